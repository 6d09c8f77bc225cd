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
    slug          text not null unique check (
                      length(slug) between 1 and 32 and slug not like '-%'
                      and slug not glob '*[^a-z0-9-]*'),
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
    version       integer not null default 1,
    created_at    text not null default (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at    text not null default (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
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
