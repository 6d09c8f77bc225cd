//! The store's orchestration, written once in plain Rust for both backends: what every
//! write shares.
//!
//! Every operation that writes runs inside one write transaction, seen here as a
//! [`WriteTx`] (`tx.rs`): small sets of SQL statements by resource (lock a row, write it
//! back, append an event, insert a delivery …) that `sql_store!` implements for each
//! backend with SQL text and binds only. The write functions take the row locks, ask
//! `domain::rules` what to do, and write down what was decided; they commit the
//! transaction themselves where the old code did (some paths commit and still report an
//! error, e.g. a late report under a lost lease), and an early return drops the
//! transaction, which rolls it back. This module holds the steps they share (lock and
//! save an operation, change its status, open a case, take a lease); each write lives
//! with the role that makes it:
//!
//! - `journal/ops.rs`: a delivery's journal entry and its claim (new / duplicate /
//!   conflict, late deliveries, cross-channel matching).
//! - `work_queue/attempts.rs`, `contacts.rs`, `outage.rs`: claims, leases, an attempt's
//!   start and outcome, late reports; contact locks; the connector's health.
//! - `crm_access/pacing.rs`: the CRM account's shared request pace.
//! - `review/ops.rs`: review cases and a person's decisions; `review/requests.rs`: a
//!   person's requests a gateway applies (PostgreSQL personal logins).
//! - `claim_api/ops.rs`: operations an external integration executes.
//! - `updates/ops.rs`, `rules/ops.rs`: CRM entity updates; business rules.
//! - `upkeep/retention.rs`: scrubbing finished operations down to tombstones.
//!
//! What holds for every writer here:
//!
//! - Every state change is checked against `Status::can_become` (the one transition
//!   table) and appends a `status_changed` event in the same transaction; every human
//!   action appends `human_action` with its actor and comment in the same transaction.
//!   The timeline itself is append-only in the database: triggers on both backends refuse
//!   UPDATE and DELETE, so the console, connected to the same database, cannot rewrite it.
//! - An operation has at most one open review case that is not a payload conflict (the
//!   partial unique index `review_cases_one_open`, on both backends). A new reason to
//!   review an operation that has one (a claim-API lease ran out, then n8n reports
//!   `uncertain` under the token it still holds) is added to that case's timeline as
//!   `review_noted`, and that case's id is returned. When an operation is settled
//!   (`completed` or `failed_terminal`), by a resolution or by an attempt's outcome, its
//!   other open non-conflict cases are closed as `superseded` by the same actor, with a
//!   `review_superseded` event naming the case that settled it, if one did: every path
//!   that settles an operation calls [`supersede_open_cases`]. Payload-conflict cases stay
//!   open until a person decides them: each is about a delivery of its own, and *Keep
//!   original* / *Accept as new* still work on a completed operation.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use leadgate_domain::rules::{status_on_review, OpFacts};
use leadgate_domain::EventKind;
use leadgate_domain::{OperationId, ReviewReason, Status};

use super::{ContactKeys, Lease, NewDelivery, NewEvent, Operation, Result, StoreError};

/// The operation together with what only the store sees of it, as read under its row
/// lock.
#[derive(Debug, Clone)]
pub(crate) struct Locked {
    pub op: Operation,
    /// The token of the lease that holds it now.
    pub lease_token: Option<String>,
    /// The token of the last attempt whose outcome was recorded.
    pub finished_token: Option<String>,
    /// Until when a create sent under the last lease may still land.
    pub quiet_after: Option<DateTime<Utc>>,
    /// `version` as read, to write back under.
    pub read_version: i64,
}

impl Locked {
    /// What the domain's rules need to know of it.
    pub fn facts(&self) -> OpFacts<'_> {
        OpFacts {
            lease_held: self.lease_token.is_some(),
            quiet_after: self.quiet_after,
            ..self.op.facts()
        }
    }

    pub fn id(&self) -> &str {
        self.op.operation_id.as_str()
    }
}

/// A review case as `resolve` reads it, locked.
#[derive(Debug, Clone)]
pub(crate) struct CaseRow {
    pub operation_id: String,
    pub reason: ReviewReason,
    pub resolved_at: Option<DateTime<Utc>>,
    pub resolved_by: Option<String>,
    pub delivery_id: Option<i64>,
}

/// One earlier operation sharing a contact key.
#[derive(Debug, Clone)]
pub(crate) struct ContactMatch {
    pub operation_id: String,
    pub source: String,
    pub crm_id: Option<String>,
    pub status: String,
}

/// A conflicting delivery's data, for *accept as new*.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct DeliveryData {
    pub payload: Option<String>,
    pub payload_hash: Option<String>,
    pub event_time: Option<DateTime<Utc>>,
}

/// A claim-API operation due for a redelivery: `(operation_id, payload, due at)`.
pub(crate) type RedeliveryRow = (String, String, Option<DateTime<Utc>>);

pub(crate) mod tx;
pub(crate) use tx::*;

pub(crate) async fn must_lock<T: WriteTx>(tx: &mut T, id: &str) -> Result<Locked> {
    tx.lock_operation(id)
        .await?
        .ok_or_else(|| StoreError::UnknownOperation(id.to_owned()))
}

/// Writes back a locked operation and bumps its version.
pub(crate) async fn save<T: WriteTx>(tx: &mut T, l: &mut Locked, now: DateTime<Utc>) -> Result<()> {
    l.op.version = l.read_version + 1;
    l.op.updated_at = now;
    if tx.update_operation(l).await? != 1 {
        // Unreachable while the row lock is held; kept as a tripwire.
        return Err(StoreError::StaleVersion {
            expected: l.read_version,
            current: -1,
        });
    }
    l.read_version = l.op.version;
    Ok(())
}

/// Changes the status, checked against the one transition table, and records the change
/// on the timeline.
pub(crate) async fn set_status<T: WriteTx>(
    tx: &mut T,
    l: &mut Locked,
    to: Status,
    actor: &str,
    now: DateTime<Utc>,
) -> Result<()> {
    let from = l.op.status;
    from.check(to)?;
    l.op.status = to;
    if to != Status::NeedsReview {
        l.op.review_reason = None;
    }
    let event = NewEvent::new(EventKind::StatusChanged, json!({"from": from, "to": to}));
    tx.append(l.id(), actor, &event, now).await
}

pub(crate) fn clear_lease(l: &mut Locked) {
    l.lease_token = None;
    l.op.lease_owner = None;
    l.op.lease_expires_at = None;
}

/// Opens a review case on a locked operation. At most one case that is not a payload
/// conflict is open per operation: while one is, a new reason to review is added to that
/// case's timeline (`review_noted`) and its id returned. Payload conflicts always get a
/// case of their own (each concerns another delivery).
pub(crate) async fn open_case<T: WriteTx>(
    tx: &mut T,
    l: &mut Locked,
    reason: ReviewReason,
    delivery_id: Option<i64>,
    actor: &str,
    detail: Value,
    now: DateTime<Utc>,
) -> Result<i64> {
    let open = if reason == ReviewReason::PayloadConflict {
        None
    } else {
        tx.open_non_conflict_case(l.id()).await?
    };
    let (id, kind) = match open {
        Some(id) => (id, EventKind::ReviewNoted),
        None => {
            let id = tx
                .insert_case(l.id(), reason, delivery_id, &detail, now)
                .await?;
            (id, EventKind::ReviewOpened)
        }
    };
    let event = NewEvent::new(
        kind,
        json!({"case_id": id, "reason": reason, "detail": detail}),
    );
    tx.append(l.id(), actor, &event, now).await?;
    if let Some(to) = status_on_review(l.op.status) {
        set_status(tx, l, to, actor, now).await?;
        l.op.review_reason = Some(reason);
    }
    Ok(id)
}

/// Closes the open review cases of an operation whose result became known without
/// them, or that another case's resolution settled (payload conflicts stay: they are
/// about another delivery's data, and a person decides them). Each is resolved as
/// `superseded` by `actor`, with `why` as its comment and a `review_superseded` event
/// naming the case that settled the operation (`by_case`, if one did). Every store path
/// that settles an operation (completed or failed) calls it: with at most one open
/// non-conflict case per operation, none is ever stranded open.
pub(crate) async fn supersede_open_cases<T: WriteTx>(
    tx: &mut T,
    l: &Locked,
    actor: &str,
    by_case: Option<i64>,
    why: &str,
    now: DateTime<Utc>,
) -> Result<()> {
    for case_id in tx.supersede_cases(l.id(), actor, why, now).await? {
        let event = NewEvent::new(
            EventKind::ReviewSuperseded,
            json!({"case_id": case_id, "by_case": by_case, "why": why, "status": l.op.status}),
        );
        tx.append(l.id(), actor, &event, now).await?;
    }
    Ok(())
}

/// Puts a claimed operation in the hands of `owner` with a fresh lease, and remembers
/// the grant (its token's hash) for late reports.
pub(crate) async fn take_lease<T: WriteTx>(
    tx: &mut T,
    l: &mut Locked,
    owner: &str,
    lease_for: std::time::Duration,
    now: DateTime<Utc>,
) -> Result<Lease> {
    let lease = Lease {
        operation_id: l.op.operation_id.clone(),
        token: uuid::Uuid::new_v4().to_string(),
        owner: owner.to_owned(),
        expires_at: super::after(now, lease_for),
    };
    l.lease_token = Some(lease.token.clone());
    l.op.lease_owner = Some(owner.to_owned());
    l.op.lease_expires_at = Some(lease.expires_at);
    tx.record_grant(l.id(), &token_hash(&lease.token), now)
        .await?;
    Ok(lease)
}

pub(crate) fn token_hash(token: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

/// Appends `events` to the operation's timeline, in order.
pub(crate) async fn append_all<T: WriteTx>(
    tx: &mut T,
    operation_id: &str,
    actor: &str,
    events: &[NewEvent],
    now: DateTime<Utc>,
) -> Result<()> {
    for e in events {
        tx.append(operation_id, actor, e, now).await?;
    }
    Ok(())
}
