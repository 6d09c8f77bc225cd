-- The signed event feed (src/feed/): subscribers, the events they are owed, and every
-- delivery attempt. An event is written by the triggers below in the same transaction as
-- the state change it reports (the outbox pattern): a change that commits has its event
-- and one delivery row per subscriber of its type; one that rolls back, or a process killed
-- before the commit, has neither. The feed's loop sends each delivery row until the
-- subscriber answers 2xx; then the row goes, and the event with its last row (what was
-- sent stays in `feed_attempts`).

create table feed_subscribers (
    id              integer primary key autoincrement,
    url             text not null,
    -- `whsec_<base64>`: the signing key, shown once by `leadgate feed subscribe`, never logged
    secret          text not null,
    -- the event types it receives, comma-separated (`operation.completed,review.opened`)
    events          text not null,
    state           text not null default 'active' check (state in ('active', 'disabled')),
    disabled_reason text,
    disabled_at     text,
    created_at      text not null,
    -- consecutive failed deliveries, since when, and when the head of its queue is tried again
    failures        integer not null default 0,
    first_failed_at text,
    next_try_at     text,
    -- the sending turn: of several gateways on one database, one sends to a subscriber
    lease_owner     text,
    lease_token     text,
    lease_until     text
);

create table feed_events (
    seq          integer primary key autoincrement,
    -- the `webhook-id`: made once, the same on every retry, so receivers can deduplicate
    event_id     text not null unique,
    type         text not null,
    occurred_at  text not null,
    -- the event's `data` (JSON text): ids, states, reasons and names, no lead's data
    data         text not null
);

-- What each subscriber is still owed: one row per subscriber and event not yet delivered.
create table feed_deliveries (
    subscriber_id integer not null references feed_subscribers (id) on delete cascade,
    event_seq     integer not null references feed_events (seq),
    attempts      integer not null default 0,
    primary key (subscriber_id, event_seq)
);

-- Every delivery attempt, for `leadgate feed deliveries` (the newest 500
-- per subscriber are kept).
create table feed_attempts (
    id            integer primary key autoincrement,
    subscriber_id integer not null references feed_subscribers (id) on delete cascade,
    event_seq     integer not null,
    event_id      text not null,
    type          text not null,
    at            text not null,
    -- the receiver's HTTP status; null when it gave none (refused, timed out)
    status        integer,
    ok            integer not null,
    error         text
);
create index feed_attempts_subscriber on feed_attempts (subscriber_id, id);

create trigger feed_attempts_counted after insert on feed_attempts begin
    insert into metric_counters (metric, label, value)
        values ('feed_deliveries', case when new.ok then 'delivered' else 'failed' end, 1)
        on conflict (metric, label, label2, shard) do update set value = value + 1;
end;

-- One event: `insert into feed_emit (type, occurred_at, data)` writes it with its delivery
-- rows, when some active or disabled subscriber takes its type (a disabled one gets what
-- it missed once re-enabled).
create view feed_emit (type, occurred_at, data) as select type, occurred_at, data from feed_events;
create trigger feed_emit_insert instead of insert on feed_emit
when exists (select 1 from feed_subscribers where ',' || events || ',' like '%,' || new.type || ',%')
begin
    insert into feed_events (event_id, type, occurred_at, data)
        values ('evt_' || lower(hex(randomblob(16))), new.type, new.occurred_at, new.data);
    insert into feed_deliveries (subscriber_id, event_seq)
        select id, last_insert_rowid() from feed_subscribers
        where ',' || events || ',' like '%,' || new.type || ',%';
end;

create trigger feed_operation_inserted after insert on operations
when new.status in ('completed', 'failed_terminal')
begin
    insert into feed_emit (type, occurred_at, data) values (
        case new.status when 'completed' then 'operation.completed' else 'operation.failed' end,
        new.updated_at,
        json_object('operation_id', new.operation_id, 'source', new.source, 'status', new.status,
                    'crm_id', new.crm_id, 'error_class', new.last_error_class));
end;
create trigger feed_operation_finished after update of status on operations
when new.status in ('completed', 'failed_terminal') and old.status <> new.status
begin
    insert into feed_emit (type, occurred_at, data) values (
        case new.status when 'completed' then 'operation.completed' else 'operation.failed' end,
        new.updated_at,
        json_object('operation_id', new.operation_id, 'source', new.source, 'status', new.status,
                    'crm_id', new.crm_id, 'error_class', new.last_error_class));
end;

create trigger feed_review_opened after insert on review_cases begin
    insert into feed_emit (type, occurred_at, data) values ('review.opened', new.opened_at,
        json_object('case_id', new.id, 'operation_id', new.operation_id, 'reason', new.reason));
end;
create trigger feed_review_resolved after update of resolved_at on review_cases
when old.resolved_at is null and new.resolved_at is not null
begin
    insert into feed_emit (type, occurred_at, data) values ('review.resolved', new.resolved_at,
        json_object('case_id', new.id, 'operation_id', new.operation_id, 'reason', new.reason,
                    'resolution', new.resolution));
end;

create trigger feed_connector_added after insert on connectors begin
    insert into feed_emit (type, occurred_at, data)
        select 'connector.paused', new.since,
               json_object('connector', new.name, 'reason', new.reason)
        where new.state = 'paused';
    insert into feed_emit (type, occurred_at, data)
        select 'connector.unreachable', new.unreachable_since,
               json_object('connector', new.name, 'since', new.unreachable_since)
        where new.unreachable_since is not null;
end;
create trigger feed_connector_paused after update of state on connectors
when old.state = 'active' and new.state = 'paused'
begin
    insert into feed_emit (type, occurred_at, data) values ('connector.paused', new.since,
        json_object('connector', new.name, 'reason', new.reason));
end;
create trigger feed_connector_unpaused after update of state on connectors
when old.state = 'paused' and new.state = 'active'
begin
    insert into feed_emit (type, occurred_at, data) values ('connector.resumed', new.since,
        json_object('connector', new.name, 'after', 'pause'));
end;
create trigger feed_connector_unreachable after update of unreachable_since on connectors
when old.unreachable_since is null and new.unreachable_since is not null
begin
    insert into feed_emit (type, occurred_at, data) values ('connector.unreachable',
        new.unreachable_since, json_object('connector', new.name, 'since', new.unreachable_since));
end;
create trigger feed_connector_reachable after update of unreachable_since on connectors
when old.unreachable_since is not null and new.unreachable_since is null
begin
    insert into feed_emit (type, occurred_at, data) values ('connector.resumed',
        strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
        json_object('connector', new.name, 'after', 'outage', 'unreachable_since', old.unreachable_since));
end;
