//! The worker: the single owner of CRM calls and retries.
//!
//! It claims due work (the store has already persisted `in_progress` and counted the
//! attempt), calls the CRM through an adapter, and reports the outcome by error class:
//! retry what cannot have executed, stop on validation, pause the connector on auth,
//! and never repeat an uncertain create blindly: reconcile by external key instead.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use tokio::sync::watch;
use tracing::Instrument;

use crate::config::RetryConfig;
use crate::crm::{Crm, CrmError, Exchange, FieldMap, Lead};
use crate::domain::{RetryDecision, ReviewReason};
use crate::reconcile;
use crate::store::{self, AttemptOutcome, Claim, Failure, NewEvent, Store, StoreError};
use crate::supervise::{supervise, RESTART_DELAY};

#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub poll_interval: Duration,
    pub lease: Duration,
    pub retry: RetryConfig,
    /// Attempts processed at once by this process.
    pub concurrency: usize,
    /// Field mapping per source.
    pub fields: HashMap<String, FieldMap>,
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
                store::now(),
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
        // Recorded before the call: if this process dies mid-call, the timeline still
        // shows that a create may have reached the CRM.
        let started = NewEvent::new(
            "attempt_started",
            json!({"connector": self.crm.connector(), "attempt": op.attempts, "granted": claim.granted}),
        );
        self.store
            .append_events(&claim.lease, vec![started], store::now())
            .await?;
        let (result, exchange) = self.crm.create(&lead).await;
        let mut events = exchange_events(
            "crm_request",
            "crm_response",
            &exchange,
            result.as_ref().err(),
        );
        let now = store::now();
        let outcome = match result {
            Ok(crm_id) => {
                tracing::info!(crm_id = %crm_id, "created in the CRM");
                AttemptOutcome::Created { crm_id }
            }
            Err(e) => {
                tracing::warn!(class = %e.class, "CRM attempt failed");
                let failure = Failure {
                    class: e.class,
                    message: e.message.clone(),
                };
                match e.class.decision() {
                    RetryDecision::RetryWithBackoff => {
                        retry_or_exhausted(&self.settings.retry, claim, failure, e.retry_after, now)
                    }
                    RetryDecision::Reconcile => {
                        let (outcome, more) = reconcile::lookup(
                            self.crm.as_ref(),
                            &self.settings.retry,
                            claim,
                            Some(failure),
                            now,
                        )
                        .await;
                        events.extend(more);
                        outcome
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
        self.store
            .finish_attempt(&claim.lease, outcome, events, store::now())
            .await
            .map(|_| ())
    }
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
