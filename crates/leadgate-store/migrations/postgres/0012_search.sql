-- Issue 16: search across all operations (`Store::search`). SQLite's twin has the same
-- version. (0011 is left to a change made in parallel; sqlx applies a missing lower
-- version when it appears.)
--
-- The lead's name, as the source's field map reads it (`domain::Lead::name`), kept for
-- display (`contact_name`) and for search, like contact_phone and contact_email;
-- retention scrubs all three. `name_words` is the name's words as `domain::search::words`
-- makes them (lower case, `ё` as `е`: done in Rust, whatever the database's ctype), in
-- the form ' иван петров ', to filter rows; `operation_names` holds one row per word,
-- the index a word-prefix search ranges over (collation "C": a prefix is a byte range).
--
-- No backfill: which payload field is the name is each source's field map in
-- leadgate.toml, which the database does not know. Operations recorded before this
-- version are found by key, crm_id, phone and e-mail, not by name.
alter table operations add column contact_name text;
alter table operations add column name_words text;

create table operation_names (
    word          text collate "C" not null,
    created_at    timestamptz not null,
    operation_id  text not null,
    primary key (word, created_at, operation_id)
);

-- Newest first: results are ordered by (created_at, operation_id), and a query that
-- matches many operations walks this index from the newest end.
create index operations_created on operations (created_at, operation_id);
-- Search by the CRM's id (set by the worker, never at intake: intake pays nothing).
create index operations_crm_id on operations (crm_id) where crm_id is not null;
-- Key prefixes: a byte range whatever the database's collation.
create index operations_key_c on operations ((operation_id collate "C"));

-- `leadgate_record_delivery` (0008) again, with the name: `p_name` for the operation's
-- row, `p_name_words` (from `domain::search::words`) for `operation_names`, written with
-- the operation in the same statement. Everything else is 0008's function unchanged.
drop function leadgate_record_delivery(text, text, text, bytea, text, text, integer, text,
    text, timestamptz, timestamptz, timestamptz, bigint[]);

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
begin
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
            insert into timeline (operation_id, at, kind, actor, error_class, detail)
                values (p_operation_id, p_received_at, 'delivery', 'gateway', null,
                        '{"delivery_id":' || r_delivery_id || ',"outcome":"new","payload_hash":'
                        || to_json(p_payload_hash)::text || '}');
            r_outcome := 'new';
            r_status := 'received';
            return;
        end if;
    end loop;
end
$$;
