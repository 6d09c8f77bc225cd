//! The worker: the single owner of CRM calls and retries.
//!
//! It claims due work (the store has already persisted `in_progress` and counted the
//! attempt), calls the CRM through an adapter, and reports the outcome by error class:
//! retry what cannot have executed, stop on validation, pause the connector on auth,
//! and never repeat an uncertain create blindly: reconcile by external key instead.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::json;
use tokio::sync::watch;
use tracing::Instrument;

use crate::config::{RetryConfig, LEASE_MARGIN};
use crate::crm::{Crm, CrmError, Exchange, FieldMap, Lead, Lookup};
use crate::domain::{ErrorClass, RetryDecision, ReviewReason};
use crate::reconcile;
use crate::store::{
    self, AttemptOutcome, Claim, Failure, Lease, NewEvent, Operation, Store, StoreError,
};
use crate::supervise::{supervise, RESTART_DELAY};

#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub poll_interval: Duration,
    /// How long a claim holds the operation before the reconciler may take it over.
    /// A create's lease is extended to `call_timeout + LEASE_MARGIN` if it is shorter.
    pub lease: Duration,
    /// The longest one CRM call may take, redirects and a re-send after a refused
    /// token included (a due token refresh and the pacing wait come before it, in
    /// `Crm::pace`): the worker cuts it there (the outcome is then uncertain), so the
    /// call never outlives its lease.
    pub call_timeout: Duration,
    /// How long after an uncertain outcome the CRM may still land the create: a lookup
    /// that finds nothing counts only after this window.
    pub settle: Duration,
    pub retry: RetryConfig,
    /// Attempts processed at once by this process.
    pub concurrency: usize,
    /// Field mapping per source.
    pub fields: HashMap<String, FieldMap>,
}

impl WorkerSettings {
    /// What a lease that may see a CRM call is armed for: the whole call plus the margin.
    pub fn lease_for_call(&self) -> Duration {
        self.lease.max(self.call_timeout + LEASE_MARGIN)
    }

    /// How long recording an outcome is tried through database hiccups: while the lease
    /// holds, and through the settle window after it (a late report is still kept).
    pub fn keep_trying(&self) -> Duration {
        self.lease_for_call() + self.settle
    }
}

#[derive(Clone)]
pub struct Worker {
    pub store: Arc<dyn Store>,
    pub crm: Arc<dyn Crm>,
    pub settings: Arc<WorkerSettings>,
    /// Names this process on the timeline (`worker:<host>:<pid>:<n>`).
    pub owner: String,
}

impl Worker {
    /// Runs `concurrency` claim loops and the reconciler until `shutdown` turns true. An
    /// attempt in flight is finished before a loop stops.
    pub async fn run(self, shutdown: watch::Receiver<bool>) {
        let mut tasks = tokio::task::JoinSet::new();
        // Supervised: a loop that panics is logged and restarted (crate::supervise).
        for n in 0..self.settings.concurrency.max(1) {
            let mut w = self.clone();
            w.owner = format!("{}:{n}", self.owner);
            let rx = shutdown.clone();
            tasks.spawn(supervise(
                "claim loop",
                rx.clone(),
                RESTART_DELAY,
                move || w.clone().claim_loop(rx.clone()),
            ));
        }
        let r = self.clone();
        tasks.spawn(supervise(
            "reconciler",
            shutdown.clone(),
            RESTART_DELAY,
            move || {
                let (r, shutdown) = (r.clone(), shutdown.clone());
                async move {
                    reconcile::run(
                        r.store,
                        r.crm,
                        r.settings,
                        format!("reconciler:{}", r.owner),
                        shutdown,
                    )
                    .await
                }
            },
        ));
        while tasks.join_next().await.is_some() {}
    }

    async fn claim_loop(self, mut shutdown: watch::Receiver<bool>) {
        while !*shutdown.borrow() {
            match self.step().await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => tracing::error!(error = %e, "worker step failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.poll_interval) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    /// Claims and processes one due operation; false when nothing was due.
    pub async fn step(&self) -> Result<bool, StoreError> {
        let claim = self
            .store
            .claim_due(
                self.crm.connector(),
                &self.owner,
                self.settings.lease,
                self.store.now(),
            )
            .await?;
        let Some(claim) = claim else {
            return Ok(false);
        };
        match self.attempt(&claim).await {
            Ok(()) | Err(StoreError::LeaseLost(_)) => Ok(true),
            Err(e) => Err(e),
        }
    }

    async fn attempt(&self, claim: &Claim) -> Result<(), StoreError> {
        let op = &claim.operation;
        let span =
            tracing::info_span!("attempt", operation_id = %op.operation_id, attempt = op.attempts);
        self.attempt_in(claim).instrument(span).await
    }

    async fn attempt_in(&self, claim: &Claim) -> Result<(), StoreError> {
        let op = &claim.operation;
        let fields = self
            .settings
            .fields
            .get(&op.source)
            .cloned()
            .unwrap_or_default();
        let payload = op.payload.clone().unwrap_or_default();
        let lead = Lead::from_payload(&op.operation_id, &op.source, &payload, &fields);
        let mut before = vec![];
        if op.verify_first {
            // An earlier attempt's outcome is unknown and its settle window is over:
            // ask the CRM once more before anything is created.
            let (found, events) =
                reconcile::look_up(self.crm.as_ref(), claim, self.settings.call_timeout).await;
            let decided = self.after_verify(claim, found);
            before = events;
            if let Some(outcome) = decided {
                return self.finish(&claim.lease, outcome, before).await;
            }
        }
        // A token refresh and the connector's pacing wait come first: they are not part
        // of the call's budget. If they fail, nothing was sent.
        if let Err(e) = self.crm.pace().await {
            tracing::warn!(class = %e.class, "could not get ready to call the CRM");
            let failure = Failure::from(&e);
            let outcome = match e.class.decision() {
                RetryDecision::PauseConnector => AttemptOutcome::PauseConnector {
                    connector: self.crm.connector().to_owned(),
                    failure,
                },
                _ => retry_or_exhausted(
                    &self.settings.retry,
                    claim,
                    failure,
                    e.retry_after,
                    self.store.now(),
                ),
            };
            let note = NewEvent::new("not_sent", json!({"class": e.class, "error": e.message}));
            before.push(note);
            return self.finish(&claim.lease, outcome, before).await;
        }
        // Recorded before the call: if this process dies mid-call, the timeline still
        // shows that a create may have reached the CRM. The lease is extended to cover
        // the whole call; a holder whose lease ran out does not call at all.
        before.push(NewEvent::new(
            "attempt_started",
            json!({"connector": self.crm.connector(), "attempt": op.attempts, "granted": claim.granted}),
        ));
        let armed_at = Instant::now();
        let lease = match self
            .store
            .start_attempt(
                &claim.lease,
                self.settings.lease_for_call(),
                self.settings.settle,
                before,
                self.store.now(),
            )
            .await
        {
            Ok(lease) => lease,
            Err(StoreError::LeaseLost(_)) => {
                tracing::warn!("the lease ran out before the call: not calling the CRM");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let budget = self.settings.call_timeout;
        let (result, exchange) = match tokio::time::timeout_at(
            (armed_at + budget).into(),
            crate::crm::rate::prepaid(self.crm.create(&lead)),
        )
        .await
        {
            Ok(answer) => answer,
            Err(_) => cut_off("create", budget),
        };
        let mut events = exchange_events(
            "crm_request",
            "crm_response",
            &exchange,
            result.as_ref().err(),
        );
        let now = self.store.now();
        let outcome = match result {
            Ok(crm_id) => {
                tracing::info!(crm_id = %crm_id, "created in the CRM");
                AttemptOutcome::Created { crm_id }
            }
            Err(e) => {
                tracing::warn!(class = %e.class, "CRM attempt failed");
                let failure = Failure::from(&e);
                match e.class.decision() {
                    RetryDecision::RetryWithBackoff => {
                        retry_or_exhausted(&self.settings.retry, claim, failure, e.retry_after, now)
                    }
                    RetryDecision::Reconcile => {
                        // Found at once: recovered at once. Found nothing: the CRM may
                        // still be executing it, so ask again after the settle window.
                        let (found, more) = reconcile::look_up(
                            self.crm.as_ref(),
                            claim,
                            self.settings.call_timeout,
                        )
                        .await;
                        events.extend(more);
                        reconcile::after_uncertain(
                            found,
                            Some(failure),
                            store::after(now, self.settings.settle),
                        )
                    }
                    RetryDecision::FailTerminal => AttemptOutcome::Terminal { failure },
                    RetryDecision::PauseConnector => AttemptOutcome::PauseConnector {
                        connector: self.crm.connector().to_owned(),
                        failure,
                    },
                    RetryDecision::Review => AttemptOutcome::Review {
                        reason: ReviewReason::PayloadConflict,
                        failure: Some(failure),
                        detail: json!({}),
                    },
                }
            }
        };
        self.finish(&lease, outcome, events).await
    }

    /// The verify pass's decision; `None`: nothing under the key and a create may go out.
    fn after_verify(
        &self,
        claim: &Claim,
        found: Result<Lookup, CrmError>,
    ) -> Option<AttemptOutcome> {
        let op = &claim.operation;
        let retry = &self.settings.retry;
        let failure = op.last_error_class.map(|class| Failure {
            class,
            message: op.last_error.clone().unwrap_or_default(),
        });
        match found {
            Ok(Lookup::One(crm_id)) => Some(AttemptOutcome::Recovered { crm_id }),
            Ok(Lookup::Many(ids)) => Some(reconcile::several(ids, failure)),
            Ok(Lookup::NotFound) if !self.crm.lookup_is_authoritative() && !claim.granted => {
                Some(AttemptOutcome::Review {
                    reason: ReviewReason::UncertainOutcome,
                    failure,
                    detail: json!({"lookup": "not found after the settle window, but this CRM's search may lag: not proof that nothing was created"}),
                })
            }
            // This claim counted one more attempt: the create it is about to make.
            Ok(Lookup::NotFound)
                if !claim.granted && op.attempts.max(0) as u32 > retry.max_attempts =>
            {
                Some(AttemptOutcome::Review {
                    reason: ReviewReason::RetriesExhausted,
                    failure,
                    detail: json!({"attempts": op.attempts - 1, "lookup": "not found"}),
                })
            }
            Ok(Lookup::NotFound) => None,
            Err(e) => {
                let lookup_failure = Failure::from(&e);
                Some(match e.class.decision() {
                    RetryDecision::PauseConnector => AttemptOutcome::PauseConnector {
                        connector: self.crm.connector().to_owned(),
                        failure: lookup_failure,
                    },
                    RetryDecision::RetryWithBackoff | RetryDecision::Reconcile
                        if !claim.granted && (op.attempts.max(0) as u32) < retry.max_attempts =>
                    {
                        let delay = backoff(retry, op.attempts.max(0) as u32, e.retry_after);
                        AttemptOutcome::Verify {
                            failure: Some(lookup_failure),
                            at: store::after(self.store.now(), delay),
                        }
                    }
                    _ => AttemptOutcome::Review {
                        reason: ReviewReason::UncertainOutcome,
                        failure: Some(lookup_failure),
                        detail: json!({"lookup": "failed", "class": e.class, "error": e.message}),
                    },
                })
            }
        }
    }

    async fn finish(
        &self,
        lease: &Lease,
        outcome: AttemptOutcome,
        events: Vec<NewEvent>,
    ) -> Result<(), StoreError> {
        finish_attempt(
            self.store.as_ref(),
            lease,
            outcome,
            events,
            self.settings.keep_trying(),
        )
        .await
        .map(|_| ())
    }
}

/// Records an attempt's outcome, trying again with backoff for up to `keep_trying` when
/// the database fails transiently (a deadlock, a serialization failure, a connection
/// reset, a restart): a CRM answer that came back must not become a lookup or a review
/// because of a database hiccup. Repeating is safe: the store recognises a report it
/// has already recorded by its lease token.
pub async fn finish_attempt(
    store: &dyn Store,
    lease: &Lease,
    outcome: AttemptOutcome,
    events: Vec<NewEvent>,
    keep_trying: Duration,
) -> Result<Operation, StoreError> {
    let give_up = Instant::now() + keep_trying;
    let mut delay = Duration::from_millis(50);
    loop {
        match store
            .finish_attempt(lease, outcome.clone(), events.clone(), store.now())
            .await
        {
            Err(e) if e.is_transient() && Instant::now() + delay < give_up => {
                tracing::warn!(error = %e, "recording the outcome failed; trying again");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// The answer of a call the worker cut at its budget: the request may have reached the
/// CRM, so the outcome is unknown.
pub fn cut_off<T>(what: &str, budget: Duration) -> (Result<T, CrmError>, Exchange) {
    let message = format!(
        "no answer within {} ms (the call's whole budget): the CRM may still execute it",
        budget.as_millis()
    );
    (
        Err(CrmError::new(ErrorClass::Uncertain, message)),
        Exchange {
            request: json!({"call": what}),
            response: json!({"cut_after_ms": budget.as_millis() as u64}),
        },
    )
}

/// A retryable failure: due again after a backoff, unless the attempts are used up (or
/// this attempt was a person's single grant), in which case a person decides.
pub fn retry_or_exhausted(
    retry: &RetryConfig,
    claim: &Claim,
    failure: Failure,
    retry_after: Option<Duration>,
    now: DateTime<Utc>,
) -> AttemptOutcome {
    after_retryable_failure(
        retry,
        claim.operation.attempts,
        claim.granted,
        failure,
        retry_after,
        now,
    )
}

/// [`retry_or_exhausted`] for callers that know the attempt count but hold no claim
/// (the claim API).
pub fn after_retryable_failure(
    retry: &RetryConfig,
    attempts: i32,
    granted: bool,
    failure: Failure,
    retry_after: Option<Duration>,
    now: DateTime<Utc>,
) -> AttemptOutcome {
    let attempts = attempts.max(0) as u32;
    if granted || attempts >= retry.max_attempts {
        return AttemptOutcome::Review {
            reason: ReviewReason::RetriesExhausted,
            failure: Some(failure),
            detail: json!({"attempts": attempts, "granted": granted}),
        };
    }
    let delay = backoff(retry, attempts, retry_after);
    AttemptOutcome::Retry {
        failure: Some(failure),
        at: store::after(now, delay),
    }
}

/// Exponential backoff with full jitter: a uniform delay in `[0, min(max, base · 2^(n-1))]`,
/// but never sooner than the CRM's `Retry-After`. Full jitter spreads the retries of many
/// operations that failed together (one CRM outage); crates' jitter (e.g. backon's) adds
/// `[0, d)` on top of `d` instead, which neither spreads from zero nor respects `max`.
pub fn backoff(retry: &RetryConfig, attempt: u32, retry_after: Option<Duration>) -> Duration {
    let exp = attempt.saturating_sub(1).min(30);
    let ceiling = retry
        .base_delay
        .saturating_mul(1 << exp)
        .min(retry.max_delay);
    let jittered = ceiling.mul_f64(rand::random::<f64>());
    retry_after.map_or(jittered, |ra| ra.max(jittered))
}

/// Timeline events for one CRM exchange: the request summary and the answer (with its
/// error class when it failed).
pub fn exchange_events(
    request_kind: &'static str,
    response_kind: &'static str,
    exchange: &Exchange,
    error: Option<&CrmError>,
) -> Vec<NewEvent> {
    let mut response = NewEvent::new(response_kind, exchange.response.clone());
    if let Some(e) = error {
        response.error_class = Some(e.class);
        if let serde_json::Value::Object(m) = &mut response.detail {
            m.insert("class".into(), json!(e.class));
            m.insert("error".into(), json!(e.message));
        }
    }
    vec![
        NewEvent::new(request_kind, exchange.request.clone()),
        response,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_full_jitter_under_an_exponential_ceiling() {
        let retry = RetryConfig {
            max_attempts: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        for attempt in 1..=8u32 {
            let ceiling =
                Duration::from_millis(100 * (1u64 << (attempt - 1))).min(Duration::from_secs(1));
            let samples: Vec<_> = (0..200).map(|_| backoff(&retry, attempt, None)).collect();
            assert!(samples.iter().all(|d| *d <= ceiling), "attempt {attempt}");
            // Full jitter: some retries go early, some late.
            assert!(
                samples.iter().any(|d| *d < ceiling / 4),
                "attempt {attempt}"
            );
            assert!(
                samples.iter().any(|d| *d > ceiling / 2),
                "attempt {attempt}"
            );
        }
        // Retry-After is a floor.
        for _ in 0..50 {
            assert!(backoff(&retry, 1, Some(Duration::from_secs(7))) >= Duration::from_secs(7));
        }
    }
}
