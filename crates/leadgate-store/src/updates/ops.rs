//! Updates of CRM entities a person asked for: *Keep original and update the CRM* on a
//! payload conflict. Requesting one is part of the resolution (`review.rs`); this records
//! how the worker's call ended. What follows a failure is `domain::update`.
//!
//! An update never lands over a newer one. Each is a `crm_updates` row (migration 0014);
//! the worker takes one only when no update of the same entity for an earlier delivery is
//! pending or may still land (`quiet_after`: the last call's lease plus the settle
//! window), and a person cannot queue an older delivery's update after a newer one's. An
//! update may be sent again — it names the entity by id and sets values, and phones and
//! e-mails are read first so none is added twice — but one whose answer did not come only
//! after the settle window. A refused update opens a new payload-conflict case on the same
//! delivery; retention keeps an operation whose update is pending.

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::{NewEvent, Result, StoreError, UpdateClaim, UpdateOutcome};
use leadgate_domain::EventKind;
use leadgate_domain::{ErrorClass, ReviewReason};

use crate::ops::{append_all, must_lock, open_case, save, WriteTx};

/// A `crm_updates` row as [`finish`] reads it, locked.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct UpdateRow {
    pub state: String,
    pub lease_token: Option<String>,
    pub delivery_id: i64,
    pub crm_id: String,
}

/// What is written back to a `crm_updates` row.
#[derive(Debug, Clone)]
pub(crate) struct UpdateWrite<'a> {
    pub state: &'static str,
    pub due_at: Option<DateTime<Utc>>,
    /// Keep `quiet_after`: the last call may still land.
    pub keep_quiet: bool,
    pub error: Option<(&'a str, ErrorClass)>,
    /// Give the try back (not counted against `max_attempts`).
    pub refund: bool,
}

pub(crate) async fn finish<T: WriteTx>(
    mut tx: T,
    claim: &UpdateClaim,
    outcome: UpdateOutcome,
    events: Vec<NewEvent>,
    now: DateTime<Utc>,
) -> Result<()> {
    // The operation first, as every writer does (a resolution locks its case, then the
    // operation, then inserts the update).
    let mut l = must_lock(&mut tx, claim.operation_id.as_str()).await?;
    let row = tx
        .lock_crm_update(claim.id)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("update {} is gone", claim.id)))?;
    if row.state != "pending" || row.lease_token.as_deref() != Some(claim.token.as_str()) {
        return Err(StoreError::LeaseLost(format!("update {}", claim.id)));
    }
    let actor = claim.owner.as_str();
    let id = l.id().to_owned();
    append_all(&mut tx, &id, actor, &events, now).await?;
    let base = json!({"update_id": claim.id, "crm_id": row.crm_id, "case_id": claim.case_id});
    let with = |extra: serde_json::Value| {
        let mut v = base.clone();
        if let (serde_json::Value::Object(m), serde_json::Value::Object(e)) = (&mut v, extra) {
            m.extend(e);
        }
        v
    };
    match &outcome {
        UpdateOutcome::Done { fields } => {
            write(&mut tx, claim.id, "done", None, false, None, now).await?;
            let event = NewEvent::new(EventKind::CrmUpdated, with(json!({"fields": fields})));
            tx.append(&id, actor, &event, now).await?;
        }
        UpdateOutcome::Skipped => {
            write(&mut tx, claim.id, "skipped", None, false, None, now).await?;
            let event = NewEvent::new(EventKind::CrmUpdateSkipped, with(json!({"fields": []})));
            tx.append(&id, actor, &event, now).await?;
        }
        UpdateOutcome::Retry {
            at,
            failure,
            refund,
        } => {
            let w = UpdateWrite {
                state: "pending",
                due_at: Some(*at),
                keep_quiet: failure.class.may_have_executed(),
                error: Some((failure.message.as_str(), failure.class)),
                refund: *refund,
            };
            tx.write_crm_update(claim.id, &w, now).await?;
            let mut event = NewEvent::new(
                EventKind::CrmUpdateRetry,
                with(json!({"class": failure.class, "error": failure.message, "due_at": at})),
            );
            event.error_class = Some(failure.class);
            tx.append(&id, actor, &event, now).await?;
        }
        UpdateOutcome::Failed { failure } => {
            let keep = failure.class.may_have_executed();
            let error = Some((failure.message.as_str(), failure.class));
            write(&mut tx, claim.id, "failed", None, keep, error, now).await?;
            // The question goes back to a person: the same delivery, a case of its own
            // saying why (keep the CRM as it is, try the update again, or accept as new).
            let detail = json!({"update_failed": {"update_id": claim.id, "crm_id": row.crm_id,
                                "class": failure.class, "error": failure.message}});
            let case_id = open_case(
                &mut tx,
                &mut l,
                ReviewReason::PayloadConflict,
                Some(row.delivery_id),
                actor,
                detail,
                now,
            )
            .await?;
            let mut event = NewEvent::new(
                EventKind::CrmUpdateFailed,
                with(json!({"class": failure.class, "error": failure.message,
                            "review_case": case_id})),
            );
            event.error_class = Some(failure.class);
            tx.append(&id, actor, &event, now).await?;
            save(&mut tx, &mut l, now).await?;
        }
    }
    tx.commit().await
}

async fn write<T: WriteTx>(
    tx: &mut T,
    id: i64,
    state: &'static str,
    due_at: Option<DateTime<Utc>>,
    keep_quiet: bool,
    error: Option<(&str, ErrorClass)>,
    now: DateTime<Utc>,
) -> Result<()> {
    let w = UpdateWrite {
        state,
        due_at,
        keep_quiet,
        error,
        refund: false,
    };
    tx.write_crm_update(id, &w, now).await
}
