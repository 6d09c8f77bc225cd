//! The batched drain: while work is waiting and the CRM takes several creates in one
//! request (Bitrix24 `batch`, amoCRM `leads/complex`), the worker claims up to the
//! connector's batch limit and sends them together, one request per turn of the CRM's
//! pace instead of one per lead.
//!
//! Every rule of a single attempt holds per operation: each is claimed under its own
//! lease and has its own `attempt_started` recorded (in one transaction) before the
//! request leaves; each gets its own outcome from its own item of the answer, classified
//! on its own. A request that failed as a whole gives every operation in it that
//! request's class: `not_sent` and `rate_limited` are retried, `uncertain` (the answer
//! was lost, the budget ran out) makes each of them uncertain. The uncertain ones are
//! looked up by key together where the CRM allows it (one Bitrix24 `crm.lead.list` with
//! `@ORIGIN_ID` for the whole batch) and settle exactly as a single uncertain create
//! does: found → recovered, several → a person, nothing → looked up again after the
//! settle window before anything is created.
//!
//! A batch is one request, not one operation. The drain waits for its turn of the CRM's
//! pace before it claims, so no claimed operation waits for a turn.

use std::time::Instant;

use serde_json::json;
use tracing::Instrument;

use super::{not_sent_event, Worker};
use crate::attempt::{cut_off, exchange_events, Hold};
use crate::crm::{CrmError, Exchange};
use crate::domain::ErrorClass;
use crate::domain::EventKind;
use crate::reconcile;
use crate::store::{self, AttemptOutcome, Claim, Failure, Lease, NewEvent, StoreError};

/// What one operation of a batch is left with once its item of the answer is read.
enum Next {
    Decided(AttemptOutcome),
    /// The create may or may not have happened: look the key up.
    Unknown(Failure),
}

impl Worker {
    /// Claims up to the connector's batch limit of due operations and sends them; false
    /// when nothing was due.
    ///
    /// The CRM's pace is waited for *before* anything is claimed: a claim never waits
    /// for its turn (its lease would run out meanwhile), and a process killed while it
    /// waits holds nothing. Whatever owes a lookup first (an earlier outcome is
    /// unknown) is looked up in that first request, all keys together; those found
    /// absent (where that is proof) join the creates of the next request.
    pub(super) async fn drain(&self) -> Result<bool, StoreError> {
        let connector = self.crm.connector();
        // A read first: an idle poll must not use up the CRM's turns.
        if !self.store.has_due(connector, self.store.now()).await? {
            return Ok(false);
        }
        let paced = self.crm.pace().await;
        let claims = self
            .store
            .claim_due_many(
                connector,
                &self.owner,
                self.settings.lease,
                self.crm.batch_limit(),
                self.store.now(),
            )
            .await?;
        if claims.is_empty() {
            return Ok(false);
        }
        if let Err(e) = paced {
            self.not_sent_all(claims, &e).await?;
            return Ok(true);
        }
        // The gate was passed before the pace wait: the breaker may have opened since.
        if let Err(held) = self.may_call(&mut false).await {
            self.held_back_all(claims, held).await?;
            return Ok(true);
        }
        let (verify, fresh): (Vec<Claim>, Vec<Claim>) = claims
            .into_iter()
            .partition(|c| self.settings.looks_up_first(&c.operation));
        let mut creates: Vec<(Claim, Vec<NewEvent>)> =
            fresh.into_iter().map(|c| (c, Vec::new())).collect();
        let mut turn_used = false;
        if !verify.is_empty() {
            turn_used = true;
            let refs: Vec<&Claim> = verify.iter().collect();
            let found =
                reconcile::look_up_many(self.crm.as_ref(), &refs, self.settings.call_timeout, true)
                    .await;
            let failed = lookup_health(&found);
            let mut decided = Vec::new();
            for (claim, (lookup, events)) in verify.into_iter().zip(found) {
                match self.after_verify(&claim, lookup) {
                    Some(outcome) => decided.push((claim.lease, outcome, events)),
                    None => creates.push((claim, events)),
                }
            }
            self.weigh_and_finish(failed, decided).await?;
        }
        if creates.is_empty() {
            return Ok(true);
        }
        if turn_used {
            if let Err(e) = self.crm.pace().await {
                let claims = creates.into_iter().map(|(c, _)| c).collect();
                self.not_sent_all(claims, &e).await?;
                return Ok(true);
            }
            if let Err(held) = self.may_call(&mut false).await {
                self.held_back_all(creates.into_iter().map(|(c, _)| c).collect(), held)
                    .await?;
                return Ok(true);
            }
        }
        let span = tracing::info_span!("batch", size = creates.len());
        self.attempt_batch(creates).instrument(span).await?;
        Ok(true)
    }

    /// Records, for every claim, that its call could not be prepared (nothing sent).
    async fn not_sent_all(&self, claims: Vec<Claim>, e: &CrmError) -> Result<(), StoreError> {
        tracing::warn!(class = %e.class, "could not get ready to call the CRM");
        let done = claims
            .iter()
            .map(|c| {
                (
                    c.lease.clone(),
                    self.not_ready(c, e),
                    vec![not_sent_event(e)],
                )
            })
            .collect();
        self.weigh_and_finish(Some(e.class), done).await
    }

    /// Records, for every claim, that its call was held back: the CRM became unreachable,
    /// or the connector was paused, after this drain passed its gate (nothing sent, not
    /// counted against anybody).
    async fn held_back_all(&self, claims: Vec<Claim>, held: Hold) -> Result<(), StoreError> {
        tracing::info!(?held, "the batch is held back");
        // Not weighed: no call was made, so nothing was learnt of the CRM's health.
        let mut first_error = None;
        for claim in &claims {
            match self
                .finish(&claim.lease, self.held_back(claim, held), vec![])
                .await
            {
                Ok(()) | Err(StoreError::LeaseLost(_)) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Sends the creates of `creates` (each with the events recorded before it: a
    /// verify pass's lookup) in one request, its turn of the pace already taken.
    async fn attempt_batch(&self, creates: Vec<(Claim, Vec<NewEvent>)>) -> Result<(), StoreError> {
        let size = creates.len();
        let (claims, starts): (Vec<Claim>, Vec<_>) = creates
            .into_iter()
            .map(|(c, mut before)| {
                before.push(self.attempt_started(&c, Some(size)));
                let lease = c.lease.clone();
                (c, (lease, before))
            })
            .unzip();
        let leases = self
            .store
            .start_attempts(
                starts,
                self.settings.lease_for_call(),
                self.settings.settle,
                self.store.now(),
            )
            .await?;
        let mut sent: Vec<(Claim, Lease)> = Vec::with_capacity(size);
        for (claim, lease) in claims.into_iter().zip(leases) {
            match lease {
                Ok(lease) => sent.push((claim, lease)),
                Err(StoreError::LeaseLost(id)) => {
                    tracing::warn!(operation_id = %id, "the lease ran out before the call: not sending it");
                }
                Err(e) => return Err(e),
            }
        }
        if sent.is_empty() {
            return Ok(());
        }
        let leads: Vec<_> = sent.iter().map(|(c, _)| self.lead_of(c)).collect();
        let armed_at = Instant::now();
        let budget = self.settings.call_timeout;
        let answer = match tokio::time::timeout_at(
            (armed_at + budget).into(),
            crate::crm::rate::prepaid(self.crm.create_many(&leads)),
        )
        .await
        {
            Ok(answer) => answer,
            Err(_) => {
                let (result, exchange) = cut_off::<()>("batch create", budget);
                Err((result.expect_err("a cut-off call fails"), exchange))
            }
        };
        let now = self.store.now();
        let answer = match answer {
            Ok(items) if items.len() != sent.len() => {
                let message = format!(
                    "the batch answer has {} results for {} creates",
                    items.len(),
                    sent.len()
                );
                let exchange = items
                    .into_iter()
                    .next()
                    .map(|(_, ex)| ex)
                    .unwrap_or_else(|| Exchange {
                        request: json!({"call": "batch create"}),
                        response: json!({}),
                    });
                Err((CrmError::new(ErrorClass::Uncertain, message), exchange))
            }
            other => other,
        };
        // What the request says of the CRM's health: a request that failed as a whole
        // counts against the connector; any answer per item means it is there.
        let mut health = None;
        let mut items: Vec<(Next, Vec<NewEvent>)> = Vec::with_capacity(sent.len());
        match answer {
            Ok(answers) => {
                for ((claim, _), (result, exchange)) in sent.iter().zip(answers) {
                    let events = exchange_events(
                        EventKind::CrmRequest,
                        EventKind::CrmResponse,
                        &exchange,
                        result.as_ref().err(),
                    );
                    let next = match result {
                        Ok(crm_id) => Next::Decided(AttemptOutcome::Created { crm_id }),
                        Err(e) => self.after_item_failure(claim, &e, now),
                    };
                    items.push((next, events));
                }
            }
            Err((e, exchange)) => {
                tracing::warn!(class = %e.class, "the batch request failed");
                health = Some(e.class);
                let events = exchange_events(
                    EventKind::CrmRequest,
                    EventKind::CrmResponse,
                    &exchange,
                    Some(&e),
                );
                for (claim, _) in &sent {
                    items.push((self.after_item_failure(claim, &e, now), events.clone()));
                }
            }
        }
        let unknown: Vec<&Claim> = sent
            .iter()
            .zip(&items)
            .filter(|(_, (next, _))| matches!(next, Next::Unknown(_)))
            .map(|((c, _), _)| c)
            .collect();
        let held = match unknown.is_empty() {
            true => Ok(()),
            false => self.may_call(&mut false).await,
        };
        let mut found = if unknown.is_empty() {
            Vec::new()
        } else if let Err(held) = held {
            // Another lane opened the breaker meanwhile, or a person paused the
            // connector: the lookup waits too (its leads are looked up before anything
            // is created).
            unknown
                .iter()
                .map(|_| (Err(held.into()), Vec::new()))
                .collect()
        } else {
            let found = reconcile::look_up_many(
                self.crm.as_ref(),
                &unknown,
                self.settings.call_timeout,
                false,
            )
            .await;
            // The lookup says whether the CRM is there at all, as after a single
            // uncertain create.
            health = lookup_health(&found);
            found
        }
        .into_iter();
        let settle_until = store::after(now, self.settings.settle);
        let mut done = Vec::with_capacity(items.len());
        for ((_, lease), (next, mut events)) in sent.into_iter().zip(items) {
            let outcome = match next {
                Next::Decided(outcome) => outcome,
                Next::Unknown(failure) => {
                    let (lookup, more) = found.next().expect("one lookup per unknown item");
                    events.extend(more);
                    reconcile::after_uncertain(lookup, Some(failure), settle_until)
                }
            };
            done.push((lease, outcome, events));
        }
        self.weigh_and_finish(health, done).await
    }

    /// The next step of one operation whose create failed with `e` (its own item's
    /// error, or the whole request's).
    fn after_item_failure(
        &self,
        claim: &Claim,
        e: &CrmError,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Next {
        match self.settings.retry.after_failed_call(
            Failure::from(e),
            claim.operation.attempts,
            claim.granted,
            e.retry_after,
            self.crm.connector(),
            json!({}),
            now,
        ) {
            Ok(outcome) => Next::Decided(outcome),
            Err(failure) => Next::Unknown(failure),
        }
    }

    /// Weighs the outcomes of one request for the connector's health
    /// ([`weigh_all`](Worker::weigh_all)) and records each; a lease lost meanwhile is
    /// that operation's affair, any other failure is reported after the rest were tried.
    async fn weigh_and_finish(
        &self,
        failed: Option<ErrorClass>,
        done: Vec<(Lease, AttemptOutcome, Vec<NewEvent>)>,
    ) -> Result<(), StoreError> {
        let (leases, outcomes): (Vec<_>, Vec<_>) = done
            .into_iter()
            .map(|(lease, outcome, events)| ((lease, events), outcome))
            .unzip();
        let outcomes = self.weigh_all(failed, outcomes).await;
        let mut first_error = None;
        for ((lease, events), outcome) in leases.into_iter().zip(outcomes) {
            match self.finish(&lease, outcome, events).await {
                Ok(()) | Err(StoreError::LeaseLost(_)) => {}
                Err(e) => {
                    tracing::error!(operation_id = %lease.operation_id, error = %e, "recording the outcome failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// What lookups say of the CRM's health: the class of their failure when none of them
/// was answered, else nothing (the CRM is there).
fn lookup_health<T>(found: &[(Result<T, CrmError>, Vec<NewEvent>)]) -> Option<ErrorClass> {
    if found.iter().any(|(r, _)| r.is_ok()) {
        return None;
    }
    found
        .iter()
        .find_map(|(r, _)| r.as_ref().err().map(|e| e.class))
}
