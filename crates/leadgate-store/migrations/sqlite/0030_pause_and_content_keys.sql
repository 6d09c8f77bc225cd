-- Issue 38, point 4: a connector paused by hand (a CRM's maintenance window, a
-- migration), with a reason and who paused it. `by_hand` tells it from a pause the worker
-- made after an auth failure; `reason` and `changed_by` already say why and who.
alter table connectors add column by_hand integer not null default 0;

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
    expires_at      text not null,
    primary key (source, content_sha256)
);
create index content_keys_expires_at on content_keys (expires_at);
