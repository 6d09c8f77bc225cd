//! Request pacing per CRM account, and `Retry-After` parsing.
//!
//! CRMs limit how fast an account may be called and punish those that keep exceeding
//! it: amoCRM allows 7 requests a second per integration and then blocks the account
//! (every call answers 403); a Bitrix24 portal drains a leaky bucket at 2 requests a
//! second with room for 50 and refuses what overflows with 503 `QUERY_LIMIT_EXCEEDED`,
//! blocking portals that keep overflowing it. So every adapter paces itself to its
//! CRM's documented limit instead of learning it from refusals.
//!
//! A [`RateLimiter`] keeps one account's pace (`domain::pacing`, a leaky bucket with a
//! burst). Built with the operations store ([`RateLimiter::in_store`]) its state lives in
//! the database, so every process of the installation — the worker loops, the
//! reconciler, other gateways on the same PostgreSQL — draws from the one bucket the CRM
//! sees. Without a store (adapter tests), or while the store fails, it paces this
//! process alone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use tokio::time::Instant;

use crate::domain::pacing::Pace;
use crate::store::CrmAccess;

/// How far under a CRM's documented limit the pace stays: this share of its rate, and one
/// request of its burst kept spare. A request leaves a little after its turn (the claims
/// of its batch are written first, the machine is busy) and crosses a network, so two
/// turns one interval apart may arrive closer together; paced at the limit exactly, a
/// full bucket then refuses one now and then (measured, `benches/drain.rs`: 1 refusal in
/// 61 requests at Bitrix24's 2/s). A pace without a burst also spaces the departures
/// themselves ([`Pace::spacing`]).
pub const RATE_SHARE: f64 = 0.95;

/// The pace kept for a CRM documented to allow `per_second` with `burst` at once.
fn under_the_limit(per_second: f64, burst: u32) -> Pace {
    Pace::new(per_second * RATE_SHARE, burst.saturating_sub(1).max(1))
}

/// A `Retry-After` beyond this is treated as this: the worker's own stop condition
/// should take over rather than parking a lead for days on one header.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// One CRM account's request pace.
pub struct RateLimiter {
    pace: Pace,
    /// The pace's state when it is kept in this process (also the fallback while the
    /// store fails): the theoretical arrival time, in ms since `epoch`.
    local: Mutex<Option<f64>>,
    epoch: Instant,
    shared: Option<(Arc<dyn CrmAccess>, String)>,
    /// When this process's latest request left (or is due to), for
    /// [`Pace::spacing`].
    left: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("pace", &self.pace)
            .field("shared", &self.shared.as_ref().map(|(_, account)| account))
            .finish()
    }
}

impl RateLimiter {
    /// Spaces this process's calls at least `1/per_second` apart (no bursts): N calls
    /// take at least `(N - 1) / per_second` seconds (a little more: [`RATE_SHARE`]).
    /// `per_second` must be positive and finite (the configuration checks it).
    pub fn new(per_second: f64) -> RateLimiter {
        RateLimiter::with_burst(per_second, 1)
    }

    /// For a CRM that allows `per_second` sustained with `burst` at once, for this
    /// process; paced a little under that limit ([`RATE_SHARE`]).
    pub fn with_burst(per_second: f64, burst: u32) -> RateLimiter {
        RateLimiter {
            pace: under_the_limit(per_second, burst),
            local: Mutex::new(None),
            epoch: Instant::now(),
            shared: None,
            left: Mutex::new(None),
        }
    }

    /// For a CRM that allows `per_second` sustained with `burst` at once, the pace of
    /// `account` kept in `store`: every process on the database shares it.
    pub fn in_store(store: Arc<dyn CrmAccess>, account: &str, per_second: f64, burst: u32) -> Self {
        RateLimiter {
            shared: Some((store, account.to_owned())),
            ..RateLimiter::with_burst(per_second, burst)
        }
    }

    fn local_ms(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64() * 1000.0
    }

    /// Waits for this call's turn. The turn is reserved before waiting, so concurrent
    /// callers queue up one interval apart. For a pace without a burst it then also waits
    /// out the spacing after this process's previous departure ([`depart`](Self::depart)
    /// keeps it): that wait belongs before the attempt is recorded, not between the record
    /// and the request, where a process killed meanwhile leaves a lead that looks sent
    /// (the CRM's search cannot prove it was not).
    pub async fn acquire(&self) {
        self.take_turn().await;
        if let Some(spacing) = self.pace.spacing() {
            let at = lock(&self.left).map(|l| l + spacing);
            if let Some(at) = at {
                tokio::time::sleep_until(at).await;
            }
        }
    }

    async fn take_turn(&self) {
        if let Some((store, account)) = &self.shared {
            match store.take_turn(account, self.pace, store.now()).await {
                Ok(wait) => return tokio::time::sleep(wait).await,
                Err(e) => {
                    tracing::warn!(error = %e, "the shared request pace failed; pacing this process alone")
                }
            }
        }
        let wait = {
            let mut tat = lock(&self.local);
            let (next, wait) = self.pace.reserve(*tat, self.local_ms());
            *tat = Some(next);
            wait
        };
        tokio::time::sleep(wait).await;
    }

    /// Right before a request leaves, for a pace without a burst: waits until one
    /// interval after this process's previous request left. Its turn was taken earlier
    /// (before the claims of its batch were written), so a request that left late would
    /// otherwise be followed closer than the CRM allows (measured: 2–5 of 200 requests
    /// refused by amoCRM's 7/s before this). [`acquire`](Self::acquire) already waited
    /// for the spacing, so what is left here is only what another task of this process
    /// departing meanwhile adds.
    async fn depart(&self) {
        let Some(spacing) = self.pace.spacing() else {
            return;
        };
        let at = {
            let mut left = lock(&self.left);
            let now = Instant::now();
            let at = left.map_or(now, |l| (l + spacing).max(now));
            *left = Some(at);
            at
        };
        tokio::time::sleep_until(at).await;
    }

    /// No call starts before `wait` from now (the CRM said it is overloaded).
    pub async fn hold(&self, wait: Duration) {
        if let Some((store, account)) = &self.shared {
            let until = crate::store::after(store.now(), wait);
            if let Err(e) = store.hold_turns(account, self.pace, until).await {
                tracing::warn!(error = %e, "holding the shared request pace failed");
            }
        }
        let mut tat = lock(&self.local);
        let until = self.local_ms() + wait.as_secs_f64() * 1000.0;
        *tat = Some(self.pace.hold(*tat, until));
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
    /// prepaid turn yet; then keeps the pace's spacing from the previous request.
    pub async fn acquire_unless_prepaid(&self) {
        if !PREPAID.try_with(|p| p.replace(false)).unwrap_or(false) {
            self.acquire().await;
        }
        self.depart().await;
    }
}

/// The limiter's lock is never held across an await, and a panic elsewhere must not
/// poison every later call.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The limiter of this process for `account` at `per_second` (no burst), shared by every
/// adapter built for it without a store.
pub fn shared(account: &str, per_second: f64) -> Arc<RateLimiter> {
    static LIMITERS: std::sync::OnceLock<
        Mutex<std::collections::HashMap<String, Arc<RateLimiter>>>,
    > = std::sync::OnceLock::new();
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
            // This machine's clock, not the store's: the CRM's date is turned into a
            // wait for this process, nothing is stored or compared across machines.
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
        a.hold(Duration::from_millis(150)).await;
        let started = std::time::Instant::now();
        b.acquire().await;
        assert!(started.elapsed() >= Duration::from_millis(140));
    }

    #[tokio::test]
    async fn requests_whose_turns_were_taken_early_still_leave_an_interval_apart() {
        // 10/s, paced at 9/s: about 111 ms apart. Both turns were taken (prepaid) long
        // before; the second request must still not follow the first closer than that.
        let limiter = RateLimiter::new(10.0);
        let started = std::time::Instant::now();
        prepaid(limiter.acquire_unless_prepaid()).await;
        prepaid(limiter.acquire_unless_prepaid()).await;
        assert!(
            started.elapsed() >= Duration::from_millis(105),
            "{:?}",
            started.elapsed()
        );
        // A pace with a burst lets them go together.
        let burst = RateLimiter::with_burst(10.0, 5);
        let started = std::time::Instant::now();
        prepaid(burst.acquire_unless_prepaid()).await;
        prepaid(burst.acquire_unless_prepaid()).await;
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "{:?}",
            started.elapsed()
        );
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
