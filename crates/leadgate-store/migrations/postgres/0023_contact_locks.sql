-- The contact step's lock per normalized phone and e-mail (src/store/ops/contacts.rs):
-- two leads of one new client must not both search, find nothing and create a contact
-- each. A lease, not a transaction held across CRM calls and not an advisory lock
-- anyone could take: a row the gateway's login writes, taken for all of an operation's
-- keys at once (sorted, all or nothing), ending with its holder's lease (`expires_at`
-- follows the lease as `start_attempt` extends it), freed when the contact step is
-- recorded. It remembers the contact its last holder made or linked, so the next lead
-- with that phone or e-mail links it even while the CRM's search does not show it yet.
-- `key` is intake's contact lock key (a SHA-256 of the normalized value, never the
-- value); `lease_token_sha256` names the attempt that holds it (a stale release of an
-- earlier attempt of the same operation frees nothing). Retention deletes rows that ended
-- before its cutoff.
create table contact_locks (
    key                 bigint primary key,
    operation_id        text not null,
    lease_token_sha256  text not null,
    expires_at          timestamptz not null,
    crm_contact_id      text,
    contact_at          timestamptz
);
create index contact_locks_expires_at on contact_locks (expires_at);
