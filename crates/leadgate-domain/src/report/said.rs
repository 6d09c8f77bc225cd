//! The report's sentences as data: each a stable code and its arguments (serialized
//! `{"code": "delivered_times", "args": {"n": 3}}`), so the console can say it in the
//! operator's language (`ui/src/lib/i18n/diagnosis.{en,ru}.ts`). English is rendered
//! here and only here (`Display`): the HTML and Markdown reports and the saved English
//! text are this rendering, so the text and its code cannot disagree.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What delivered or executed one event twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The CRM call's outcome was unknown (a timeout after the create had landed) and
    /// the create was sent again.
    TimeoutAfterCreate,
    /// Two workers created for the one operation.
    TwoWorkers,
    /// The source delivered the event again and it was created again.
    Redelivery,
    /// n8n re-ran a failed execution (`retryOf`).
    RetryExecution,
    /// Someone ran the workflow again by hand.
    ManualRerun,
    /// The same external key twice, the history silent on why.
    SameKeyTwice,
}

impl Trigger {
    pub const ALL: [Trigger; 6] = [
        Trigger::TimeoutAfterCreate,
        Trigger::TwoWorkers,
        Trigger::Redelivery,
        Trigger::RetryExecution,
        Trigger::ManualRerun,
        Trigger::SameKeyTwice,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Trigger::TimeoutAfterCreate => "timeout after a successful create",
            Trigger::TwoWorkers => "two workers",
            Trigger::Redelivery => "redelivery of the same event",
            Trigger::RetryExecution => "retry of an n8n execution",
            Trigger::ManualRerun => "manual re-run of the workflow",
            Trigger::SameKeyTwice => "the same key created twice",
        }
    }
}

/// What identifies an entity's event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum KeyKind {
    LeadgateOperation,
    SubmissionId,
    OriginId,
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyKind::LeadgateOperation => "Leadgate operation",
            KeyKind::SubmissionId => "submission id",
            KeyKind::OriginId => "ORIGIN_ID",
        })
    }
}

/// By what two entities' content was compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum ContentMeasure {
    PayloadHash,
    N8nBody,
    CrmFields,
}

impl fmt::Display for ContentMeasure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ContentMeasure::PayloadHash => "payload hash",
            ContentMeasure::N8nBody => "n8n request body",
            ContentMeasure::CrmFields => "CRM fields",
        })
    }
}

/// A duration as a person reads it: `40 s`, `12 min`, `3 h 5 min`, `2 d`.
pub fn duration(secs: u32) -> String {
    let s = secs;
    match s {
        0..=119 => format!("{s} s"),
        120..=3599 => format!("{} min", s / 60),
        3600..=86_399 => match (s % 3600) / 60 {
            0 => format!("{} h", s / 3600),
            m => format!("{} h {m} min", s / 3600),
        },
        _ => format!("{} d", s / 86_400),
    }
}

/// One line of a pair's evidence (`leadgate::diagnose::verdict`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(tag = "code", content = "args", rename_all = "snake_case")]
pub enum Evidence {
    /// `later` was created `secs` seconds after `earlier`.
    CreatedAfter {
        later: String,
        secs: u32,
        earlier: String,
    },
    SameOperation {
        operation: String,
        deliveries: u32,
        attempts: u32,
    },
    OutcomeUnknownSentAgain,
    AttemptsBy {
        workers: Vec<String>,
    },
    DeliveredTimes {
        n: u32,
    },
    ExecutionRetry {
        later: String,
        mode: String,
        earlier: String,
        status: String,
    },
    /// The earlier execution ended unsuccessfully, yet its entity exists.
    ExecutionFailedYetCreated {
        execution: String,
        status: String,
        entity: String,
    },
    SameSubmission {
        earlier: String,
        later: String,
        submission: String,
    },
    StartedByHand {
        execution: String,
    },
    TriggeredAgain {
        execution: String,
        mode: String,
    },
    SameOriginId {
        origin_id: String,
    },
    SameContent {
        measure: ContentMeasure,
    },
    /// After [`Evidence::SameContent`]: yet the two have keys of their own.
    TwoIdentities {
        kind: KeyKind,
        first: String,
        second: String,
    },
    /// After [`Evidence::SameContent`]: and no key both carry.
    NoSharedKey,
    DifferentSources {
        first: String,
        then: String,
    },
    TwoEvents {
        first_kind: KeyKind,
        first: String,
        second_kind: KeyKind,
        second: String,
    },
    DifferentContent {
        measure: ContentMeasure,
    },
    NoKey {
        entity: String,
    },
}

impl fmt::Display for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Evidence::CreatedAfter {
                later,
                secs,
                earlier,
            } => write!(
                f,
                "entity {later} was created {} after entity {earlier}",
                duration(*secs)
            ),
            Evidence::SameOperation {
                operation,
                deliveries,
                attempts,
            } => write!(
                f,
                "both belong to Leadgate operation {operation} ({deliveries} deliveries, {attempts} attempts)"
            ),
            Evidence::OutcomeUnknownSentAgain => {
                f.write_str("an attempt's outcome was unknown and the create was sent again")
            }
            Evidence::AttemptsBy { workers } => write!(f, "attempts by {}", workers.join(" and ")),
            Evidence::DeliveredTimes { n } => write!(f, "the source delivered it {n} times"),
            Evidence::ExecutionRetry {
                later,
                mode,
                earlier,
                status,
            } => write!(
                f,
                "n8n execution {later} ({mode}) is a retry of execution {earlier} ({status})"
            ),
            Evidence::ExecutionFailedYetCreated {
                execution,
                status,
                entity,
            } => write!(
                f,
                "execution {execution} ended as `{status}` although entity {entity} exists: the create had gone through"
            ),
            Evidence::SameSubmission {
                earlier,
                later,
                submission,
            } => write!(
                f,
                "n8n executions {earlier} and {later} both carry submission {submission}"
            ),
            Evidence::StartedByHand { execution } => {
                write!(f, "execution {execution} was started by hand")
            }
            Evidence::TriggeredAgain { execution, mode } => write!(
                f,
                "execution {execution} was triggered by `{mode}`: the source delivered the event again"
            ),
            Evidence::SameOriginId { origin_id } => write!(f, "both carry ORIGIN_ID {origin_id}"),
            Evidence::SameContent { measure } => write!(f, "the same content ({measure})"),
            Evidence::TwoIdentities {
                kind,
                first,
                second,
            } => write!(f, "but two identities: {kind} {first} and {second}"),
            Evidence::NoSharedKey => f.write_str("and no key that both carry"),
            Evidence::DifferentSources { first, then } => {
                write!(f, "different sources: {first}, then {then}")
            }
            Evidence::TwoEvents {
                first_kind,
                first,
                second_kind,
                second,
            } => write!(
                f,
                "two events: {first_kind} {first} and {second_kind} {second}"
            ),
            Evidence::DifferentContent { measure } => write!(f, "different content ({measure})"),
            Evidence::NoKey { entity } => write!(
                f,
                "entity {entity} has no key: no ORIGIN_ID, no Leadgate operation, no n8n execution"
            ),
        }
    }
}

/// One field of a journal event, as the timeline line names it (`attempt 2`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct LineDetail {
    /// `outcome`, `attempt`, `method`, `status`, `crm_id`, `error`, `class`, …
    pub field: String,
    pub value: String,
}

/// What happened, on one line of a pair's merged timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(tag = "code", content = "args", rename_all = "snake_case")]
pub enum LineText {
    /// The entity as the CRM holds it. `originator_id` is said only with an `origin_id`.
    CrmCreated {
        entity: String,
        source: Option<String>,
        originator_id: Option<String>,
        origin_id: Option<String>,
        utm_source: Option<String>,
    },
    /// An event of Leadgate's journal (`kind`: `domain::EventKind`'s code).
    JournalEvent {
        operation: String,
        kind: String,
        actor: String,
        details: Vec<LineDetail>,
    },
    ExecutionStarted {
        execution: String,
        workflow: String,
        mode: String,
        retry_of: Option<String>,
        submission: Option<String>,
    },
    ExecutionEnded {
        execution: String,
        status: String,
        nodes: Vec<String>,
        crm_ids: Vec<String>,
    },
}

impl fmt::Display for LineText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LineText::CrmCreated {
                entity,
                source,
                originator_id,
                origin_id,
                utm_source,
            } => {
                let mut about = vec![];
                if let Some(s) = source {
                    about.push(format!("source {s}"));
                }
                match (originator_id, origin_id) {
                    (Some(o), Some(k)) => about.push(format!("ORIGINATOR_ID {o}, ORIGIN_ID {k}")),
                    (None, Some(k)) => about.push(format!("ORIGIN_ID {k}")),
                    _ => about.push("no ORIGIN_ID".into()),
                }
                if let Some(u) = utm_source {
                    about.push(format!("utm_source {u}"));
                }
                write!(
                    f,
                    "entity {entity} created in the CRM ({})",
                    about.join(", ")
                )
            }
            LineText::JournalEvent {
                operation,
                kind,
                actor,
                details,
            } => {
                write!(f, "{operation} {} by {actor}", kind.replace('_', " "))?;
                if !details.is_empty() {
                    let d: Vec<String> = details
                        .iter()
                        .map(|d| format!("{} {}", d.field, d.value))
                        .collect();
                    write!(f, " ({})", d.join(", "))?;
                }
                Ok(())
            }
            LineText::ExecutionStarted {
                execution,
                workflow,
                mode,
                retry_of,
                submission,
            } => {
                write!(
                    f,
                    "n8n execution {execution} of workflow {workflow} started ({mode}"
                )?;
                if let Some(r) = retry_of {
                    write!(f, ", retry of {r}")?;
                }
                match submission {
                    Some(k) => write!(f, "): submission {k}"),
                    None => f.write_str("): no submission id in the request"),
                }
            }
            LineText::ExecutionEnded {
                execution,
                status,
                nodes,
                crm_ids,
            } => {
                write!(
                    f,
                    "n8n execution {execution} ended `{status}` after nodes {}",
                    nodes.join(" → ")
                )?;
                if !crm_ids.is_empty() {
                    write!(f, "; the CRM answered id {}", crm_ids.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

/// What the CRM was read through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(tag = "code", content = "args", rename_all = "snake_case")]
pub enum ReportInput {
    /// A CSV export, by its file name.
    Csv { file: String },
    /// Bitrix24's `crm.lead.list` and `crm.duplicate.findbycomm`.
    Bitrix24Api,
    /// amoCRM's API v4: leads and the contact search.
    AmoCrmApi,
}

const CSV: &str = "CSV export ";
const BITRIX24: &str = "Bitrix24 crm.lead.list and crm.duplicate.findbycomm";
const AMOCRM: &str = "amoCRM leads and contact search (API v4)";

impl ReportInput {
    /// The input its English text names (the list of saved reports keeps the text only).
    pub fn parse(text: &str) -> Option<ReportInput> {
        match text {
            BITRIX24 => Some(ReportInput::Bitrix24Api),
            AMOCRM => Some(ReportInput::AmoCrmApi),
            _ => text.strip_prefix(CSV).map(|file| ReportInput::Csv {
                file: file.to_owned(),
            }),
        }
    }
}

impl fmt::Display for ReportInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportInput::Csv { file } => write!(f, "{CSV}{file}"),
            ReportInput::Bitrix24Api => f.write_str(BITRIX24),
            ReportInput::AmoCrmApi => f.write_str(AMOCRM),
        }
    }
}

/// What a diagnosis read, in words: "132 CRM entities (…), Leadgate's journal, no n8n
/// history".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct SourcesRead {
    pub entities: u32,
    pub input: ReportInput,
    pub journal: bool,
    /// n8n executions read; `None` when n8n's history was not read.
    pub executions: Option<u32>,
}

impl fmt::Display for SourcesRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} CRM entities ({})", self.entities, self.input)?;
        f.write_str(if self.journal {
            ", Leadgate's journal"
        } else {
            ", no Leadgate journal"
        })?;
        match self.executions {
            Some(n) => write!(f, ", {n} n8n executions"),
            None => f.write_str(", no n8n history"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    /// Every code against the sentence `leadgate diagnose` wrote before the codes, word
    /// for word (the `format!` each replaced, with the same arguments).
    #[test]
    fn every_code_renders_to_the_english_sentence_it_replaced() {
        let (a, b, op) = ("101", "102", "site:1");
        let evidence: Vec<(Evidence, String)> = vec![
            (
                Evidence::CreatedAfter {
                    later: b.into(),
                    secs: 60,
                    earlier: a.into(),
                },
                format!("entity {} was created {} after entity {}", b, "60 s", a),
            ),
            (
                Evidence::SameOperation {
                    operation: op.into(),
                    deliveries: 2,
                    attempts: 3,
                },
                format!(
                    "both belong to Leadgate operation {} ({} deliveries, {} attempts)",
                    op, 2, 3
                ),
            ),
            (
                Evidence::OutcomeUnknownSentAgain,
                "an attempt's outcome was unknown and the create was sent again".into(),
            ),
            (
                Evidence::AttemptsBy {
                    workers: s(&["worker:a", "worker:b"]),
                },
                format!("attempts by {}", ["worker:a", "worker:b"].join(" and ")),
            ),
            (
                Evidence::DeliveredTimes { n: 3 },
                format!("the source delivered it {} times", 3),
            ),
            (
                Evidence::ExecutionRetry {
                    later: "42".into(),
                    mode: "retry".into(),
                    earlier: "41".into(),
                    status: "error".into(),
                },
                format!(
                    "n8n execution {} ({}) is a retry of execution {} ({})",
                    "42", "retry", "41", "error"
                ),
            ),
            (
                Evidence::ExecutionFailedYetCreated {
                    execution: "41".into(),
                    status: "error".into(),
                    entity: a.into(),
                },
                format!(
                    "execution {} ended as `{}` although entity {} exists: the create had gone through",
                    "41", "error", a
                ),
            ),
            (
                Evidence::SameSubmission {
                    earlier: "50".into(),
                    later: "51".into(),
                    submission: "7741:50".into(),
                },
                format!(
                    "n8n executions {} and {} both carry submission {}",
                    "50", "51", "7741:50"
                ),
            ),
            (
                Evidence::StartedByHand {
                    execution: "57".into(),
                },
                format!("execution {} was started by hand", "57"),
            ),
            (
                Evidence::TriggeredAgain {
                    execution: "51".into(),
                    mode: "webhook".into(),
                },
                format!(
                    "execution {} was triggered by `{}`: the source delivered the event again",
                    "51", "webhook"
                ),
            ),
            (
                Evidence::SameOriginId {
                    origin_id: "x-1".into(),
                },
                format!("both carry ORIGIN_ID {}", "x-1"),
            ),
            (
                Evidence::SameContent {
                    measure: ContentMeasure::PayloadHash,
                },
                format!("the same content ({})", "payload hash"),
            ),
            (
                Evidence::SameContent {
                    measure: ContentMeasure::N8nBody,
                },
                format!("the same content ({})", "n8n request body"),
            ),
            (
                Evidence::TwoIdentities {
                    kind: KeyKind::LeadgateOperation,
                    first: "site:a".into(),
                    second: "site:b".into(),
                },
                format!(
                    "but two identities: {} {} and {}",
                    "Leadgate operation", "site:a", "site:b"
                ),
            ),
            (Evidence::NoSharedKey, "and no key that both carry".into()),
            (
                Evidence::DifferentSources {
                    first: "WEB".into(),
                    then: "CALL".into(),
                },
                format!("different sources: {}, then {}", "WEB", "CALL"),
            ),
            (
                Evidence::TwoEvents {
                    first_kind: KeyKind::SubmissionId,
                    first: "tr-1".into(),
                    second_kind: KeyKind::OriginId,
                    second: "x-2".into(),
                },
                format!(
                    "two events: {} {} and {} {}",
                    "submission id", "tr-1", "ORIGIN_ID", "x-2"
                ),
            ),
            (
                Evidence::DifferentContent {
                    measure: ContentMeasure::CrmFields,
                },
                format!("different content ({})", "CRM fields"),
            ),
            (
                Evidence::NoKey { entity: b.into() },
                format!(
                    "entity {} has no key: no ORIGIN_ID, no Leadgate operation, no n8n execution",
                    b
                ),
            ),
        ];
        for (e, want) in &evidence {
            assert_eq!(&e.to_string(), want, "{e:?}");
        }

        let lines: Vec<(LineText, String)> = vec![
            (
                LineText::CrmCreated {
                    entity: a.into(),
                    source: Some("WEB".into()),
                    originator_id: Some("leadgate".into()),
                    origin_id: Some(op.into()),
                    utm_source: Some("yandex".into()),
                },
                format!(
                    "entity {} created in the CRM ({})",
                    a, "source WEB, ORIGINATOR_ID leadgate, ORIGIN_ID site:1, utm_source yandex"
                ),
            ),
            (
                LineText::CrmCreated {
                    entity: a.into(),
                    source: None,
                    originator_id: None,
                    origin_id: Some(op.into()),
                    utm_source: None,
                },
                format!("entity {} created in the CRM ({})", a, "ORIGIN_ID site:1"),
            ),
            (
                LineText::CrmCreated {
                    entity: a.into(),
                    source: Some("CALL".into()),
                    originator_id: Some("leadgate".into()),
                    origin_id: None,
                    utm_source: None,
                },
                format!(
                    "entity {} created in the CRM ({})",
                    a, "source CALL, no ORIGIN_ID"
                ),
            ),
            (
                LineText::JournalEvent {
                    operation: op.into(),
                    kind: "attempt_started".into(),
                    actor: "worker:a".into(),
                    details: vec![
                        LineDetail {
                            field: "attempt".into(),
                            value: "2".into(),
                        },
                        LineDetail {
                            field: "class".into(),
                            value: "uncertain".into(),
                        },
                    ],
                },
                format!(
                    "{} {} by {}{}",
                    op,
                    "attempt_started".replace('_', " "),
                    "worker:a",
                    format_args!(" ({})", ["attempt 2", "class uncertain"].join(", "))
                ),
            ),
            (
                LineText::JournalEvent {
                    operation: op.into(),
                    kind: "verify_scheduled".into(),
                    actor: "gateway".into(),
                    details: vec![],
                },
                format!("{} {} by {}{}", op, "verify scheduled", "gateway", ""),
            ),
            (
                LineText::ExecutionStarted {
                    execution: "42".into(),
                    workflow: "wf-leads".into(),
                    mode: "retry".into(),
                    retry_of: Some("41".into()),
                    submission: None,
                },
                format!(
                    "n8n execution {} of workflow {} started ({}{}){}",
                    "42", "wf-leads", "retry", ", retry of 41", ": no submission id in the request"
                ),
            ),
            (
                LineText::ExecutionStarted {
                    execution: "41".into(),
                    workflow: "wf-leads".into(),
                    mode: "webhook".into(),
                    retry_of: None,
                    submission: Some("7741:41".into()),
                },
                format!(
                    "n8n execution {} of workflow {} started ({}{}){}",
                    "41", "wf-leads", "webhook", "", ": submission 7741:41"
                ),
            ),
            (
                LineText::ExecutionEnded {
                    execution: "42".into(),
                    status: "success".into(),
                    nodes: s(&["Webhook", "Bitrix24 crm.lead.add"]),
                    crm_ids: s(&["602"]),
                },
                format!(
                    "n8n execution {} ended `{}` after nodes {}{}",
                    "42",
                    "success",
                    ["Webhook", "Bitrix24 crm.lead.add"].join(" → "),
                    format_args!("; the CRM answered id {}", ["602"].join(", "))
                ),
            ),
            (
                LineText::ExecutionEnded {
                    execution: "41".into(),
                    status: "error".into(),
                    nodes: s(&["Webhook"]),
                    crm_ids: vec![],
                },
                format!(
                    "n8n execution {} ended `{}` after nodes {}{}",
                    "41", "error", "Webhook", ""
                ),
            ),
        ];
        for (l, want) in &lines {
            assert_eq!(&l.to_string(), want, "{l:?}");
        }

        for (input, want) in [
            (
                ReportInput::Csv {
                    file: "leads.csv".into(),
                },
                format!("CSV export {}", "leads.csv"),
            ),
            (
                ReportInput::Bitrix24Api,
                "Bitrix24 crm.lead.list and crm.duplicate.findbycomm".into(),
            ),
            (
                ReportInput::AmoCrmApi,
                "amoCRM leads and contact search (API v4)".into(),
            ),
        ] {
            assert_eq!(input.to_string(), want);
            assert_eq!(ReportInput::parse(&want), Some(input.clone()), "{want}");
            let read = SourcesRead {
                entities: 132,
                input: input.clone(),
                journal: true,
                executions: None,
            };
            assert_eq!(
                read.to_string(),
                format!("132 CRM entities ({want}), Leadgate's journal, no n8n history")
            );
            let read = SourcesRead {
                journal: false,
                executions: Some(6),
                ..read
            };
            assert_eq!(
                read.to_string(),
                format!("132 CRM entities ({want}), no Leadgate journal, 6 n8n executions")
            );
        }
        assert_eq!(ReportInput::parse("something else"), None);
    }

    #[test]
    fn durations_read_as_people_say_them() {
        for (s, want) in [
            (40, "40 s"),
            (119, "119 s"),
            (720, "12 min"),
            (3600, "1 h"),
            (11_100, "3 h 5 min"),
            (200_000, "2 d"),
        ] {
            assert_eq!(duration(s), want);
        }
    }

    /// The saved form: a code and its arguments, stable across versions.
    #[test]
    fn a_sentence_is_saved_as_its_code_and_arguments() {
        fn j<T: Serialize>(v: &T) -> String {
            serde_json::to_string(v).unwrap()
        }
        assert_eq!(
            j(&Evidence::DeliveredTimes { n: 3 }),
            r#"{"code":"delivered_times","args":{"n":3}}"#
        );
        assert_eq!(j(&Evidence::NoSharedKey), r#"{"code":"no_shared_key"}"#);
        assert_eq!(
            j(&Evidence::SameContent {
                measure: ContentMeasure::N8nBody
            }),
            r#"{"code":"same_content","args":{"measure":"n8n_body"}}"#
        );
        assert_eq!(j(&Trigger::TimeoutAfterCreate), r#""timeout_after_create""#);
        assert_eq!(j(&ReportInput::Bitrix24Api), r#"{"code":"bitrix24_api"}"#);
        let back: Evidence =
            serde_json::from_str(r#"{"code":"attempts_by","args":{"workers":["a","b"]}}"#).unwrap();
        assert_eq!(
            back,
            Evidence::AttemptsBy {
                workers: s(&["a", "b"])
            }
        );
    }
}
