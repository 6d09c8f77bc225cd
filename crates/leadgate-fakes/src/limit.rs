//! Request limits the fake CRMs enforce as the real ones do: Bitrix24's leaky bucket
//! and amoCRM's requests-per-second window. Real time ([`Instant`]), thread-safe; the
//! limit itself is passed to each check, so a fake can change it while it runs.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::control::lock;

/// A leaky bucket: each admitted request adds 1 to a counter that drains continuously
/// at `per_second`; a request is admitted while the counter plus that request stays
/// within `burst`, otherwise it is refused (and adds nothing).
#[derive(Debug)]
pub(crate) struct LeakyBucket {
    /// The counter and when it was last drained.
    level: Mutex<(f64, Instant)>,
    refused: AtomicU64,
}

impl Default for LeakyBucket {
    fn default() -> Self {
        LeakyBucket {
            level: Mutex::new((0.0, Instant::now())),
            refused: AtomicU64::new(0),
        }
    }
}

impl LeakyBucket {
    pub(crate) fn admit(&self, per_second: f64, burst: f64) -> bool {
        self.admit_at(Instant::now(), per_second, burst)
    }

    fn admit_at(&self, now: Instant, per_second: f64, burst: f64) -> bool {
        let mut level = lock(&self.level);
        let drained = now.saturating_duration_since(level.1).as_secs_f64() * per_second.max(0.0);
        level.0 = (level.0 - drained).max(0.0);
        level.1 = now;
        // The small slack keeps float drift from refusing a request that exactly fits.
        if level.0 + 1.0 <= burst + 1e-9 {
            level.0 += 1.0;
            true
        } else {
            self.refused.fetch_add(1, Ordering::SeqCst);
            false
        }
    }

    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    /// Empties the bucket; the refusals stay counted.
    pub(crate) fn empty(&self) {
        *lock(&self.level) = (0.0, Instant::now());
    }

    /// Empties the bucket and zeroes the refusals.
    pub(crate) fn reset(&self) {
        self.empty();
        self.refused.store(0, Ordering::SeqCst);
    }
}

/// A sliding window: at most `n = max(1, floor(per_second))` admitted requests in any
/// window of `n / per_second` seconds — for a whole `per_second` (amoCRM's 7), at most
/// that many in any one second, with no burst beyond it. Refused requests do not count.
#[derive(Debug, Default)]
pub(crate) struct Window {
    admitted: Mutex<VecDeque<Instant>>,
    refused: AtomicU64,
}

impl Window {
    pub(crate) fn admit(&self, per_second: f64) -> bool {
        self.admit_at(Instant::now(), per_second)
    }

    fn admit_at(&self, now: Instant, per_second: f64) -> bool {
        let n = per_second.floor().max(1.0);
        let span = if per_second > 0.0 {
            Duration::try_from_secs_f64(n / per_second).unwrap_or(Duration::MAX)
        } else {
            Duration::MAX
        };
        let mut admitted = lock(&self.admitted);
        while admitted
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) >= span)
        {
            admitted.pop_front();
        }
        if per_second > 0.0 && (admitted.len() as f64) < n {
            admitted.push_back(now);
            true
        } else {
            self.refused.fetch_add(1, Ordering::SeqCst);
            false
        }
    }

    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    /// Forgets the admitted requests; the refusals stay counted.
    pub(crate) fn empty(&self) {
        lock(&self.admitted).clear();
    }

    /// Forgets the admitted requests and zeroes the refusals.
    pub(crate) fn reset(&self) {
        self.empty();
        self.refused.store(0, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn leaky_bucket_admits_a_burst_then_drains() {
        let b = LeakyBucket::default();
        let t0 = Instant::now();
        for i in 0..5 {
            assert!(b.admit_at(t0 + ms(i), 2.0, 5.0), "request {i}");
        }
        assert!(!b.admit_at(t0 + ms(10), 2.0, 5.0));
        assert_eq!(b.refused(), 1);
        // 0.5 s drains one request's worth.
        assert!(b.admit_at(t0 + ms(510), 2.0, 5.0));
        assert!(!b.admit_at(t0 + ms(520), 2.0, 5.0));
        // Long idle: a whole burst again.
        for i in 0..5 {
            assert!(b.admit_at(t0 + ms(10_000 + i), 2.0, 5.0));
        }
        assert!(!b.admit_at(t0 + ms(10_010), 2.0, 5.0));
        assert_eq!(b.refused(), 3);
        b.reset();
        assert_eq!(b.refused(), 0);
        assert!(b.admit(2.0, 1.0));
        assert!(!LeakyBucket::default().admit(2.0, 0.0));
    }

    #[test]
    fn window_admits_per_second_without_burst() {
        let w = Window::default();
        let t0 = Instant::now();
        for i in 0..7 {
            assert!(w.admit_at(t0 + ms(i * 10), 7.0));
        }
        assert!(!w.admit_at(t0 + ms(900), 7.0));
        // The first request leaves the window 1 s after it came, the second 10 ms later.
        assert!(w.admit_at(t0 + ms(1000), 7.0));
        assert!(!w.admit_at(t0 + ms(1005), 7.0));
        assert!(w.admit_at(t0 + ms(1010), 7.0));
        assert_eq!(w.refused(), 2);
        // Below one a second: one request per 1/per_second seconds.
        let slow = Window::default();
        assert!(slow.admit_at(t0, 0.5));
        assert!(!slow.admit_at(t0 + ms(1999), 0.5));
        assert!(slow.admit_at(t0 + ms(2000), 0.5));
        assert!(!Window::default().admit(0.0));
    }
}
