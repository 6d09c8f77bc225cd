-- Issue 35 (fleet mode), step 10: the console shows one tenant at a time.
--
-- Its lists read the tenant shown (`Clock::tenant`), so a person with several tenants
-- switches between them. People read their tenants' slugs and names (row-level security
-- of 0039 keeps the rows theirs); "did my lead arrive?" takes the tenant shown, still
-- within the caller's tenants. The open cases of one tenant are an index range.

create index review_cases_tenant_open on review_cases (tenant_id, id) where resolved_at is null;

-- The lookup of 0039 in one tenant: one of the caller's, or any for the tables' owner (the
-- gateway's login, which serves every tenant). Every name is qualified and the caller's
-- temporary schema searched last: a person's temporary `pg_class` or `operations` must not
-- stand in for the catalog's. 0039's is kept for gateways of the release before: a rolling
-- upgrade runs both.
create function leadgate_lookup(p_phone text, p_text text, p_limit integer, p_tenant integer)
returns table (operation_id text, source text, status text, received_at timestamptz, crm_id text)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
    select o.operation_id, o.source, o.status, o.created_at, o.crm_id
    from public.operations o
    where o.operation_id in (
        select m.operation_id from public.operations m
            where p_phone is not null and m.contact_phone = p_phone
        union select m.operation_id from public.operations m where m.operation_id = p_text
        union select m.operation_id from public.operations m
            where p_text is not null and m.crm_id = p_text)
      and o.tenant_id = p_tenant
      and (p_tenant = any (public.leadgate_my_tenants())
           or pg_catalog.pg_has_role(session_user,
                  (select c.relowner from pg_catalog.pg_class c
                   where c.oid = 'public.operations'::pg_catalog.regclass), 'MEMBER'))
    order by o.created_at desc, o.operation_id desc
    limit least(greatest(p_limit, 1), 50)
$$;
revoke all on function leadgate_lookup(text, text, integer, integer) from public;

-- 0039's grants, and the two above.
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
    -- everyone: their tenants' names (the console's switcher), and whether a tenant holds
    -- its connectors (paused, why, by whom, since when)
    execute 'grant select (id, slug, name, state, paused_reason, changed_by, updated_at) on tenants to '
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
    execute 'grant execute on function leadgate_lookup(text, text, integer, integer) to ' || everyone;
end
$$;
revoke all on function leadgate_install_roles() from public;
