-- Fleet mode (issue 35): one Leadgate for many CRM portals, each a tenant with its own
-- connector, sources, rules, alert routes and retention. Tenant 0 is the default tenant:
-- the `[crm]` and `[[source]]`s of leadgate.toml (its spec_digest is null: it is read
-- from the file at every start). Every row written before this migration is the default
-- tenant's, so a deployment without tenants runs unchanged.
--
-- A tenant is never deleted (a removed one keeps its tombstones), so the `tenant_id`
-- columns carry no foreign key: none to check at every intake.

create table tenants (
    id            integer primary key check (id >= 0),
    -- in URLs, operation keys and metrics labels; never changes
    slug          text not null unique check (slug ~ '^[a-z0-9][a-z0-9-]{0,31}$'),
    name          text not null,
    state         text not null default 'active' check (state in ('active', 'paused', 'removed')),
    -- its share of the worker's lanes when tenants contend
    weight        integer not null default 1 check (weight between 1 and 1000),
    -- CRM calls at once, per process
    max_in_flight integer not null default 2 check (max_in_flight between 1 and 64),
    -- why a person paused it (`leadgate tenant pause --reason`), or that its tenants
    -- file no longer names it
    paused_reason text,
    changed_by    text not null default 'migration',
    version       bigint not null default 1,
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now()
);
insert into tenants (id, slug, name) values (0, 'default', 'Default');

-- A tenant's spec as `leadgate tenant apply` last stored it (its CRM, sources, alerts,
-- retention, claim API): canonical JSON sealed with the token key (crm/vault.rs), since
-- it holds the tenant's credentials. The default tenant has none: leadgate.toml is its
-- spec. Read only by the gateway's login.
create table tenant_specs (
    tenant_id integer primary key,
    sealed    text not null
);

-- Every tenant-owned table says whose its rows are (tests/it/tenants.rs holds the list).
alter table operations add column tenant_id integer not null default 0;
alter table deliveries add column tenant_id integer not null default 0;
alter table timeline add column tenant_id integer not null default 0;
alter table review_cases add column tenant_id integer not null default 0;
alter table lease_grants add column tenant_id integer not null default 0;
alter table redeliveries add column tenant_id integer not null default 0;
alter table crm_updates add column tenant_id integer not null default 0;
alter table operation_names add column tenant_id integer not null default 0;
alter table content_keys add column tenant_id integer not null default 0;
alter table signature_uses add column tenant_id integer not null default 0;
alter table connectors add column tenant_id integer not null default 0;
alter table crm_tokens add column tenant_id integer not null default 0;
alter table crm_links add column tenant_id integer not null default 0;
alter table business_rules add column tenant_id integer not null default 0;
alter table business_rule_history add column tenant_id integer not null default 0;
alter table pull_cursors add column tenant_id integer not null default 0;
alter table contact_locks add column tenant_id integer not null default 0;
alter table alert_channels add column tenant_id integer not null default 0;
alter table alert_conditions add column tenant_id integer not null default 0;
alter table metric_counters add column tenant_id integer not null default 0;
alter table metric_series add column tenant_id integer not null default 0;
alter table diagnosis_reports add column tenant_id integer not null default 0;
alter table feed_subscribers add column tenant_id integer not null default 0;
alter table feed_events add column tenant_id integer not null default 0;
alter table feed_deliveries add column tenant_id integer not null default 0;
alter table feed_attempts add column tenant_id integer not null default 0;
alter table human_requests add column tenant_id integer not null default 0;

-- The people's grants (0028's function), with tenants' specs kept from casework as the
-- CRM's tokens are: sealed or not, credentials are the gateway's alone. Applied at every
-- start (`PgStore::secure_database`).
create or replace function leadgate_install_roles() returns void language plpgsql as $$
declare
    r text;
    t text;
    cols text;
    everyone constant text := 'leadgate_support, leadgate_sales_ops, leadgate_manager, leadgate_admin';
    casework constant text := 'leadgate_sales_ops, leadgate_manager';
    figures constant text := 'leadgate_support, leadgate_admin';
begin
    foreach r in array array['leadgate_support', 'leadgate_sales_ops', 'leadgate_manager', 'leadgate_admin'] loop
        if not exists (select 1 from pg_roles where rolname = r) then
            begin
                execute format('create role %I nologin', r);
            exception when duplicate_object or unique_violation then
                null; -- another database of this cluster created it at the same moment
            end;
        end if;
    end loop;
    execute 'revoke all on all tables in schema public from ' || everyone;
    execute 'revoke all on all sequences in schema public from ' || everyone;
    execute 'grant usage on schema public to ' || everyone;
    -- everyone: the schema version, the counted figures, the connectors, the business rules
    execute 'grant select on _sqlx_migrations, metric_counters, metric_series, connectors, crm_links, '
         || 'business_rules, business_rule_history to ' || everyone;
    -- support and admin: counts by state and reason, nothing a lead said
    execute 'grant select (operation_id, status, source, created_at, updated_at, lease_expires_at) '
         || 'on operations to ' || figures;
    execute 'grant select (id, operation_id, reason, opened_at, resolved_at, resolution, resolved_by) '
         || 'on review_cases to ' || figures;
    -- casework: every table but the CRM credentials (a tenant's spec holds them too) and
    -- others' requests, and no column holding a token (a lease's, a grant's hash): whoever
    -- reads the database must not be able to report for a worker or an integration
    for t in select tablename from pg_tables where schemaname = 'public'
             and tablename not in ('crm_tokens', 'human_requests', 'human_request_logins',
                                   'leadgate_locks', 'intake_contact_slots',
                                   'console_sign_ins', 'tenant_specs') loop
        select string_agg(quote_ident(column_name), ', ' order by ordinal_position) into cols
        from information_schema.columns
        where table_schema = 'public' and table_name = t and column_name not like '%token%';
        execute format('grant select (%s) on %I to %s', cols, t, casework);
    end loop;
    -- asking: row-level security says who may ask what; only the columns of the ask (the
    -- id, the actor, the times and the answer are the database's and the gateway's)
    execute 'grant select on human_requests to ' || everyone;
    execute 'grant insert (kind, case_id, operation_id, connector, expected_version, body) '
         || 'on human_requests to ' || everyone;
    execute 'grant usage on sequence human_requests_id_seq to ' || everyone;
    execute 'grant execute on function leadgate_withdraw(bigint) to ' || everyone;
    -- admin: who signed in to the web console, from where (the people they manage)
    execute 'grant select on console_sign_ins to leadgate_admin';
    -- everyone: whether a gateway is running
    execute 'grant select on gateway_heartbeats to ' || everyone;
    -- everyone: "did my lead arrive?" (status, received-at, crm_id; nothing a lead said)
    execute 'grant execute on function leadgate_lookup(text, text, integer) to ' || everyone;
end
$$;
revoke all on function leadgate_install_roles() from public;
