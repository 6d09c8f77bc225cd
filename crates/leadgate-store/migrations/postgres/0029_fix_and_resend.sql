-- Issue 37, point 8: "Fix and resend" — a person fixes a failed lead's data and sends it
-- again. It is a resolution like "authorize one retry" (`resent_edited`, the same roles:
-- sales_ops and managers, `leadgate_may_request` unchanged), whose request carries the
-- edited payload (a JSON object). Only that request may be longer than 16 KiB: up to the
-- payload's 256 KiB (domain::rules::MAX_EDITED_PAYLOAD_BYTES) and a little more for the
-- rest of the body. The gateway then replaces `operations.payload` (its fingerprint stays
-- the original's; store/review/ops.rs). No column or grant changes.

-- 0026's function: a resolution may carry `payload` exactly when it is `resent_edited`.
create or replace function leadgate_request_problem(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, body text) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
declare
    b jsonb;
    keys text[];
    t text;
    most integer;
begin
    if kind is null or kind not in ('resolve', 'open_review', 'notified', 'resume_connector', 'set_rules') then
        return format('`%s` is not a kind of request Leadgate knows', left(coalesce(kind, 'null'), 40));
    end if;
    begin
        b := body::jsonb;
    exception when others then
        return 'its body is not JSON';
    end;
    if jsonb_typeof(b) is distinct from 'object' then
        return 'its body is not a JSON object';
    end if;
    select coalesce(array_agg(k), '{}') into keys from jsonb_object_keys(b) k;
    -- only Fix and resend carries a lead's data; every other body is a few fields
    if octet_length(body) > 16384
       and (kind <> 'resolve' or b ->> 'resolution' is distinct from 'resent_edited') then
        return 'its body is longer than 16384 bytes';
    end if;
    if kind = 'resolve' then
        if case_id is null or expected_version is null or operation_id is not null or connector is not null then
            return 'a resolution names a case and the version seen, and nothing else';
        end if;
        if not keys <@ array['resolution', 'crm_id', 'comment', 'bulk', 'payload'] then
            return 'a resolution has only `resolution`, `crm_id`, `comment`, `bulk` and `payload`';
        end if;
        if coalesce(b ->> 'resolution' = 'resent_edited', false)
           <> coalesce(jsonb_typeof(b -> 'payload') = 'object', false) then
            return 'Fix and resend carries the edited data as a JSON object, and nothing else does';
        end if;
        if jsonb_typeof(b -> 'resolution') is distinct from 'string'
           or b ->> 'resolution' not in ('confirmed_crm_result', 'linked_existing', 'retry_authorized',
                'kept_original', 'accepted_as_new', 'updated_crm', 'rejected', 'created_new',
                'resent_edited') then
            return 'its resolution is not one a person may choose';
        end if;
        t := jsonb_typeof(b -> 'crm_id');
        if t is not null and t <> 'null' and (t <> 'string' or char_length(b ->> 'crm_id') > 256
                                              or b ->> 'crm_id' ~ '[[:cntrl:]]') then
            return 'a CRM id is at most 256 printable characters';
        end if;
        t := jsonb_typeof(b -> 'comment');
        if t is not null and t <> 'null' and (t <> 'string' or char_length(b ->> 'comment') > 4000) then
            return 'a comment is a text of at most 4000 characters';
        end if;
        t := jsonb_typeof(b -> 'bulk');
        if t is not null and t <> 'null' and (t <> 'object'
                or not array(select jsonb_object_keys(b -> 'bulk')) <@ array['id', 'of']
                or jsonb_typeof(b -> 'bulk' -> 'id') is distinct from 'string'
                or char_length(b -> 'bulk' ->> 'id') > 100
                or jsonb_typeof(b -> 'bulk' -> 'of') is distinct from 'number') then
            return 'a bulk run is its id and its size';
        end if;
    elsif kind in ('open_review', 'notified') then
        if operation_id is null or char_length(operation_id) > 255 or case_id is not null
           or expected_version is not null or connector is not null then
            return 'it names an operation, and nothing else';
        end if;
        if not keys <@ array['detail'] then
            return 'its body has only `detail`';
        end if;
        t := jsonb_typeof(b -> 'detail');
        if t is not null and t not in ('null', 'object') then
            return 'its detail is a JSON object';
        end if;
        most := case kind when 'notified' then 1024 else 12288 end;
        if octet_length((b -> 'detail')::text) > most then
            return format('its detail is longer than %s bytes', most);
        end if;
    elsif kind = 'resume_connector' then
        if connector is null or char_length(connector) > 128 or case_id is not null
           or expected_version is not null or operation_id is not null then
            return 'it names a connector, and nothing else';
        end if;
        if b <> '{}'::jsonb then
            return 'its body is empty';
        end if;
    elsif kind = 'set_rules' then
        if expected_version is null or case_id is not null or operation_id is not null or connector is not null then
            return 'it names the version seen, and nothing else';
        end if;
        if not (keys <@ array['source', 'rule', 'window_secs', 'channel']
                and keys @> array['source', 'rule', 'window_secs', 'channel'])
           or jsonb_typeof(b -> 'source') <> 'string' or char_length(b ->> 'source') > 64
           or jsonb_typeof(b -> 'rule') <> 'string' or char_length(b ->> 'rule') > 64
           or jsonb_typeof(b -> 'window_secs') <> 'number'
           or jsonb_typeof(b -> 'channel') <> 'string' or char_length(b ->> 'channel') > 64 then
            return 'business rules are `source`, `rule`, `window_secs` and `channel`';
        end if;
    end if;
    return null;
end
$$;


alter table human_requests drop constraint human_requests_body_size;
alter table human_requests add constraint human_requests_body_size check (octet_length(body) <= 278528);
