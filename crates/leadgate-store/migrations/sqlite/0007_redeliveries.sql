-- Redelivery of claim-API operations (issue 13). An operation an integration claimed and
-- then reported `not_sent` or `rate_limited` is `received` again, due at its
-- next_attempt_at; one that was first seen while its connector was paused is `received`
-- and due at once. Neither is the worker's (executor = 'external'), and the integration's
-- run that reported it has ended. Leadgate's worker sends its stored payload back to the
-- integration's webhook ([claim_api] redeliver_url) when it is due; the claim API then
-- decides, as for any delivery. This table says when each one was last sent, so every
-- process sharing the database sends it once per due time (a compare-and-set on resend_at).
create table redeliveries (
    operation_id  text primary key references operations (operation_id),
    -- how many times it was sent back
    sent          integer not null,
    -- when it was last sent: an operation due again after this was claimed meanwhile
    sent_at       text not null,
    -- not sent again before this unless it became due again (the integration never claimed)
    resend_at     text not null
);

-- The redelivery queue: externally executed operations waiting for their next attempt.
create index operations_external_due on operations (next_attempt_at)
    where status = 'received' and executor = 'external';
