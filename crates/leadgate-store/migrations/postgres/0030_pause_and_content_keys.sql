-- Issue 38, point 4: a connector paused by hand (a CRM's maintenance window, a
-- migration), with a reason and who paused it, from the CLI or the console (admin). It is
-- one more kind of person's request, `pause_connector`: a connector named, a body of
-- exactly {"reason": "…"} (said, at most 500 printable characters; the gateway checks it
-- again with `domain::text::check_pause_reason`), asked by admins only, like
-- `resume_connector`. `connectors.by_hand` tells such a pause from the one the worker makes
-- after an auth failure; `reason` and `changed_by` already say why and who.

alter table connectors add column by_hand boolean not null default false;

alter table human_requests drop constraint human_requests_kind_check;
alter table human_requests add constraint human_requests_kind_check
    check (kind in ('resolve', 'open_review', 'resume_connector', 'pause_connector', 'notified',
                    'set_rules'));

-- 0021's function: admins pause connectors as they resume them.
create or replace function leadgate_may_request(kind text, case_id bigint, body text) returns boolean
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
    role text := public.leadgate_role_of(session_user);
    reason text;
begin
    if role is null then
        return false;
    end if;
    if kind in ('resume_connector', 'pause_connector') then
        return role = 'leadgate_admin';
    end if;
    if kind = 'set_rules' then
        return role = 'leadgate_manager';
    end if;
    if role not in ('leadgate_sales_ops', 'leadgate_manager') then
        return false;
    end if;
    if kind in ('open_review', 'notified') or role = 'leadgate_manager' then
        return true;
    end if;
    -- sales_ops: not a cross-channel match, and never "create new"
    select c.reason into reason from public.review_cases c where c.id = case_id;
    return reason is distinct from 'cross_channel_match'
       and coalesce((body::jsonb) ->> 'resolution', '') <> 'created_new';
end
$$;

-- 0029's function, with the shape of a pause by hand.
create or replace function leadgate_request_problem(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, body text) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
declare
    b jsonb;
    keys text[];
    t text;
    most integer;
begin
    if kind is null or kind not in ('resolve', 'open_review', 'notified', 'resume_connector', 'pause_connector', 'set_rules') then
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
    elsif kind = 'pause_connector' then
        if connector is null or char_length(connector) > 128 or case_id is not null
           or expected_version is not null or operation_id is not null then
            return 'it names a connector, and nothing else';
        end if;
        if not (keys <@ array['reason'] and keys @> array['reason'])
           or jsonb_typeof(b -> 'reason') <> 'string'
           or btrim(b ->> 'reason', E' \t\n\r') = ''
           or char_length(b ->> 'reason') > 500
           or b ->> 'reason' ~ '[\x01-\x09\x0b-\x1f\x7f]' then
            return 'a pause by hand says why: `reason`, at most 500 printable characters';
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

-- Issue 38, point 5: content keys for senders whose deliveries carry no id
-- (`key = "content:/form+/phone+/email+/message"`). A content's SHA-256 is remembered with
-- the operation its first delivery made, until the source's `content_window` has passed:
-- the same content within it is that operation (a duplicate or, with other data outside
-- the keyed fields, a conflict), after it a new one. Of two gateways at once, the second
-- waits for the first's row and takes its operation.
create table content_keys (
    source          text not null,
    content_sha256  text not null,
    operation_id    text not null,
    expires_at      timestamptz not null,
    primary key (source, content_sha256)
);
create index content_keys_expires_at on content_keys (expires_at);
