//! The reconciler: settles attempts whose outcome is unknown by asking the CRM for the
//! operation's external key, instead of creating again.
//!
//! It runs for every uncertain attempt (inline, by the worker that holds the lease) and
//! for every `in_progress` operation whose lease ran out (its worker died or hung: this
//! loop takes the lease over). Exactly one entity → recovered; several → a person
//! (ambiguous). Nothing found, or the lookup failed, proves nothing *yet*: the CRM may
//! still be executing the create (Bitrix24 finishes requests up to 60 s after the client
//! gave up) or its search may lag. The operation is then due again only after the
//! connector's settle window, and the worker's first step is another lookup
//! (`verify_first`); only a "not found" after the window lets a create go out, and only
//! when the CRM's lookup is authoritative.
//!
//! In the outcome's terms: a lookup that finds the entity completes the operation at once;
//! nothing found or no answer is `AttemptOutcome::Verify` — `received`, due at now +
//! `[crm] settle`, `verify_first`. A person's grant is the only other way to a create
//! after an unknown outcome, and it too verifies first. The settle window must be at least
//! the CRM's own server-side time limit for a request: it is the one setting that can let
//! a second create through.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use tokio::sync::watch;
use tracing::Instrument;

use crate::attempt::{cut_off, exchange_events, finish_attempt, hold, WorkerSettings};
use crate::crm::{Crm, CrmError, Lookup};
use crate::domain::outage::counts_against_connector;
use crate::domain::EventKind;
use crate::domain::ReviewReason;
use crate::store::{self, AttemptOutcome, Claim, Failure, NewEvent, Store, StoreError};
use crate::turns::Turns;

/// Takes over expired leases until `shutdown`.
pub async fn run(
    store: Arc<dyn Store>,
    crm: Arc<dyn Crm>,
    settings: Arc<WorkerSettings>,
    owner: String,
    turns: Option<Arc<Turns>>,
    mut shutdown: watch::Receiver<bool>,
) {
    while !*shutdown.borrow() {
        // A fleet tenant's reconciler takes a lane of the fleet's, like its claim loops.
        let Some(lane) = crate::turns::turn(turns.as_deref(), &mut shutdown).await else {
            break;
        };
        match store.expire_external_leases(store.now()).await {
            Ok(0) => {}
            Ok(n) => tracing::warn!(count = n, "claim-API leases ran out; sent to review"),
            Err(e) => tracing::error!(error = %e, "expiring claim-API leases failed"),
        }
        let stepped = reconcile_one_stale(store.as_ref(), crm.as_ref(), &settings, &owner).await;
        drop(lane);
        match stepped {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => tracing::error!(error = %e, "reconciler step failed"),
        }
        crate::turns::idle(
            turns.as_deref(),
            crate::turns::Wait::Stale,
            settings.poll_interval,
            &mut shutdown,
        )
        .await;
    }
}

/// Reconciles one operation whose lease ran out; false when there was none.
pub async fn reconcile_one_stale(
    store: &dyn Store,
    crm: &dyn Crm,
    settings: &WorkerSettings,
    owner: &str,
) -> Result<bool, StoreError> {
    let lease_for = settings.lease_for_call();
    let Some(claim) = store
        .claim_stale(crm.connector(), owner, lease_for, store.now())
        .await?
    else {
        return Ok(false);
    };
    let span = tracing::info_span!("reconcile", operation_id = %claim.operation.operation_id);
    async {
        tracing::warn!("lease expired; asking the CRM by external key");
        let (found, events) = if let Some(held) = hold(store, crm.connector()).await {
            // The CRM is unreachable (only its probes go out, `domain::outage`) or the
            // connector is paused. The lookup is owed, not made: the worker makes it
            // before anything is created.
            (Err(held.into()), Vec::new())
        } else {
            let (found, events) = look_up(crm, &claim, settings.call_timeout).await;
            // Weighed for the connector's health as the worker's calls are.
            let now = store.now();
            let health = match &found {
                Err(e) if counts_against_connector(e.class) => store
                    .connector_failed(crm.connector(), &settings.outage, now)
                    .await
                    .map(|_| ()),
                Err(_) => Ok(()),
                Ok(_) => store
                    .connector_answered(crm.connector(), now)
                    .await
                    .map(|_| ()),
            };
            if let Err(e) = health {
                tracing::error!(error = %e, "recording the connector's health failed");
            }
            (found, events)
        };
        // The holder's call was cut before its lease ran out, but the CRM may still be
        // executing it: a "not found" counts only after the settle window from now.
        let outcome = after_uncertain(found, None, store::after(store.now(), settings.settle));
        // A stepped create's final entity found here is counted like one the worker found.
        let mut events = events;
        events.extend(crate::attempt::final_step(crm, &outcome));
        match finish_attempt(store, &claim.lease, outcome, events, settings.keep_trying()).await {
            Ok(_) | Err(StoreError::LeaseLost(_)) => Ok(true),
            Err(e) => Err(e),
        }
    }
    .instrument(span)
    .await
}

/// Looks the operation up in the CRM by its external key, within `budget`; the events
/// are the request, the answer and the verdict, for the timeline.
pub async fn look_up(
    crm: &dyn Crm,
    claim: &Claim,
    budget: Duration,
) -> (Result<Lookup, CrmError>, Vec<NewEvent>) {
    let mut found = look_up_many(crm, &[claim], budget, false).await;
    found.remove(0)
}

/// [`look_up`] for several claims (the uncertain creates of one batch): one request per
/// [`Crm::lookup_batch_limit`] keys where the CRM allows it, else one per key. One
/// answer per claim, in order, each with its own timeline events.
/// With `paced` the caller has already waited for the first request's turn. After a
/// request that failed for a reason the connector is to blame for (it is down), the
/// others are not sent: each of their claims gets that failure.
pub async fn look_up_many(
    crm: &dyn Crm,
    claims: &[&Claim],
    budget: Duration,
    mut paced: bool,
) -> Vec<(Result<Lookup, CrmError>, Vec<NewEvent>)> {
    let per_request = crm.lookup_batch_limit().max(1);
    let mut found = Vec::with_capacity(claims.len());
    let mut down: Option<CrmError> = None;
    for chunk in claims.chunks(per_request) {
        let ids: Vec<&str> = chunk
            .iter()
            // The CRM holds the key without its tenant (`OperationId::local_part`).
            .map(|c| c.operation.operation_id.local_part())
            .collect();
        let ready = if let Some(e) = &down {
            Err(e.clone())
        } else if std::mem::take(&mut paced) {
            Ok(())
        } else {
            crm.pace().await
        };
        let (result, exchange) = match ready {
            Err(e) => (Err(e), not_sent("lookup")),
            Ok(()) => {
                // One key is found with `find` (the CRM's cheapest lookup), several with
                // `find_many`.
                let lookup = async {
                    match ids.as_slice() {
                        [id] => {
                            let (found, exchange) = crm.find(id).await;
                            (found.map(|f| vec![f]), exchange)
                        }
                        _ => crm.find_many(&ids).await,
                    }
                };
                match tokio::time::timeout(budget, crate::crm::rate::prepaid(lookup)).await {
                    Ok((Ok(lookups), exchange)) if lookups.len() != ids.len() => (
                        Err(CrmError::new(
                            crate::domain::ErrorClass::Uncertain,
                            format!(
                                "the lookup answered {} of {} keys",
                                lookups.len(),
                                ids.len()
                            ),
                        )),
                        exchange,
                    ),
                    Ok(answer) => answer,
                    Err(_) => cut_off("lookup", budget),
                }
            }
        };
        let events = exchange_events(
            EventKind::ReconcileRequest,
            EventKind::ReconcileResponse,
            &exchange,
            result.as_ref().err(),
        );
        match result {
            Ok(lookups) => {
                for (claim, lookup) in chunk.iter().zip(lookups) {
                    let mut events = events.clone();
                    events.push(verdict(crm, claim, Ok(&lookup)));
                    found.push((Ok(lookup), events));
                }
            }
            Err(e) => {
                if counts_against_connector(e.class) {
                    down.get_or_insert_with(|| e.clone());
                }
                for claim in chunk {
                    let mut events = events.clone();
                    events.push(verdict(crm, claim, Err(&e)));
                    found.push((Err(e.clone()), events));
                }
            }
        }
    }
    found
}

fn not_sent(what: &str) -> crate::crm::Exchange {
    crate::crm::Exchange {
        request: json!({"call": what}),
        response: json!({"sent": false}),
    }
}

/// The `reconciliation` event: what the lookup decided.
fn verdict(crm: &dyn Crm, claim: &Claim, result: Result<&Lookup, &CrmError>) -> NewEvent {
    let verdict = match result {
        Ok(Lookup::One(_)) => "found_one",
        Ok(Lookup::Many(_)) => "found_several",
        Ok(Lookup::NotFound) => "not_found",
        Err(_) => "lookup_failed",
    };
    tracing::info!(operation_id = %claim.operation.operation_id, verdict, "looked up by key");
    NewEvent::new(
        EventKind::Reconciliation,
        json!({"verdict": verdict, "authoritative": crm.lookup_is_authoritative(),
               "verify_pass": claim.operation.verify_first}),
    )
}

/// Several entities carry the key: duplicates exist already; a person decides.
pub fn several(ids: Vec<String>, failure: Option<Failure>) -> AttemptOutcome {
    AttemptOutcome::Review {
        reason: ReviewReason::AmbiguousMatch,
        failure,
        detail: json!({"crm_ids": ids}),
    }
}

/// What a lookup right after an unknown outcome decides: found → settled at once;
/// nothing (or no answer) → look again at `settle_until`, before anything is created.
pub fn after_uncertain(
    found: Result<Lookup, CrmError>,
    failure: Option<Failure>,
    settle_until: DateTime<Utc>,
) -> AttemptOutcome {
    match found {
        Ok(Lookup::One(crm_id)) => AttemptOutcome::Recovered { crm_id },
        Ok(Lookup::Many(ids)) => several(ids, failure),
        Ok(Lookup::NotFound) | Err(_) => AttemptOutcome::Verify {
            failure,
            at: settle_until,
        },
    }
}
