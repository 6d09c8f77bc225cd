//! Claims, leases, an attempt's start and its outcome, and reports that arrive after the
//! lease was lost.
//!
//! **Claiming.** Due work is picked with `for update skip locked` on PostgreSQL, under
//! the one writer lock `BEGIN IMMEDIATE` takes on SQLite. A picked operation is
//! `in_progress`, its `attempts` counted and its lease granted, all committed *before*
//! anyone may call the CRM; a retry a person granted is consumed by that claim in the
//! same transaction. `start_attempt`, right before a create leaves, writes
//! `attempt_started` (if the caller did not), refuses a lease that has run out (nothing
//! is sent) and extends a live one to cover the call (see `attempt`).
//!
//! **Stale leases.** A lease that ran out while the operation's latest mark on the
//! timeline is still `claimed` — its holder died waiting for the CRM's pace or during a
//! lookup, before anything left — is released by `claim_stale` (`released_unsent`: due
//! now, the attempt and the grant given back). Only a lease with `attempt_started` after
//! its claim is taken over and its key looked up.
//!
//! **Reports.** Only the lease holder changes an attempt's state, but a CRM id is never
//! thrown away. A report under a lost lease is believed only from a token that once held
//! the operation (`lease_grants` keeps their SHA-256); any other token writes nothing
//! (`StoreError::UnknownLease`, `409 unknown_lease` at the claim API). A late
//! `Created`/`Recovered` completes an operation that has no `crm_id` (voiding the current
//! holder's lease and superseding its open non-conflict cases) or, when the operation has
//! another id, opens an `ambiguous_match` case with both and counts the second entity
//! (`extra_crm_entity`); the version moves either way. Other late reports are kept as
//! `late_outcome` events. A report is idempotent by its lease token (`finished_token`),
//! so recording an outcome can be retried through transient database errors.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::{after, Claim, Lease, NewEvent, Operation, Result, StoreError};
use leadgate_domain::rules::{late_id, LateId};
use leadgate_domain::EventKind;
use leadgate_domain::{AttemptOutcome, Failure, Status};

use crate::ops::{
    append_all, clear_lease, must_lock, open_case, save, set_status, supersede_open_cases,
    take_lease, token_hash, Locked, WriteTx,
};

/// Starts an attempt on a locked `received` operation: `in_progress`, attempts counted,
/// a person's grant consumed, a fresh lease — persisted in `tx`.
pub(crate) async fn claim_locked<T: WriteTx>(
    tx: &mut T,
    l: &mut Locked,
    owner: &str,
    lease_for: Duration,
    now: DateTime<Utc>,
) -> Result<Claim> {
    let granted = l.op.retry_grants > 0;
    l.op.retry_grants = (l.op.retry_grants - 1).max(0);
    l.op.attempts += 1;
    l.op.next_attempt_at = None;
    let lease = take_lease(tx, l, owner, lease_for, now).await?;
    let event = NewEvent::new(
        EventKind::Claimed,
        json!({"attempt": l.op.attempts, "lease_expires_at": lease.expires_at, "granted": granted}),
    );
    tx.append(l.id(), owner, &event, now).await?;
    set_status(tx, l, Status::InProgress, owner, now).await?;
    save(tx, l, now).await?;
    Ok(Claim {
        operation: l.op.clone(),
        lease,
        granted,
    })
}

pub(crate) async fn claim_due<T: WriteTx>(
    tx: T,
    connector: &str,
    owner: &str,
    lease_for: Duration,
    now: DateTime<Utc>,
) -> Result<Option<Claim>> {
    Ok(claim_due_many(tx, connector, owner, lease_for, 1, now)
        .await?
        .pop())
}

/// Claims up to `limit` due operations in one transaction (a batch for one CRM request).
pub(crate) async fn claim_due_many<T: WriteTx>(
    mut tx: T,
    connector: &str,
    owner: &str,
    lease_for: Duration,
    limit: usize,
    now: DateTime<Utc>,
) -> Result<Vec<Claim>> {
    let mut claims = Vec::new();
    // Each claimed row is `in_progress` within this transaction, so the next pick is
    // another one.
    while claims.len() < limit {
        let Some(id) = tx.pick_due(connector, now).await? else {
            break;
        };
        let mut l = must_lock(&mut tx, &id).await?;
        claims.push(claim_locked(&mut tx, &mut l, owner, lease_for, now).await?);
    }
    if !claims.is_empty() {
        tx.commit().await?;
    }
    Ok(claims)
}

/// The most never-started operations one call puts back (in one transaction); the
/// reconciler's next call goes on.
const MAX_RELEASED: usize = 100;

pub(crate) async fn claim_stale<T: WriteTx>(
    mut tx: T,
    connector: &str,
    owner: &str,
    lease_for: Duration,
    now: DateTime<Utc>,
) -> Result<Option<Claim>> {
    let mut released = 0;
    let claim = loop {
        if released == MAX_RELEASED {
            break None;
        }
        let Some(id) = tx.pick_stale(connector, now).await? else {
            break None;
        };
        let mut l = must_lock(&mut tx, &id).await?;
        let previous =
            json!({"previous_owner": l.op.lease_owner, "expired_at": l.op.lease_expires_at});
        if let Some((_, detail)) = tx
            .last_lease_mark(&id)
            .await?
            .filter(|(kind, _)| kind == EventKind::Claimed.as_str())
        {
            // Its holder died (or stalled) before its request left — waiting for the
            // CRM's pace, or during a lookup: nothing can have reached the CRM under
            // this claim. It goes back as it was, the attempt not counted.
            let granted = serde_json::from_str::<Value>(&detail)
                .ok()
                .and_then(|d| d.get("granted").and_then(Value::as_bool))
                .unwrap_or(false);
            release_unsent(&mut tx, &mut l, owner, previous, granted, now).await?;
            released += 1;
            continue;
        }
        let lease = take_lease(&mut tx, &mut l, owner, lease_for, now).await?;
        let event = NewEvent::new(EventKind::LeaseTakenOver, previous);
        tx.append(&id, owner, &event, now).await?;
        save(&mut tx, &mut l, now).await?;
        break Some(Claim {
            operation: l.op,
            lease,
            granted: false,
        });
    };
    if claim.is_some() || released > 0 {
        tx.commit().await?;
    }
    Ok(claim)
}

/// Puts back an operation whose claim ran out before its call started: due now, the
/// attempt and a person's grant given back, a lookup still owed kept owed.
async fn release_unsent<T: WriteTx>(
    tx: &mut T,
    l: &mut Locked,
    actor: &str,
    mut previous: Value,
    granted: bool,
    now: DateTime<Utc>,
) -> Result<()> {
    l.op.attempts = (l.op.attempts - 1).max(0);
    if granted {
        l.op.retry_grants += 1;
    }
    l.op.next_attempt_at = Some(now);
    clear_lease(l);
    if let Value::Object(m) = &mut previous {
        m.insert("granted".into(), json!(granted));
    }
    let event = NewEvent::new(EventKind::ReleasedUnsent, previous);
    tx.append(l.id(), actor, &event, now).await?;
    set_status(tx, l, Status::Received, actor, now).await?;
    save(tx, l, now).await
}

pub(crate) async fn start_attempt<T: WriteTx>(
    tx: T,
    lease: &Lease,
    lease_for: Duration,
    settle: Duration,
    events: Vec<NewEvent>,
    now: DateTime<Utc>,
) -> Result<Lease> {
    let mut started =
        start_attempts(tx, vec![(lease.clone(), events)], lease_for, settle, now).await?;
    started
        .pop()
        .unwrap_or_else(|| Err(StoreError::LeaseLost(lease.operation_id.to_string())))
}

/// Starts the attempts of several leases in one transaction (the operations of one
/// batch request), each with its events, and each with its own answer: a lease that
/// ran out is `LeaseLost` and does not stop the others.
pub(crate) async fn start_attempts<T: WriteTx>(
    mut tx: T,
    leases: Vec<(Lease, Vec<NewEvent>)>,
    lease_for: Duration,
    settle: Duration,
    now: DateTime<Utc>,
) -> Result<Vec<Result<Lease>>> {
    let mut started = Vec::with_capacity(leases.len());
    for (lease, events) in &leases {
        let id = lease.operation_id.as_str();
        let mut l = must_lock(&mut tx, id).await?;
        // A holder whose lease ran out never starts the call, even if nobody has taken
        // the operation over yet: the reconciler may be about to.
        if l.lease_token.as_deref() != Some(lease.token.as_str())
            || l.op.status != Status::InProgress
            || l.op.lease_expires_at.is_none_or(|t| t <= now)
        {
            started.push(Err(StoreError::LeaseLost(id.to_owned())));
            continue;
        }
        append_all(&mut tx, id, &lease.owner, events, now).await?;
        if !events.iter().any(|e| e.kind == EventKind::AttemptStarted) {
            // The mark the reconciler reads: this claim's call may have left.
            let mark = NewEvent::new(EventKind::AttemptStarted, json!({}));
            tx.append(id, &lease.owner, &mark, now).await?;
        }
        let expires_at = after(now, lease_for).max(l.op.lease_expires_at.unwrap_or(now));
        l.op.lease_expires_at = Some(expires_at);
        l.quiet_after = Some(after(expires_at, settle));
        // To `quiet_after`, not the lease's end: a holder that dies mid-create leaves a
        // contact that may still land until then, and nobody remembers it.
        crate::work_queue::contacts::follow_lease(&mut tx, &l, lease, after(expires_at, settle))
            .await?;
        save(&mut tx, &mut l, now).await?;
        started.push(Ok(Lease {
            expires_at,
            ..lease.clone()
        }));
    }
    tx.commit().await?;
    Ok(started)
}

/// Commits the result of one step of a create (and the step's exchange) under the
/// lease that armed the call: the recovery point the next step, or the next attempt,
/// starts from. A lease no longer held (or run out) writes nothing: its step's entity
/// carries the operation's key and is found by it.
pub(crate) async fn record_step<T: WriteTx>(
    mut tx: T,
    lease: &Lease,
    events: &[NewEvent],
    now: DateTime<Utc>,
) -> Result<()> {
    let id = lease.operation_id.as_str();
    let mut l = must_lock(&mut tx, id).await?;
    if l.lease_token.as_deref() != Some(lease.token.as_str())
        || l.op.status != Status::InProgress
        || l.op.lease_expires_at.is_none_or(|t| t <= now)
    {
        return Err(StoreError::LeaseLost(id.to_owned()));
    }
    append_all(&mut tx, id, &lease.owner, events, now).await?;
    crate::work_queue::contacts::after_step(&mut tx, &l, lease, events, now).await?;
    save(&mut tx, &mut l, now).await?;
    tx.commit().await
}

pub(crate) async fn finish_attempt<T: WriteTx>(
    mut tx: T,
    lease: &Lease,
    outcome: AttemptOutcome,
    events: &[NewEvent],
    now: DateTime<Utc>,
) -> Result<Operation> {
    let id = lease.operation_id.as_str().to_owned();
    let actor = lease.owner.as_str();
    let mut l = must_lock(&mut tx, &id).await?;
    if l.finished_token.as_deref() == Some(lease.token.as_str()) {
        let brings_id = outcome
            .crm_id()
            .is_some_and(|crm_id| l.op.crm_id.as_deref() != Some(crm_id));
        if !brings_id {
            // Recorded before: the answer to that commit was lost and the worker
            // reported again. Nothing to write.
            return Ok(l.op);
        }
        // A second report under a finished token that brings a CRM id (an integration
        // reported `fail`, then learnt the id): never dropped.
        append_all(&mut tx, &id, actor, events, now).await?;
        late_outcome(&mut tx, &mut l, actor, outcome, now).await?;
        tx.commit().await?;
        return Ok(l.op);
    }
    append_all(&mut tx, &id, actor, events, now).await?;
    if l.lease_token.as_deref() != Some(lease.token.as_str()) {
        // Someone else owns the operation now (the reconciler took over an expired
        // lease, or a person resolved it). Only a token that once held it may still
        // report; any other writes nothing.
        if !tx.was_granted(&id, &token_hash(&lease.token)).await? {
            // Not a late report: a token never handed out for this operation (the claim
            // API takes tokens from anyone). Nothing is written.
            return Err(StoreError::UnknownLease(id));
        }
        late_outcome(&mut tx, &mut l, actor, outcome, now).await?;
        tx.commit().await?;
        return Err(StoreError::LeaseLost(id));
    }
    // A conflicting delivery may have blocked the operation while the attempt was in
    // flight: the outcome is recorded, the status stays for the person.
    let blocked = l.op.status != Status::InProgress;
    clear_lease(&mut l);
    l.finished_token = Some(lease.token.clone());
    // Set again below by `Verify`; kept through a pause (the lookup still owes).
    if !matches!(outcome, AttemptOutcome::PauseConnector { .. }) {
        l.op.verify_first = false;
    }
    // The call is over. Unless its outcome is unknown, nothing of it can land later, and
    // a person's grant need not wait.
    if !outcome.leaves_unknown() {
        l.quiet_after = None;
    }
    let target = outcome.target();
    record_outcome(&mut tx, &mut l, actor, outcome, now).await?;
    if let Some(to) = target {
        if !blocked {
            set_status(&mut tx, &mut l, to, actor, now).await?;
            if to.is_final() {
                let why = "the attempt's outcome settled the operation";
                supersede_open_cases(&mut tx, &l, actor, None, why, now).await?;
            }
        }
    }
    save(&mut tx, &mut l, now).await?;
    tx.commit().await?;
    Ok(l.op)
}

/// Writes an outcome's own fields and events (the status change is the caller's).
async fn record_outcome<T: WriteTx>(
    tx: &mut T,
    l: &mut Locked,
    actor: &str,
    outcome: AttemptOutcome,
    now: DateTime<Utc>,
) -> Result<()> {
    let id = l.id().to_owned();
    let failure_event = |kind: EventKind, f: &Failure, extra: Value| {
        let mut detail = json!({"class": f.class, "error": f.message});
        if let (Value::Object(d), Value::Object(e)) = (&mut detail, extra) {
            d.extend(e);
        }
        NewEvent {
            kind,
            error_class: Some(f.class),
            detail,
        }
    };
    let record_failure = |l: &mut Locked, f: &Failure| {
        l.op.last_error = Some(f.message.clone());
        l.op.last_error_class = Some(f.class);
    };
    match outcome {
        AttemptOutcome::Created { crm_id } => {
            let event = NewEvent::new(EventKind::CrmCreated, json!({"crm_id": crm_id}));
            tx.append(&id, actor, &event, now).await?;
            l.op.crm_id = Some(crm_id);
            l.op.crm_link = Some("created".into());
        }
        AttemptOutcome::Recovered { crm_id } => {
            let event = NewEvent::new(EventKind::Recovered, json!({"crm_id": crm_id}));
            tx.append(&id, actor, &event, now).await?;
            l.op.crm_id = Some(crm_id);
            l.op.crm_link = Some("recovered".into());
        }
        AttemptOutcome::Retry { failure, at } => {
            let event = match &failure {
                Some(f) => {
                    record_failure(l, f);
                    failure_event(EventKind::RetryScheduled, f, json!({"at": at}))
                }
                None => NewEvent::new(EventKind::RetryScheduled, json!({"at": at})),
            };
            tx.append(&id, actor, &event, now).await?;
            l.op.next_attempt_at = Some(at);
        }
        AttemptOutcome::Verify { failure, at } => {
            let detail = json!({"at": at});
            let event = match &failure {
                Some(f) => {
                    record_failure(l, f);
                    failure_event(EventKind::VerifyScheduled, f, detail)
                }
                None => NewEvent::new(EventKind::VerifyScheduled, detail),
            };
            tx.append(&id, actor, &event, now).await?;
            l.op.next_attempt_at = Some(at);
            l.op.verify_first = true;
        }
        AttemptOutcome::Terminal { failure } => {
            record_failure(l, &failure);
            let event = failure_event(EventKind::Failed, &failure, json!({}));
            tx.append(&id, actor, &event, now).await?;
        }
        AttemptOutcome::Review {
            reason,
            failure,
            detail,
        } => {
            if let Some(f) = &failure {
                record_failure(l, f);
            }
            open_case(tx, l, reason, None, actor, detail, now).await?;
        }
        AttemptOutcome::Outage {
            failure,
            at,
            verify,
        } => {
            record_failure(l, &failure);
            // The connector is to blame: the lead's attempts are not used up.
            l.op.attempts = (l.op.attempts - 1).max(0);
            l.op.next_attempt_at = Some(at);
            l.op.verify_first = verify;
            let event = failure_event(
                EventKind::ConnectorUnreachable,
                &failure,
                json!({"at": at, "verify": verify}),
            );
            tx.append(&id, actor, &event, now).await?;
        }
        AttemptOutcome::Paused {
            failure,
            verify,
            granted,
        } => {
            record_failure(l, &failure);
            // Nothing was sent, and the connector is to blame: not counted, and a
            // person's grant is still there for the attempt after the resume.
            l.op.attempts = (l.op.attempts - 1).max(0);
            if granted {
                l.op.retry_grants += 1;
            }
            l.op.next_attempt_at = Some(now);
            l.op.verify_first = verify;
            let event = failure_event(
                EventKind::NotSent,
                &failure,
                json!({"verify": verify, "granted": granted}),
            );
            tx.append(&id, actor, &event, now).await?;
        }
        AttemptOutcome::PauseConnector { connector, failure } => {
            record_failure(l, &failure);
            // The call never executed: it does not use up the retry budget.
            l.op.attempts = (l.op.attempts - 1).max(0);
            l.op.next_attempt_at = Some(now);
            tx.pause_connector(&connector, &failure.message, actor, now)
                .await?;
            let event = failure_event(
                EventKind::ConnectorPaused,
                &failure,
                json!({"connector": connector}),
            );
            tx.append(&id, actor, &event, now).await?;
            let note = NewEvent::new(
                EventKind::Notification,
                json!({"what": "connector_paused", "connector": connector}),
            );
            tx.append(&id, actor, &note, now).await?;
        }
    }
    Ok(())
}

/// An attempt's outcome reported after its lease was lost (the reconciler took over, a
/// person decided, another attempt ran). A CRM id is never thrown away: an operation
/// without one is completed with it (whoever holds it now loses the lease, open
/// non-conflict cases are superseded); one that has another id gets a review case
/// listing both, and the second entity is counted. Anything else is kept on the
/// timeline and changes nothing.
pub(crate) async fn late_outcome<T: WriteTx>(
    tx: &mut T,
    l: &mut Locked,
    actor: &str,
    outcome: AttemptOutcome,
    now: DateTime<Utc>,
) -> Result<()> {
    let id = l.id().to_owned();
    let (crm_id, kind, link) = match outcome {
        AttemptOutcome::Created { crm_id } => (crm_id, EventKind::CrmCreated, "created"),
        AttemptOutcome::Recovered { crm_id } => (crm_id, EventKind::Recovered, "recovered"),
        other => {
            let event = NewEvent::new(
                EventKind::LateOutcome,
                json!({"outcome": format!("{other:?}")}),
            );
            return tx.append(&id, actor, &event, now).await;
        }
    };
    match late_id(l.op.crm_id.as_deref(), &crm_id) {
        LateId::SameAsKnown => {
            let event = NewEvent::new(
                EventKind::LateOutcome,
                json!({"crm_id": crm_id, "same_as_known": true}),
            );
            tx.append(&id, actor, &event, now).await?;
        }
        LateId::Completes => {
            let event = NewEvent::new(kind, json!({"crm_id": crm_id, "late": true}));
            tx.append(&id, actor, &event, now).await?;
            l.op.crm_id = Some(crm_id);
            l.op.crm_link = Some(link.into());
            l.op.verify_first = false;
            l.op.next_attempt_at = None;
            clear_lease(l);
            let why = "a late CRM answer brought the result";
            supersede_open_cases(tx, l, actor, None, why, now).await?;
            if l.op.status != Status::Completed && !tx.has_open_conflict(&id).await? {
                set_status(tx, l, Status::Completed, actor, now).await?;
            }
        }
        LateId::SecondEntity => {
            let known = l.op.crm_id.clone().unwrap_or_default();
            let event = NewEvent::new(
                EventKind::ExtraCrmEntity,
                json!({"crm_id": crm_id, "known_crm_id": known}),
            );
            tx.append(&id, actor, &event, now).await?;
            let detail = json!({"crm_ids": [known, crm_id], "cause": "late_answer"});
            open_case(
                tx,
                l,
                leadgate_domain::ReviewReason::AmbiguousMatch,
                None,
                actor,
                detail,
                now,
            )
            .await?;
        }
    }
    save(tx, l, now).await
}

/// Appends one event to an operation's timeline (the row is locked meanwhile).
pub(crate) async fn note<T: WriteTx>(
    mut tx: T,
    id: &str,
    actor: &str,
    event: &NewEvent,
    now: DateTime<Utc>,
) -> Result<()> {
    note_in(&mut tx, id, actor, event, now).await?;
    tx.commit().await
}

pub(crate) async fn note_in<T: WriteTx>(
    tx: &mut T,
    id: &str,
    actor: &str,
    event: &NewEvent,
    now: DateTime<Utc>,
) -> Result<()> {
    must_lock(tx, id).await?;
    tx.append(id, actor, event, now).await
}
