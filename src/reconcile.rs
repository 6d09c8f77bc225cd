//! The reconciler: settles attempts whose outcome is unknown by asking the CRM for the
//! operation's external key, instead of creating again.
//!
//! It runs for every uncertain attempt (inline, by the worker that holds the lease) and
//! for every `in_progress` operation whose lease ran out (its worker died or hung: this
//! loop takes the lease over). Exactly one entity → recovered; several → a person
//! (ambiguous); none and the CRM's lookup is authoritative → due again; none but not
//! authoritative, or the lookup failed → a person (uncertain outcome).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::json;
use tokio::sync::watch;
use tracing::Instrument;

use crate::config::RetryConfig;
use crate::crm::{Crm, Lookup};
use crate::domain::{ErrorClass, ReviewReason};
use crate::store::{self, AttemptOutcome, Claim, Failure, NewEvent, Store, StoreError};
use crate::worker::{exchange_events, retry_or_exhausted, WorkerSettings};

/// Takes over expired leases until `shutdown`.
pub async fn run(
    store: Arc<dyn Store>,
    crm: Arc<dyn Crm>,
    settings: Arc<WorkerSettings>,
    owner: String,
    mut shutdown: watch::Receiver<bool>,
) {
    while !*shutdown.borrow() {
        match store.expire_external_leases(store::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(count = n, "claim-API leases ran out; sent to review"),
            Err(e) => tracing::error!(error = %e, "expiring claim-API leases failed"),
        }
        match reconcile_one_stale(store.as_ref(), crm.as_ref(), &settings, &owner).await {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => tracing::error!(error = %e, "reconciler step failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(settings.poll_interval) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Reconciles one operation whose lease ran out; false when there was none.
pub async fn reconcile_one_stale(
    store: &dyn Store,
    crm: &dyn Crm,
    settings: &WorkerSettings,
    owner: &str,
) -> Result<bool, StoreError> {
    let Some(claim) = store
        .claim_stale(crm.connector(), owner, settings.lease, store::now())
        .await?
    else {
        return Ok(false);
    };
    let span = tracing::info_span!("reconcile", operation_id = %claim.operation.operation_id);
    async {
        tracing::warn!("lease expired; asking the CRM by external key");
        let (outcome, events) = lookup(crm, &settings.retry, &claim, None, store::now()).await;
        match store
            .finish_attempt(&claim.lease, outcome, events, store::now())
            .await
        {
            Ok(_) | Err(StoreError::LeaseLost(_)) => Ok(true),
            Err(e) => Err(e),
        }
    }
    .instrument(span)
    .await
}

/// Looks the operation up in the CRM by its external key and decides what the unknown
/// outcome was. `failure` is the uncertain attempt's error, when there was one.
pub async fn lookup(
    crm: &dyn Crm,
    retry: &RetryConfig,
    claim: &Claim,
    failure: Option<Failure>,
    now: DateTime<Utc>,
) -> (AttemptOutcome, Vec<NewEvent>) {
    let id = claim.operation.operation_id.as_str();
    let (result, exchange) = crm.find(id).await;
    let mut events = exchange_events(
        "reconcile_request",
        "reconcile_response",
        &exchange,
        result.as_ref().err(),
    );
    let (verdict, outcome) = match result {
        Ok(Lookup::One(crm_id)) => ("found_one", AttemptOutcome::Recovered { crm_id }),
        Ok(Lookup::Many(ids)) => (
            "found_several",
            AttemptOutcome::Review {
                reason: ReviewReason::AmbiguousMatch,
                failure,
                detail: json!({"crm_ids": ids}),
            },
        ),
        Ok(Lookup::NotFound) if crm.lookup_is_authoritative() => {
            let failure = failure.unwrap_or_else(|| Failure {
                class: ErrorClass::Uncertain,
                message: "the attempt's outcome was unknown; the CRM has no entity with this key"
                    .into(),
            });
            (
                "not_found",
                retry_or_exhausted(retry, claim, failure, None, now),
            )
        }
        Ok(Lookup::NotFound) => (
            "not_found_not_authoritative",
            AttemptOutcome::Review {
                reason: ReviewReason::UncertainOutcome,
                failure,
                detail: json!({"lookup": "not found, but this CRM's search may lag: not proof that nothing was created"}),
            },
        ),
        Err(e) => (
            "lookup_failed",
            AttemptOutcome::Review {
                reason: ReviewReason::UncertainOutcome,
                failure,
                detail: json!({"lookup": "failed", "class": e.class, "error": e.message}),
            },
        ),
    };
    tracing::info!(verdict, "reconciled");
    events.push(NewEvent::new(
        "reconciliation",
        json!({"verdict": verdict, "authoritative": crm.lookup_is_authoritative()}),
    ));
    (outcome, events)
}
