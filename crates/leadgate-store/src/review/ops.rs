//! Review cases and a person's decisions on them. What an action does, or why it is
//! refused, is `domain::rules::decide`; this writes it down.
//!
//! A resolution is guarded by the operation version the person saw and by the case still
//! being open, so two people (or a double click) cannot both act. A retry grant is
//! single-use: the worker's claim consumes it in the same transaction (an integration's
//! granted attempt that fails again comes back to review, as the worker's does), and an
//! attempt granted after an earlier one verifies first. *Authorize one retry* is refused
//! when the operation has a `crm_id`, on an `ambiguous_match` case, while a lease is live
//! and once retention purged the payload; *Open a review case* is refused while a lease is
//! live. *Reject* is refused while an attempt's lease is live
//! (`StoreError::AttemptInFlight`: the call may still create the lead) and drops a lease
//! that ran out, so a later report is a late answer — a `crm_id` then completes the
//! operation — never a `failed_terminal` operation holding a `crm_id`.
//!
//! *Accept as new* makes the key `<original>#accepted-<delivery id>` (cut to fit 255
//! bytes; no source can send a key ending like that, so it is never a real key), executed
//! by the original's executor: a claim-API conflict stays the integration's, and the
//! worker never takes it. *Keep original, update CRM* queues an update (`updates`).
//!
//! *Fix and resend* (`HumanAction::ResendEdited`) is *Authorize one retry* with other
//! data: the same rules grant it (`rules::decide`), and the same single-use grant sends it
//! (looked up by key first after an earlier attempt, so a create that did land is found,
//! not repeated). The edited payload replaces `operations.payload`, which is what the
//! worker, the claim API and a later update read; `payload_hash` stays the original
//! delivery's fingerprint, so a repeat of the original request is still a duplicate
//! (absorbed), and a delivery of the edited data is a conflict a person decides. The data
//! as the source sent it stays in the journal (`deliveries.payload`, scrubbed by
//! retention like the operation's). The human action's event names the fields the edit
//! added, changed and removed, never their values: the timeline outlives retention. The
//! contact keys (`contact_phone`, …: matching, search) stay as intake derived them from
//! the original, since only a gateway knows the source's field map.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::{NewEvent, Operation, Resolve, Resolved, Result, StoreError};
use leadgate_domain::rules::{
    bulk_allowed, bulk_decision_allowed, check_comment, decide, edited_fields, may_open_review,
    waits_behind_a_conflict, Decision,
};
use leadgate_domain::EventKind;
use leadgate_domain::{HumanAction, OperationId, Refusal, ReviewReason, Status};

use crate::ops::{
    clear_lease, must_lock, open_case, save, set_status, supersede_open_cases, WriteTx,
};

pub(crate) async fn open_review<T: WriteTx>(
    mut tx: T,
    operation_id: &OperationId,
    reason: ReviewReason,
    actor: &str,
    detail: Value,
    now: DateTime<Utc>,
) -> Result<i64> {
    let id = open_review_in(&mut tx, operation_id, reason, actor, detail, now).await?;
    tx.commit().await?;
    Ok(id)
}

pub(crate) async fn open_review_in<T: WriteTx>(
    tx: &mut T,
    operation_id: &OperationId,
    reason: ReviewReason,
    actor: &str,
    detail: Value,
    now: DateTime<Utc>,
) -> Result<i64> {
    let mut l = must_lock(tx, operation_id.as_str()).await?;
    may_open_review(l.facts(), now)?;
    let id = open_case(tx, &mut l, reason, None, actor, detail, now).await?;
    save(tx, &mut l, now).await?;
    Ok(id)
}

pub(crate) async fn resolve<T: WriteTx>(mut tx: T, req: Resolve) -> Result<Resolved> {
    let resolved = resolve_in(&mut tx, req).await?;
    tx.commit().await?;
    Ok(resolved)
}

pub(crate) async fn resolve_in<T: WriteTx>(tx: &mut T, req: Resolve) -> Result<Resolved> {
    let now = req.now;
    let case = tx
        .lock_case(req.case_id)
        .await?
        .ok_or(StoreError::UnknownCase(req.case_id))?;
    if case.resolved_at.is_some() {
        return Err(StoreError::CaseAlreadyResolved(
            req.case_id,
            case.resolved_by.unwrap_or_else(|| "someone".into()),
        ));
    }
    let op_id = case.operation_id;
    let mut l = must_lock(tx, &op_id).await?;
    if l.op.version != req.expected_version {
        return Err(StoreError::StaleVersion {
            expected: req.expected_version,
            current: l.op.version,
        });
    }
    let actor = req.actor.trim();
    let decision = match decide(&req.action, actor, case.reason, l.facts(), now) {
        Ok(d) => d,
        Err(Refusal::AttemptInFlight { until }) => {
            return Err(StoreError::AttemptInFlight(op_id, until))
        }
        Err(refusal) => return Err(refusal.into()),
    };
    if req.bulk.is_some() {
        bulk_allowed(case.reason)?;
        bulk_decision_allowed(&decision)?;
        // Edited data is one lead's, typed by a person: never a bulk action's.
        if matches!(req.action, HumanAction::ResendEdited { .. }) {
            return Err(Refusal::NotInBulk {
                reason: case.reason,
            }
            .into());
        }
    }
    // The conflict first: a grant behind it would never be sent.
    if waits_behind_a_conflict(&decision, l.op.status, case.reason)
        && tx.has_open_conflict(op_id.as_str()).await?
    {
        return Err(Refusal::RetryWhileConflictOpen.into());
    }
    check_comment(
        req.action.resolution(),
        req.bulk.is_some(),
        req.comment.as_deref(),
    )?;
    let mut new_operation = None;
    let mut crm_id_set = None;
    let mut update = None;
    let mut edited = None;
    match &decision {
        Decision::SettleCrmId { crm_id, link } => {
            if let Some(link) = link {
                l.op.crm_link = Some((*link).into());
            }
            l.op.crm_id = Some(crm_id.clone());
            crm_id_set = Some(crm_id.clone());
            clear_lease(&mut l);
        }
        Decision::GrantRetry {
            due_at,
            verify_first,
        } => {
            l.op.retry_grants = 1;
            l.op.next_attempt_at = Some(*due_at);
            // Never lowered: a lookup already owed (an outage gave the attempt back
            // after its create went out) stays owed whatever the counter says.
            l.op.verify_first = l.op.verify_first || *verify_first;
            clear_lease(&mut l);
            // Fix and resend: the granted attempt sends the edited data; the fingerprint
            // stays the original delivery's (whose payload the journal keeps).
            if let HumanAction::ResendEdited { payload } = &req.action {
                edited = Some(edited_fields(l.op.payload.as_ref(), payload));
                tx.replace_payload(&op_id, payload).await?;
                l.op.payload = Some(payload.clone());
            }
        }
        Decision::ResolveConflict {
            accept_as_new,
            update_crm,
            ..
        } => {
            if let Some(crm_id) = update_crm {
                let delivery_id = case.delivery_id.ok_or_else(|| {
                    StoreError::Corrupt("payload conflict without its delivery".into())
                })?;
                update = Some(
                    request_update(tx, &l, req.case_id, delivery_id, crm_id, actor, now).await?,
                );
            }
            if *accept_as_new {
                let delivery_id = case.delivery_id.ok_or_else(|| {
                    StoreError::Corrupt("payload conflict without its delivery".into())
                })?;
                new_operation = Some(
                    accept_delivery_as_new(tx, &l.op, delivery_id, actor, req.case_id, now).await?,
                );
            }
        }
        Decision::CreateNew { due_at } => {
            l.op.next_attempt_at = Some(*due_at);
        }
        Decision::Reject => {
            // A report under the ran-out lease is then only kept on the timeline.
            clear_lease(&mut l);
            // The failed list shows why, as it does for a CRM's refusal.
            l.op.last_error = Some(match &req.comment {
                Some(c) => format!("rejected by {actor}: {c}"),
                None => format!("rejected by {actor}"),
            });
        }
    }
    let resolution = req.action.resolution();
    tx.close_case(
        req.case_id,
        resolution.as_str(),
        actor,
        req.comment.as_deref(),
        now,
    )
    .await?;
    let event = NewEvent::new(
        EventKind::HumanAction,
        json!({"case_id": req.case_id, "action": resolution, "comment": req.comment,
               "crm_id": crm_id_set.or_else(|| update.as_ref().map(|u| u.1.clone())),
               "new_operation": new_operation, "bulk": req.bulk, "edited": edited}),
    );
    tx.append(&op_id, actor, &event, now).await?;
    if let Some((update_id, crm_id, delivery_id)) = update {
        let event = NewEvent::new(
            EventKind::CrmUpdateRequested,
            json!({"update_id": update_id, "case_id": req.case_id, "crm_id": crm_id,
                   "delivery_id": delivery_id}),
        );
        tx.append(&op_id, actor, &event, now).await?;
    }
    let others_open = tx.open_case_count(&op_id).await?;
    if let Some(to) = decision.target() {
        // Another open case still holds the operation, unless the person settled the CRM
        // result itself.
        if (others_open == 0 || to == Status::Completed) && l.op.status != to {
            set_status(tx, &mut l, to, actor, now).await?;
        }
    }
    if l.op.status.is_final() {
        let why = format!("case #{} settled the operation", req.case_id);
        supersede_open_cases(tx, &l, actor, Some(req.case_id), &why, now).await?;
    }
    save(tx, &mut l, now).await?;
    Ok(Resolved {
        operation: l.op,
        new_operation,
    })
}

/// Queues the update of entity `crm_id` with the fields of the conflicting delivery: due
/// now, sent by the worker (`store::updates::ops`).
async fn request_update<T: WriteTx>(
    tx: &mut T,
    l: &crate::ops::Locked,
    case_id: i64,
    delivery_id: i64,
    crm_id: &str,
    actor: &str,
    now: DateTime<Utc>,
) -> Result<(i64, String, i64)> {
    let data = tx.delivery_data(delivery_id).await?;
    if data.payload.is_none() || l.op.payload.is_none() {
        return Err(Refusal::ConflictPayloadPurged.into());
    }
    // The entity holds a newer delivery's fields already (or will): sending this older
    // one's would put older data over newer.
    if tx.newer_update_of_entity(crm_id, delivery_id).await? {
        return Err(Refusal::UpdateSuperseded.into());
    }
    let id = tx
        .insert_crm_update(l.id(), case_id, delivery_id, crm_id, actor, now)
        .await?
        .ok_or(Refusal::UpdateNotOurs)?;
    Ok((id, crm_id.to_owned(), delivery_id))
}

/// Makes the conflicting delivery of a payload-conflict case an operation of its own,
/// keyed `<original>#accepted-<delivery id>` (`OperationId::accepted_as_new`: bounded,
/// never a real key), due now, executed by whoever executes the original (an operation
/// claimed through the claim API stays the integration's).
async fn accept_delivery_as_new<T: WriteTx>(
    tx: &mut T,
    original: &Operation,
    delivery_id: i64,
    actor: &str,
    case_id: i64,
    now: DateTime<Utc>,
) -> Result<OperationId> {
    let data = tx.delivery_data(delivery_id).await?;
    if data.payload.is_none() || data.payload_hash.is_none() {
        return Err(Refusal::ConflictPayloadPurged.into());
    }
    let new_id = OperationId::accepted_as_new(&original.operation_id, delivery_id);
    if !tx.insert_accepted(&new_id, original, &data, now).await? {
        return Err(Refusal::AcceptedExists {
            operation_id: new_id.to_string(),
        }
        .into());
    }
    let event = NewEvent::new(
        EventKind::AcceptedAsNew,
        json!({"from_operation": original.operation_id, "case_id": case_id, "delivery_id": delivery_id}),
    );
    tx.append(new_id.as_str(), actor, &event, now).await?;
    Ok(new_id)
}
