-- The signed event feed (src/feed/): subscribers, the events they are owed, and every
-- delivery attempt. An event is written by the triggers below in the same transaction as
-- the state change it reports (the outbox pattern): a change that commits has its event
-- and one delivery row per subscriber of its type; one that rolls back, or a process killed
-- before the commit, has neither. The feed's loop sends each delivery row until the
-- subscriber answers 2xx; then the row goes, and the event with its last row (what was
-- sent stays in `feed_attempts`).

create table feed_subscribers (
    id              bigserial primary key,
    url             text not null,
    -- `whsec_<base64>`: the signing key, shown once by `leadgate feed subscribe`, never logged
    secret          text not null,
    -- the event types it receives, comma-separated (`operation.completed,review.opened`)
    events          text not null,
    state           text not null default 'active' check (state in ('active', 'disabled')),
    disabled_reason text,
    disabled_at     timestamptz,
    created_at      timestamptz not null,
    -- consecutive failed deliveries, since when, and when the head of its queue is tried again
    failures        integer not null default 0,
    first_failed_at timestamptz,
    next_try_at     timestamptz,
    -- the sending turn: of several gateways on one database, one sends to a subscriber
    lease_owner     text,
    lease_token     text,
    lease_until     timestamptz
);

create table feed_events (
    seq          bigserial primary key,
    -- the `webhook-id`: made once, the same on every retry, so receivers can deduplicate
    event_id     text not null unique,
    type         text not null,
    occurred_at  timestamptz not null,
    -- the event's `data` (JSON text): ids, states, reasons and names, no lead's data
    data         text not null
);

-- What each subscriber is still owed: one row per subscriber and event not yet delivered.
create table feed_deliveries (
    subscriber_id bigint not null references feed_subscribers (id) on delete cascade,
    event_seq     bigint not null references feed_events (seq),
    attempts      integer not null default 0,
    primary key (subscriber_id, event_seq)
);

-- Every delivery attempt, for `leadgate feed deliveries` (the newest 500
-- per subscriber are kept).
create table feed_attempts (
    id            bigserial primary key,
    subscriber_id bigint not null references feed_subscribers (id) on delete cascade,
    event_seq     bigint not null,
    event_id      text not null,
    type          text not null,
    at            timestamptz not null,
    -- the receiver's HTTP status; null when it gave none (refused, timed out)
    status        integer,
    ok            boolean not null,
    error         text
);
create index feed_attempts_subscriber on feed_attempts (subscriber_id, id);

create function feed_attempts_counted() returns trigger language plpgsql as $$
begin
    perform metric_add('feed_deliveries', case when new.ok then 'delivered' else 'failed' end, '', 1);
    return null;
end
$$;
create trigger feed_attempts_counted after insert on feed_attempts
    for each row execute function feed_attempts_counted();

-- One event, with its delivery rows, when some active or disabled subscriber takes its
-- type (a disabled one gets what it missed once re-enabled).
-- It runs inside the change it reports (a completed operation, a review case), so it must
-- never fail it: the subscribers are locked `for key share`, and one an admin removes
-- meanwhile is waited for, then skipped (a foreign-key error here would throw away the
-- record of a CRM create). An event nobody is owed any more is not kept.
create function feed_emit(kind text, at timestamptz, body jsonb) returns void language plpgsql as $$
declare
    n bigint;
    owed bigint;
begin
    if not exists (select 1 from feed_subscribers where kind = any(string_to_array(events, ','))) then
        return;
    end if;
    insert into feed_events (event_id, type, occurred_at, data)
        values ('evt_' || replace(gen_random_uuid()::text, '-', ''), kind, at, body::text)
        returning seq into n;
    insert into feed_deliveries (subscriber_id, event_seq)
        select id, n from feed_subscribers where kind = any(string_to_array(events, ','))
        for key share;
    get diagnostics owed = row_count;
    if owed = 0 then
        delete from feed_events where seq = n;
    end if;
end
$$;

create function feed_operation_finished() returns trigger language plpgsql as $$
begin
    if new.status in ('completed', 'failed_terminal')
       and (tg_op = 'INSERT' or old.status is distinct from new.status) then
        perform feed_emit(
            case new.status when 'completed' then 'operation.completed' else 'operation.failed' end,
            new.updated_at,
            jsonb_build_object('operation_id', new.operation_id, 'source', new.source,
                               'status', new.status, 'crm_id', new.crm_id,
                               'error_class', new.last_error_class));
    end if;
    return null;
end
$$;
-- WHEN clauses keep intake's inserts and the worker's other updates free of any call.
create trigger feed_operation_inserted after insert on operations
    for each row when (new.status in ('completed', 'failed_terminal'))
    execute function feed_operation_finished();
create trigger feed_operation_finished after update of status on operations
    for each row when (new.status in ('completed', 'failed_terminal') and old.status is distinct from new.status)
    execute function feed_operation_finished();

create function feed_review_changed() returns trigger language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        perform feed_emit('review.opened', new.opened_at,
            jsonb_build_object('case_id', new.id, 'operation_id', new.operation_id, 'reason', new.reason));
    elsif old.resolved_at is null and new.resolved_at is not null then
        perform feed_emit('review.resolved', new.resolved_at,
            jsonb_build_object('case_id', new.id, 'operation_id', new.operation_id, 'reason', new.reason,
                               'resolution', new.resolution));
    end if;
    return null;
end
$$;
create trigger feed_review_opened after insert on review_cases
    for each row execute function feed_review_changed();
create trigger feed_review_resolved after update of resolved_at on review_cases
    for each row when (old.resolved_at is null and new.resolved_at is not null)
    execute function feed_review_changed();

create function feed_connector_changed() returns trigger language plpgsql as $$
declare
    was_paused boolean := false;
    was_unreachable timestamptz;
begin
    if tg_op = 'UPDATE' then
        was_paused := old.state = 'paused';
        was_unreachable := old.unreachable_since;
    end if;
    if new.state = 'paused' and not was_paused then
        perform feed_emit('connector.paused', new.since,
            jsonb_build_object('connector', new.name, 'reason', new.reason));
    elsif new.state = 'active' and was_paused then
        perform feed_emit('connector.resumed', new.since,
            jsonb_build_object('connector', new.name, 'after', 'pause'));
    end if;
    if new.unreachable_since is not null and was_unreachable is null then
        perform feed_emit('connector.unreachable', new.unreachable_since,
            jsonb_build_object('connector', new.name, 'since', new.unreachable_since));
    elsif new.unreachable_since is null and was_unreachable is not null then
        perform feed_emit('connector.resumed', clock_timestamp(),
            jsonb_build_object('connector', new.name, 'after', 'outage',
                               'unreachable_since', was_unreachable));
    end if;
    return null;
end
$$;
create trigger feed_connector_added after insert on connectors
    for each row execute function feed_connector_changed();
create trigger feed_connector_changed after update of state, unreachable_since on connectors
    for each row when (old.state is distinct from new.state
                       or (old.unreachable_since is null) <> (new.unreachable_since is null))
    execute function feed_connector_changed();

-- Only the administrator reads the feed (subscribers without their secret, deliveries,
-- attempts); the people's other roles see none of it. Run by `PgStore::secure_database`
-- at every start after `leadgate_install_roles` (whose casework grant covers every table).
create function leadgate_feed_grants() returns void language plpgsql as $$
begin
    revoke all on feed_subscribers, feed_events, feed_deliveries, feed_attempts
        from leadgate_support, leadgate_sales_ops, leadgate_manager, leadgate_admin;
    grant select (id, url, events, state, disabled_reason, disabled_at, created_at, failures,
                  first_failed_at, next_try_at) on feed_subscribers to leadgate_admin;
    grant select on feed_events, feed_deliveries, feed_attempts to leadgate_admin;
end
$$;
revoke all on function leadgate_feed_grants() from public;
