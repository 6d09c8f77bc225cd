//! The store's orchestration, written once in plain Rust for both backends.
//!
//! Every operation that writes runs inside one write transaction, seen here as a
//! [`WriteTx`]: a small set of SQL statements (lock a row, write it back, append an
//! event, insert a delivery …) that `sql_store!` implements for each backend with SQL
//! text and binds only. The functions in this module and its children take the row
//! locks, ask `domain::rules` what to do, and write down what was decided; they commit
//! the transaction themselves where the old code did (some paths commit and still report
//! an error, e.g. a late report under a lost lease), and an early return drops the
//! transaction, which rolls it back.
//!
//! - [`intake`]: a delivery's journal entry and its claim (new / duplicate / conflict,
//!   late deliveries, cross-channel matching).
//! - [`attempts`]: claims, leases, an attempt's start and outcome, late reports.
//! - [`review`]: review cases and a person's decisions.
//! - [`claim_api`]: operations an external integration executes.
//! - [`retention`]: scrubbing finished operations down to tombstones.
//! - [`requests`]: a person's requests a gateway applies (PostgreSQL personal logins).
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

use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use leadgate_domain::rules::{status_on_review, OpFacts};
use leadgate_domain::EventKind;
use leadgate_domain::{OperationId, ReviewReason, Status};

use super::{ContactKeys, Lease, NewDelivery, NewEvent, Operation, Result, StoreError};

pub(super) mod attempts;
pub(super) mod claim_api;
pub(super) mod contacts;
pub(super) mod intake;
pub(super) mod outage;
pub(super) mod pacing;
pub(super) mod requests;
pub(super) mod retention;
pub(super) mod review;
pub(super) mod rules;
pub(super) mod updates;

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
#[derive(Debug, Clone)]
pub(crate) struct DeliveryData {
    pub payload: Option<String>,
    pub payload_hash: Option<String>,
    pub event_time: Option<DateTime<Utc>>,
}

/// A claim-API operation due for a redelivery: `(operation_id, payload, due at)`.
pub(crate) type RedeliveryRow = (String, String, Option<DateTime<Utc>>);

/// The statements of one write transaction. Implemented by `sql_store!` for each
/// backend: SQL and binds, no decisions. Row locks are the backend's (`for update` on
/// PostgreSQL; SQLite's one writer holds the whole database).
pub(crate) trait WriteTx: Send {
    fn commit(self) -> impl Future<Output = Result<()>> + Send;

    // operations
    /// The operation, locked until commit.
    fn lock_operation(&mut self, id: &str) -> impl Future<Output = Result<Option<Locked>>> + Send;
    /// Writes back every mutable column of `l` where the row is still at
    /// `l.read_version`; the rows written.
    fn update_operation(&mut self, l: &Locked) -> impl Future<Output = Result<u64>> + Send;
    /// Insert-if-absent on the unique key: true when this call created the operation.
    fn insert_operation(
        &mut self,
        d: &NewDelivery,
        executor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// A new operation from `original`'s row (its executor), keyed `new_id`: true when
    /// inserted.
    fn insert_accepted(
        &mut self,
        new_id: &OperationId,
        original: &Operation,
        data: &DeliveryData,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// The worker's next due operation on `connector` (none while it is paused).
    fn pick_due(
        &mut self,
        connector: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<String>>> + Send;
    /// A worker's operation whose lease ran out.
    fn pick_stale(
        &mut self,
        connector: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<String>>> + Send;
    /// Externally executed operations whose lease ran out (a bounded batch).
    fn pick_expired_external(
        &mut self,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;

    // timeline, deliveries, leases
    fn append(
        &mut self,
        operation_id: &str,
        actor: &str,
        event: &NewEvent,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    fn insert_delivery(
        &mut self,
        d: &NewDelivery,
        outcome: &str,
    ) -> impl Future<Output = Result<i64>> + Send;
    fn delivery_data(
        &mut self,
        delivery_id: i64,
    ) -> impl Future<Output = Result<DeliveryData>> + Send;
    fn record_grant(
        &mut self,
        operation_id: &str,
        token_sha256: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    fn was_granted(
        &mut self,
        operation_id: &str,
        token_sha256: &str,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// The kind and detail (JSON text) of the operation's latest `claimed`,
    /// `attempt_started` or `lease_taken_over` event: whether its current holder ever
    /// sent anything.
    fn last_lease_mark(
        &mut self,
        operation_id: &str,
    ) -> impl Future<Output = Result<Option<(String, String)>>> + Send;

    // updates of CRM entities (migration 0014)
    /// A pending update of `operation_id`'s entity `crm_id`, asked for on `case_id` with
    /// the fields of `delivery_id`, due now: false (nothing written) when the operation
    /// is not the worker's to send (claim API).
    fn insert_crm_update(
        &mut self,
        operation_id: &str,
        case_id: i64,
        delivery_id: i64,
        crm_id: &str,
        actor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;
    /// Whether entity `crm_id` already has an update (pending or sent) carrying a delivery
    /// newer than `delivery_id`.
    fn newer_update_of_entity(
        &mut self,
        crm_id: &str,
        delivery_id: i64,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// The update, locked until commit.
    fn lock_crm_update(
        &mut self,
        id: i64,
    ) -> impl Future<Output = Result<Option<updates::UpdateRow>>> + Send;
    /// Writes how an update's try ended and drops its lease.
    fn write_crm_update(
        &mut self,
        id: i64,
        w: &updates::UpdateWrite<'_>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;

    // request pacing
    /// An account's pacing `tat` (ms), locked until commit where the row exists.
    fn lock_pacing(&mut self, account: &str) -> impl Future<Output = Result<Option<f64>>> + Send;
    fn save_pacing(
        &mut self,
        account: &str,
        tat_ms: f64,
    ) -> impl Future<Output = Result<()>> + Send;

    // review cases
    /// The open case of an operation that is not a payload conflict, if any.
    fn open_non_conflict_case(
        &mut self,
        operation_id: &str,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;
    fn insert_case(
        &mut self,
        operation_id: &str,
        reason: ReviewReason,
        delivery_id: Option<i64>,
        detail: &Value,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<i64>> + Send;
    /// The case, locked until commit.
    fn lock_case(&mut self, case_id: i64) -> impl Future<Output = Result<Option<CaseRow>>> + Send;
    fn close_case(
        &mut self,
        case_id: i64,
        resolution: &str,
        actor: &str,
        comment: Option<&str>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    fn open_case_count(&mut self, operation_id: &str) -> impl Future<Output = Result<i64>> + Send;
    fn has_open_conflict(
        &mut self,
        operation_id: &str,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// Resolves every open case of the operation that is not a payload conflict as
    /// `superseded`; the ids closed.
    fn supersede_cases(
        &mut self,
        operation_id: &str,
        actor: &str,
        why: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<i64>>> + Send;

    // contact matching
    /// Takes the transaction-level locks of these intake slots (`store::contact_slot`,
    /// sorted), where the backend needs them to serialise matching intakes.
    fn lock_contacts(&mut self, slots: &[i64]) -> impl Future<Output = Result<()>> + Send;
    /// How many operations other than `operation_id`, created since `since`, carry the
    /// phone and the e-mail: each counted up to `at_most`.
    fn contact_uses(
        &mut self,
        operation_id: &str,
        since: DateTime<Utc>,
        contact: &ContactKeys,
        at_most: i64,
    ) -> impl Future<Output = Result<(i64, i64)>> + Send;
    /// Up to ten operations created since `since` sharing the phone or e-mail, newest
    /// first.
    fn contact_matches(
        &mut self,
        operation_id: &str,
        since: DateTime<Utc>,
        contact: &ContactKeys,
    ) -> impl Future<Output = Result<Vec<ContactMatch>>> + Send;

    // contact locks (migration 0023, `contacts`)
    /// Takes contact lock `key` for `operation_id`'s attempt `holder` (its lease token's
    /// hash) until `until`, if it is free at `now` or the operation's own: the
    /// remembered contact and when it was remembered. `None`: another lead holds it.
    fn take_contact_lock(
        &mut self,
        key: i64,
        operation_id: &str,
        holder: &str,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<contacts::Remembered>>> + Send;
    /// Until when contact lock `key` is held.
    fn contact_lock_until(
        &mut self,
        key: i64,
    ) -> impl Future<Output = Result<Option<DateTime<Utc>>>> + Send;
    /// Where `holder` holds lock `key`: held until `until` (now: free), and the contact
    /// remembered with its time, when given.
    fn move_contact_lock(
        &mut self,
        key: i64,
        holder: &str,
        until: DateTime<Utc>,
        contact: Option<(&str, DateTime<Utc>)>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Deletes up to `batch` contact locks that ended before `before`.
    fn purge_contact_locks(
        &mut self,
        before: DateTime<Utc>,
        batch: i64,
    ) -> impl Future<Output = Result<u64>> + Send;

    // connectors
    fn connector_paused(&mut self, name: &str) -> impl Future<Output = Result<bool>> + Send;
    fn pause_connector(
        &mut self,
        name: &str,
        reason: &str,
        actor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Resumes a paused connector; false if it was not paused.
    fn resume_connector(
        &mut self,
        name: &str,
        actor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send;

    // a person's requests (PostgreSQL, migration 0017)
    /// The oldest request no gateway has applied, locked; one another gateway is
    /// applying is skipped.
    fn lock_waiting_request(
        &mut self,
    ) -> impl Future<Output = Result<Option<requests::RequestRow>>> + Send;
    /// Request `id`, locked, unless a gateway applied it already.
    fn lock_request(
        &mut self,
        id: i64,
    ) -> impl Future<Output = Result<Option<requests::RequestRow>>> + Send;
    /// The Leadgate role `login` is in now (`leadgate_role_of`).
    fn role_of(
        &mut self,
        login: &str,
    ) -> impl Future<Output = Result<Option<leadgate_domain::roles::Role>>> + Send;
    /// Writes the answer (`store::requests::outcome_text`) and marks it applied.
    fn answer_request(
        &mut self,
        id: i64,
        outcome: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;

    // business rules (migration 0021)
    /// A source's rules, locked until commit (`None`: the source has none).
    fn lock_rules(
        &mut self,
        source: &str,
    ) -> impl Future<Output = Result<Option<super::StoredRules>>> + Send;
    /// A source's first rules, at version 1, unless it has some: true when inserted.
    fn insert_rules(
        &mut self,
        rules: &super::SourceRules,
        actor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// Writes a (locked) source's rules at `version`.
    fn save_rules(
        &mut self,
        rules: &super::SourceRules,
        version: i64,
        actor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Appends a version to the rules' history.
    fn append_rule_change(
        &mut self,
        version: i64,
        actor: &str,
        now: DateTime<Utc>,
        before: Option<&super::SourceRules>,
        after: &super::SourceRules,
    ) -> impl Future<Output = Result<()>> + Send;

    // redeliveries of claim-API operations
    /// Due redeliveries of `source` (locked where the backend locks rows, skipping rows
    /// another process is taking): `(operation_id, payload, due at)`.
    fn pick_redeliveries(
        &mut self,
        source: &str,
        now: DateTime<Utc>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<RedeliveryRow>>> + Send;
    /// Marks one as sent unless another process did since it became due at `due`: the
    /// sending's number, or `None`.
    fn mark_redelivered(
        &mut self,
        operation_id: &str,
        due: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
        resend_at: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;

    // connector health
    /// The connector's health, locked until commit (`None`: no row yet).
    fn lock_connector_health(
        &mut self,
        name: &str,
    ) -> impl Future<Output = Result<Option<leadgate_domain::outage::Health>>> + Send;
    /// Creates the connector's row, active and healthy, if there is none; waits for one
    /// another transaction is creating (so that [`lock_connector_health`] then has a row
    /// to lock).
    ///
    /// [`lock_connector_health`]: WriteTx::lock_connector_health
    fn add_connector_row(
        &mut self,
        name: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Writes the connector's health (creating its row, active, if there is none).
    fn save_connector_health(
        &mut self,
        name: &str,
        health: &leadgate_domain::outage::Health,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;

    // retention
    fn purge_candidates(
        &mut self,
        finished_before: DateTime<Utc>,
        batch: i64,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;
    /// Whether the (locked) operation is still finished, unpurged, older than
    /// `finished_before` and without an open case.
    fn still_purgeable(
        &mut self,
        operation_id: &str,
        finished_before: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send;
    fn scrub_operation(
        &mut self,
        operation_id: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Scrubs the journal entries of one operation; how many.
    fn scrub_deliveries_of(
        &mut self,
        operation_id: &str,
    ) -> impl Future<Output = Result<u64>> + Send;
    /// Scrubs deliveries that came after their operation was purged, past retention.
    fn scrub_late_deliveries(
        &mut self,
        finished_before: DateTime<Utc>,
        batch: i64,
    ) -> impl Future<Output = Result<u64>> + Send;
    /// Scrubs refused deliveries past retention.
    fn scrub_rejected(
        &mut self,
        finished_before: DateTime<Utc>,
        batch: i64,
    ) -> impl Future<Output = Result<u64>> + Send;
}

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
