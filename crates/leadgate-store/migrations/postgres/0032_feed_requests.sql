-- Issue 38, point 3: the event feed's subscribers managed from the console, by admins.
-- Three more kinds of person's request: `feed_subscribe` (a body of exactly {"url",
-- "events", "secret"}: an http(s) URL of at most 2048 printable characters, an array of
-- the feed's event types or `all`, a `whsec_` base64 secret of at most 200 characters; the
-- gateway checks them again with the CLI's code, store::feed::check), `feed_remove` and
-- `feed_enable` (a body of exactly {"id": N}, N > 0). No key column: the id travels in the
-- body. Admins only, like the connectors. The secret leaves the row when the gateway
-- answers the request (`answer_request`): only the new subscriber keeps it.

alter table human_requests drop constraint human_requests_kind_check;
alter table human_requests add constraint human_requests_kind_check
    check (kind in ('resolve', 'open_review', 'resume_connector', 'pause_connector', 'notified',
                    'set_rules', 'feed_subscribe', 'feed_remove', 'feed_enable'));

-- 0030's function: admins manage the feed as they pause and resume connectors.
create or replace function leadgate_may_request(kind text, case_id bigint, body text) returns boolean
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
    role text := public.leadgate_role_of(session_user);
    reason text;
begin
    if role is null then
        return false;
    end if;
    if kind in ('resume_connector', 'pause_connector', 'feed_subscribe', 'feed_remove',
                'feed_enable') then
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

-- 0030's function, with the shapes of the feed's three kinds.
create or replace function leadgate_request_problem(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, body text) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
declare
    b jsonb;
    keys text[];
    t text;
    most integer;
begin
    if kind is null or kind not in ('resolve', 'open_review', 'notified', 'resume_connector', 'pause_connector',
                                   'set_rules', 'feed_subscribe', 'feed_remove', 'feed_enable') then
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
    elsif kind = 'feed_subscribe' then
        if case_id is not null or expected_version is not null or operation_id is not null
           or connector is not null then
            return 'a subscriber is its body only';
        end if;
        if not (keys <@ array['url', 'events', 'secret'] and keys @> array['url', 'events', 'secret']) then
            return 'a subscriber is `url`, `events` and `secret`';
        end if;
        if jsonb_typeof(b -> 'url') <> 'string' or char_length(b ->> 'url') > 2048
           or b ->> 'url' !~ '^https?://' or b ->> 'url' ~ '[[:cntrl:][:space:]]' then
            return 'a subscriber''s URL is an http:// or https:// URL of at most 2048 printable characters';
        end if;
        if jsonb_typeof(b -> 'events') <> 'array' or jsonb_array_length(b -> 'events') not between 1 and 8
           or exists (select 1 from jsonb_array_elements(b -> 'events') e
                      where jsonb_typeof(e) <> 'string'
                         or e #>> '{}' not in ('all', 'operation.completed', 'operation.failed',
                             'review.opened', 'review.resolved', 'connector.paused',
                             'connector.unreachable', 'connector.resumed')) then
            return 'a subscriber''s events are the feed''s event types, or `all`';
        end if;
        if jsonb_typeof(b -> 'secret') <> 'string' or char_length(b ->> 'secret') > 200
           or b ->> 'secret' !~ '^whsec_[A-Za-z0-9+/]+={0,2}$' then
            return 'a subscriber''s secret is `whsec_` then base64, at most 200 characters';
        end if;
    elsif kind in ('feed_remove', 'feed_enable') then
        if case_id is not null or expected_version is not null or operation_id is not null
           or connector is not null then
            return 'it names a subscriber in its body, and nothing else';
        end if;
        if not (keys <@ array['id'] and keys @> array['id'])
           or jsonb_typeof(b -> 'id') <> 'number' or b ->> 'id' !~ '^[1-9][0-9]{0,17}$' then
            return 'it names a subscriber: `id`, a positive integer';
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

