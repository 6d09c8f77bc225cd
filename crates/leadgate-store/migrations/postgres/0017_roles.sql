-- Who may do what, enforced by PostgreSQL (docs/SPEC.md, "Roles").
--
-- Each person connects the console with a login of their own (`leadgate user add`),
-- a member of one of four group roles. The database owner (the role that runs
-- `leadgate migrate`: the gateway's and the workers') owns every table, so only it
-- can read CRM credentials, change rows, or disable the timeline's triggers.
--
--   leadgate_support    the dashboard's figures and the queue's counts: no payloads,
--                       no contact data, no actions
--   leadgate_sales_ops  reads the cases and asks for actions on them, except on
--                       cross-channel matches and except "create new"
--   leadgate_manager    what sales_ops may, and cross-channel matches and "create new"
--   leadgate_admin      the dashboard's figures and resuming a connector
--
-- A person never writes a case, an operation or the timeline: they insert a request
-- into human_requests, as themselves (row-level security: `actor = session_user`, and
-- only what their role may ask), and a running gateway applies it through the same
-- rules as the CLI (store/ops/requests.rs), recording the login as the actor.

create table human_requests (
    id               bigserial primary key,
    -- the login that asked, as PostgreSQL knows it (never a name the client sends)
    actor            text not null default session_user,
    kind             text not null check (kind in ('resolve', 'open_review', 'resume_connector', 'notified')),
    case_id          bigint,
    operation_id     text,
    connector        text,
    -- the operation version the person saw (resolve)
    expected_version bigint,
    -- what they ask (JSON text, store::Ask): the resolution, its crm_id, a comment, a bulk run
    body             text not null default '{}',
    requested_at     timestamptz not null default clock_timestamp(),
    applied_at       timestamptz,
    -- what the gateway answered (JSON text): {"ok": {...}} or {"error": {...}}
    outcome          text,
    -- a request is a few fields, not a store for data
    constraint human_requests_body_size check (octet_length(body) <= 16384)
);
create index human_requests_waiting on human_requests (id) where applied_at is null;

-- Which of the four group roles a login is in (a login is given one; the first wins).
create function leadgate_role_of(login name) returns text
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select r from unnest(array['leadgate_admin', 'leadgate_manager', 'leadgate_sales_ops', 'leadgate_support']) r
    where exists (select 1 from pg_roles g where g.rolname = r)
      and pg_has_role(login, r, 'member')
    limit 1
$$;

-- May the session's login ask for this? The same answer the console's buttons give
-- (domain::roles::may_ask), checked where a request is written, so psql cannot ask for more.
-- Security definer: its search path is pg_catalog, then pg_temp last (a person's temporary
-- table must never stand in for review_cases), and every table is schema-qualified.
create function leadgate_may_request(kind text, case_id bigint, body text) returns boolean
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

alter table human_requests enable row level security;
create policy human_requests_own on human_requests for select using (actor = session_user);
create policy human_requests_ask on human_requests for insert
    with check (actor = session_user and applied_at is null and outcome is null
                and leadgate_may_request(kind, case_id, body));

-- A console that gave up waiting withdraws what no gateway has applied yet (waiting for a
-- gateway applying it right then). A function, not a DELETE grant: DELETE would also let a
-- person LOCK the table and stall every gateway.
create function leadgate_withdraw(request bigint) returns boolean
language sql security definer set search_path = pg_catalog, pg_temp as $$
    with gone as (
        delete from public.human_requests
        where id = request and actor = session_user and applied_at is null
        returning 1
    )
    select exists (select 1 from gone)
$$;

-- The grants, from nothing: run by this migration when its role may create roles, and
-- by `leadgate user add` (which needs that anyway). Idempotent; a later migration that
-- adds a table calls it again.
create function leadgate_install_roles() returns void language plpgsql as $$
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
    -- everyone: the schema version, the counted figures, the connectors
    execute 'grant select on _sqlx_migrations, metric_counters, metric_series, connectors, crm_links to ' || everyone;
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
revoke all on function leadgate_withdraw(bigint) from public;

do $$
begin
    if exists (select 1 from pg_roles where rolname = current_user and (rolsuper or rolcreaterole)) then
        perform leadgate_install_roles();
    else
        raise notice 'leadgate: roles not installed (% may not create roles); `leadgate user add` installs them', current_user;
    end if;
end
$$;
