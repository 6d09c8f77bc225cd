//! Each CRM entity tied to its history: the Leadgate operation behind it (by
//! `ORIGIN_ID` = the operation key, by its `crm_id`, or as a further entity the
//! operation's timeline names) read through `Store` methods only, and the n8n execution
//! that made it (the CRM id in a node's answer, else the contact data of a run started
//! shortly before the entity).

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::n8n::Execution;
use super::verdict::{Facts, JournalFacts};
use super::{CrmEntity, Event, Origin};
use crate::domain::report::{LineDetail, LineText};
use crate::domain::EventKind;
use crate::domain::OperationId;
use crate::store::{Operation, Reads, SearchPlan, SearchQuery, StoreError, TimelineEvent};

/// An entity's operation and its timeline.
#[derive(Debug, Clone)]
pub struct Journal {
    pub operation: Operation,
    pub timeline: Vec<TimelineEvent>,
}

/// The operation whose key is the entity's `ORIGIN_ID` (stamped by Leadgate, with
/// `ORIGINATOR_ID` `leadgate` or none), else the one holding its id as `crm_id`.
pub async fn journal_of(store: &dyn Reads, e: &CrmEntity) -> Result<Option<Journal>, StoreError> {
    let by_key = match (&e.origin_id, e.originator_id.as_deref()) {
        (Some(key), None | Some("leadgate")) => match key.parse::<OperationId>() {
            Ok(id) => store.operation(&id).await?,
            Err(_) => None,
        },
        _ => None,
    };
    let operation = match by_key {
        Some(op) => Some(op),
        None => {
            let query = SearchQuery::Text {
                text: e.id.clone(),
                words: vec![],
                key: e.id.clone(),
            };
            let page = store.search(&query, None, 50, SearchPlan::Ranges).await?;
            match page
                .hits
                .iter()
                .find(|h| h.crm_id.as_deref() == Some(e.id.as_str()))
            {
                Some(hit) => match hit.operation_id.parse::<OperationId>() {
                    Ok(id) => store.operation(&id).await?,
                    Err(_) => None,
                },
                None => None,
            }
        }
    };
    let Some(operation) = operation else {
        return Ok(None);
    };
    let timeline = store.timeline(&operation.operation_id).await?;
    Ok(Some(Journal {
        operation,
        timeline,
    }))
}

/// Every CRM id the operation's timeline names (created, recovered, a late answer, a
/// second entity), and its `crm_id`.
pub fn crm_ids(j: &Journal) -> Vec<String> {
    let mut ids: Vec<String> = j
        .timeline
        .iter()
        .filter(|e| {
            matches!(
                e.kind.as_str(),
                "crm_created" | "recovered" | "late_outcome" | "extra_crm_entity" | "linked"
            )
        })
        .filter_map(|e| scalar(e.detail.get("crm_id")?))
        .chain(j.operation.crm_id.clone())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// What the journal says of the operation.
pub fn journal_facts(j: &Journal) -> JournalFacts {
    let t = &j.timeline;
    let mut workers: Vec<String> = t
        .iter()
        .filter(|e| e.is(EventKind::AttemptStarted))
        .map(|e| e.actor.clone())
        .collect();
    workers.sort();
    workers.dedup();
    JournalFacts {
        operation_id: j.operation.operation_id.to_string(),
        source: j.operation.source.clone(),
        payload_hash: j.operation.payload_hash.clone(),
        deliveries: t
            .iter()
            .filter(|e| {
                e.is(EventKind::Delivery)
                    && matches!(
                        e.detail.get("outcome").and_then(Value::as_str),
                        Some("new" | "duplicate")
                    )
            })
            .count() as u32,
        attempts: t.iter().filter(|e| e.is(EventKind::AttemptStarted)).count() as u32,
        workers,
        uncertain_attempt: t
            .iter()
            .any(|e| e.error_class.as_deref() == Some("uncertain")),
        crm_ids: crm_ids(j),
    }
}

/// The journal's events as timeline lines (state changes left out: each is told by
/// the event that caused it).
pub fn journal_events(entity: &str, j: &Journal) -> Vec<Event> {
    const FIELDS: &[&str] = &[
        "outcome",
        "attempt",
        "method",
        "status",
        "crm_id",
        "known_crm_id",
        "found",
        "error",
        "class",
        "action",
        "resolution",
        "reason",
        "redirects",
    ];
    j.timeline
        .iter()
        .filter(|e| !e.is(EventKind::StatusChanged))
        .map(|e| {
            let details: Vec<LineDetail> = FIELDS
                .iter()
                .filter_map(|f| {
                    let v = e.detail.get(*f)?;
                    let text = match v {
                        Value::String(s) => s.clone(),
                        Value::Null => return None,
                        other => other.to_string(),
                    };
                    Some(LineDetail {
                        field: (*f).to_owned(),
                        value: clip(&text, 80),
                    })
                })
                .chain(e.error_class.as_ref().map(|c| LineDetail {
                    field: "class".into(),
                    value: c.clone(),
                }))
                .collect();
            Event {
                at: Some(e.at),
                entity: entity.to_owned(),
                origin: Origin::Leadgate,
                text: LineText::JournalEvent {
                    operation: j.operation.operation_id.to_string(),
                    kind: e.kind.clone(),
                    actor: e.actor.clone(),
                    details,
                },
            }
        })
        .collect()
}

fn clip(s: &str, max: usize) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > max {
        format!("{}…", one.chars().take(max - 1).collect::<String>())
    } else {
        one
    }
}

/// An n8n execution's timeline lines.
pub fn execution_events(entity: &str, x: &Execution) -> Vec<Event> {
    let f = &x.facts;
    let mut out = vec![Event {
        at: f.started_at,
        entity: entity.to_owned(),
        origin: Origin::N8n,
        text: LineText::ExecutionStarted {
            execution: f.id.clone(),
            workflow: x.workflow_id.clone(),
            mode: f.mode.clone(),
            retry_of: f.retry_of.clone(),
            submission: f.event_key.clone(),
        },
    }];
    if x.stopped_at.is_some() || !f.status.is_empty() {
        out.push(Event {
            at: x.stopped_at,
            entity: entity.to_owned(),
            origin: Origin::N8n,
            text: LineText::ExecutionEnded {
                execution: f.id.clone(),
                status: f.status.clone(),
                nodes: x.nodes.clone(),
                crm_ids: x.crm_ids.clone(),
            },
        });
    }
    out
}

/// How long before an entity's creation the execution that made it may have started.
pub const EXECUTION_LEAD: TimeDelta = TimeDelta::minutes(10);

/// Which execution made each entity: one naming its id in a node's answer, else the
/// closest unused one that started within [`EXECUTION_LEAD`] before it (a minute after
/// for clock skew) and carried one of its phones or e-mails. An execution makes at
/// most one entity.
pub fn tie_executions(entities: &[&CrmEntity], executions: &[Execution]) -> Vec<Option<usize>> {
    let mut used = vec![false; executions.len()];
    let mut out = vec![None; entities.len()];
    for (i, e) in entities.iter().enumerate() {
        if let Some(x) = executions
            .iter()
            .enumerate()
            .find(|(j, x)| !used[*j] && x.crm_ids.contains(&e.id))
            .map(|(j, _)| j)
        {
            used[x] = true;
            out[i] = Some(x);
        }
    }
    for (i, e) in entities.iter().enumerate() {
        if out[i].is_some() {
            continue;
        }
        let Some(created) = e.created else { continue };
        let near = |at: DateTime<Utc>| {
            at <= created + TimeDelta::minutes(1) && at >= created - EXECUTION_LEAD
        };
        let best = executions
            .iter()
            .enumerate()
            .filter(|(j, x)| {
                !used[*j]
                    && x.crm_ids.is_empty()
                    && x.facts.started_at.is_some_and(near)
                    && x.contacts
                        .iter()
                        .any(|c| e.phones.contains(c) || e.emails.contains(c))
            })
            .min_by_key(|(_, x)| (created - x.facts.started_at.unwrap_or(created)).abs());
        if let Some((j, _)) = best {
            used[j] = true;
            out[i] = Some(j);
        }
    }
    out
}

/// A hash of what a person filled in (title, name, comment), if anything.
pub fn crm_content(e: &CrmEntity) -> Option<String> {
    let parts: Vec<String> = [&e.title, &e.name, &e.comment]
        .into_iter()
        .map(|p| p.as_deref().unwrap_or("").trim().to_lowercase())
        .collect();
    if parts.iter().all(String::is_empty) {
        return None;
    }
    Some(hex::encode(
        &Sha256::digest(parts.join("\u{1f}").as_bytes())[..12],
    ))
}

/// The facts the verdict rules see of one entity.
pub fn facts(e: &CrmEntity, journal: Option<&Journal>, execution: Option<&Execution>) -> Facts {
    Facts {
        crm_id: e.id.clone(),
        created: e.created,
        source: e
            .source
            .clone()
            .or_else(|| journal.map(|j| j.operation.source.clone())),
        origin_id: e.origin_id.clone(),
        crm_content: crm_content(e),
        journal: journal.map(journal_facts),
        execution: execution.map(|x| x.facts.clone()),
    }
}
