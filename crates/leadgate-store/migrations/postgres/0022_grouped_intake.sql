-- Issue 15, point 3: PostgreSQL's intake is grouped, as SQLite's has been since 0008.
--
-- `leadgate_record_delivery` (0008, 0012, 0015) took one delivery per call, about fifteen
-- statements inside the server, each with its own executor start-up, and a transaction
-- and a round trip of its own. The gateway now hands the deliveries that are waiting
-- together (store/postgres.rs, `intake_writer`) to `leadgate_record_deliveries`, which
-- journals and claims all of them with one statement per table, in one transaction: the
-- journal rows, the claims, the timeline events and the contact matches of a group
-- commit together, and each sender is answered only after that commit.
--
-- What it takes is what 0015's function took: a new key whose contact matches nothing,
-- and a duplicate. Anything else it leaves unwritten and answers `steps`; the store then
-- runs its steps for that delivery (`store::ops::intake`) after the group committed:
--   * a known key with another fingerprint (a conflict: it opens a case);
--   * a new key whose phone or e-mail matches an earlier operation in the window;
--   * a new key that an earlier delivery of the same group also carries, or whose phone
--     or e-mail an earlier delivery of the group shares: the steps then see the earlier
--     one committed, exactly as if the two had come one after the other;
--   * a new key that a concurrent transaction inserted first (it is a known key now);
--   * a known key whose operation another transaction holds (locked, or changed and not
--     committed yet);
--   * everything, below READ COMMITTED.
--
-- Locks, always in this order, each kind sorted, so two groups never wait crosswise:
--   1. the contacts' advisory locks (the caller sends them sorted, without repeats);
--   2. the known operations of the group (`for update skip locked`, by operation_id: a
--      group never waits on a known operation; a delivery whose operation another
--      transaction holds goes to the steps);
--   3. the new keys, inserted by operation_id (a known key never gets here, so an insert
--      waits only for another intake inserting the same new key).
-- The store's steps take a delivery's contact locks before anything else too
-- (store/ops/intake.rs), so a group and the steps do not wait crosswise either.
--
-- Counting (0015, 3.): the insert triggers skip the rows written while `leadgate.counted`
-- is `intake`; the function adds those rows' figures itself, one upsert per table for
-- the whole group, and clears the setting right after its inserts.
--
-- Delivery ids follow the order of the group (ids are taken from the sequence before the
-- insert), so the journal reads in the order the deliveries were handed over.

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
    -- the advisory-lock keys of every matched delivery's contact values, sorted, no repeats
    p_lock_keys          bigint[],
    -- the name for display, and its search words as `operations.name_words` keeps them
    p_names              text[],
    p_names_words        text[],
    -- the names' search words, one row each: word i belongs to delivery p_word_rows[i] (1-based)
    p_word_rows          integer[],
    p_words              text[]
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
    k bigint;
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
begin
    if n = 0 then
        return;
    end if;
    if current_setting('transaction_isolation') <> 'read committed' then
        return query select g, 'steps'::text, null::bigint, null::text, null::text
            from generate_series(1, n) g;
        return;
    end if;

    -- 1. The contacts of the deliveries that match, before anything else (the store's
    --    steps take them before anything else too).
    foreach k in array coalesce(p_lock_keys, '{}') loop
        perform pg_advisory_xact_lock(k);
    end loop;

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
               case when x.phone is not null then min(x.i) over (partition by x.phone) end as first_of_phone,
               case when x.email is not null then min(x.i) over (partition by x.email) end as first_of_email
            from unnest(p_operation_ids, p_payload_hashes, p_phones, p_emails, p_match_sinces)
                with ordinality as x(id, hash, phone, email, since, i)
    )
    select array_agg(
        case
            when kn.id is not null then case when kn.hash = d.hash then 'duplicate' else 'steps' end
            when d.id = any(v_existing) then 'steps'
            when d.first_of_key < d.i then 'steps'
            when d.since is not null and (d.phone is not null or d.email is not null) and (
                d.first_of_phone < d.i or d.first_of_email < d.i
                or exists (select 1 from operations o where o.contact_phone = d.phone
                           and o.created_at >= d.since and o.operation_id <> d.id)
                or exists (select 1 from operations o where o.contact_email = d.email
                           and o.created_at >= d.since and o.operation_id <> d.id))
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
                                event_time, executor, next_attempt_at, created_at, updated_at)
            select x.id, x.source, 'received', x.hash, x.payload, x.phone, x.email, x.name,
                   x.words, x.event_time, 'worker', x.at, x.at, x.at
                from unnest(p_operation_ids, p_sources, p_payload_hashes, p_payloads, p_phones,
                            p_emails, p_names, p_names_words, p_event_times, p_received_ats, v_class)
                    as x(id, source, hash, payload, phone, email, name, words, event_time, at, class)
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

    insert into operation_names (word, created_at, operation_id)
        select w.word, p_received_ats[w.r], p_operation_ids[w.r]
            from unnest(p_word_rows, p_words) as w(r, word)
            where v_class[w.r] = 'new';
    insert into deliveries (id, source, operation_id, received_at, content_type, raw_body,
                            payload, payload_hash, outcome, transform_version, event_time)
        select x.delivery, x.source, x.id, x.at, x.content_type, x.raw_body, x.payload, x.hash,
               x.class, x.version, x.event_time
            from unnest(v_delivery, p_sources, p_operation_ids, p_received_ats, p_content_types,
                        p_raw_bodies, p_payloads, p_payload_hashes, v_class, p_transform_versions,
                        p_event_times)
                as x(delivery, source, id, at, content_type, raw_body, payload, hash, class,
                     version, event_time)
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
    insert into timeline (operation_id, at, kind, actor, error_class, detail)
        select x.id, x.at, 'delivery', 'gateway', null,
               case x.class
                   when 'new' then '{"delivery_id":' || x.delivery || ',"outcome":"new","payload_hash":'
                                   || to_json(x.hash)::text || '}'
                   else '{"delivery_id":' || x.delivery || ',"outcome":"duplicate"}'
               end
            from unnest(v_delivery, p_operation_ids, p_received_ats, p_payload_hashes, v_class)
                as x(delivery, id, at, hash, class)
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

-- `leadgate_record_delivery` (0015) stays: gateways of the previous version, sharing this
-- database during a rolling upgrade, still call it. Nothing in this version does; a later
-- migration may drop it.
