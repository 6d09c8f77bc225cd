-- Issue 32, point 8: a signed delivery's signature covers its timestamp and body, not its
-- headers. Where a source's key is a header (`generic-json`: `Idempotency-Key`), a captured
-- request sent again within the replay window under another key was a new lead. Each
-- signature (its SHA-256) is remembered with the operation it was first used for, until
-- the replay window has passed: the same signature under another key is refused
-- (`signature_replayed`); under the same key it is a duplicate as before.
create table signature_uses (
    source            text not null,
    signature_sha256  text not null,
    operation_id      text not null,
    expires_at        timestamptz not null,
    primary key (source, signature_sha256)
);
create index signature_uses_expires_at on signature_uses (expires_at);
