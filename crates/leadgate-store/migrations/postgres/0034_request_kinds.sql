-- The kinds of a person's request, one row each: who may ask for it (`asked_by`, roles;
-- the case-by-case rule for a sales_ops resolution stays in `leadgate_may_request`) and the
-- function that checks its shape (`shape`). A migration that adds a kind now adds a row and
-- a function. Before, the kinds were listed three times (the `kind` check, both functions)
-- and 0026, 0029, 0030 and 0032 each restated both functions whole. Same rules, same
-- refusals, word for word; an unknown kind is refused by the insert trigger
-- (`human_requests_checked`), which the `kind` check duplicated.

create table leadgate_request_kinds (
    kind      text primary key,
    asked_by  text[] not null,
    shape     text not null
);
insert into leadgate_request_kinds (kind, asked_by, shape) values
    ('resolve',          '{leadgate_sales_ops,leadgate_manager}', 'leadgate_request_shape_resolve'),
    ('open_review',      '{leadgate_sales_ops,leadgate_manager}', 'leadgate_request_shape_operation'),
    ('notified',         '{leadgate_sales_ops,leadgate_manager}', 'leadgate_request_shape_operation'),
    ('resume_connector', '{leadgate_admin}',                      'leadgate_request_shape_resume'),
    ('pause_connector',  '{leadgate_admin}',                      'leadgate_request_shape_pause'),
    ('feed_subscribe',   '{leadgate_admin}',                      'leadgate_request_shape_feed_subscribe'),
    ('feed_remove',      '{leadgate_admin}',                      'leadgate_request_shape_feed_subscriber'),
    ('feed_enable',      '{leadgate_admin}',                      'leadgate_request_shape_feed_subscriber'),
    ('set_rules',        '{leadgate_manager}',                    'leadgate_request_shape_rules');

alter table human_requests drop constraint human_requests_kind_check;

create or replace function leadgate_may_request(kind text, case_id bigint, body text) returns boolean
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
    role text := public.leadgate_role_of(session_user);
    reason text;
begin
    if role is null or not exists (select 1 from public.leadgate_request_kinds k
                                   where k.kind = $1 and role = any (k.asked_by)) then
        return false;
    end if;
    if $1 = 'resolve' and role = 'leadgate_sales_ops' then
        -- not a cross-channel match, and never "create new"
        select c.reason into reason from public.review_cases c where c.id = $2;
        return reason is distinct from 'cross_channel_match'
           and coalesce(($3::jsonb) ->> 'resolution', '') <> 'created_new';
    end if;
    return true;
end
$$;

-- What every kind's body shares, then the kind's own function. Called by the insert
-- trigger (`human_requests_checked`, security definer), which reads the kinds.
create or replace function leadgate_request_problem(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, body text) returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
    b jsonb;
    keys text[];
    shape text;
    problem text;
begin
    select k.shape into shape from public.leadgate_request_kinds k where k.kind = $1;
    if shape is null then
        return format('`%s` is not a kind of request Leadgate knows', left(coalesce($1, 'null'), 40));
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
       and ($1 <> 'resolve' or b ->> 'resolution' is distinct from 'resent_edited') then
        return 'its body is longer than 16384 bytes';
    end if;
    execute format('select public.%I($1, $2, $3, $4, $5, $6, $7)', shape)
        into problem using $1, case_id, operation_id, connector, expected_version, b, keys;
    return problem;
end
$$;

create function leadgate_request_shape_resolve(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, b jsonb, keys text[]) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
declare
    t text;
begin
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
    return null;
end
$$;

-- `open_review` and `notified`: an operation, and a detail object.
create function leadgate_request_shape_operation(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, b jsonb, keys text[]) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
declare
    t text;
    most integer := case kind when 'notified' then 1024 else 12288 end;
begin
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
    if octet_length((b -> 'detail')::text) > most then
        return format('its detail is longer than %s bytes', most);
    end if;
    return null;
end
$$;

create function leadgate_request_shape_resume(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, b jsonb, keys text[]) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
    if connector is null or char_length(connector) > 128 or case_id is not null
       or expected_version is not null or operation_id is not null then
        return 'it names a connector, and nothing else';
    end if;
    if b <> '{}'::jsonb then
        return 'its body is empty';
    end if;
    return null;
end
$$;

create function leadgate_request_shape_pause(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, b jsonb, keys text[]) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
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
    return null;
end
$$;

create function leadgate_request_shape_feed_subscribe(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, b jsonb, keys text[]) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
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
    return null;
end
$$;

-- `feed_remove` and `feed_enable`: a subscriber's id in the body.
create function leadgate_request_shape_feed_subscriber(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, b jsonb, keys text[]) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
    if case_id is not null or expected_version is not null or operation_id is not null
       or connector is not null then
        return 'it names a subscriber in its body, and nothing else';
    end if;
    if not (keys <@ array['id'] and keys @> array['id'])
       or jsonb_typeof(b -> 'id') <> 'number' or b ->> 'id' !~ '^[1-9][0-9]{0,17}$' then
        return 'it names a subscriber: `id`, a positive integer';
    end if;
    return null;
end
$$;

create function leadgate_request_shape_rules(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, b jsonb, keys text[]) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
begin
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
    return null;
end
$$;
