-- Issue 35 (fleet mode): the grouped intake (0022, 0024) records each delivery as its
-- tenant's (`p_tenants`, one per delivery): its operation, journal row, timeline event and
-- search words carry the tenant, and contact matching and the shared-contact count look
-- only at the same tenant's operations. A delivery's key already carries its tenant's slug
-- (`<tenant>/<source>:<key>`; the default tenant's as before), so the claim is unchanged.
--
-- The metric counters it adds to are not per tenant yet (as the counting triggers'),
-- and the intake slots are shared by all tenants: two tenants' leads with one phone only
-- wait for each other's commit, they never match.
--
-- 0024's signature stays, for a gateway of the previous version (which serves the default
-- tenant only): it records every delivery as the default tenant's.
--
-- And everyone may read whether a tenant holds its connectors, as the connectors.

create function leadgate_record_deliveries(
    p_operation_ids      text[],
    p_sources            text[],
    p_content_types      text[],
    p_raw_bodies         bytea[],
    p_payloads           text[],
    p_payload_hashes     text[],
    p_transform_versions integer[],
    p_phones             text[],
    p_emails             text[],
    p_event_times        timestamptz[],
    p_received_ats       timestamptz[],
    -- null: no contact matching for this delivery
    p_match_sinces       timestamptz[],
    -- per delivery: the intake slot of its phone and of its e-mail (`store::contact_slot`),
    -- null where it has none or is not matched
    p_phone_slots        bigint[],
    p_email_slots        bigint[],
    -- a phone or e-mail that this many other operations of the window carry already is
    -- shared (a placeholder, a switchboard): neither matched nor locked; null: none is
    p_shared_after       integer,
    -- the name for display, and its search words as `operations.name_words` keeps them
    p_names              text[],
    p_names_words        text[],
    -- the names' search words, one row each: word i belongs to delivery p_word_rows[i] (1-based)
    p_word_rows          integer[],
    p_words              text[],
    -- per delivery: its tenant (0: the default tenant)
    p_tenants            integer[]
) returns table (r_row integer, r_outcome text, r_delivery_id bigint, r_status text, r_crm_id text)
language plpgsql
-- Every lookup here is by an index. A new, still unanalyzed table (a new installation's
-- first minutes) must not make the planner scan it, once per group, for ever after.
set enable_seqscan = off
-- Planned once per session: a custom plan for each group's arrays cost more to make than
-- the group took to write.
set plan_cache_mode = force_generic_plan
as $$
declare
    n integer := coalesce(cardinality(p_operation_ids), 0);
    v_shard integer := pg_backend_pid();
    i integer;
    -- the known operations, locked
    known_ids text[];
    known_hashes text[];
    known_status text[];
    known_crm text[];
    -- every known operation of the group, locked or not
    v_existing text[];
    -- per delivery: 'new', 'duplicate' or 'steps'; its journal id
    v_class text[];
    v_delivery bigint[];
    v_inserted text[];
    v_journaled integer := 0;
    v_ids bigint[];
    -- per delivery: its phone and e-mail as matched (null when shared or not matched), and
    -- whether each was shared
    v_phones text[];
    v_emails text[];
    v_phone_shared boolean[];
    v_email_shared boolean[];
begin
    if n = 0 then
        return;
    end if;
    if current_setting('transaction_isolation') <> 'read committed' then
        return query select g, 'steps'::text, null::bigint, null::text, null::text
            from generate_series(1, n) g;
        return;
    end if;

    -- 0. Which phones and e-mails are shared: one probe of each index, at most
    --    p_shared_after entries long. Read before any lock, so a shared value is never
    --    waited on (a value that becomes shared meanwhile is matched once more: harmless).
    --    Whether a value matches is read after the locks (below), as the steps read it.
    with x as (
        select u.i, u.phone, u.email, u.since,
               case when u.since is not null and u.phone is not null and p_shared_after is not null then
                   (select count(*) from (select 1 from operations o where o.contact_phone = u.phone
                        and o.created_at >= u.since and o.tenant_id = u.tenant limit p_shared_after) c) else 0 end as on_phone,
               case when u.since is not null and u.email is not null and p_shared_after is not null then
                   (select count(*) from (select 1 from operations o where o.contact_email = u.email
                        and o.created_at >= u.since and o.tenant_id = u.tenant limit p_shared_after) c) else 0 end as on_email
            from unnest(p_phones, p_emails, p_match_sinces, p_tenants) with ordinality as u(phone, email, since, tenant, i)
    ), y as (
        select x.*, p_shared_after is not null and x.on_phone >= p_shared_after as phone_shared,
                    p_shared_after is not null and x.on_email >= p_shared_after as email_shared
            from x
    )
    select array_agg(y.phone_shared order by y.i), array_agg(y.email_shared order by y.i),
           array_agg(case when y.since is not null and not y.phone_shared then y.phone end order by y.i),
           array_agg(case when y.since is not null and not y.email_shared then y.email end order by y.i)
        into v_phone_shared, v_email_shared, v_phones, v_emails
        from y;

    -- 1. The contacts of the deliveries that match, before anything else (the store's
    --    steps take them before anything else too): rows of intake_contact_slots, which
    --    only the gateway's login may lock, in slot order.
    perform 1 from intake_contact_slots s
        where s.slot = any (array(
            select v.slot::integer
                from unnest(p_phone_slots, p_email_slots, v_phone_shared, v_email_shared)
                         as z(ps, es, p_shared, e_shared),
                     lateral (values (case when not z.p_shared then z.ps end),
                                     (case when not z.e_shared then z.es end)) as v(slot)
                where v.slot is not null))
        order by s.slot
        for update;

    -- 2. The known operations of the group, locked in one order. One that another
    --    transaction holds (a worker settling it, retention, a person; locked or changed
    --    and not committed yet) is skipped, and its delivery goes to the steps, which wait
    --    for that row alone: the group never waits on a known operation.
    select coalesce(array_agg(o.operation_id), '{}') into v_existing
        from operations o where o.operation_id = any(p_operation_ids);
    with l as (
        select o.operation_id, o.payload_hash, o.status, o.crm_id from operations o
            where o.operation_id = any(p_operation_ids)
            order by o.operation_id for update skip locked
    )
    select coalesce(array_agg(l.operation_id), '{}'), coalesce(array_agg(l.payload_hash), '{}'),
           coalesce(array_agg(l.status), '{}'), coalesce(array_agg(l.crm_id), '{}')
        into known_ids, known_hashes, known_status, known_crm from l;

    -- What each delivery is (see the top of this file).
    with d as (
        select x.*,
               min(x.i) over (partition by x.id) as first_of_key,
               case when x.phone is not null then min(x.i) over (partition by x.tenant, x.phone) end as first_of_phone,
               case when x.email is not null then min(x.i) over (partition by x.tenant, x.email) end as first_of_email
            from unnest(p_operation_ids, p_payload_hashes, v_phones, v_emails, p_match_sinces, p_tenants)
                with ordinality as x(id, hash, phone, email, since, tenant, i)
    )
    select array_agg(
        case
            when kn.id is not null then case when kn.hash = d.hash then 'duplicate' else 'steps' end
            when d.id = any(v_existing) then 'steps'
            when d.first_of_key < d.i then 'steps'
            when d.since is not null and (d.phone is not null or d.email is not null) and (
                d.first_of_phone < d.i or d.first_of_email < d.i
                or exists (select 1 from operations o where o.contact_phone = d.phone
                           and o.created_at >= d.since and o.operation_id <> d.id and o.tenant_id = d.tenant)
                or exists (select 1 from operations o where o.contact_email = d.email
                           and o.created_at >= d.since and o.operation_id <> d.id and o.tenant_id = d.tenant))
                then 'steps'
            else 'new'
        end order by d.i)
        into v_class
        from d left join unnest(known_ids, known_hashes) as kn(id, hash) on kn.id = d.id;

    -- 3. The new keys, in one order. A key a concurrent transaction inserted first is
    --    known now: the steps take that delivery.
    perform set_config('leadgate.counted', 'intake', true);
    with ins as (
        insert into operations (operation_id, source, status, payload_hash, payload,
                                contact_phone, contact_email, contact_name, name_words,
                                event_time, executor, next_attempt_at, created_at, updated_at, tenant_id)
            select x.id, x.source, 'received', x.hash, x.payload, x.phone, x.email, x.name,
                   x.words, x.event_time, 'worker', x.at, x.at, x.at, x.tenant
                from unnest(p_operation_ids, p_sources, p_payload_hashes, p_payloads, p_phones,
                            p_emails, p_names, p_names_words, p_event_times, p_received_ats, v_class,
                            p_tenants)
                    as x(id, source, hash, payload, phone, email, name, words, event_time, at, class,
                         tenant)
                where x.class = 'new'
                order by x.id
            on conflict (operation_id) do nothing
            returning operation_id
    )
    select coalesce(array_agg(ins.operation_id), '{}') into v_inserted from ins;

    -- Each journaled delivery's id, in the group's order.
    v_delivery := array_fill(null::bigint, array[n]);
    for i in 1 .. n loop
        if v_class[i] = 'new' and not (p_operation_ids[i] = any(v_inserted)) then
            v_class[i] := 'steps';
        end if;
        if v_class[i] <> 'steps' then
            v_journaled := v_journaled + 1;
        end if;
    end loop;
    v_ids := array(select nextval('deliveries_id_seq') from generate_series(1, v_journaled));
    v_journaled := 0;
    for i in 1 .. n loop
        if v_class[i] <> 'steps' then
            v_journaled := v_journaled + 1;
            v_delivery[i] := v_ids[v_journaled];
        end if;
    end loop;

    insert into operation_names (word, created_at, operation_id, tenant_id)
        select w.word, p_received_ats[w.r], p_operation_ids[w.r], p_tenants[w.r]
            from unnest(p_word_rows, p_words) as w(r, word)
            where v_class[w.r] = 'new';
    insert into deliveries (id, source, operation_id, received_at, content_type, raw_body,
                            payload, payload_hash, outcome, transform_version, event_time, tenant_id)
        select x.delivery, x.source, x.id, x.at, x.content_type, x.raw_body, x.payload, x.hash,
               x.class, x.version, x.event_time, x.tenant
            from unnest(v_delivery, p_sources, p_operation_ids, p_received_ats, p_content_types,
                        p_raw_bodies, p_payloads, p_payload_hashes, v_class, p_transform_versions,
                        p_event_times, p_tenants)
                as x(delivery, source, id, at, content_type, raw_body, payload, hash, class,
                     version, event_time, tenant)
            where x.class <> 'steps'
            order by x.delivery;
    perform set_config('leadgate.counted', '', true);
    if v_journaled = 0 then
        return query select g, 'steps'::text, null::bigint, null::text, null::text
            from generate_series(1, n) g;
        return;
    end if;

    insert into metric_counters (metric, label, label2, shard, value)
        select m.metric, m.label, m.label2, v_shard, count(*)
            from unnest(p_sources, v_class) as x(source, class),
                 lateral (values ('deliveries', x.source, x.class),
                                 ('operations', 'received', '')) as m(metric, label, label2)
            where x.class <> 'steps' and (m.metric = 'deliveries' or x.class = 'new')
            group by m.metric, m.label, m.label2
        on conflict (metric, label, label2, shard)
            do update set value = metric_counters.value + excluded.value;
    insert into metric_series (slot, metric, label, shard, value)
        select m.slot, m.metric, '', v_shard, count(*)
            from unnest(p_received_ats, v_class) as x(at, class),
                 lateral (select floor(extract(epoch from x.at) / 300)::bigint as slot) s,
                 lateral (values (s.slot, 'deliveries'),
                                 (s.slot, case x.class when 'new' then 'new_operations'
                                                       else 'duplicates' end)) as m(slot, metric)
            where x.class <> 'steps'
            group by m.slot, m.metric
        on conflict (slot, metric, label, shard)
            do update set value = metric_series.value + excluded.value;
    insert into timeline (operation_id, at, kind, actor, error_class, detail, tenant_id)
        select x.id, x.at, 'delivery', 'gateway', null,
               case x.class
                   when 'new' then '{"delivery_id":' || x.delivery || ',"outcome":"new","payload_hash":'
                                   || to_json(x.hash)::text
                                   || case when x.p_shared and x.e_shared then ',"shared_contact":["phone","email"]'
                                           when x.p_shared then ',"shared_contact":["phone"]'
                                           when x.e_shared then ',"shared_contact":["email"]'
                                           else '' end || '}'
                   else '{"delivery_id":' || x.delivery || ',"outcome":"duplicate"}'
               end,
               x.tenant
            from unnest(v_delivery, p_operation_ids, p_received_ats, p_payload_hashes, v_class,
                        v_phone_shared, v_email_shared, p_tenants)
                as x(delivery, id, at, hash, class, p_shared, e_shared, tenant)
            where x.class <> 'steps'
            order by x.delivery;

    return query
        select x.i::integer, x.class, x.delivery,
               case x.class when 'new' then 'received'
                            when 'duplicate' then known_status[array_position(known_ids, x.id)] end,
               case x.class when 'duplicate' then known_crm[array_position(known_ids, x.id)] end
            from unnest(p_operation_ids, v_class, v_delivery) with ordinality as x(id, class, delivery, i)
            order by x.i;
end
$$;


create or replace function leadgate_record_deliveries(
    p_operation_ids text[], p_sources text[], p_content_types text[], p_raw_bodies bytea[],
    p_payloads text[], p_payload_hashes text[], p_transform_versions integer[],
    p_phones text[], p_emails text[], p_event_times timestamptz[], p_received_ats timestamptz[],
    p_match_sinces timestamptz[], p_phone_slots bigint[], p_email_slots bigint[],
    p_shared_after integer, p_names text[], p_names_words text[], p_word_rows integer[],
    p_words text[]
) returns table (r_row integer, r_outcome text, r_delivery_id bigint, r_status text, r_crm_id text)
language plpgsql as $$
begin
    return query select * from leadgate_record_deliveries(
        p_operation_ids, p_sources, p_content_types, p_raw_bodies, p_payloads, p_payload_hashes,
        p_transform_versions, p_phones, p_emails, p_event_times, p_received_ats, p_match_sinces,
        p_phone_slots, p_email_slots, p_shared_after, p_names, p_names_words, p_word_rows, p_words,
        array_fill(0, array[coalesce(cardinality(p_operation_ids), 0)]));
end
$$;


-- The people's grants (0035's function), with what a console reads of a connector's
-- tenant readable by everyone as the connectors are: a paused tenant holds its connectors
-- (`Dashboard::connectors`). A tenant's spec stays the gateway's alone. Applied at every start (`PgStore::secure_database`).
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
