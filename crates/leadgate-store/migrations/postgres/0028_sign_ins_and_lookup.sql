-- Issue 34, point 4: every sign-in to the web console is journaled — when, the login as
-- typed (none when it was not a plausible login: it may be a password typed into the
-- wrong field), the client's address and how it ended. Never the password.
create table console_sign_ins (
    id       bigserial primary key,
    at       timestamptz not null,
    login    text,
    client   text not null,
    outcome  text not null
);
create index console_sign_ins_at on console_sign_ins (at);
create index console_sign_ins_login on console_sign_ins (login, id);

-- Issue 37, point 1: "did my lead arrive?" is answered by support without reading a
-- lead. Phone (normalized), key or crm_id in, exact matches only (nothing to enumerate by
-- prefix); key, source, status, received-at and crm_id out — no name, contact or payload.
-- The function runs with its owner's rights and returns those five columns alone; the
-- people may execute it and still read no column they could not before.
create function leadgate_lookup(p_phone text, p_text text, p_limit integer)
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
    order by o.created_at desc, o.operation_id desc
    limit least(greatest(p_limit, 1), 50)
$$;
revoke all on function leadgate_lookup(text, text, integer) from public;

-- Issue 37, point 5: every running gateway and worker says it is alive every few seconds
-- (`leadgate serve`/`worker`, `app::heartbeat_loop`): a console then says, before a click,
-- that no gateway is running and that what it asks would wait. Only the time and the
-- kind of process; rows of processes gone for a day are removed by the next beat.
create table gateway_heartbeats (
    owner       text primary key,
    kind        text not null,
    started_at  timestamptz not null,
    beat_at     timestamptz not null
);

-- The people's grants (0026's function): the journal names logins and addresses, so
-- casework does not read it; an admin, who manages the people, does; everyone may look a
-- lead up. Applied at the next start (`PgStore::secure_database` runs it at every start).
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
             and tablename not in ('crm_tokens', 'human_requests', 'human_request_logins',
                                   'leadgate_locks', 'intake_contact_slots',
                                   'console_sign_ins') loop
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
