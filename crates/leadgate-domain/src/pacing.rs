//! Request pacing: the generic cell rate algorithm (GCRA), the leaky bucket's
//! arithmetic, kept as one number per CRM account — the theoretical arrival time
//! (`tat`) of the next request.
//!
//! A request arriving at `now` is scheduled at `max(now, tat - tolerance)` and moves
//! `tat` to `max(tat, now) + interval`. With `burst` B the tolerance is `(B - 1) ·
//! interval`: after a quiet spell B requests go at once, then one per interval — the
//! bucket Bitrix24 documents (2 per second, 50 at once). With B = 1 requests are spaced
//! `interval` apart (amoCRM's 7 per second). Times are milliseconds on one clock; the
//! callers keep `tat` in memory or in the operations database (shared by every process).

use std::time::Duration;

/// A request rate with a burst.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    interval_ms: f64,
    tolerance_ms: f64,
}

impl Pace {
    /// `per_second` requests a second sustained, `burst` at once (at least 1). A rate
    /// that is not a positive finite number is taken as 1 per second (the configuration
    /// refuses it before this).
    pub fn new(per_second: f64, burst: u32) -> Pace {
        let per_second = if per_second.is_finite() && per_second > 0.0 {
            per_second
        } else {
            1.0
        };
        let interval_ms = 1000.0 / per_second;
        Pace {
            interval_ms,
            tolerance_ms: f64::from(burst.max(1) - 1) * interval_ms,
        }
    }

    /// A turn for a request arriving at `now_ms`: the new `tat` and how long the
    /// request waits.
    pub fn reserve(&self, tat_ms: Option<f64>, now_ms: f64) -> (f64, Duration) {
        let tat = tat_ms.unwrap_or(now_ms);
        let wait_ms = (tat - self.tolerance_ms - now_ms).max(0.0);
        let next = tat.max(now_ms) + self.interval_ms;
        (next, Duration::from_secs_f64(wait_ms / 1000.0))
    }

    /// The least time between two requests leaving, for a pace without a burst. A
    /// request leaves a little after its turn; with a burst, the bucket's room absorbs one
    /// that left late, without one the next must not follow it closer than this.
    pub fn spacing(&self) -> Option<Duration> {
        (self.tolerance_ms == 0.0).then(|| Duration::from_secs_f64(self.interval_ms / 1000.0))
    }

    /// The `tat` after the CRM asked for quiet until `until_ms` (a refusal with
    /// `Retry-After`): no request goes before then, and the burst starts empty.
    pub fn hold(&self, tat_ms: Option<f64>, until_ms: f64) -> f64 {
        tat_ms.unwrap_or(until_ms).max(until_ms + self.tolerance_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests arriving together at `now`: when each goes, in ms after `now`.
    fn schedule(pace: Pace, mut tat: Option<f64>, now: f64, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let (next, wait) = pace.reserve(tat, now);
                tat = Some(next);
                (wait.as_secs_f64() * 1000.0).round()
            })
            .collect()
    }

    #[test]
    fn a_burst_goes_at_once_and_then_one_per_interval() {
        let pace = Pace::new(2.0, 50);
        let waits = schedule(pace, None, 1_000.0, 53);
        assert!(waits[..50].iter().all(|w| *w == 0.0), "{waits:?}");
        assert_eq!(&waits[50..], &[500.0, 1000.0, 1500.0]);
    }

    #[test]
    fn without_a_burst_requests_are_spaced() {
        let pace = Pace::new(7.0, 1);
        let waits = schedule(pace, None, 0.0, 8);
        assert_eq!(waits[0], 0.0);
        assert_eq!(waits[7], 1000.0);
        for w in waits.windows(2) {
            assert!((w[1] - w[0] - 142.857).abs() < 1.0, "{waits:?}");
        }
    }

    #[test]
    fn the_bucket_refills_while_quiet() {
        let pace = Pace::new(2.0, 50);
        let (mut tat, mut now) = (None, 0.0);
        for _ in 0..50 {
            tat = Some(pace.reserve(tat, now).0);
        }
        // 5 s later ten more may go at once, the eleventh waits.
        now += 5_000.0;
        let waits = schedule(pace, tat, now, 11);
        assert!(waits[..10].iter().all(|w| *w == 0.0), "{waits:?}");
        assert_eq!(waits[10], 500.0);
    }

    #[test]
    fn a_hold_stops_everything_until_then_and_empties_the_burst() {
        let pace = Pace::new(2.0, 50);
        let tat = pace.hold(None, 3_000.0);
        let waits = schedule(pace, Some(tat), 1_000.0, 3);
        assert_eq!(waits, vec![2000.0, 2500.0, 3000.0]);
        // A hold earlier than what is already booked changes nothing.
        assert_eq!(pace.hold(Some(1e9), 0.0), 1e9);
    }

    #[test]
    fn only_a_pace_without_a_burst_spaces_departures() {
        assert_eq!(
            Pace::new(4.0, 1).spacing(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(Pace::new(2.0, 50).spacing(), None);
    }

    #[test]
    fn nonsense_rates_do_not_panic() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let (_, wait) = Pace::new(rate, 0).reserve(None, 0.0);
            assert_eq!(wait, Duration::ZERO);
        }
    }
}
