-- Issue 35 (fleet mode), step 8: the metrics are each tenant's. `metric_counters` and
-- `metric_series` are keyed by tenant first, and every writer of them (the counting
-- triggers, and the grouped intake, which counts for itself) adds to the row of the tenant
-- whose row it counts. `/metrics` labels each series with its tenant once a tenant other
-- than the default exists; the dashboard reads one tenant's.
--
-- Not beside earlier gateways (`NOT_BESIDE_EARLIER_GATEWAYS`): their statements name the
-- old conflict targets.

alter table metric_counters drop constraint metric_counters_pkey,
    add primary key (tenant_id, metric, label, label2, shard);
alter table metric_series drop constraint metric_series_pkey,
    add primary key (tenant_id, slot, metric, label, shard);

create function metric_add(t integer, m text, l text, l2 text, delta bigint) returns void
language plpgsql as $$
begin
    insert into metric_counters (tenant_id, metric, label, label2, shard, value)
    values (t, m, l, l2, pg_backend_pid(), delta)
    on conflict (tenant_id, metric, label, label2, shard)
        do update set value = metric_counters.value + excluded.value;
end
$$;

create function series_add(t integer, at timestamptz, m text, l text) returns void
language plpgsql as $$
begin
    insert into metric_series (tenant_id, slot, metric, label, shard, value)
    values (t, floor(extract(epoch from at) / 300)::bigint, m, l, pg_backend_pid(), 1)
    on conflict (tenant_id, slot, metric, label, shard)
        do update set value = metric_series.value + 1;
end
$$;

create or replace function deliveries_counted() returns trigger language plpgsql as $$
begin
    perform metric_add(new.tenant_id, 'deliveries', new.source, new.outcome, 1);
    if new.outcome <> 'rejected' then
        perform series_add(new.tenant_id, new.received_at, 'deliveries', '');
    end if;
    if new.outcome = 'new' then
        perform series_add(new.tenant_id, new.received_at, 'new_operations', '');
    elsif new.outcome = 'duplicate' then
        perform series_add(new.tenant_id, new.received_at, 'duplicates', '');
    end if;
    -- A lost lead: an accepted delivery without an operation (never, by construction:
    -- the operation is written first, in the same transaction; this checks it).
    if new.outcome <> 'rejected' and not exists (select 1 from operations where operation_id = new.operation_id) then
        perform metric_add(new.tenant_id, 'lost', '', '', 1);
    end if;
    return null;
end
$$;

create or replace function operations_counted() returns trigger language plpgsql as $$
declare
    old_crm boolean := false;
    new_crm boolean := coalesce(new.crm_link in ('created', 'recovered'), false);
begin
    if tg_op = 'UPDATE' then
        old_crm := coalesce(old.crm_link in ('created', 'recovered'), false);
    end if;
    if tg_op = 'INSERT' then
        perform metric_add(new.tenant_id, 'operations', new.status, '', 1);
    elsif old.status <> new.status then
        perform metric_add(new.tenant_id, 'operations', old.status, '', -1);
        perform metric_add(new.tenant_id, 'operations', new.status, '', 1);
        -- A completion the journal cannot explain: no CRM answer, recovery, link or
        -- human decision on the timeline when the operation became `completed`.
        if new.status = 'completed' and not exists (
            select 1 from timeline where operation_id = new.operation_id
            and kind in ('crm_created', 'recovered', 'linked', 'human_action')) then
            perform metric_add(new.tenant_id, 'unreconstructable', '', '', 1);
        end if;
    end if;
    -- CRM entities Leadgate created (or found again by its key) for its operations.
    if old_crm <> new_crm then
        perform metric_add(new.tenant_id, 'crm_entities', '', '', case when new_crm then 1 else -1 end);
    end if;
    return null;
end
$$;

create or replace function timeline_counted() returns trigger language plpgsql as $$
begin
    if new.kind = 'retry_scheduled' then
        perform metric_add(new.tenant_id, 'retries', new.error_class, '', 1);
        perform series_add(new.tenant_id, new.at, 'retries', new.error_class);
    else
        perform series_add(new.tenant_id, new.at, 'crm_entities', '');
    end if;
    return null;
end
$$;

create or replace function timeline_extra_entity() returns trigger language plpgsql as $$
begin
    perform metric_add(new.tenant_id, 'crm_entities', '', '', 1);
    perform series_add(new.tenant_id, new.at, 'crm_entities', '');
    return null;
end
$$;

create or replace function timeline_crm_steps() returns trigger language plpgsql as $$
declare
    d jsonb := new.detail::jsonb;
begin
    perform metric_add(new.tenant_id, 'crm_steps', coalesce(d ->> 'entity', ''), coalesce(d ->> 'how', ''), 1);
    return null;
end
$$;

create or replace function feed_attempts_counted() returns trigger language plpgsql as $$
begin
    perform metric_add(new.tenant_id, 'feed_deliveries', case when new.ok then 'delivered' else 'failed' end, '', 1);
    return null;
end
$$;

create or replace function review_cases_counted() returns trigger language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        perform series_add(new.tenant_id, new.opened_at, 'cases_opened', '');
    elsif old.resolved_at is null and new.resolved_at is not null then
        perform series_add(new.tenant_id, new.resolved_at, 'cases_resolved', '');
    end if;
    return null;
end
$$;

drop function metric_add(text, text, text, bigint);
drop function series_add(timestamptz, text, text);

-- The grouped intake (0037's), counting each delivery under its tenant.
create or replace function leadgate_record_deliveries(
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

    insert into metric_counters (tenant_id, metric, label, label2, shard, value)
        select x.tenant, m.metric, m.label, m.label2, v_shard, count(*)
            from unnest(p_sources, v_class, p_tenants) as x(source, class, tenant),
                 lateral (values ('deliveries', x.source, x.class),
                                 ('operations', 'received', '')) as m(metric, label, label2)
            where x.class <> 'steps' and (m.metric = 'deliveries' or x.class = 'new')
            group by x.tenant, m.metric, m.label, m.label2
        on conflict (tenant_id, metric, label, label2, shard)
            do update set value = metric_counters.value + excluded.value;
    insert into metric_series (tenant_id, slot, metric, label, shard, value)
        select x.tenant, m.slot, m.metric, '', v_shard, count(*)
            from unnest(p_received_ats, v_class, p_tenants) as x(at, class, tenant),
                 lateral (select floor(extract(epoch from x.at) / 300)::bigint as slot) s,
                 lateral (values (s.slot, 'deliveries'),
                                 (s.slot, case x.class when 'new' then 'new_operations'
                                                       else 'duplicates' end)) as m(slot, metric)
            where x.class <> 'steps'
            group by x.tenant, m.slot, m.metric
        on conflict (tenant_id, slot, metric, label, shard)
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
