-- The operations store on SQLite. PostgreSQL's twin lives in migrations/postgres with the
-- same version numbers; an applied migration is never edited, a change is a new file in
-- both folders. Timestamps are UTC RFC 3339 text written by sqlx from chrono values, so
-- comparing the text compares the times.

-- Every inbound delivery, kept before the sender gets its answer: the journal answers
-- "what came in, when, and what did Leadgate make of it" for every operation.
create table deliveries (
    id                integer primary key autoincrement,
    source            text not null,
    -- null when the delivery was rejected before a key could be derived
    operation_id      text,
    received_at       text not null,
    content_type      text,
    -- the raw body as received (bytes: a rejected body may not even be UTF-8);
    -- null once retention scrubbed it
    raw_body          blob,
    -- the parsed payload (JSON text) that the fingerprint was computed over
    payload           text,
    payload_hash      text,
    outcome           text not null check (outcome in ('new', 'duplicate', 'conflict', 'rejected')),
    reject_reason     text,
    transform_version integer not null,
    -- the source's own event time, when the payload carries one (late-duplicate check)
    event_time        text
);
-- Delivery history of one operation, newest last.
create index deliveries_operation on deliveries (operation_id, id);
-- Metrics: deliveries by source and outcome over a time range.
create index deliveries_received on deliveries (received_at);

create table operations (
    operation_id      text primary key,
    source            text not null,
    status            text not null check (status in ('received', 'in_progress', 'completed', 'failed_terminal', 'needs_review')),
    payload_hash      text not null,
    -- the first accepted payload (JSON text); null after retention scrubbed it
    payload           text,
    crm_id            text,
    -- how crm_id became known: created | recovered | confirmed | linked
    crm_link          text check (crm_link in ('created', 'recovered', 'confirmed', 'linked')),
    -- create attempts that may have reached the CRM
    attempts          integer not null default 0,
    last_error        text,
    last_error_class  text check (last_error_class in ('not_sent', 'rate_limited', 'uncertain', 'validation', 'auth', 'conflict')),
    review_reason     text,
    lease_owner       text,
    -- the holder of this token is the only one allowed to report an attempt's outcome
    lease_token       text,
    lease_expires_at  text,
    next_attempt_at   text,
    -- single-use grants of one more attempt, given by a person (0 or 1)
    retry_grants      integer not null default 0 check (retry_grants >= 0),
    -- normalized contact keys, for cross-channel matching; scrubbed by retention
    contact_phone     text,
    contact_email     text,
    event_time        text,
    -- optimistic lock for human resolutions: bumped by every change
    version           integer not null default 1,
    created_at        text not null,
    updated_at        text not null,
    purged_at         text
);
-- The worker's queue: due work, oldest first. Partial, so finished rows cost nothing.
create index operations_due on operations (next_attempt_at) where status = 'received';
-- The reconciler's queue: leases that ran out.
create index operations_leases on operations (lease_expires_at) where status = 'in_progress';
-- Console and metrics: operations by status, newest changes first.
create index operations_status on operations (status, updated_at);
-- Cross-channel matching looks operations up by contact.
create index operations_phone on operations (contact_phone) where contact_phone is not null;
create index operations_email on operations (contact_email) where contact_email is not null;
-- Retention walks finished operations by age.
create index operations_updated on operations (updated_at) where purged_at is null;

-- What happened to each operation, in order. Append-only (enforced below).
create table timeline (
    id            integer primary key autoincrement,
    operation_id  text not null references operations (operation_id),
    at            text not null,
    kind          text not null,
    -- who: gateway, worker:<id>, reconciler:<id>, or the operator's name
    actor         text not null,
    -- set on events about a failed attempt, for the retries-by-class figures
    error_class   text,
    -- event details as JSON text (never secrets or contact data)
    detail        text not null default '{}'
);
create index timeline_operation on timeline (operation_id, id);
create index timeline_kind on timeline (kind, at);

-- The timeline is evidence: the database itself refuses to rewrite history.
create trigger timeline_no_update before update on timeline
begin
    select raise(abort, 'the timeline is append-only (UPDATE refused)');
end;
create trigger timeline_no_delete before delete on timeline
begin
    select raise(abort, 'the timeline is append-only (DELETE refused)');
end;

create table review_cases (
    id            integer primary key autoincrement,
    operation_id  text not null references operations (operation_id),
    reason        text not null check (reason in ('payload_conflict', 'uncertain_outcome', 'retries_exhausted', 'ambiguous_match', 'cross_channel_match', 'late_duplicate')),
    opened_at     text not null,
    resolved_at   text,
    resolution    text,
    resolved_by   text,
    comment       text,
    -- the delivery that caused a payload conflict
    delivery_id   integer references deliveries (id),
    -- what the machine knew when it opened the case (JSON text)
    detail        text not null default '{}'
);
-- The review queue: open cases by reason, oldest first.
create index review_cases_open on review_cases (reason, opened_at) where resolved_at is null;
create index review_cases_operation on review_cases (operation_id);
create index review_cases_resolved on review_cases (resolved_at) where resolved_at is not null;

create table connectors (
    name        text primary key,
    state       text not null check (state in ('active', 'paused')),
    reason      text,
    since       text not null,
    changed_by  text not null
);
