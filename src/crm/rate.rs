//! A process-wide request-rate limit per CRM account, and `Retry-After` parsing.
//!
//! amoCRM allows 7 requests a second per integration and blocks an account that keeps
//! exceeding it (after which every call answers 403), so the adapter paces itself
//! instead of relying on 429s. Every adapter built for the same account in one process
//! (the worker loops, the reconciler, a second `app::start` in tests) shares one
//! limiter, so the limit holds for the process, not per task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use tokio::time::Instant;

/// A `Retry-After` beyond this is treated as this: the worker's own stop condition
/// should take over rather than parking a lead for days on one header.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Spaces calls at least `1/rate` apart (no bursts): N calls take at least
/// `(N - 1) / rate` seconds, which also keeps every one-second window within the rate.
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    /// When the next call may start.
    next: Mutex<Instant>,
}

impl RateLimiter {
    /// `per_second` must be positive and finite (the configuration checks it).
    pub fn new(per_second: f64) -> RateLimiter {
        let per_second = if per_second.is_finite() && per_second > 0.0 {
            per_second
        } else {
            1.0
        };
        RateLimiter {
            interval: Duration::from_secs_f64(1.0 / per_second),
            next: Mutex::new(Instant::now()),
        }
    }

    /// Waits for this call's slot. The slot is reserved before waiting, so concurrent
    /// callers queue up one interval apart.
    pub async fn acquire(&self) {
        let at = {
            let mut next = lock(&self.next);
            let at = (*next).max(Instant::now());
            *next = at + self.interval;
            at
        };
        tokio::time::sleep_until(at).await;
    }

    /// No call starts before `wait` from now (the CRM said it is overloaded).
    pub fn hold(&self, wait: Duration) {
        let mut next = lock(&self.next);
        *next = (*next).max(Instant::now() + wait);
    }
}

tokio::task_local! {
    /// Set by [`prepaid`]: the next request this task sends already waited its turn.
    static PREPAID: std::cell::Cell<bool>;
}

/// Runs `call` with its first request's turn already taken (the worker waits for the
/// connector's pace *before* it arms the lease, so that waiting is not part of the
/// call's budget).
pub async fn prepaid<F: std::future::Future>(call: F) -> F::Output {
    PREPAID.scope(std::cell::Cell::new(true), call).await
}

impl RateLimiter {
    /// Waits for a turn, unless the caller runs inside [`prepaid`] and has not used its
    /// prepaid turn yet.
    pub async fn acquire_unless_prepaid(&self) {
        if !PREPAID.try_with(|p| p.replace(false)).unwrap_or(false) {
            self.acquire().await;
        }
    }
}

/// The limiter's lock is never held across an await, and a panic elsewhere must not
/// poison every later call.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The limiter shared by every adapter of this process that talks to `account` at
/// `per_second`.
pub fn shared(account: &str, per_second: f64) -> Arc<RateLimiter> {
    static LIMITERS: OnceLock<Mutex<HashMap<String, Arc<RateLimiter>>>> = OnceLock::new();
    let key = format!("{account}@{per_second}");
    let mut map = lock(LIMITERS.get_or_init(Default::default));
    Arc::clone(
        map.entry(key)
            .or_insert_with(|| Arc::new(RateLimiter::new(per_second))),
    )
}

/// `Retry-After` in seconds or as an HTTP date, capped at [`MAX_RETRY_AFTER`].
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let wait = match v.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
            let secs = (at.timestamp() - chrono::Utc::now().timestamp()).max(0);
            Duration::from_secs(secs as u64)
        }
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn n_calls_take_at_least_n_minus_one_intervals() {
        let limiter = Arc::new(RateLimiter::new(20.0));
        let started = std::time::Instant::now();
        let calls: Vec<_> = (0..6)
            .map(|_| {
                let l = Arc::clone(&limiter);
                tokio::spawn(async move { l.acquire().await })
            })
            .collect();
        for c in calls {
            c.await.unwrap();
        }
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn hold_delays_the_next_call_and_shared_limiters_are_shared() {
        let a = shared("http://acc.example", 1000.0);
        let b = shared("http://acc.example", 1000.0);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &shared("http://other.example", 1000.0)));
        a.hold(Duration::from_millis(150));
        let started = std::time::Instant::now();
        b.acquire().await;
        assert!(started.elapsed() >= Duration::from_millis(140));
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, "12".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(12)));
        h.insert(RETRY_AFTER, "999999".parse().unwrap());
        assert_eq!(retry_after(&h), Some(MAX_RETRY_AFTER));
        let at = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        h.insert(RETRY_AFTER, at.parse().unwrap());
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(25) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        h.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }
}
