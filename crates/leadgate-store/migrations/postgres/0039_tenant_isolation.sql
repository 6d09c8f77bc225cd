-- Issue 35 (fleet mode), step 9: PostgreSQL keeps each person's login to their tenants.
--
-- `tenant_members` says which tenants a person's login belongs to (`leadgate user add
-- --tenants acme,beta`), or that it belongs to every tenant (`--tenants all`: -1, an
-- integrator's admin and support). A login without a row belongs to the default tenant
-- alone, which is all a deployment without tenants has: people added before fleet mode
-- keep seeing what they saw.
--
-- Every table with a `tenant_id` gets row-level security: a person's login reads the rows
-- of its tenants only (`leadgate_my_tenants()`, one InitPlan per statement), whatever its
-- role's column grants; the registry shows it its tenants only. People write nothing but
-- requests, and a request must be about a case, an operation or a connector of a tenant of
-- theirs, and say which (`human_requests.tenant_id`): the gateway applies it as that
-- tenant's. `leadgate_lookup` (security definer, so above row-level security) looks in the
-- caller's tenants only.
--
-- The gateway's login owns the tables and is not subject to row-level security (it is not
-- forced): it serves every tenant. SQLite has no logins: its one operator sees everything.

create table tenant_members (
    login     text not null,
    -- a tenant's id, or -1: every tenant, present and future (not `tenant_id`: the rows
    -- are the gateway's, not a tenant's)
    member_of integer not null check (member_of >= -1),
    added_at  timestamptz not null default now(),
    primary key (login, member_of)
);

-- The tenants of the session's login: every tenant's id for a login in all of them, its
-- tenants' otherwise, the default tenant's for a login without a row.
create function leadgate_my_tenants() returns integer[]
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select case
        when exists (select 1 from public.tenant_members m
                     where m.login = session_user and m.member_of = -1)
            then array(select t.id from public.tenants t)
        when exists (select 1 from public.tenant_members m where m.login = session_user)
            then array(select m.member_of from public.tenant_members m
                       where m.login = session_user and m.member_of >= 0)
        else array[0]
    end
$$;

-- Every table of a tenant's rows: a login that is not the owner reads its tenants' rows.
-- (`human_requests` keeps its own policies, below: a person reads their own requests.)
do $$
declare
    t text;
begin
    for t in select c.table_name from information_schema.columns c
             join pg_tables p on p.schemaname = 'public' and p.tablename = c.table_name
             where c.table_schema = 'public' and c.column_name = 'tenant_id'
               and c.table_name <> 'human_requests' loop
        execute format('alter table %I enable row level security', t);
        execute format('create policy tenant_rows on %I for select '
                       'using (tenant_id = any ((select public.leadgate_my_tenants())::integer[]))', t);
    end loop;
end
$$;
alter table tenants enable row level security;
create policy tenant_rows on tenants for select
    using (id = any ((select public.leadgate_my_tenants())::integer[]));

-- Whether the session's login is in every tenant: an integrator's, or anyone's while the
-- deployment has no tenant but the default one. What spans tenants is theirs alone: the
-- event feed (its events are every tenant's) and the web console's sign-in journal.
create function leadgate_in_every_tenant() returns boolean
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select exists (select 1 from public.tenant_members m
                   where m.login = session_user and m.member_of = -1)
        or not exists (select 1 from public.tenants t where t.id <> 0 and t.state <> 'removed')
$$;

-- A request is about its tenant's case, operation or connector, and the tenant is one of
-- the asker's: checked as it is written, besides what `human_requests_ask` checks. The
-- event feed's requests are for people in every tenant.
create function leadgate_request_in_tenant(p_kind text, p_tenant integer, p_case bigint,
                                           p_operation text)
returns boolean
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select p_tenant = any (public.leadgate_my_tenants())
       and (p_case is null or exists (select 1 from public.review_cases c
                                      where c.id = p_case and c.tenant_id = p_tenant))
       and (p_operation is null or exists (select 1 from public.operations o
                                           where o.operation_id = p_operation
                                             and o.tenant_id = p_tenant))
       and (p_kind not like 'feed\_%' or public.leadgate_in_every_tenant())
$$;
create policy human_requests_in_tenant on human_requests as restrictive for insert
    with check (public.leadgate_request_in_tenant(kind, tenant_id, case_id, operation_id));

-- Who signed in to the web console, from where: the people of every tenant.
alter table console_sign_ins enable row level security;
create policy every_tenant on console_sign_ins for select
    using ((select public.leadgate_in_every_tenant()));

-- "Did my lead arrive?", in the caller's tenants.
create or replace function leadgate_lookup(p_phone text, p_text text, p_limit integer)
returns table (operation_id text, source text, status text, received_at timestamptz, crm_id text)
language sql stable security definer set search_path = pg_catalog, public as $$
    select o.operation_id, o.source, o.status, o.created_at, o.crm_id
    from operations o
    where o.operation_id in (
        select m.operation_id from operations m
            where p_phone is not null and m.contact_phone = p_phone
        union select m.operation_id from operations m where m.operation_id = p_text
        union select m.operation_id from operations m
            where p_text is not null and m.crm_id = p_text)
      and o.tenant_id = any (public.leadgate_my_tenants())
    order by o.created_at desc, o.operation_id desc
    limit least(greatest(p_limit, 1), 50)
$$;

-- The people's grants (0037's function): who belongs to which tenant is the gateway's; a
-- request names its tenant; the figures' roles read whose an operation or a case is (the
-- figures are counted per tenant). Applied at every start (`PgStore::secure_database`).
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
    -- everyone: whether a tenant holds its connectors (paused, why, by whom, since when)
    execute 'grant select (id, state, paused_reason, changed_by, updated_at) on tenants to '
         || everyone;
    -- support and admin: counts by state and reason, nothing a lead said
    execute 'grant select (operation_id, status, source, created_at, updated_at, lease_expires_at, '
         || 'tenant_id) on operations to ' || figures;
    execute 'grant select (id, operation_id, reason, opened_at, resolved_at, resolution, resolved_by, '
         || 'tenant_id) on review_cases to ' || figures;
    -- casework: every table but the CRM credentials (a tenant's spec holds them too), who
    -- belongs to which tenant, what spans tenants (the CRM accounts' pacing, the default
    -- tenant's quoted keys) and others' requests, and no column holding a token (a lease's, a grant's hash): whoever
    -- reads the database must not be able to report for a worker or an integration
    for t in select tablename from pg_tables where schemaname = 'public'
             and tablename not in ('crm_tokens', 'human_requests', 'human_request_logins',
                                   'leadgate_locks', 'intake_contact_slots',
                                   'console_sign_ins', 'tenant_specs', 'tenant_members',
                                   'request_pacing', 'quoted_keys_before_the_draft') loop
        select string_agg(quote_ident(column_name), ', ' order by ordinal_position) into cols
        from information_schema.columns
        where table_schema = 'public' and table_name = t and column_name not like '%token%';
        execute format('grant select (%s) on %I to %s', cols, t, casework);
    end loop;
    -- asking: row-level security says who may ask what; only the columns of the ask (the
    -- id, the actor, the times and the answer are the database's and the gateway's)
    execute 'grant select on human_requests to ' || everyone;
    execute 'grant insert (kind, case_id, operation_id, connector, expected_version, body, tenant_id) '
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
