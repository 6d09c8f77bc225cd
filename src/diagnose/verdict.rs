//! Why two CRM entities of one person exist: the verdict for one pair and its
//! evidence. Pure: it decides from the facts gathered about each entity (the CRM's own
//! fields, Leadgate's journal, the n8n execution that made it), without I/O.
//!
//! The rules, first match wins:
//!
//! 1. **Technical duplicate** — one event made both:
//!    both entities belong to one Leadgate operation (its trigger from the journal: a
//!    create that timed out and was tried again, two workers, a redelivery), or carry
//!    the same `ORIGIN_ID`; or the later n8n execution is a retry of the earlier one
//!    (`retryOf`), or both executions carry the same event key (the source delivered
//!    it twice; a `manual` run re-ran it by hand).
//! 2. **Same submission without a stable key** — the same content (the same payload
//!    hash, the same n8n request body, or the same CRM fields) within the window, but
//!    no key shared: the source or the workflow gave the one submission two identities.
//! 3. **Cross-channel overlap** — both sources are known and differ (a form, then a
//!    call or a messenger).
//! 4. **New request from a known client** — both entities can be tied to events of
//!    their own (a key, a Leadgate operation, an n8n execution) and those differ.
//! 5. **Cannot be tied together** — otherwise: at least one entity has no key anywhere,
//!    so nothing says whether it is the same event.

use chrono::{DateTime, TimeDelta, Utc};

/// What delivered or executed one event twice (its words: `domain::report`).
pub use crate::domain::report::Trigger;
use crate::domain::report::{duration, ContentMeasure, Evidence, KeyKind};

/// What Leadgate's journal says of the operation behind an entity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalFacts {
    pub operation_id: String,
    pub source: String,
    pub payload_hash: String,
    /// Deliveries journaled for the key (repeats included).
    pub deliveries: u32,
    /// CRM create attempts (`attempt_started`).
    pub attempts: u32,
    /// Distinct workers (actors) that started an attempt.
    pub workers: Vec<String>,
    /// An attempt's outcome was unknown (a timeout, a 5xx) before a later create.
    pub uncertain_attempt: bool,
    /// Every CRM id the timeline names as created or found for the operation.
    pub crm_ids: Vec<String>,
}

/// What n8n's history says of the execution that made an entity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutionFacts {
    pub id: String,
    pub mode: String,
    pub status: String,
    pub retry_of: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    /// The submission's own id found in the trigger's data (`tranid`, `submission_id`…).
    pub event_key: Option<String>,
    /// A hash of the trigger's request body.
    pub body_hash: Option<String>,
}

/// Everything known of one entity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    pub crm_id: String,
    pub created: Option<DateTime<Utc>>,
    /// The CRM's source field, else the Leadgate source.
    pub source: Option<String>,
    pub origin_id: Option<String>,
    /// A hash of the CRM fields a person filled in (title, name, comment), if any.
    pub crm_content: Option<String>,
    pub journal: Option<JournalFacts>,
    pub execution: Option<ExecutionFacts>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    Technical,
    SameSubmissionNoKey,
    CrossChannel,
    NewRequest,
    CannotTie,
}

impl Verdict {
    pub const ALL: [Verdict; 5] = [
        Verdict::Technical,
        Verdict::SameSubmissionNoKey,
        Verdict::CrossChannel,
        Verdict::NewRequest,
        Verdict::CannotTie,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Verdict::Technical => "technical_duplicate",
            Verdict::SameSubmissionNoKey => "same_submission_without_key",
            Verdict::CrossChannel => "cross_channel_overlap",
            Verdict::NewRequest => "new_request_known_client",
            Verdict::CannotTie => "cannot_be_tied",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Verdict::Technical => "Technical duplicate",
            Verdict::SameSubmissionNoKey => "Same submission without a stable key",
            Verdict::CrossChannel => "Cross-channel overlap",
            Verdict::NewRequest => "New request from a known client",
            Verdict::CannotTie => "Cannot be tied together",
        }
    }
}

/// A pair's verdict and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub verdict: Verdict,
    pub trigger: Option<Trigger>,
    /// In English: each one's `Display`.
    pub evidence: Vec<Evidence>,
}

fn finding(verdict: Verdict, trigger: Option<Trigger>, evidence: Vec<Evidence>) -> Finding {
    Finding {
        verdict,
        trigger,
        evidence,
    }
}

/// The key that identifies an entity's event, and where it comes from.
fn event_key(f: &Facts) -> Option<(String, KeyKind)> {
    if let Some(j) = &f.journal {
        return Some((j.operation_id.clone(), KeyKind::LeadgateOperation));
    }
    if let Some(k) = f.execution.as_ref().and_then(|x| x.event_key.clone()) {
        return Some((k, KeyKind::SubmissionId));
    }
    f.origin_id
        .clone()
        .filter(|o| !o.trim().is_empty())
        .map(|o| (o, KeyKind::OriginId))
}

/// Whether the two carry the same content, and by which measure.
fn same_content(a: &Facts, b: &Facts) -> Option<(bool, ContentMeasure)> {
    if let (Some(x), Some(y)) = (&a.journal, &b.journal) {
        return Some((
            x.payload_hash == y.payload_hash,
            ContentMeasure::PayloadHash,
        ));
    }
    let body = |f: &Facts| f.execution.as_ref().and_then(|x| x.body_hash.clone());
    if let (Some(x), Some(y)) = (body(a), body(b)) {
        return Some((x == y, ContentMeasure::N8nBody));
    }
    if let (Some(x), Some(y)) = (&a.crm_content, &b.crm_content) {
        return Some((x == y, ContentMeasure::CrmFields));
    }
    None
}

fn gap(a: &Facts, b: &Facts) -> Option<TimeDelta> {
    Some((b.created? - a.created?).abs())
}

/// A duration as a person reads it: `40 s`, `12 min`, `3 h 5 min`, `2 d`.
pub fn human(d: TimeDelta) -> String {
    duration(seconds(d))
}

/// A gap in whole seconds, either way, as the evidence keeps it.
fn seconds(d: TimeDelta) -> u32 {
    u32::try_from(d.num_seconds().unsigned_abs()).unwrap_or(u32::MAX)
}

/// The verdict for `a` (the earlier entity) and `b` (the later), with `window` the
/// longest gap at which the same content still counts as the same submission.
pub fn decide(a: &Facts, b: &Facts, window: TimeDelta) -> Finding {
    let mut ev = Vec::new();
    if let Some(g) = gap(a, b) {
        ev.push(Evidence::CreatedAfter {
            later: b.crm_id.clone(),
            secs: seconds(g),
            earlier: a.crm_id.clone(),
        });
    }
    // 1. One event, twice.
    if let (Some(x), Some(y)) = (&a.journal, &b.journal) {
        if x.operation_id == y.operation_id {
            ev.push(Evidence::SameOperation {
                operation: x.operation_id.clone(),
                deliveries: y.deliveries.max(x.deliveries),
                attempts: y.attempts.max(x.attempts),
            });
            let trigger = if y.uncertain_attempt {
                ev.push(Evidence::OutcomeUnknownSentAgain);
                Trigger::TimeoutAfterCreate
            } else if y.workers.len() > 1 {
                ev.push(Evidence::AttemptsBy {
                    workers: y.workers.clone(),
                });
                Trigger::TwoWorkers
            } else if y.deliveries > 1 {
                ev.push(Evidence::DeliveredTimes { n: y.deliveries });
                Trigger::Redelivery
            } else {
                Trigger::SameKeyTwice
            };
            return finding(Verdict::Technical, Some(trigger), ev);
        }
    }
    if let (Some(x), Some(y)) = (&a.execution, &b.execution) {
        if y.retry_of.as_deref() == Some(x.id.as_str())
            || x.retry_of.as_deref() == Some(y.id.as_str())
            || (x.retry_of.is_some() && x.retry_of == y.retry_of)
        {
            ev.push(Evidence::ExecutionRetry {
                later: y.id.clone(),
                mode: y.mode.clone(),
                earlier: x.id.clone(),
                status: x.status.clone(),
            });
            if x.status != "success" {
                ev.push(Evidence::ExecutionFailedYetCreated {
                    execution: x.id.clone(),
                    status: x.status.clone(),
                    entity: a.crm_id.clone(),
                });
            }
            return finding(Verdict::Technical, Some(Trigger::RetryExecution), ev);
        }
        if let (Some(k), Some(l)) = (&x.event_key, &y.event_key) {
            if k == l {
                ev.push(Evidence::SameSubmission {
                    earlier: x.id.clone(),
                    later: y.id.clone(),
                    submission: k.clone(),
                });
                let trigger = if y.mode == "manual" {
                    ev.push(Evidence::StartedByHand {
                        execution: y.id.clone(),
                    });
                    Trigger::ManualRerun
                } else {
                    ev.push(Evidence::TriggeredAgain {
                        execution: y.id.clone(),
                        mode: y.mode.clone(),
                    });
                    Trigger::Redelivery
                };
                return finding(Verdict::Technical, Some(trigger), ev);
            }
        }
    }
    if let (Some(o), Some(p)) = (&a.origin_id, &b.origin_id) {
        if !o.trim().is_empty() && o == p {
            ev.push(Evidence::SameOriginId {
                origin_id: o.clone(),
            });
            return finding(Verdict::Technical, Some(Trigger::SameKeyTwice), ev);
        }
    }
    // 2. The same content, no shared key.
    let keys = (event_key(a), event_key(b));
    if let Some((true, measure)) = same_content(a, b) {
        if gap(a, b).is_some_and(|g| g <= window) {
            ev.push(Evidence::SameContent { measure });
            ev.push(match &keys {
                (Some((k, kind)), Some((l, _))) => Evidence::TwoIdentities {
                    kind: *kind,
                    first: k.clone(),
                    second: l.clone(),
                },
                _ => Evidence::NoSharedKey,
            });
            return finding(Verdict::SameSubmissionNoKey, None, ev);
        }
    }
    // 3. Two channels.
    if let (Some(s), Some(t)) = (&a.source, &b.source) {
        if !s.eq_ignore_ascii_case(t) {
            ev.push(Evidence::DifferentSources {
                first: s.clone(),
                then: t.clone(),
            });
            return finding(Verdict::CrossChannel, None, ev);
        }
    }
    // 4. Two events of their own.
    if let (Some((k, what)), Some((l, other))) = &keys {
        if k != l {
            ev.push(Evidence::TwoEvents {
                first_kind: *what,
                first: k.clone(),
                second_kind: *other,
                second: l.clone(),
            });
            if let Some((false, measure)) = same_content(a, b) {
                ev.push(Evidence::DifferentContent { measure });
            }
            return finding(Verdict::NewRequest, None, ev);
        }
    }
    // 5. Nothing to tie them by.
    for f in [a, b] {
        if event_key(f).is_none() {
            ev.push(Evidence::NoKey {
                entity: f.crm_id.clone(),
            });
        }
    }
    finding(Verdict::CannotTie, None, ev)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minute: i64) -> Option<DateTime<Utc>> {
        Some("2026-11-20T10:00:00Z".parse::<DateTime<Utc>>().unwrap() + TimeDelta::minutes(minute))
    }

    fn entity(id: &str, minute: i64) -> Facts {
        Facts {
            crm_id: id.into(),
            created: at(minute),
            ..Facts::default()
        }
    }

    fn journal(op: &str, hash: &str) -> JournalFacts {
        JournalFacts {
            operation_id: op.into(),
            source: "site".into(),
            payload_hash: hash.into(),
            deliveries: 1,
            attempts: 1,
            workers: vec!["worker:a".into()],
            ..JournalFacts::default()
        }
    }

    fn exec(id: &str, mode: &str, status: &str) -> ExecutionFacts {
        ExecutionFacts {
            id: id.into(),
            mode: mode.into(),
            status: status.into(),
            ..ExecutionFacts::default()
        }
    }

    /// Each row: a name, the two entities, the verdict and trigger expected.
    #[test]
    fn verdicts() {
        let window = TimeDelta::minutes(30);
        let with = |mut f: Facts, g: &dyn Fn(&mut Facts)| {
            g(&mut f);
            f
        };
        fn op(o: &'static str, h: &'static str) -> impl Fn(&mut Facts) {
            move |f: &mut Facts| f.journal = Some(journal(o, h))
        }
        let table: Vec<(&str, Facts, Facts, Verdict, Option<Trigger>)> = vec![
            (
                "one operation, an uncertain attempt before the second create",
                with(entity("1", 0), &op("site:1", "h")),
                with(entity("2", 1), &|f| {
                    let mut j = journal("site:1", "h");
                    j.attempts = 2;
                    j.uncertain_attempt = true;
                    f.journal = Some(j);
                }),
                Verdict::Technical,
                Some(Trigger::TimeoutAfterCreate),
            ),
            (
                "one operation, two workers",
                with(entity("1", 0), &op("site:1", "h")),
                with(entity("2", 0), &|f| {
                    let mut j = journal("site:1", "h");
                    j.workers = vec!["worker:a".into(), "worker:b".into()];
                    f.journal = Some(j);
                }),
                Verdict::Technical,
                Some(Trigger::TwoWorkers),
            ),
            (
                "one operation delivered twice",
                with(entity("1", 0), &op("site:1", "h")),
                with(entity("2", 2), &|f| {
                    let mut j = journal("site:1", "h");
                    j.deliveries = 2;
                    f.journal = Some(j);
                }),
                Verdict::Technical,
                Some(Trigger::Redelivery),
            ),
            (
                "an n8n retry of a failed execution",
                with(entity("1", 0), &|f| {
                    f.execution = Some(exec("41", "webhook", "error"))
                }),
                with(entity("2", 3), &|f| {
                    let mut x = exec("42", "retry", "success");
                    x.retry_of = Some("41".into());
                    f.execution = Some(x);
                }),
                Verdict::Technical,
                Some(Trigger::RetryExecution),
            ),
            (
                "the same submission id in two webhook executions",
                with(entity("1", 0), &|f| {
                    let mut x = exec("41", "webhook", "success");
                    x.event_key = Some("tr-9".into());
                    f.execution = Some(x);
                }),
                with(entity("2", 1), &|f| {
                    let mut x = exec("42", "webhook", "success");
                    x.event_key = Some("tr-9".into());
                    f.execution = Some(x);
                }),
                Verdict::Technical,
                Some(Trigger::Redelivery),
            ),
            (
                "the same submission run again by hand",
                with(entity("1", 0), &|f| {
                    let mut x = exec("41", "webhook", "success");
                    x.event_key = Some("tr-9".into());
                    f.execution = Some(x);
                }),
                with(entity("2", 90), &|f| {
                    let mut x = exec("57", "manual", "success");
                    x.event_key = Some("tr-9".into());
                    f.execution = Some(x);
                }),
                Verdict::Technical,
                Some(Trigger::ManualRerun),
            ),
            (
                "the same ORIGIN_ID, no other history",
                with(entity("1", 0), &|f| f.origin_id = Some("x-1".into())),
                with(entity("2", 5), &|f| f.origin_id = Some("x-1".into())),
                Verdict::Technical,
                Some(Trigger::SameKeyTwice),
            ),
            (
                "two operations of one payload a minute apart",
                with(entity("1", 0), &op("site:a", "h")),
                with(entity("2", 1), &op("site:b", "h")),
                Verdict::SameSubmissionNoKey,
                None,
            ),
            (
                "identical n8n bodies without a submission id",
                with(entity("1", 0), &|f| {
                    let mut x = exec("41", "webhook", "success");
                    x.body_hash = Some("b".into());
                    f.execution = Some(x);
                }),
                with(entity("2", 2), &|f| {
                    let mut x = exec("43", "webhook", "success");
                    x.body_hash = Some("b".into());
                    f.execution = Some(x);
                }),
                Verdict::SameSubmissionNoKey,
                None,
            ),
            (
                "identical CRM fields, no history at all",
                with(entity("1", 0), &|f| f.crm_content = Some("c".into())),
                with(entity("2", 4), &|f| f.crm_content = Some("c".into())),
                Verdict::SameSubmissionNoKey,
                None,
            ),
            (
                "identical content but a day apart, different sources",
                with(entity("1", 0), &|f| {
                    f.crm_content = Some("c".into());
                    f.source = Some("WEB".into());
                }),
                with(entity("2", 1440), &|f| {
                    f.crm_content = Some("c".into());
                    f.source = Some("CALL".into());
                }),
                Verdict::CrossChannel,
                None,
            ),
            (
                "a form, then a call",
                with(entity("1", 0), &|f| f.source = Some("WEB".into())),
                with(entity("2", 30), &|f| f.source = Some("CALL".into())),
                Verdict::CrossChannel,
                None,
            ),
            (
                "two operations of the same source, different payloads",
                with(entity("1", 0), &op("site:a", "h1")),
                with(entity("2", 600), &op("site:b", "h2")),
                Verdict::NewRequest,
                None,
            ),
            (
                "the same payload again three days later",
                with(entity("1", 0), &op("site:a", "h")),
                with(entity("2", 3 * 1440), &op("site:b", "h")),
                Verdict::NewRequest,
                None,
            ),
            (
                "nothing but the phone",
                entity("1", 0),
                entity("2", 60),
                Verdict::CannotTie,
                None,
            ),
            (
                "one tied, the other not",
                with(entity("1", 0), &op("site:a", "h")),
                with(entity("2", 60), &|f| f.crm_content = Some("c".into())),
                Verdict::CannotTie,
                None,
            ),
        ];
        for (name, a, b, verdict, trigger) in table {
            let f = decide(&a, &b, window);
            assert_eq!((f.verdict, f.trigger), (verdict, trigger), "{name}: {f:?}");
            assert!(!f.evidence.is_empty(), "{name}: evidence");
        }
    }

    #[test]
    fn the_evidence_names_the_retry_and_the_failed_first_run() {
        let mut a = entity("101", 0);
        a.execution = Some(exec("41", "webhook", "error"));
        let mut b = entity("102", 1);
        let mut x = exec("42", "retry", "success");
        x.retry_of = Some("41".into());
        b.execution = Some(x);
        let f = decide(&a, &b, TimeDelta::minutes(30));
        assert_eq!(
            f.evidence.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "entity 102 was created 60 s after entity 101",
                "n8n execution 42 (retry) is a retry of execution 41 (error)",
                "execution 41 ended as `error` although entity 101 exists: the create had gone through",
            ]
        );
    }

    #[test]
    fn durations_read_as_people_say_them() {
        for (s, want) in [
            (40, "40 s"),
            (720, "12 min"),
            (3600, "1 h"),
            (11_100, "3 h 5 min"),
            (200_000, "2 d"),
        ] {
            assert_eq!(human(TimeDelta::seconds(s)), want);
        }
    }
}
