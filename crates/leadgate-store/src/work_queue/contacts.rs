//! Contact locks (migration 0023): one lead at a time makes the contact of a phone or
//! e-mail, so two leads of one new client arriving together do not both search, find
//! nothing and create a contact each.
//!
//! A lock is a `contact_locks` row per intake contact lock key (a hash of the normalized
//! value), held by one attempt — the lease token's hash — until its lease ends: taken
//! before anything is sent, for all of the operation's keys in one transaction (sorted,
//! all or none), carried along when `start_attempt` extends the lease, and left when the
//! contact step is recorded (`record_step`, same transaction) or the attempt is over
//! ([`leave`]). No transaction is held across a CRM call and nobody but the gateway's
//! login can write the table, so a dead worker blocks a phone no longer than its lease,
//! and no person's login can hold one. A lead that finds a key held is handed back
//! ([`take`]'s `Held`) instead of waiting: the worker's lane goes on with other leads.
//!
//! The row remembers the contact its last holder made or linked: the CRM's search lags
//! behind a create, so the next lead links that contact even when the search does not
//! show it yet (a contact remembered within `worker::contacts::REMEMBER_CONTACT`, ten
//! minutes, counts as found: `ContactSearch::known`).
//!
//! Each take is an upsert that succeeds only on a free row or on the operation's own. A
//! lead that finds a key held gets a `contact_wait` event and is due again shortly (at
//! most about a second later, sooner when the holder's lease ends first), its attempt and
//! grant given back, so a lane goes on with other leads and a shared placeholder phone
//! queues only its own leads. Bitrix24's contact step leaves the locks in `record_step`'s
//! transaction; amoCRM's one-call create leaves them right after the outcome. While a
//! contact create of the attempt may still land, the row stays held until the
//! operation's `quiet_after`. Retention deletes rows that ended before its cutoff.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::{after, before, Claim, ContactLeave, ContactTurn, Lease, NewEvent, Result, StoreError};
use leadgate_domain::EventKind;
use leadgate_domain::Status;

use crate::journal::ops::contact_lock_keys;
use crate::ops::{clear_lease, must_lock, save, set_status, token_hash, Locked, WriteTx};

/// The contact a lock remembers and when it was remembered.
pub(crate) type Remembered = (Option<String>, Option<DateTime<Utc>>);

/// Whether `l` is held by `lease` and the lease has not run out.
fn holds(l: &Locked, lease: &Lease, now: DateTime<Utc>) -> bool {
    l.lease_token.as_deref() == Some(lease.token.as_str())
        && l.op.status == Status::InProgress
        && l.op.lease_expires_at.is_some_and(|t| t > now)
}

/// Tries to take every contact lock of the claimed operation for its lease. `Ok(Ok)`:
/// taken (committed), with the contacts remembered since `now - remember`;
/// `Ok(Err(until))`: a key is held by another lead until `until` — nothing is written
/// (the transaction is dropped, rolling back the keys taken before it).
pub(crate) async fn take<T: WriteTx>(
    mut tx: T,
    claim: &Claim,
    remember: Duration,
    now: DateTime<Utc>,
) -> Result<std::result::Result<Vec<String>, DateTime<Utc>>> {
    let lease = &claim.lease;
    let id = lease.operation_id.as_str();
    let l = must_lock(&mut tx, id).await?;
    if !holds(&l, lease, now) {
        return Err(StoreError::LeaseLost(id.to_owned()));
    }
    let keys = contact_lock_keys(&l.op.contact);
    if keys.is_empty() {
        return Ok(Ok(Vec::new()));
    }
    let until = l.op.lease_expires_at.unwrap_or(now);
    let holder = token_hash(&lease.token);
    let since = before(now, remember);
    let mut known: Vec<String> = Vec::new();
    for key in keys {
        match tx.take_contact_lock(key, id, &holder, until, now).await? {
            Some((contact, at)) => {
                if let (Some(contact), Some(at)) = (contact, at) {
                    if at >= since && !known.contains(&contact) {
                        known.push(contact);
                    }
                }
            }
            None => {
                let held_until = tx.contact_lock_until(key).await?.unwrap_or(now);
                return Ok(Err(held_until));
            }
        }
    }
    tx.commit().await?;
    Ok(Ok(known))
}

/// Hands a claim whose contact is locked by another lead back: due at `at`, the attempt
/// and a person's grant given back, a lookup still owed kept owed — nothing was sent.
pub(crate) async fn hand_back<T: WriteTx>(
    mut tx: T,
    claim: &Claim,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<ContactTurn> {
    let lease = &claim.lease;
    let id = lease.operation_id.as_str();
    let mut l = must_lock(&mut tx, id).await?;
    if !holds(&l, lease, now) {
        return Err(StoreError::LeaseLost(id.to_owned()));
    }
    l.op.attempts = (l.op.attempts - 1).max(0);
    if claim.granted {
        l.op.retry_grants += 1;
    }
    l.op.next_attempt_at = Some(at);
    clear_lease(&mut l);
    let event = NewEvent::new(
        EventKind::ContactWait,
        json!({"at": at, "granted": claim.granted}),
    );
    tx.append(id, &lease.owner, &event, now).await?;
    set_status(&mut tx, &mut l, Status::Received, &lease.owner, now).await?;
    save(&mut tx, &mut l, now).await?;
    tx.commit().await?;
    Ok(ContactTurn::Held { at })
}

/// When a held key is free again, or a poll after `wait`, whichever is first.
pub(crate) fn due_again(
    held_until: DateTime<Utc>,
    wait: Duration,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    held_until.max(now).min(after(now, wait))
}

/// In `start_attempt`'s transaction: the contact locks the lease holds follow it to
/// `expires_at` (the operation's `quiet_after`: as long as the create may still land).
pub(crate) async fn follow_lease<T: WriteTx>(
    tx: &mut T,
    l: &Locked,
    lease: &Lease,
    expires_at: DateTime<Utc>,
) -> Result<()> {
    let holder = token_hash(&lease.token);
    for key in contact_lock_keys(&l.op.contact) {
        tx.move_contact_lock(key, &holder, expires_at, None).await?;
    }
    Ok(())
}

/// In `record_step`'s transaction: a contact's step leaves the locks, remembering the
/// contact it made or linked.
pub(crate) async fn after_step<T: WriteTx>(
    tx: &mut T,
    l: &Locked,
    lease: &Lease,
    events: &[NewEvent],
    now: DateTime<Utc>,
) -> Result<()> {
    let contact = events.iter().find_map(|e| {
        (e.kind == EventKind::CrmStep && e.detail["entity"] == "contact")
            .then(|| e.detail["crm_id"].as_str().map(str::to_owned))
            .flatten()
    });
    let Some(contact) = contact else {
        return Ok(());
    };
    let holder = token_hash(&lease.token);
    for key in contact_lock_keys(&l.op.contact) {
        tx.move_contact_lock(key, &holder, now, Some((&contact, now)))
            .await?;
    }
    Ok(())
}

/// Leaves the locks `lease` holds (see [`ContactLeave`]).
pub(crate) async fn leave<T: WriteTx>(
    mut tx: T,
    lease: &Lease,
    how: ContactLeave,
    now: DateTime<Utc>,
) -> Result<()> {
    let l = must_lock(&mut tx, lease.operation_id.as_str()).await?;
    let holder = token_hash(&lease.token);
    let (until, contact) = match &how {
        ContactLeave::Settled(contact) => (now, contact.as_deref().map(|c| (c, now))),
        // Until a create sent under this lease can no longer land.
        ContactLeave::Unsettled => (l.quiet_after.unwrap_or(now).max(now), None),
    };
    for key in contact_lock_keys(&l.op.contact) {
        tx.move_contact_lock(key, &holder, until, contact).await?;
    }
    tx.commit().await
}
