//! Updating a CRM entity that exists with the changed fields of a later delivery
//! (*Keep original and update the CRM* on a payload conflict).
//!
//! An update names its entity by id and sets values, so sending it twice leaves the
//! entity as sending it once does: unlike a create, an update whose answer was lost may
//! be sent again. What must not happen is an *older* update landing after a newer one
//! (a slow CRM finishing a request the worker gave up on): so after an answer that did
//! not come, nothing more goes to the entity before the settle window is over, and the
//! updates of one operation go out one at a time, oldest first.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{after, ErrorClass, RetryConfig};

/// What follows a failed update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateNext {
    /// Send it again, not before `at`.
    Retry { at: DateTime<Utc> },
    /// Give up: a person decides (`update_failed`).
    Fail,
}

/// The step after an update failed with `class` on its `attempts`-th try (`granted`: a
/// person's one more try). Refusals of the data (validation, conflict) are final; any
/// other failure is tried again with the retry schedule's backoff, up to its
/// `max_attempts` — an answer that did not come (uncertain) not before `settle`, the
/// time within which the CRM may still execute the request it got.
pub fn after_failed_update(
    class: ErrorClass,
    attempts: i32,
    granted: bool,
    retry_after: Option<Duration>,
    retry: &RetryConfig,
    settle: Duration,
    now: DateTime<Utc>,
) -> UpdateNext {
    let attempts = attempts.max(0) as u32;
    match class {
        ErrorClass::Validation | ErrorClass::Conflict => UpdateNext::Fail,
        _ if granted || attempts >= retry.max_attempts => UpdateNext::Fail,
        ErrorClass::Uncertain => UpdateNext::Retry {
            at: after(now, retry.backoff(attempts, retry_after).max(settle)),
        },
        ErrorClass::NotSent | ErrorClass::RateLimited | ErrorClass::Auth => UpdateNext::Retry {
            at: after(now, retry.backoff(attempts, retry_after)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry() -> RetryConfig {
        RetryConfig {
            max_attempts: 3,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(4),
        }
    }

    #[test]
    fn each_class_fails_or_retries_as_the_table_says() {
        let now = Utc::now();
        let settle = Duration::from_secs(30);
        let s = chrono::TimeDelta::seconds;
        use ErrorClass::*;
        // (class, attempts, granted, retried within [lo, hi] seconds, or failed)
        type Row = (ErrorClass, i32, bool, Option<(i64, i64)>);
        let table: [Row; 9] = [
            (Validation, 1, false, None),
            (Conflict, 1, false, None),
            (NotSent, 1, false, Some((0, 1))),
            (RateLimited, 2, false, Some((0, 2))),
            (Auth, 1, false, Some((0, 1))),
            // an answer that did not come: not before the settle window
            (Uncertain, 1, false, Some((30, 30))),
            (Uncertain, 3, false, None),
            (NotSent, 3, false, None),
            (NotSent, 1, true, None),
        ];
        for (class, attempts, granted, want) in table {
            let got = after_failed_update(class, attempts, granted, None, &retry(), settle, now);
            match (got, want) {
                (UpdateNext::Fail, None) => {}
                (UpdateNext::Retry { at }, Some((lo, hi))) => assert!(
                    at >= now + s(lo) && at <= now + s(hi),
                    "{class} after {attempts}: {at}"
                ),
                other => panic!("{class} after {attempts} (granted {granted}): {other:?}"),
            }
        }
    }

    #[test]
    fn a_retry_after_of_the_crm_is_kept() {
        let now = Utc::now();
        let got = after_failed_update(
            ErrorClass::RateLimited,
            1,
            false,
            Some(Duration::from_secs(20)),
            &retry(),
            Duration::from_secs(5),
            now,
        );
        assert_eq!(
            got,
            UpdateNext::Retry {
                at: now + chrono::TimeDelta::seconds(20)
            }
        );
    }
}
