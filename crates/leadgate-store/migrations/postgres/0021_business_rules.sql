-- Business rules in the database (issue 17, "two owners"): per source, what a contact
-- match means (`create`, `link`, `review`), how far back it looks, and which channel the
-- source belongs to. Edited by managers in the console (a `set_rules` request), read
-- live by every running gateway (it polls the history's row count about once a second).
-- The TOML's `on_contact_match` and `[matching] window` only seed a source that has no
-- row yet; from then on these rows decide.

create table business_rules (
    source      text primary key,
    rule        text not null check (rule in ('create', 'link', 'review')),
    -- from 1 s to 365 days
    window_secs bigint not null check (window_secs between 1 and 31536000),
    -- letters, digits, `-` and `_`, as a source name (domain::is_valid_source_name)
    channel     text not null check (channel ~ '^[A-Za-z0-9_-]{1,64}$'),
    -- each edit names the version it was made from (compare-and-set)
    version     bigint not null,
    changed_at  timestamptz not null,
    changed_by  text not null
);

-- Consoles listen (0004's console_notify): another manager's edit shows on the Rules
-- screen at once. Edits are rare: NOTIFY serialising their commits costs nothing.
create trigger business_rules_notify after insert or update on business_rules
    for each row execute function console_notify();

-- Who changed what, when, from what to what: one row per version of a source's rules.
create table business_rule_history (
    id          bigserial primary key,
    source      text not null,
    version     bigint not null,
    actor       text not null,
    changed_at  timestamptz not null,
    -- the rules before (JSON text, domain::business::SourceRules; null when seeded) and after
    before      text,
    after       text not null,
    unique (source, version)
);

create function business_rule_history_is_append_only() returns trigger language plpgsql as $$
begin
    raise exception 'the rules'' history is append-only (% refused)', tg_op;
end
$$;
create trigger business_rule_history_append_only before update or delete on business_rule_history
    for each row execute function business_rule_history_is_append_only();
create trigger business_rule_history_no_truncate before truncate on business_rule_history
    for each statement execute function business_rule_history_is_append_only();

-- A manager's edit is one more kind of request.
alter table human_requests drop constraint human_requests_kind_check;
alter table human_requests add constraint human_requests_kind_check
    check (kind in ('resolve', 'open_review', 'resume_connector', 'notified', 'set_rules'));

-- 0017's function, with one more row: only managers edit the business rules.
create or replace function leadgate_may_request(kind text, case_id bigint, body text) returns boolean
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
    role text := public.leadgate_role_of(session_user);
    reason text;
begin
    if role is null then
        return false;
    end if;
    if kind = 'resume_connector' then
        return role = 'leadgate_admin';
    end if;
    if kind = 'set_rules' then
        return role = 'leadgate_manager';
    end if;
    if role not in ('leadgate_sales_ops', 'leadgate_manager') then
        return false;
    end if;
    if kind in ('open_review', 'notified') or role = 'leadgate_manager' then
        return true;
    end if;
    -- sales_ops: not a cross-channel match, and never "create new"
    select c.reason into reason from public.review_cases c where c.id = case_id;
    return reason is distinct from 'cross_channel_match'
       and coalesce((body::jsonb) ->> 'resolution', '') <> 'created_new';
end
$$;

-- 0017's grants, and everyone reads the rules and their history.
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
    -- casework: every table but the CRM credentials and others' requests, and no column
    -- holding a token (a lease's, a grant's hash): whoever reads the database must not be
    -- able to report for a worker or an integration
    for t in select tablename from pg_tables where schemaname = 'public'
             and tablename not in ('crm_tokens', 'human_requests') loop
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
end
$$;
revoke all on function leadgate_install_roles() from public;

do $$
begin
    if exists (select 1 from pg_roles where rolname = current_user and (rolsuper or rolcreaterole)) then
        perform leadgate_install_roles();
    else
        raise notice 'leadgate: roles not installed (% may not create roles); `leadgate user add` installs them', current_user;
    end if;
end
$$;
