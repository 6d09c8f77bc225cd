//! Operations an external integration (an n8n workflow) executes itself: it claims the
//! key through the claim API, calls the CRM, and reports with the lease token.

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::{
    after, DueRedelivery, ExternalClaim, ExternalClaimOutcome, NewEvent, Result, StoreError,
};
use leadgate_domain::rules::{claim_step, ClaimStep, DeliveryKind};
use leadgate_domain::EventKind;
use leadgate_domain::OperationId;
use leadgate_domain::{ReviewReason, Status};

use crate::journal::ops::{conflict_event, open_conflict};
use crate::ops::{must_lock, open_case, save, Locked, WriteTx};
use crate::work_queue::attempts::claim_locked;

/// One try of `ClaimApi::claim_external` (the backend retries it as a whole on a deadlock).
pub(crate) async fn claim<T: WriteTx>(
    mut tx: T,
    c: &ExternalClaim,
) -> Result<ExternalClaimOutcome> {
    let d = &c.delivery;
    let id = d.operation_id.as_str();
    let now = d.received_at;
    let paused = tx.connector_paused(&c.connector).await?;
    let created = tx.insert_operation(d, "external", now).await?;
    let mut l = must_lock(&mut tx, id).await?;
    let kind = DeliveryKind::of(created, &l.op.payload_hash, d.payload_hash.as_str());
    let delivery_id = tx.insert_delivery(d, kind.as_str()).await?;
    let detail = json!({"delivery_id": delivery_id, "outcome": kind.as_str(), "via": "claim_api"});
    let event = if kind == DeliveryKind::Conflict {
        conflict_event(detail)
    } else {
        NewEvent::new(EventKind::Delivery, detail)
    };
    tx.append(id, &c.owner, &event, now).await?;
    let outcome = if kind == DeliveryKind::Conflict {
        open_conflict(&mut tx, &mut l, delivery_id, &c.owner, now).await?;
        ExternalClaimOutcome::Conflict
    } else {
        let step = claim_step(
            l.op.status,
            l.op.lease_expires_at,
            l.op.next_attempt_at,
            paused,
            now,
        );
        match step {
            ClaimStep::Completed => ExternalClaimOutcome::Completed {
                crm_id: l.op.crm_id.clone(),
            },
            ClaimStep::Failed => ExternalClaimOutcome::Failed {
                last_error: l.op.last_error.clone(),
            },
            ClaimStep::NeedsReview => ExternalClaimOutcome::NeedsReview {
                reason: l.op.review_reason,
            },
            ClaimStep::InFlight { until } => ExternalClaimOutcome::InFlight { until },
            ClaimStep::ConnectorPaused => ExternalClaimOutcome::ConnectorPaused,
            ClaimStep::LeaseRanOut => {
                lease_ran_out(&mut tx, &mut l, &c.owner, now).await?;
                ExternalClaimOutcome::NeedsReview {
                    reason: Some(ReviewReason::UncertainOutcome),
                }
            }
            ClaimStep::Claim => {
                // The integration's call may land until its lease ends, and (with no
                // settle window known for it) as long again.
                l.quiet_after = Some(after(after(now, c.lease_for), c.lease_for));
                let claim = claim_locked(&mut tx, &mut l, &c.owner, c.lease_for, now).await?;
                ExternalClaimOutcome::Claimed {
                    attempts: claim.operation.attempts,
                    lease: claim.lease,
                }
            }
        }
    };
    tx.commit().await?;
    Ok(outcome)
}

/// Integrations' leases that ran out go to a person (the outcome is unknown); how many.
pub(crate) async fn expire_leases<T: WriteTx>(mut tx: T, now: DateTime<Utc>) -> Result<u64> {
    let mut expired = 0;
    for id in tx.pick_expired_external(now).await? {
        let Some(mut l) = tx.lock_operation(&id).await? else {
            continue;
        };
        // Checked again under the lock: a late `complete` or another process's expiry may
        // have come between the pick and the lock.
        if l.op.status != Status::InProgress || l.op.lease_expires_at.is_none_or(|t| t > now) {
            continue;
        }
        lease_ran_out(&mut tx, &mut l, "reconciler", now).await?;
        expired += 1;
    }
    tx.commit().await?;
    Ok(expired)
}

/// The lease token stays: a late `complete` from the integration is still recorded, for
/// the person to confirm.
async fn lease_ran_out<T: WriteTx>(
    tx: &mut T,
    l: &mut Locked,
    actor: &str,
    now: DateTime<Utc>,
) -> Result<()> {
    let detail = json!({"lease_expired_at": l.op.lease_expires_at, "owner": l.op.lease_owner});
    open_case(
        tx,
        l,
        ReviewReason::UncertainOutcome,
        None,
        actor,
        detail,
        now,
    )
    .await?;
    save(tx, l, now).await
}

/// `ClaimApi::take_due_redeliveries`.
pub(crate) async fn take_due_redeliveries<T: WriteTx>(
    mut tx: T,
    source: &str,
    actor: &str,
    now: DateTime<Utc>,
    resend_at: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<DueRedelivery>> {
    let mut taken = vec![];
    for (id, payload, due) in tx.pick_redeliveries(source, now, limit).await? {
        let Some(sent) = tx.mark_redelivered(&id, due, now, resend_at).await? else {
            continue;
        };
        let event = NewEvent::new(
            EventKind::Redelivered,
            json!({"redelivery": sent, "due_at": due}),
        );
        tx.append(&id, actor, &event, now).await?;
        let operation_id =
            OperationId::try_from(id).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        taken.push(DueRedelivery {
            operation_id,
            payload,
            sent,
        });
    }
    tx.commit().await?;
    Ok(taken)
}
