//! What an attempt's outcome is, and the retry policy that decides the next step after
//! a retryable failure — one policy for the worker and the claim API.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{after, ErrorClass, RetryDecision, ReviewReason, Status};

/// Why an attempt failed, as it is kept: no secrets, no contact data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub class: ErrorClass,
    pub message: String,
}

/// How an attempt (or a reconciliation) ended; the store applies it atomically.
#[derive(Debug, Clone)]
pub enum AttemptOutcome {
    /// The CRM created the entity and answered with its id.
    Created { crm_id: String },
    /// A lookup by external key found the one entity an earlier attempt created.
    Recovered { crm_id: String },
    /// Nothing was executed: due again at `at`.
    Retry {
        failure: Option<Failure>,
        at: DateTime<Utc>,
    },
    /// The outcome is unknown and a lookup found nothing (yet): the CRM may still be
    /// executing the create. Due again at `at` (the end of the settle window), and then
    /// the key is looked up once more before anything is created.
    Verify {
        failure: Option<Failure>,
        at: DateTime<Utc>,
    },
    /// The CRM refused the data for good.
    Terminal { failure: Failure },
    /// A person must decide.
    Review {
        reason: ReviewReason,
        failure: Option<Failure>,
        detail: Value,
    },
    /// The connector's credentials failed: pause it and put the operation back, unharmed.
    PauseConnector { connector: String, failure: Failure },
    /// The connector is unreachable (an outage, see `domain::outage`): due again at `at`
    /// (its next probe), the attempt not counted; with `verify` the key is looked up
    /// before anything is created, as after `Verify`.
    Outage {
        failure: Failure,
        at: DateTime<Utc>,
        verify: bool,
    },
    /// The connector was paused (by a person, or after an auth failure) between the
    /// claim and the call: nothing was sent. Due again at once — no claim is granted until
    /// it is resumed — the attempt not counted; with `verify` the key is still looked up
    /// before anything is created, and a person's grant (`granted`: the claim used one)
    /// is given back.
    Paused {
        failure: Failure,
        verify: bool,
        granted: bool,
    },
}

impl AttemptOutcome {
    /// The status the outcome moves an operation to; `None` when a review case decides
    /// (the case moves it to `needs_review`).
    pub fn target(&self) -> Option<Status> {
        match self {
            AttemptOutcome::Created { .. } | AttemptOutcome::Recovered { .. } => {
                Some(Status::Completed)
            }
            AttemptOutcome::Retry { .. }
            | AttemptOutcome::Verify { .. }
            | AttemptOutcome::PauseConnector { .. }
            | AttemptOutcome::Outage { .. }
            | AttemptOutcome::Paused { .. } => Some(Status::Received),
            AttemptOutcome::Terminal { .. } => Some(Status::FailedTerminal),
            AttemptOutcome::Review { .. } => None,
        }
    }

    /// The CRM id the outcome brings, if any.
    pub fn crm_id(&self) -> Option<&str> {
        match self {
            AttemptOutcome::Created { crm_id } | AttemptOutcome::Recovered { crm_id } => {
                Some(crm_id)
            }
            _ => None,
        }
    }

    /// Whether the call may still have created something that is not known yet: then a
    /// create sent under the lease may land later, and the settle window stays.
    pub fn leaves_unknown(&self) -> bool {
        match self {
            AttemptOutcome::Verify { .. } => true,
            AttemptOutcome::Outage { verify, .. } | AttemptOutcome::Paused { verify, .. } => {
                *verify
            }
            AttemptOutcome::Review {
                reason, failure, ..
            } => {
                matches!(
                    reason,
                    ReviewReason::UncertainOutcome | ReviewReason::AmbiguousMatch
                ) || failure
                    .as_ref()
                    .is_some_and(|f| f.class == ErrorClass::Uncertain)
            }
            _ => false,
        }
    }
}

/// The retry policy (`[retry]`): how many attempts, and the backoff between them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    pub max_attempts: u32,
    #[serde(with = "humantime_serde")]
    pub base_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub max_delay: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(300),
        }
    }
}

impl RetryConfig {
    /// The next step after a retryable failure of attempt number `attempts`: due again
    /// after a backoff, unless the attempts are used up (or this attempt was a person's
    /// single grant), in which case a person decides. The one policy of the worker and
    /// the claim API.
    pub fn after_failure(
        &self,
        attempts: i32,
        granted: bool,
        failure: Failure,
        retry_after: Option<Duration>,
        now: DateTime<Utc>,
    ) -> AttemptOutcome {
        let attempts = attempts.max(0) as u32;
        if granted || attempts >= self.max_attempts {
            return AttemptOutcome::Review {
                reason: ReviewReason::RetriesExhausted,
                failure: Some(failure),
                detail: json!({"attempts": attempts, "granted": granted}),
            };
        }
        let delay = self.backoff(attempts, retry_after);
        AttemptOutcome::Retry {
            failure: Some(failure),
            at: after(now, delay),
        }
    }

    /// The next step after a failed call, as one table for the worker and the claim API:
    /// retried with backoff (or to a person once the attempts are used up), failed for
    /// good, the connector paused, or a review. `Err(failure)` when the class says the
    /// outcome is unknown: the caller reconciles (the worker looks the key up in the CRM;
    /// the claim API, which cannot, hands it to a person).
    #[allow(clippy::too_many_arguments)]
    pub fn after_failed_call(
        &self,
        failure: Failure,
        attempts: i32,
        granted: bool,
        retry_after: Option<Duration>,
        connector: &str,
        detail: Value,
        now: DateTime<Utc>,
    ) -> Result<AttemptOutcome, Failure> {
        Ok(match failure.class.decision() {
            RetryDecision::RetryWithBackoff => {
                self.after_failure(attempts, granted, failure, retry_after, now)
            }
            RetryDecision::Reconcile => return Err(failure),
            RetryDecision::FailTerminal => AttemptOutcome::Terminal { failure },
            RetryDecision::PauseConnector => AttemptOutcome::PauseConnector {
                connector: connector.to_owned(),
                failure,
            },
            RetryDecision::Review => AttemptOutcome::Review {
                reason: ReviewReason::PayloadConflict,
                failure: Some(failure),
                detail,
            },
        })
    }

    /// Exponential backoff with full jitter: a uniform delay in `[0, min(max, base ·
    /// 2^(n-1))]`, but never sooner than the CRM's `Retry-After`. Full jitter spreads the
    /// retries of many operations that failed together (one CRM outage); crates' jitter
    /// (e.g. backon's) adds `[0, d)` on top of `d` instead, which neither spreads from zero
    /// nor respects `max`.
    pub fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let ceiling = self.base_delay.saturating_mul(1 << exp).min(self.max_delay);
        let jittered = ceiling.mul_f64(rand::random::<f64>());
        retry_after.map_or(jittered, |ra| ra.max(jittered))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure() -> Failure {
        Failure {
            class: ErrorClass::RateLimited,
            message: "503".into(),
        }
    }

    #[test]
    fn a_retryable_failure_is_retried_until_the_attempts_are_used_up() {
        let retry = RetryConfig {
            max_attempts: 3,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(4),
        };
        let now = Utc::now();
        // (attempts so far, a person's grant, retried?)
        for (attempts, granted, retried) in [
            (1, false, true),
            (2, false, true),
            (3, false, false),
            (7, false, false),
            (1, true, false),
        ] {
            let next = retry.after_failure(attempts, granted, failure(), None, now);
            match next {
                AttemptOutcome::Retry { at, failure } => {
                    assert!(retried, "{attempts} {granted}");
                    assert!(at >= now && at <= after(now, Duration::from_secs(4)));
                    assert_eq!(failure, Some(super::tests::failure()));
                }
                AttemptOutcome::Review { reason, .. } => {
                    assert!(!retried, "{attempts} {granted}");
                    assert_eq!(reason, ReviewReason::RetriesExhausted);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn each_error_class_has_one_next_step() {
        let retry = RetryConfig::default();
        let now = Utc::now();
        for class in ErrorClass::ALL {
            let f = Failure {
                class: *class,
                message: "x".into(),
            };
            let next = retry.after_failed_call(f.clone(), 1, false, None, "crm", Value::Null, now);
            match (class.decision(), next) {
                (RetryDecision::RetryWithBackoff, Ok(AttemptOutcome::Retry { .. })) => {}
                (RetryDecision::Reconcile, Err(back)) => assert_eq!(back, f),
                (RetryDecision::FailTerminal, Ok(AttemptOutcome::Terminal { failure })) => {
                    assert_eq!(failure, f)
                }
                (
                    RetryDecision::PauseConnector,
                    Ok(AttemptOutcome::PauseConnector { connector, .. }),
                ) => {
                    assert_eq!(connector, "crm")
                }
                (RetryDecision::Review, Ok(AttemptOutcome::Review { reason, .. })) => {
                    assert_eq!(reason, ReviewReason::PayloadConflict)
                }
                (decision, next) => panic!("{class}: {decision:?} led to {next:?}"),
            }
        }
    }

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
            let samples: Vec<_> = (0..200).map(|_| retry.backoff(attempt, None)).collect();
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
            assert!(retry.backoff(1, Some(Duration::from_secs(7))) >= Duration::from_secs(7));
        }
    }

    #[test]
    fn each_outcome_has_one_target_status_and_unknowns_keep_the_settle_window() {
        let now = Utc::now();
        let review = |reason, class: Option<ErrorClass>| AttemptOutcome::Review {
            reason,
            failure: class.map(|class| Failure {
                class,
                message: String::new(),
            }),
            detail: Value::Null,
        };
        let table: Vec<(AttemptOutcome, Option<Status>, bool)> = vec![
            (
                AttemptOutcome::Created { crm_id: "1".into() },
                Some(Status::Completed),
                false,
            ),
            (
                AttemptOutcome::Recovered { crm_id: "1".into() },
                Some(Status::Completed),
                false,
            ),
            (
                AttemptOutcome::Retry {
                    failure: None,
                    at: now,
                },
                Some(Status::Received),
                false,
            ),
            (
                AttemptOutcome::Verify {
                    failure: None,
                    at: now,
                },
                Some(Status::Received),
                true,
            ),
            (
                AttemptOutcome::Terminal { failure: failure() },
                Some(Status::FailedTerminal),
                false,
            ),
            (
                AttemptOutcome::PauseConnector {
                    connector: "c".into(),
                    failure: failure(),
                },
                Some(Status::Received),
                false,
            ),
            (review(ReviewReason::UncertainOutcome, None), None, true),
            (review(ReviewReason::AmbiguousMatch, None), None, true),
            (
                review(ReviewReason::RetriesExhausted, Some(ErrorClass::Uncertain)),
                None,
                true,
            ),
            (
                review(
                    ReviewReason::RetriesExhausted,
                    Some(ErrorClass::RateLimited),
                ),
                None,
                false,
            ),
        ];
        for (outcome, target, unknown) in table {
            assert_eq!(outcome.target(), target, "{outcome:?}");
            assert_eq!(outcome.leaves_unknown(), unknown, "{outcome:?}");
            assert_eq!(
                outcome.crm_id().is_some(),
                target == Some(Status::Completed),
                "{outcome:?}"
            );
        }
    }
}
