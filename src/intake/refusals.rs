//! Requests refused before they authenticated — a missing or wrong token or signature,
//! a source that is not configured — come from strangers as often as from a sender with
//! a typo. Each is journaled without its body (`rejected_body`), but a stranger can send
//! thousands: only a budget of them is journaled, per client address (an IPv6 address by
//! its /64, which one host usually owns whole) and for the whole gateway; the rest are
//! counted here, in aggregate (`/metrics`, and a summary in the log each minute), and
//! answered `429 too_many_refusals`. A request that authenticates is never held back by
//! its address's refusals: a sender behind the same NAT as a stranger keeps getting in.
//!
//! The budgets are [`PER_ADDRESS_PER_MINUTE`] (10) per client address and
//! [`OVERALL_PER_MINUTE`] (600) for the gateway, kept with `governor`
//! (`tests/it/strangers.rs` sends a flood and checks the journal and the disk).

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};

/// Journaled refusals per client address per minute.
pub const PER_ADDRESS_PER_MINUTE: u32 = 10;
/// Journaled refusals per minute, all addresses together.
pub const OVERALL_PER_MINUTE: u32 = 600;

pub struct Refusals {
    per_address: DefaultKeyedRateLimiter<IpAddr>,
    overall: DefaultDirectRateLimiter,
    journaled: AtomicU64,
    counted_only: AtomicU64,
    /// `counted_only` when the log last said so.
    logged: AtomicU64,
}

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refusals")
            .field("journaled", &self.journaled)
            .field("counted_only", &self.counted_only)
            .finish()
    }
}

/// What to do with one refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Journal it (without its body) and answer as usual.
    Journal,
    /// Count it and answer 429: its address (or the gateway) is over its budget.
    CountOnly,
}

impl Default for Refusals {
    fn default() -> Self {
        Refusals::new(PER_ADDRESS_PER_MINUTE, OVERALL_PER_MINUTE)
    }
}

impl Refusals {
    pub fn new(per_address_per_minute: u32, overall_per_minute: u32) -> Refusals {
        let quota = |n: u32| Quota::per_minute(NonZeroU32::new(n.max(1)).expect("at least 1"));
        Refusals {
            per_address: RateLimiter::keyed(quota(per_address_per_minute)),
            overall: RateLimiter::direct(quota(overall_per_minute)),
            journaled: AtomicU64::new(0),
            counted_only: AtomicU64::new(0),
            logged: AtomicU64::new(0),
        }
    }

    /// One refusal of a request from `peer` (none: the request did not come through the
    /// gateway's listener, as in tests that call the router directly: one address).
    pub fn note(&self, peer: Option<IpAddr>) -> Verdict {
        let key = peer.map(network).unwrap_or(IpAddr::from([0, 0, 0, 0]));
        // The address's budget first: one address over it must not use up the gateway's.
        if self.per_address.check_key(&key).is_ok() && self.overall.check().is_ok() {
            self.journaled.fetch_add(1, Ordering::Relaxed);
            Verdict::Journal
        } else {
            self.counted_only.fetch_add(1, Ordering::Relaxed);
            Verdict::CountOnly
        }
    }

    /// Refusals journaled and refusals only counted since the process started.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.journaled.load(Ordering::Relaxed),
            self.counted_only.load(Ordering::Relaxed),
        )
    }

    /// Forgets addresses whose budget is full again, and logs how many refusals were only
    /// counted since the last call (nothing when none were): `serve` calls it each minute.
    pub fn tidy(&self) {
        self.per_address.retain_recent();
        self.per_address.shrink_to_fit();
        let now = self.counted_only.load(Ordering::Relaxed);
        let before = self.logged.swap(now, Ordering::Relaxed);
        if now > before {
            tracing::warn!(
                refused = now - before,
                addresses = self.per_address.len(),
                "requests refused before authenticating beyond the journal's budget: counted, not journaled, answered 429"
            );
        }
    }

    /// The counters in the OpenMetrics text format (this process's).
    pub fn exposition(&self) -> String {
        let (journaled, counted) = self.counts();
        format!(
            "# TYPE leadgate_refused_requests counter\n\
             # HELP leadgate_refused_requests Requests refused before they authenticated (this process): journaled, or over the budget and only counted.\n\
             leadgate_refused_requests_total{{journaled=\"true\"}} {journaled}\n\
             leadgate_refused_requests_total{{journaled=\"false\"}} {counted}\n"
        )
    }
}

/// The budget's key of an address: an IPv4 address (also one mapped into IPv6) as is, an
/// IPv6 address by its /64.
fn network(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::from([s[0], s[1], s[2], s[3], 0, 0, 0, 0])
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_has_its_budget_and_the_gateway_one_for_all() {
        let r = Refusals::new(3, 5);
        let a: IpAddr = "203.0.113.7".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b_same_64: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let verdicts: Vec<_> = (0..4).map(|_| r.note(Some(a))).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Journal,
                Verdict::Journal,
                Verdict::Journal,
                Verdict::CountOnly
            ]
        );
        // Another address has its own, and one /64 is one address.
        assert_eq!(r.note(Some(b)), Verdict::Journal);
        assert_eq!(r.note(Some(b_same_64)), Verdict::Journal);
        // The gateway's (5) is used up now, whatever the address.
        assert_eq!(
            r.note(Some("198.51.100.1".parse().unwrap())),
            Verdict::CountOnly
        );
        assert_eq!(r.counts(), (5, 2));
        let text = r.exposition();
        assert!(text.contains("leadgate_refused_requests_total{journaled=\"false\"} 2"));
        assert_eq!(
            network("::ffff:203.0.113.7".parse().unwrap()),
            "203.0.113.7".parse::<IpAddr>().unwrap()
        );
    }
}
