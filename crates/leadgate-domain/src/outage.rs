//! CRM outages, handled by the connector rather than lead by lead (a circuit breaker).
//!
//! Failures that say nothing about the lead — the CRM did not answer, refused for load,
//! or failed on its side — count against the connector. After `after_failures` of them
//! in a row (across operations, with no answer in between) the connector is
//! *unreachable*: no lead is sent; one *probe* (an ordinary due lead) goes out at each
//! time of the probe schedule; the first answer closes it again and the waiting leads
//! drain. A lead that fails while its connector is unreachable waits for the next probe
//! without using up its attempts, so an outage of hours sends nobody to a person; only
//! after `limit` of unreachability do the usual attempt limits apply again.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{after, AttemptOutcome, ErrorClass, Failure, ReviewReason};

/// `[outage]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct OutageConfig {
    /// Failures in a row, across leads, that make the connector unreachable.
    pub after_failures: u32,
    /// When the probes go out after the connector became unreachable: the n-th probe
    /// waits the n-th delay (the last one repeats).
    #[serde(with = "humantime_serde_vec")]
    pub probes: Vec<Duration>,
    /// How long leads wait through an outage before the attempt limits apply again.
    #[serde(with = "humantime_serde")]
    pub limit: Duration,
}

impl Default for OutageConfig {
    fn default() -> Self {
        OutageConfig {
            after_failures: 3,
            probes: [5, 15, 30, 60, 120, 300]
                .into_iter()
                .map(Duration::from_secs)
                .collect(),
            limit: Duration::from_secs(24 * 3600),
        }
    }
}

mod humantime_serde_vec {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
        let texts = Vec::<String>::deserialize(d)?;
        texts
            .iter()
            .map(|t| humantime::parse_duration(t).map_err(serde::de::Error::custom))
            .collect()
    }
}

impl OutageConfig {
    /// The wait before probe number `n` (0-based) of one outage.
    pub fn probe_delay(&self, n: u32) -> Duration {
        let last = self.probes.len().saturating_sub(1);
        self.probes
            .get((n as usize).min(last))
            .copied()
            .unwrap_or(Duration::from_secs(60))
    }
}

/// The most calls one attempt makes to a CRM that answers nothing: its request (a
/// create, a batch, an update's first call, a lookup) and the one lookup by key its
/// unknown outcome is followed by (`reconcile::look_up_many` stops at the first lookup
/// the connector is to blame for). Anything more needs an answer.
pub const CALLS_PER_ATTEMPT_WHILE_DOWN: u64 = 2;

impl OutageConfig {
    /// How many probes the schedule lets out within `period` after the connector became
    /// unreachable: the n-th goes out no earlier than the first n delays after it.
    pub fn probes_within(&self, period: Duration) -> u64 {
        let mut at = Duration::ZERO;
        let mut n = 0u64;
        loop {
            let delay = self.probe_delay(n.min(u64::from(u32::MAX)) as u32);
            if delay.is_zero() && n >= self.probes.len() as u64 {
                // A schedule that ends in no delay at all bounds nothing.
                return u64::MAX;
            }
            at += delay;
            if at > period {
                return n;
            }
            n += 1;
        }
    }

    /// The most calls a CRM that answers nothing at all gets, from before the breaker
    /// opens until `period` after it did, from `callers` callers that each have at most
    /// one attempt in flight (every process's `[worker] concurrency` lanes plus its
    /// reconciler): the `after_failures` attempts that open the breaker, the attempts the
    /// other callers had already let out when it opened (each call is admitted by a
    /// read of the connector's row right before it leaves: this is the only window), each
    /// of at most [`CALLS_PER_ATTEMPT_WHILE_DOWN`] calls; then one call per probe slot.
    pub fn max_calls_while_down(&self, callers: u64, period: Duration) -> u64 {
        let attempts = u64::from(self.after_failures.max(1)) + callers.saturating_sub(1);
        (attempts * CALLS_PER_ATTEMPT_WHILE_DOWN).saturating_add(self.probes_within(period))
    }
}

/// Whether a failed call counts against the connector: nothing about it concerns the
/// lead's data or the credentials.
pub fn counts_against_connector(class: ErrorClass) -> bool {
    matches!(
        class,
        ErrorClass::NotSent | ErrorClass::RateLimited | ErrorClass::Uncertain
    )
}

/// A connector that is unreachable, as the store keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreachable {
    pub since: DateTime<Utc>,
    /// When the next probe may go out.
    pub probe_at: DateTime<Utc>,
}

/// A connector's health as the store keeps it (`connectors`, migration 0009).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Health {
    /// Failures in a row the connector was to blame for, across leads.
    pub failures: i32,
    pub unreachable_since: Option<DateTime<Utc>>,
    pub probe_at: Option<DateTime<Utc>>,
    /// Probes sent in this outage.
    pub probes: i32,
}

/// What the worker may do before it claims a lead of the connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The connector is reachable: claim as usual.
    Open,
    /// Unreachable, and this worker took the probe: claim one lead.
    Probe,
    /// Unreachable, and the next probe is not due (or another worker took it).
    Wait,
}

impl Health {
    pub fn unreachable(&self) -> Option<Unreachable> {
        Some(Unreachable {
            since: self.unreachable_since?,
            probe_at: self.probe_at.unwrap_or(self.unreachable_since?),
        })
    }

    /// One more failure the connector is to blame for; true when it became unreachable
    /// now.
    pub fn failed(&mut self, config: &OutageConfig, now: DateTime<Utc>) -> bool {
        self.failures = self.failures.saturating_add(1);
        if self.unreachable_since.is_some() || (self.failures as u32) < config.after_failures {
            return false;
        }
        self.unreachable_since = Some(now);
        self.probes = 0;
        self.probe_at = Some(after(now, config.probe_delay(0)));
        true
    }

    /// The CRM answered: reachable again. True when it had been unreachable.
    pub fn answered(&mut self) -> bool {
        let was = self.unreachable_since.is_some();
        *self = Health::default();
        was
    }

    /// Before a claim: whether this worker may send a lead now; taking the probe moves
    /// the next probe along the schedule, so processes sharing the database send one.
    pub fn gate(&mut self, config: &OutageConfig, now: DateTime<Utc>) -> Gate {
        if self.unreachable_since.is_none() {
            return Gate::Open;
        }
        if self.probe_at.is_some_and(|t| t > now) {
            return Gate::Wait;
        }
        self.probes = self.probes.saturating_add(1);
        self.probe_at = Some(after(now, config.probe_delay(self.probes.max(0) as u32)));
        Gate::Probe
    }
}

/// What an attempt's outcome becomes while its connector is unreachable (`outage`):
/// a failure the connector is to blame for waits for the next probe, its attempt not
/// counted, and an outcome that was unknown is still looked up before anything is
/// created. Anything else (a create, a refusal of the data, a pause) stands, and so does
/// everything once the outage has lasted longer than `limit`.
pub fn during_outage(
    outcome: AttemptOutcome,
    outage: Option<Unreachable>,
    limit: Duration,
    now: DateTime<Utc>,
) -> AttemptOutcome {
    let Some(outage) = outage else {
        return outcome;
    };
    if now >= after(outage.since, limit) {
        return outcome;
    }
    let waits =
        |failure: Failure, at: Option<DateTime<Utc>>, verify: bool| AttemptOutcome::Outage {
            at: at.map_or(outage.probe_at, |at| at.max(outage.probe_at)),
            failure,
            verify,
        };
    match outcome {
        AttemptOutcome::Retry {
            failure: Some(f),
            at,
        } if counts_against_connector(f.class) => waits(f, Some(at), false),
        AttemptOutcome::Verify {
            failure: Some(f),
            at,
        } if counts_against_connector(f.class) => waits(f, Some(at), true),
        AttemptOutcome::Review {
            reason: reason @ (ReviewReason::RetriesExhausted | ReviewReason::UncertainOutcome),
            failure: Some(f),
            ..
        } if counts_against_connector(f.class) => {
            // An exhausted retry never sent anything unknown; an uncertain one did.
            let verify =
                reason == ReviewReason::UncertainOutcome || f.class == ErrorClass::Uncertain;
            waits(f, None, verify)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;
    use serde_json::Value;

    fn f(class: ErrorClass) -> Failure {
        Failure {
            class,
            message: "x".into(),
        }
    }

    #[test]
    fn a_failure_the_connector_is_to_blame_for_waits_for_the_probe() {
        let now: DateTime<Utc> = "2026-12-01T10:42:00Z".parse().unwrap();
        let probe = now + TimeDelta::seconds(30);
        let outage = Some(Unreachable {
            since: now - TimeDelta::seconds(60),
            probe_at: probe,
        });
        let limit = Duration::from_secs(3600);
        let review = |reason, class| AttemptOutcome::Review {
            reason,
            failure: Some(f(class)),
            detail: Value::Null,
        };
        let later = now + TimeDelta::seconds(90);
        // (outcome, the time it then waits for, whether it is looked up first)
        type Waits = Option<(DateTime<Utc>, bool)>;
        let table: Vec<(AttemptOutcome, Waits)> = vec![
            (
                AttemptOutcome::Retry {
                    failure: Some(f(ErrorClass::NotSent)),
                    at: now,
                },
                Some((probe, false)),
            ),
            (
                AttemptOutcome::Retry {
                    failure: Some(f(ErrorClass::RateLimited)),
                    at: later,
                },
                Some((later, false)),
            ),
            (
                AttemptOutcome::Verify {
                    failure: Some(f(ErrorClass::Uncertain)),
                    at: now,
                },
                Some((probe, true)),
            ),
            (
                review(ReviewReason::RetriesExhausted, ErrorClass::RateLimited),
                Some((probe, false)),
            ),
            (
                review(ReviewReason::RetriesExhausted, ErrorClass::Uncertain),
                Some((probe, true)),
            ),
            (
                review(ReviewReason::UncertainOutcome, ErrorClass::NotSent),
                Some((probe, true)),
            ),
            // Not the connector's fault, or not a failure: stands.
            (
                review(ReviewReason::RetriesExhausted, ErrorClass::Validation),
                None,
            ),
            (
                review(ReviewReason::AmbiguousMatch, ErrorClass::Uncertain),
                None,
            ),
            (
                AttemptOutcome::Terminal {
                    failure: f(ErrorClass::Validation),
                },
                None,
            ),
            (AttemptOutcome::Created { crm_id: "1".into() }, None),
            (
                AttemptOutcome::Retry {
                    failure: None,
                    at: now,
                },
                None,
            ),
        ];
        for (outcome, waits) in table {
            let got = during_outage(outcome.clone(), outage, limit, now);
            match (waits, &got) {
                (
                    Some((at, verify)),
                    AttemptOutcome::Outage {
                        at: got_at,
                        verify: got_verify,
                        ..
                    },
                ) => {
                    assert_eq!((*got_at, *got_verify), (at, verify), "{outcome:?}");
                }
                (None, _) => assert_eq!(format!("{got:?}"), format!("{outcome:?}")),
                (Some(_), other) => panic!("{outcome:?} became {other:?}"),
            }
            // No outage, or one longer than the limit: nothing changes.
            let unchanged = during_outage(outcome.clone(), None, limit, now);
            assert_eq!(format!("{unchanged:?}"), format!("{outcome:?}"));
            let long = during_outage(outcome.clone(), outage, Duration::from_secs(59), now);
            assert_eq!(format!("{long:?}"), format!("{outcome:?}"));
        }
    }

    #[test]
    fn failures_in_a_row_open_the_breaker_and_probes_follow_the_schedule() {
        let config = OutageConfig::default();
        let t0: DateTime<Utc> = "2026-12-01T10:42:00Z".parse().unwrap();
        let mut h = Health::default();
        assert_eq!(h.gate(&config, t0), Gate::Open);
        assert!(!h.failed(&config, t0));
        assert!(!h.failed(&config, t0));
        assert!(h.failed(&config, t0), "the third failure in a row");
        assert!(!h.failed(&config, t0), "already unreachable");
        assert_eq!(h.unreachable().unwrap().since, t0);
        assert_eq!(h.gate(&config, t0 + TimeDelta::seconds(4)), Gate::Wait);
        let first = t0 + TimeDelta::seconds(5);
        assert_eq!(h.gate(&config, first), Gate::Probe);
        assert_eq!(h.gate(&config, first), Gate::Wait, "one probe per slot");
        assert_eq!(h.probe_at, Some(first + TimeDelta::seconds(15)));
        assert!(h.answered());
        assert_eq!(h, Health::default());
        assert_eq!(h.gate(&config, first), Gate::Open);
        // An answer between failures starts the count again.
        h.failed(&config, t0);
        h.failed(&config, t0);
        h.answered();
        assert!(!h.failed(&config, t0));
    }

    #[test]
    fn the_calls_a_down_crm_gets_follow_the_schedule() {
        let c = OutageConfig::default();
        let s = Duration::from_secs;
        // Probes 5 s, then 15, 30, 60, 120, 300, 300 … after the one before.
        let table = [(0, 0), (4, 0), (5, 1), (19, 1), (20, 2), (50, 3), (110, 4)];
        for (secs, probes) in table {
            assert_eq!(c.probes_within(s(secs)), probes, "{secs} s");
        }
        // Five probes by 230 s, then one every 300 s.
        assert_eq!(c.probes_within(s(230 + 300 * 10)), 5 + 10);
        // 3 attempts open it, 4 lanes and a reconciler: 4 more may be in flight; two
        // calls each; then a call per probe.
        assert_eq!(c.max_calls_while_down(5, s(20)), (3 + 4) * 2 + 2);
        let none = OutageConfig {
            probes: vec![Duration::ZERO],
            ..c
        };
        assert_eq!(none.probes_within(s(1)), u64::MAX);
    }

    #[test]
    fn the_probe_schedule_repeats_its_last_delay() {
        let c = OutageConfig::default();
        let secs: Vec<u64> = (0..8).map(|n| c.probe_delay(n).as_secs()).collect();
        assert_eq!(secs, [5, 15, 30, 60, 120, 300, 300, 300]);
        assert!(counts_against_connector(ErrorClass::NotSent));
        assert!(!counts_against_connector(ErrorClass::Validation));
        assert!(!counts_against_connector(ErrorClass::Auth));
    }
}
