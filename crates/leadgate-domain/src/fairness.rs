//! Fair shares of the worker's lanes among tenants (fleet mode, issue 35): deficit round
//! robin in lane-time.
//!
//! Every visit of the round gives a ready tenant `weight × quantum` of credit; a tenant
//! runs while its credit is positive and pays, after each step, the wall time the step
//! held a lane. So a tenant whose CRM hangs ten seconds a call pays for those ten seconds
//! and runs that much less often, and a batch of fifty leads costs what its one request
//! took. A tenant that is not ready when its turn comes (nothing due, its calls at once
//! used up, its CRM paced or its breaker open) loses its credit: idle time is not banked
//! into a burst later. Shares are per process; each process keeps its own.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

/// The round of tenants `K` and each one's credit.
#[derive(Debug, Clone)]
pub struct Drr<K> {
    quantum_us: i64,
    ring: VecDeque<K>,
    tenants: HashMap<K, Share>,
}

#[derive(Debug, Clone, Copy)]
struct Share {
    weight: u32,
    /// Lane-time it may still use, in microseconds; at most one visit's worth above 0.
    credit: i64,
}

impl<K: Clone + Eq + Hash> Drr<K> {
    /// A round where each visit is worth `quantum` of lane-time per unit of weight.
    pub fn new(quantum: Duration) -> Self {
        Drr {
            quantum_us: i64::try_from(quantum.as_micros())
                .unwrap_or(i64::MAX)
                .max(1),
            ring: VecDeque::new(),
            tenants: HashMap::new(),
        }
    }

    /// Adds `tenant` at the end of the round, or changes its weight (at least 1).
    pub fn set_weight(&mut self, tenant: K, weight: u32) {
        let weight = weight.max(1);
        match self.tenants.get_mut(&tenant) {
            Some(share) => share.weight = weight,
            None => {
                self.ring.push_back(tenant.clone());
                self.tenants.insert(tenant, Share { weight, credit: 0 });
            }
        }
    }

    /// Takes `tenant` out of the round.
    pub fn remove(&mut self, tenant: &K) {
        if self.tenants.remove(tenant).is_some() {
            self.ring.retain(|t| t != tenant);
        }
    }

    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// The tenant whose turn it is among those `ready` says may run now; `None` when none
    /// may. Call [`Drr::charge`] with what its step took.
    pub fn next(&mut self, ready: impl Fn(&K) -> bool) -> Option<K> {
        let ready: Vec<bool> = self.ring.iter().map(&ready).collect();
        if !ready.iter().any(|r| *r) {
            for share in self.tenants.values_mut() {
                share.credit = share.credit.min(0);
            }
            return None;
        }
        // Whole rounds in which no ready tenant would have credit yet, given at once: the
        // same as visiting every tenant that many times, without the loop.
        let rounds = self
            .ring
            .iter()
            .zip(&ready)
            .filter(|(_, r)| **r)
            .map(|(t, _)| {
                let s = self.tenants[t];
                let per_visit = self.visit(s);
                if s.credit > 0 {
                    0
                } else {
                    (1 - s.credit + per_visit - 1) / per_visit
                }
            })
            .min()
            .unwrap_or(0);
        if rounds > 1 {
            for (t, r) in self.ring.iter().zip(&ready) {
                let per_visit = self.visit(self.tenants[t]);
                let share = self
                    .tenants
                    .get_mut(t)
                    .expect("every tenant in the ring has a share");
                share.credit = if *r {
                    share.credit.saturating_add((rounds - 1) * per_visit)
                } else {
                    0
                };
            }
        }
        let ready: HashMap<K, bool> = self.ring.iter().cloned().zip(ready).collect();
        loop {
            let tenant = self.ring.front().cloned().expect("the round is not empty");
            let per_visit = self.visit(self.tenants[&tenant]);
            let share = self
                .tenants
                .get_mut(&tenant)
                .expect("every tenant in the ring has a share");
            if !ready[&tenant] {
                share.credit = 0;
            } else if share.credit > 0 {
                return Some(tenant);
            } else {
                share.credit = share.credit.saturating_add(per_visit);
                if share.credit > 0 {
                    // its visit: it runs now and stays at the head while its credit lasts
                    return Some(tenant);
                }
            }
            self.ring.rotate_left(1);
        }
    }

    /// Charges `tenant` the lane-time its step held. Once its credit is spent the round
    /// moves on to the next tenant.
    pub fn charge(&mut self, tenant: &K, used: Duration) {
        let used = i64::try_from(used.as_micros()).unwrap_or(i64::MAX);
        if let Some(share) = self.tenants.get_mut(tenant) {
            share.credit = share.credit.saturating_sub(used);
            if share.credit <= 0 && self.ring.front() == Some(tenant) {
                self.ring.rotate_left(1);
            }
        }
    }

    fn visit(&self, share: Share) -> i64 {
        self.quantum_us.saturating_mul(i64::from(share.weight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: Duration = Duration::from_millis(100);

    /// Runs `steps` picks with every tenant ready whose `ready` says so, each step costing
    /// `cost(tenant)`; the lane-time each got, and its number of steps.
    fn run(
        drr: &mut Drr<&'static str>,
        steps: usize,
        ready: impl Fn(&&'static str) -> bool + Copy,
        cost: impl Fn(&str) -> Duration,
    ) -> HashMap<&'static str, (Duration, usize)> {
        let mut got: HashMap<&'static str, (Duration, usize)> = HashMap::new();
        for _ in 0..steps {
            let t = drr.next(ready).expect("a tenant is ready");
            let c = cost(t);
            drr.charge(&t, c);
            let e = got.entry(t).or_default();
            e.0 += c;
            e.1 += 1;
        }
        got
    }

    fn share(got: &HashMap<&str, (Duration, usize)>, t: &str) -> f64 {
        let total: Duration = got.values().map(|(d, _)| *d).sum();
        got.get(t).map_or(0.0, |(d, _)| d.as_secs_f64()) / total.as_secs_f64()
    }

    #[test]
    fn weights_share_lane_time_in_proportion() {
        for (weights, cost_ms) in [
            ([1, 1, 1], 10),
            ([1, 3, 6], 10),
            ([1, 3, 6], 250),
            ([2, 1, 1], 33),
        ] {
            let mut drr = Drr::new(Q);
            for (t, w) in ["a", "b", "c"].into_iter().zip(weights) {
                drr.set_weight(t, w);
            }
            let got = run(
                &mut drr,
                20_000,
                |_| true,
                |_| Duration::from_millis(cost_ms),
            );
            let sum: u32 = weights.iter().sum();
            for (t, w) in ["a", "b", "c"].into_iter().zip(weights) {
                let want = f64::from(w) / f64::from(sum);
                let had = share(&got, t);
                assert!(
                    (had - want).abs() < 0.02,
                    "{weights:?} {cost_ms} ms: {t} had {had:.3}, want {want:.3}"
                );
            }
        }
    }

    #[test]
    fn a_slow_crm_pays_for_the_time_it_holds_a_lane() {
        // `slow` hangs 10 s a call, `quick` answers in 20 ms: equal weights, equal lane-time,
        // so `quick` runs about 500 times as often.
        let mut drr = Drr::new(Q);
        drr.set_weight("slow", 1);
        drr.set_weight("quick", 1);
        let got = run(
            &mut drr,
            50_000,
            |_| true,
            |t| Duration::from_millis(if t == "slow" { 10_000 } else { 20 }),
        );
        assert!((share(&got, "slow") - 0.5).abs() < 0.05, "{got:?}");
        let (slow, quick) = (got["slow"].1, got["quick"].1);
        assert!(quick > 400 * slow && slow > 0, "{got:?}");
    }

    #[test]
    fn a_tenant_that_is_not_ready_is_never_chosen_and_banks_nothing() {
        let mut drr = Drr::new(Q);
        for t in ["a", "b", "idle"] {
            drr.set_weight(t, 1);
        }
        assert_eq!(drr.next(|_| false), None);
        let got = run(
            &mut drr,
            3_000,
            |t| *t != "idle",
            |_| Duration::from_millis(10),
        );
        assert!(!got.contains_key("idle"));
        // Ready again after its long idle spell: it gets its share from now on, no burst
        // for the time it waited. Within its first round it runs at most one visit's worth.
        let mut first = vec![];
        for _ in 0..60 {
            let t = drr.next(|_| true).unwrap();
            drr.charge(&t, Duration::from_millis(10));
            first.push(t);
        }
        let idle = first.iter().filter(|t| **t == "idle").count();
        assert!((10..=30).contains(&idle), "{idle} of 60: {first:?}");
        let got = run(&mut drr, 3_000, |_| true, |_| Duration::from_millis(10));
        assert!((share(&got, "idle") - 1.0 / 3.0).abs() < 0.02, "{got:?}");
    }

    #[test]
    fn tenants_join_leave_and_change_weight() {
        let mut drr = Drr::new(Q);
        drr.set_weight("a", 1);
        assert_eq!(drr.next(|_| true), Some("a"));
        drr.set_weight("b", 1);
        drr.set_weight("a", 0); // at least 1
        let got = run(&mut drr, 2_000, |_| true, |_| Duration::from_millis(10));
        assert!((share(&got, "b") - 0.5).abs() < 0.02, "{got:?}");
        drr.set_weight("b", 4);
        let got = run(&mut drr, 5_000, |_| true, |_| Duration::from_millis(10));
        assert!((share(&got, "b") - 0.8).abs() < 0.02, "{got:?}");
        drr.remove(&"b");
        assert_eq!(drr.len(), 1);
        for _ in 0..10 {
            assert_eq!(drr.next(|_| true), Some("a"));
            drr.charge(&"a", Duration::from_secs(1));
        }
        drr.remove(&"a");
        assert!(drr.is_empty());
        assert_eq!(drr.next(|_| true), None);
    }
}
