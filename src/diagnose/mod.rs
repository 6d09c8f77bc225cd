//! `leadgate diagnose`: the duplicates a CRM already has, each pair tied to its history
//! and given a verdict with its evidence, as a report a manager can read.
//!
//! Read-only everywhere: the CRM is read through a CSV export or list and duplicate-
//! search calls (`crm::bitrix24::reads`), Leadgate's journal through `Store` reads, n8n's
//! history through `store::n8n`. Merging stays a person's decision in the CRM.
//!
//! - [`csv`] reads an export; [`from_bitrix24`] reads list rows;
//! - [`groups`] finds the entities sharing a phone or e-mail;
//! - [`history`] ties each to its Leadgate operation and n8n execution;
//! - [`verdict`] decides each pair (pure, table-tested);
//! - [`report`] writes HTML and Markdown, and the saved report's data (`ReportData`,
//!   migration 0020) that the console's Diagnosis screen reads;
//! - [`run`] is one run, start to end.
//!
//! The CRM reads are `crm/bitrix24/reads.rs` and `crm/amocrm/reads.rs`; n8n's execution
//! data comes in n8n's "flatted" JSON form ([`n8n`]).

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;

use crate::domain::contact::{normalize_email, normalize_phone, Region};
use crate::domain::report::{LineText, ReportInput};
use crate::store::n8n::N8nExecution;
use crate::store::{Store, StoreError};

pub mod csv;
pub mod groups;
pub mod history;
pub mod n8n;
pub mod report;
pub mod run;
pub mod verdict;

use verdict::{Facts, Finding};

/// One lead or deal as the CRM holds it; phones (E.164) and e-mails normalized as
/// intake normalizes them (`domain::contact`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrmEntity {
    pub id: String,
    pub created: Option<DateTime<Utc>>,
    pub phones: Vec<String>,
    pub emails: Vec<String>,
    /// `SOURCE_ID` / the source column.
    pub source: Option<String>,
    pub origin_id: Option<String>,
    pub originator_id: Option<String>,
    pub title: Option<String>,
    pub name: Option<String>,
    pub comment: Option<String>,
    pub utm: BTreeMap<String, String>,
}

impl CrmEntity {
    /// Oldest first; unknown times last; then by id (numerically when it is a number).
    fn order_key(&self) -> (bool, Option<DateTime<Utc>>, u64, String) {
        (
            self.created.is_none(),
            self.created,
            self.id.parse().unwrap_or(u64::MAX),
            self.id.clone(),
        )
    }
}

/// A `crm.lead.list` row (`crm::bitrix24::reads::LEAD_FIELDS`) as an entity.
pub fn from_bitrix24(row: &Value, region: Region) -> Option<CrmEntity> {
    let text = |k: &str| match row.get(k)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let multi = |k: &str| -> Vec<String> {
        row.get(k)
            .and_then(Value::as_array)
            .map(|m| {
                m.iter()
                    .filter_map(|v| v.get("VALUE").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut phones: Vec<String> = multi("PHONE")
        .iter()
        .filter_map(|p| normalize_phone(p, region))
        .collect();
    phones.sort();
    phones.dedup();
    let mut emails: Vec<String> = multi("EMAIL")
        .iter()
        .filter_map(|e| normalize_email(e))
        .collect();
    emails.sort();
    emails.dedup();
    let name = [text("NAME"), text("LAST_NAME")]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    Some(CrmEntity {
        id: text("ID")?,
        created: text("DATE_CREATE").and_then(|t| {
            DateTime::parse_from_rfc3339(&t)
                .ok()
                .map(|d| d.with_timezone(&Utc))
        }),
        phones,
        emails,
        source: text("SOURCE_ID"),
        origin_id: text("ORIGIN_ID"),
        originator_id: text("ORIGINATOR_ID"),
        title: text("TITLE"),
        name: (!name.is_empty()).then_some(name),
        comment: text("COMMENTS"),
        utm: ["UTM_SOURCE", "UTM_MEDIUM", "UTM_CAMPAIGN"]
            .iter()
            .filter_map(|k| Some((k[4..].to_lowercase(), text(k)?)))
            .collect(),
    })
}

/// How an amoCRM lead's fields are read: Leadgate's key field, and the custom field
/// (if any) the account keeps the lead's source in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmoFields {
    /// The custom text field holding the operation_id (`[crm] operation_field_id`).
    pub operation_field_id: u64,
    /// A custom field naming the lead's source; without one, the tracking field
    /// `UTM_SOURCE` is the source.
    pub source_field_id: Option<u64>,
}

/// An amoCRM lead (`GET /api/v4/leads?with=contacts`) as an entity, its phones and
/// e-mails those of its contacts (`contacts`: by id, from `GET /api/v4/contacts`).
pub fn from_amocrm(
    lead: &Value,
    contacts: &BTreeMap<String, Value>,
    fields: AmoFields,
    region: Region,
) -> Option<CrmEntity> {
    let text = |v: &Value| match v {
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let custom = |f: &dyn Fn(&Value) -> bool| -> Option<String> {
        lead.get("custom_fields_values")?
            .as_array()?
            .iter()
            .filter(|c| f(c))
            .flat_map(|c| {
                c.get("values")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .find_map(|v| v.get("value").and_then(text))
    };
    let by_id =
        |id: u64| custom(&|c: &Value| c.get("field_id").and_then(Value::as_u64) == Some(id));
    let by_code =
        |code: &str| custom(&|c: &Value| c.get("field_code").and_then(Value::as_str) == Some(code));
    let mine: Vec<&Value> = crate::crm::amocrm::reads::contact_ids(lead)
        .iter()
        .filter_map(|id| contacts.get(id))
        .collect();
    let mut phones: Vec<String> = mine
        .iter()
        .flat_map(|c| crate::crm::amocrm::reads::contact_values(c, "PHONE"))
        .filter_map(|p| normalize_phone(&p, region))
        .collect();
    phones.sort();
    phones.dedup();
    let mut emails: Vec<String> = mine
        .iter()
        .flat_map(|c| crate::crm::amocrm::reads::contact_values(c, "EMAIL"))
        .filter_map(|e| normalize_email(&e))
        .collect();
    emails.sort();
    emails.dedup();
    let name = mine.first().and_then(|c| {
        c.get("name").and_then(text).or_else(|| {
            let n = [c.get("first_name"), c.get("last_name")]
                .into_iter()
                .flatten()
                .filter_map(text)
                .collect::<Vec<_>>()
                .join(" ");
            (!n.is_empty()).then_some(n)
        })
    });
    let utm: BTreeMap<String, String> = ["UTM_SOURCE", "UTM_MEDIUM", "UTM_CAMPAIGN"]
        .iter()
        .filter_map(|k| Some((k[4..].to_lowercase(), by_code(k)?)))
        .collect();
    Some(CrmEntity {
        id: lead.get("id").and_then(text)?,
        created: lead
            .get("created_at")
            .and_then(Value::as_i64)
            .and_then(|t| DateTime::from_timestamp(t, 0)),
        phones,
        emails,
        source: match fields.source_field_id {
            Some(id) => by_id(id),
            None => utm.get("source").cloned(),
        },
        origin_id: by_id(fields.operation_field_id),
        originator_id: None,
        title: lead.get("name").and_then(text),
        name,
        comment: None,
        utm,
    })
}

/// Where a timeline line comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    Crm,
    Leadgate,
    N8n,
}

impl Origin {
    pub fn label(self) -> &'static str {
        match self {
            Origin::Crm => "CRM",
            Origin::Leadgate => "Leadgate",
            Origin::N8n => "n8n",
        }
    }
}

/// One line of a pair's merged timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub at: Option<DateTime<Utc>>,
    /// The CRM entity the line is about.
    pub entity: String,
    pub origin: Origin,
    /// What happened (in English: its `Display`).
    pub text: LineText,
}

/// One entity of a group, with what is known of it.
#[derive(Debug, Clone)]
pub struct Member {
    pub entity: CrmEntity,
    pub facts: Facts,
    pub timeline: Vec<Event>,
}

/// A later entity and the one before it, decided.
#[derive(Debug, Clone)]
pub struct Pair {
    pub earlier: usize,
    pub later: usize,
    pub finding: Finding,
    /// The later entity's source (for the totals per source).
    pub source: String,
}

/// Entities sharing a phone or e-mail.
#[derive(Debug, Clone)]
pub struct DuplicateGroup {
    pub shared: Vec<String>,
    pub members: Vec<Member>,
    pub pairs: Vec<Pair>,
}

impl DuplicateGroup {
    /// The pair's two timelines merged in time order (lines without a time last).
    pub fn merged_timeline(&self, pair: &Pair) -> Vec<Event> {
        let mut lines: Vec<Event> = [pair.earlier, pair.later]
            .iter()
            .flat_map(|&i| self.members[i].timeline.iter().cloned())
            .collect();
        lines.sort_by(|a, b| {
            (a.at.is_none(), a.at, a.origin).cmp(&(b.at.is_none(), b.at, b.origin))
        });
        lines
    }
}

/// The whole diagnosis.
#[derive(Debug, Clone)]
pub struct Diagnosis {
    pub generated_at: DateTime<Utc>,
    /// What was read: "CSV export leads.csv", "Bitrix24 crm.lead.list and …".
    pub input: ReportInput,
    pub period: Option<(DateTime<Utc>, DateTime<Utc>)>,
    pub entities_read: usize,
    /// Whether Leadgate's journal and n8n's history were consulted.
    pub journal: bool,
    pub executions_read: Option<usize>,
    pub groups: Vec<DuplicateGroup>,
}

/// How a diagnosis is made.
#[derive(Debug, Clone)]
pub struct Options {
    pub region: Region,
    /// The longest gap at which the same content still counts as one submission.
    pub window: TimeDelta,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            region: Region::default(),
            window: TimeDelta::minutes(30),
        }
    }
}

fn crm_events(e: &CrmEntity) -> Vec<Event> {
    vec![Event {
        at: e.created,
        entity: e.id.clone(),
        origin: Origin::Crm,
        text: LineText::CrmCreated {
            entity: e.id.clone(),
            source: e.source.clone(),
            originator_id: e.originator_id.clone(),
            origin_id: e.origin_id.clone(),
            utm_source: e.utm.get("source").cloned(),
        },
    }]
}

/// Groups `entities` by phone and e-mail, ties each member of a group to its history
/// (`store`: Leadgate's journal, when given; `executions`: n8n's, when given) and
/// decides every pair of consecutive members.
pub async fn diagnose(
    entities: &[CrmEntity],
    store: Option<&dyn Store>,
    executions: Option<&[N8nExecution]>,
    options: &Options,
    progress: &mut (dyn FnMut(usize, usize) + Send),
) -> Result<Vec<DuplicateGroup>, StoreError> {
    let executions: Vec<n8n::Execution> = executions
        .unwrap_or_default()
        .iter()
        .map(|x| n8n::read(x, options.region))
        .collect();
    let found = groups::groups(entities);
    let mut out = Vec::with_capacity(found.len());
    let total = found.len();
    for (n, g) in found.into_iter().enumerate() {
        progress(n + 1, total);
        let members: Vec<&CrmEntity> = g.members.iter().map(|&i| &entities[i]).collect();
        let mut journals = Vec::with_capacity(members.len());
        for e in &members {
            journals.push(match store {
                Some(s) => history::journal_of(s, e).await?,
                None => None,
            });
        }
        // An entity the journal names as a further entity of another member's operation.
        for i in 0..members.len() {
            if journals[i].is_none() {
                journals[i] = journals
                    .iter()
                    .flatten()
                    .find(|j| history::crm_ids(j).contains(&members[i].id))
                    .cloned();
            }
        }
        let ties = history::tie_executions(&members, &executions);
        let members: Vec<Member> = members
            .iter()
            .zip(&journals)
            .zip(&ties)
            .map(|((e, j), x)| {
                let x = x.map(|x| &executions[x]);
                let mut timeline = crm_events(e);
                if let Some(j) = j {
                    timeline.extend(history::journal_events(&e.id, j));
                }
                if let Some(x) = x {
                    timeline.extend(history::execution_events(&e.id, x));
                }
                Member {
                    entity: (*e).clone(),
                    facts: history::facts(e, j.as_ref(), x),
                    timeline,
                }
            })
            .collect();
        let pairs = (1..members.len())
            .map(|later| {
                let earlier = later - 1;
                Pair {
                    earlier,
                    later,
                    finding: verdict::decide(
                        &members[earlier].facts,
                        &members[later].facts,
                        options.window,
                    ),
                    source: members[later]
                        .facts
                        .source
                        .clone()
                        .unwrap_or_else(|| "(unknown)".into()),
                }
            })
            .collect();
        out.push(DuplicateGroup {
            shared: g.shared,
            members,
            pairs,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_amocrm_lead_becomes_an_entity_with_its_contacts_data() {
        let lead = json!({"id": 3001, "name": "Заявка с сайта", "created_at": 1_795_000_000,
            "custom_fields_values": [
                {"field_id": 555001, "values": [{"value": "site:1"}]},
                {"field_id": 777, "values": [{"value": "Сайт"}]},
                {"field_id": 9, "field_code": "UTM_SOURCE", "values": [{"value": "yandex"}]}],
            "_embedded": {"contacts": [{"id": 8, "is_main": false}, {"id": 7, "is_main": true}]}});
        let contacts: BTreeMap<String, Value> = [
            ("7".to_owned(), json!({"id": 7, "name": "Анна Петрова", "custom_fields_values": [
                {"field_code": "PHONE", "values": [{"value": "8 (999) 123-45-67", "enum_code": "WORK"}]},
                {"field_code": "EMAIL", "values": [{"value": "Anna@Example.RU"}]}]})),
            ("8".to_owned(), json!({"id": 8, "first_name": "Пётр", "custom_fields_values": [
                {"field_code": "PHONE", "values": [{"value": "+7 999 765-43-21"}]}]})),
        ]
        .into_iter()
        .collect();
        let fields = AmoFields {
            operation_field_id: 555001,
            source_field_id: Some(777),
        };
        let e = from_amocrm(&lead, &contacts, fields, Region::default()).unwrap();
        assert_eq!(e.id, "3001");
        assert_eq!(e.created, DateTime::from_timestamp(1_795_000_000, 0));
        assert_eq!(e.phones, ["+79991234567", "+79997654321"]);
        assert_eq!(e.emails, ["anna@example.ru"]);
        assert_eq!(
            e.name.as_deref(),
            Some("Анна Петрова"),
            "the main contact's"
        );
        assert_eq!(e.origin_id.as_deref(), Some("site:1"));
        assert_eq!(e.source.as_deref(), Some("Сайт"));
        assert_eq!(e.utm.get("source").map(String::as_str), Some("yandex"));
        let without = AmoFields {
            source_field_id: None,
            ..fields
        };
        let e = from_amocrm(&lead, &BTreeMap::new(), without, Region::default()).unwrap();
        assert_eq!(
            e.source.as_deref(),
            Some("yandex"),
            "UTM_SOURCE without a source field"
        );
        assert!(e.phones.is_empty(), "no contact read, no phone");
        assert!(from_amocrm(
            &json!({"name": "no id"}),
            &contacts,
            fields,
            Region::default()
        )
        .is_none());
    }

    #[test]
    fn a_bitrix24_row_becomes_an_entity() {
        let row = json!({"ID": "101", "DATE_CREATE": "2026-11-20T10:15:00+03:00",
            "PHONE": [{"VALUE": "8 (999) 123-45-67", "VALUE_TYPE": "WORK"}],
            "EMAIL": [{"VALUE": "Anna@Example.RU"}], "SOURCE_ID": "WEB",
            "ORIGINATOR_ID": "leadgate", "ORIGIN_ID": "site:1", "NAME": "Анна",
            "LAST_NAME": "Петрова", "UTM_SOURCE": "yandex", "TITLE": ""});
        let e = from_bitrix24(&row, Region::default()).unwrap();
        assert_eq!(e.id, "101");
        assert_eq!(e.created, Some("2026-11-20T07:15:00Z".parse().unwrap()));
        assert_eq!(e.phones, ["+79991234567"]);
        assert_eq!(e.emails, ["anna@example.ru"]);
        assert_eq!(e.name.as_deref(), Some("Анна Петрова"));
        assert_eq!(e.title, None);
        assert_eq!(e.utm.get("source").map(String::as_str), Some("yandex"));
        assert!(from_bitrix24(&json!({"TITLE": "no id"}), Region::default()).is_none());
    }
}
