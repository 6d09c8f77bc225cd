-- Issue 15: one round trip per delivery on PostgreSQL. SQLite's twin (0008, a no-op)
-- keeps the version numbers aligned. Numbered 0008, not 0007, so that another change
-- may take 0007 without a clash.
--
-- `leadgate_record_delivery` is the store's intake of one delivery in one statement,
-- called in its own (implicit) transaction: the journal row, the claim and the
-- `delivery` timeline event commit together, and the contact-match lookup runs in the
-- same transaction, after the same advisory locks. It takes the two cases in which
-- `store::ops::intake::record` writes nothing but those rows:
--
-- * a new key (no late-delivery review, which the caller leaves to `record`) whose
--   contact matches no earlier operation: the operation, its `new` journal row and the
--   `delivery` event;
-- * a known key with the same fingerprint (`DeliveryKind::of`: the stored payload hash
--   equals this one): a `duplicate` journal row and its event, under the operation's
--   row lock, answered with the stored status and crm_id.
--
-- Anything else (another fingerprint, a contact that matches, a session that is not at
-- READ COMMITTED) comes back as `steps` *before anything was written*, and the caller
-- runs `record` — where the decisions are (domain::rules) — in a transaction of its own.
-- The rows, ids, event texts and metric counters (kept by the 0004 triggers, which fire
-- here as they do for the store's statements) are those `record` writes; the test
-- `intake_paths` compares both on the same deliveries.
--
-- Statement order and locks are `record`'s: the row lock of a known key; the advisory
-- locks of the contact keys (sorted by the caller, as `record` sorts them) before the
-- lookup; each statement of this function reads a fresh snapshot at READ COMMITTED, so
-- a lead whose intake committed while this one waited for the lock is seen. A key that
-- a concurrent delivery inserts first (`on conflict do nothing` inserts nothing) is
-- read again, locked, as a known key.
create function leadgate_record_delivery(
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
    -- 'new', 'duplicate', or 'steps' (nothing written: run the store's steps)
    out r_outcome       text,
    out r_delivery_id   bigint,
    out r_status        text,
    out r_crm_id        text
) language plpgsql as $$
declare
    stored_hash text;
    k bigint;
begin
    -- The store's row locks and re-reads are written for READ COMMITTED (its own
    -- transactions set it; this one is the session's, which the store's connections
    -- set at startup).
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
            insert into deliveries (source, operation_id, received_at, content_type, raw_body,
                                    payload, payload_hash, outcome, transform_version, event_time)
                values (p_source, p_operation_id, p_received_at, p_content_type, p_raw_body,
                        p_payload, p_payload_hash, 'duplicate', p_transform_version, p_event_time)
                returning id into r_delivery_id;
            -- serde_json's text of {"delivery_id": …, "outcome": "duplicate"}
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
        insert into operations (operation_id, source, status, payload_hash, payload,
                                contact_phone, contact_email, event_time, executor,
                                next_attempt_at, created_at, updated_at)
            values (p_operation_id, p_source, 'received', p_payload_hash, p_payload,
                    p_phone, p_email, p_event_time, 'worker',
                    p_received_at, p_received_at, p_received_at)
            on conflict (operation_id) do nothing;
        if found then
            insert into deliveries (source, operation_id, received_at, content_type, raw_body,
                                    payload, payload_hash, outcome, transform_version, event_time)
                values (p_source, p_operation_id, p_received_at, p_content_type, p_raw_body,
                        p_payload, p_payload_hash, 'new', p_transform_version, p_event_time)
                returning id into r_delivery_id;
            -- serde_json's text of {"delivery_id": …, "outcome": "new", "payload_hash": …}
            insert into timeline (operation_id, at, kind, actor, error_class, detail)
                values (p_operation_id, p_received_at, 'delivery', 'gateway', null,
                        '{"delivery_id":' || r_delivery_id || ',"outcome":"new","payload_hash":'
                        || to_json(p_payload_hash)::text || '}');
            r_outcome := 'new';
            r_status := 'received';
            return;
        end if;
        -- A concurrent delivery of this key inserted it first: it is a known key now.
    end loop;
end
$$;

-- The metric helpers of 0004/0006, unchanged in what they do, in PL/pgSQL instead of SQL:
-- PostgreSQL 15 parses and plans the body of a SQL function (one that cannot be inlined,
-- like these inserts) on every call, and the triggers call them three or four times per
-- delivery; a PL/pgSQL function keeps its plan for the session.
create or replace function metric_add(m text, l text, l2 text, delta bigint) returns void
language plpgsql as $$
begin
    insert into metric_counters (metric, label, label2, shard, value)
    values (m, l, l2, pg_backend_pid(), delta)
    on conflict (metric, label, label2, shard) do update set value = metric_counters.value + excluded.value;
end
$$;

create or replace function series_add(at timestamptz, m text, l text) returns void
language plpgsql as $$
begin
    insert into metric_series (slot, metric, label, shard, value)
    values (floor(extract(epoch from at) / 300)::bigint, m, l, pg_backend_pid(), 1)
    on conflict (slot, metric, label, shard) do update set value = metric_series.value + 1;
end
$$;
