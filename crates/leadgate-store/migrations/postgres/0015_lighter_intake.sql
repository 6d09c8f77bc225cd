-- Issue 15, point 3 again: less work per delivery inside `leadgate_record_delivery`
-- (0008, redefined in 0012). SQLite's twin changes the same indexes (1 and 2).
--
-- Measured on the function alone (BENCHMARKS.md, "Intake"): a new lead is about 15
-- statements inside the server (the function's own, the per-row metric triggers and the
-- helpers they call, the foreign-key check), each with its own executor start-up, and
-- 30 WAL records; a duplicate about 9 statements and 16 records. With the metric
-- triggers disabled the function took 40-50 % less CPU.
--
-- 1. Two indexes nothing reads: `timeline_kind` (kind, at) — every timeline query is by
--    operation (`timeline_operation`) — and `deliveries_received` (received_at), whose
--    only reader, retention's scrub of rejected deliveries, also filters on
--    `raw_body is not null or payload is not null` and is served by
--    `deliveries_unscrubbed` (0006) on the same column.
drop index timeline_kind;
drop index deliveries_received;

-- 2. Retention's walk of finished operations by age (`operations_updated`, 0001) indexed
--    every operation while it was not purged, new leads included; its one reader
--    (`purge_candidates`) asks for `completed` and `failed_terminal` ones only. Partial
--    on those, an operation enters it when it finishes (an update that writes new index
--    entries anyway), not at intake. (Building it reads the table once.)
drop index operations_updated;
create index operations_updated on operations (updated_at)
    where purged_at is null and status in ('completed', 'failed_terminal');

-- 3. The function writes the metric counters of its own rows itself, in the same
--    statement as the rows (the figures `deliveries_counted` and `operations_counted`
--    would write: deliveries by source and outcome, operations by status, the
--    `deliveries` series and `new_operations` or `duplicates`; two multi-row upserts
--    instead of two trigger calls making four helper calls), and the two insert
--    triggers skip rows written while the transaction-local setting `leadgate.counted`
--    is `intake` — which only this function sets, around its own inserts into those
--    two tables, and clears again right after them. Every other writer (the store's steps, a person
--    with psql, a migration) is counted by the triggers as before: a figure still
--    cannot disagree with the rows it counts. The `lost` check of `deliveries_counted`
--    has nothing to find here: the function journals a delivery only for the operation
--    row it has just inserted or holds locked. Everything else is 0012's function:
--    the same statements in the same order under the same locks, the same rows, ids
--    and event texts (`tests/it/intake_paths.rs` compares them with the steps').

drop trigger deliveries_counted on deliveries;
create trigger deliveries_counted after insert on deliveries
    for each row when (current_setting('leadgate.counted', true) is distinct from 'intake')
    execute function deliveries_counted();
drop trigger operations_counted_insert on operations;
create trigger operations_counted_insert after insert on operations
    for each row when (current_setting('leadgate.counted', true) is distinct from 'intake')
    execute function operations_counted();

create or replace function leadgate_record_delivery(
    p_operation_id      text,
    p_source            text,
    p_content_type      text,
    p_raw_body          bytea,
    p_payload           text,
    p_payload_hash      text,
    p_transform_version integer,
    p_phone             text,
    p_email             text,
    p_event_time        timestamptz,
    p_received_at       timestamptz,
    -- null: no contact matching for this delivery
    p_match_since       timestamptz,
    -- the advisory-lock keys of the contact values, sorted
    p_lock_keys         bigint[],
    -- the name for display, and its search words
    p_name              text,
    p_name_words        text[],
    -- 'new', 'duplicate', or 'steps' (nothing written: run the store's steps)
    out r_outcome       text,
    out r_delivery_id   bigint,
    out r_status        text,
    out r_crm_id        text
) language plpgsql as $$
declare
    stored_hash text;
    k bigint;
    v_slot bigint := floor(extract(epoch from p_received_at) / 300)::bigint;
    v_shard integer := pg_backend_pid();
begin
    -- Run the store's steps (nothing written) below READ COMMITTED's guarantees: see 0008.
    if current_setting('transaction_isolation') <> 'read committed' then
        r_outcome := 'steps';
        return;
    end if;
    loop
        select o.payload_hash, o.status, o.crm_id into stored_hash, r_status, r_crm_id
            from operations o where o.operation_id = p_operation_id for update;
        if found then
            if stored_hash <> p_payload_hash then
                r_outcome := 'steps';
                r_status := null;
                r_crm_id := null;
                return;
            end if;
            -- This row is counted here, not by the trigger (3. above).
            perform set_config('leadgate.counted', 'intake', true);
            insert into deliveries (source, operation_id, received_at, content_type, raw_body,
                                    payload, payload_hash, outcome, transform_version, event_time)
                values (p_source, p_operation_id, p_received_at, p_content_type, p_raw_body,
                        p_payload, p_payload_hash, 'duplicate', p_transform_version, p_event_time)
                returning id into r_delivery_id;
            perform set_config('leadgate.counted', '', true);
            insert into metric_counters (metric, label, label2, shard, value)
                values ('deliveries', p_source, 'duplicate', v_shard, 1)
                on conflict (metric, label, label2, shard) do update set value = metric_counters.value + 1;
            insert into metric_series (slot, metric, label, shard, value)
                values (v_slot, 'deliveries', '', v_shard, 1), (v_slot, 'duplicates', '', v_shard, 1)
                on conflict (slot, metric, label, shard) do update set value = metric_series.value + 1;
            insert into timeline (operation_id, at, kind, actor, error_class, detail)
                values (p_operation_id, p_received_at, 'delivery', 'gateway', null,
                        '{"delivery_id":' || r_delivery_id || ',"outcome":"duplicate"}');
            r_outcome := 'duplicate';
            return;
        end if;
        if p_match_since is not null and cardinality(p_lock_keys) > 0 then
            foreach k in array p_lock_keys loop
                perform pg_advisory_xact_lock(k);
            end loop;
            if exists (select 1 from operations o where o.contact_phone = p_phone
                       and o.created_at >= p_match_since and o.operation_id <> p_operation_id)
               or exists (select 1 from operations o where o.contact_email = p_email
                       and o.created_at >= p_match_since and o.operation_id <> p_operation_id)
            then
                r_outcome := 'steps';
                return;
            end if;
        end if;
        -- These rows are counted here, not by the triggers (3. above).
        perform set_config('leadgate.counted', 'intake', true);
        insert into operations (operation_id, source, status, payload_hash, payload,
                                contact_phone, contact_email, contact_name, name_words,
                                event_time, executor, next_attempt_at, created_at, updated_at)
            values (p_operation_id, p_source, 'received', p_payload_hash, p_payload,
                    p_phone, p_email, p_name,
                    case when cardinality(p_name_words) > 0
                         then ' ' || array_to_string(p_name_words, ' ') || ' ' end,
                    p_event_time, 'worker', p_received_at, p_received_at, p_received_at)
            on conflict (operation_id) do nothing;
        if found then
            if cardinality(p_name_words) > 0 then
                insert into operation_names (word, created_at, operation_id)
                    select w, p_received_at, p_operation_id from unnest(p_name_words) as w;
            end if;
            insert into deliveries (source, operation_id, received_at, content_type, raw_body,
                                    payload, payload_hash, outcome, transform_version, event_time)
                values (p_source, p_operation_id, p_received_at, p_content_type, p_raw_body,
                        p_payload, p_payload_hash, 'new', p_transform_version, p_event_time)
                returning id into r_delivery_id;
            perform set_config('leadgate.counted', '', true);
            insert into metric_counters (metric, label, label2, shard, value)
                values ('deliveries', p_source, 'new', v_shard, 1), ('operations', 'received', '', v_shard, 1)
                on conflict (metric, label, label2, shard) do update set value = metric_counters.value + 1;
            insert into metric_series (slot, metric, label, shard, value)
                values (v_slot, 'deliveries', '', v_shard, 1), (v_slot, 'new_operations', '', v_shard, 1)
                on conflict (slot, metric, label, shard) do update set value = metric_series.value + 1;
            insert into timeline (operation_id, at, kind, actor, error_class, detail)
                values (p_operation_id, p_received_at, 'delivery', 'gateway', null,
                        '{"delivery_id":' || r_delivery_id || ',"outcome":"new","payload_hash":'
                        || to_json(p_payload_hash)::text || '}');
            r_outcome := 'new';
            r_status := 'received';
            return;
        end if;
        -- A concurrent delivery of this key inserted it first: it is a known key now.
        perform set_config('leadgate.counted', '', true);
    end loop;
end
$$;
