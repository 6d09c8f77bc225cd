//! One `leadgate diagnose` run: read the CRM (a CSV export or Bitrix24's API), read
//! n8n's history, tie, decide, and hand back the diagnosis. Progress goes to the
//! caller's `progress` (the CLI prints it on stderr).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, FixedOffset, TimeDelta, Utc};
use serde_json::Value;

use super::{diagnose, from_amocrm, from_bitrix24, AmoFields, CrmEntity, Diagnosis, Options};
use crate::crm::amocrm::{self, AmoCrm};
use crate::crm::bitrix24::{Bitrix24, Entity, DEFAULT_BURST, DEFAULT_RATE_LIMIT};
use crate::domain::contact::{normalize_email, normalize_phone, Region};
use crate::domain::report::ReportInput;
use crate::store::{Store, Upkeep};

/// Where the CRM's entities come from.
#[derive(Debug, Clone)]
pub enum CrmInput {
    /// A CSV export; its times without an offset are at `offset`.
    Csv { path: PathBuf, offset: FixedOffset },
    /// Bitrix24's API through an incoming webhook, read-only, at the portal's pace.
    Bitrix24 {
        webhook_url: String,
        rate_limit: f64,
        burst: u32,
        /// Also ask `crm.duplicate.findbycomm` for older leads sharing a phone or
        /// e-mail with the period's leads.
        find_older: bool,
    },
    /// amoCRM's API v4, read-only, at the account's pace (shared through the
    /// operations database when there is one).
    AmoCrm {
        settings: Box<amocrm::Settings>,
        fields: AmoFields,
        /// Also search contacts by the period's phones and e-mails for older leads.
        find_older: bool,
    },
}

impl CrmInput {
    pub fn bitrix24(webhook_url: &str) -> CrmInput {
        CrmInput::Bitrix24 {
            webhook_url: webhook_url.to_owned(),
            rate_limit: DEFAULT_RATE_LIMIT,
            burst: DEFAULT_BURST,
            find_older: true,
        }
    }
}

/// What to diagnose.
#[derive(Clone)]
pub struct Request {
    pub crm: CrmInput,
    /// `[from, to)`; for a CSV export `None` takes every row.
    pub period: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// Leadgate's operations database, if there is one.
    pub store: Option<Arc<dyn Store>>,
    /// n8n's database (the path of its SQLite file or a `postgres://` URL) and,
    /// optionally, the one workflow to read.
    pub n8n: Option<(String, Option<String>)>,
    pub options: Options,
}

impl Request {
    /// The period a CRM's API is read over: the one asked for, else the last 30 days of
    /// this machine's clock (a report for the person running it; no lease or due time is
    /// judged by it).
    fn api_period(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        self.period
            .unwrap_or_else(|| (Utc::now() - TimeDelta::days(30), Utc::now()))
    }
}

/// Runs the diagnosis.
pub async fn run(
    request: &Request,
    progress: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<Diagnosis> {
    let region = request.options.region;
    let (entities, input): (Vec<CrmEntity>, ReportInput) = match &request.crm {
        CrmInput::Csv { path, offset } => {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let mut entities = super::csv::read(&bytes, region, *offset)
                .with_context(|| format!("reading the export {}", path.display()))?;
            if let Some((from, to)) = request.period {
                entities.retain(|e| e.created.is_some_and(|c| c >= from && c < to));
            }
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            progress(format!("read {} entities from {name}", entities.len()));
            (entities, ReportInput::Csv { file: name })
        }
        CrmInput::Bitrix24 {
            webhook_url,
            rate_limit,
            burst,
            find_older,
        } => {
            let (from, to) = request.api_period();
            let crm = Bitrix24::new(webhook_url, Entity::Lead, crate::crm::bitrix24::MAX_TIMEOUT)?;
            let crm = match &request.store {
                Some(store) => crm.paced_in(store.clone(), *rate_limit, *burst),
                None => crm.paced_here(*rate_limit, *burst),
            };
            let rows = crm
                .leads_created(from, to, &mut |p| {
                    progress(format!(
                        "Bitrix24 crm.lead.list: page {}, {} leads{}",
                        p.pages,
                        p.rows,
                        p.total.map(|t| format!(" of {t}")).unwrap_or_default()
                    ))
                })
                .await?;
            let mut entities: Vec<CrmEntity> = rows
                .iter()
                .filter_map(|r| from_bitrix24(r, region))
                .collect();
            if *find_older {
                let older = older_duplicates(&crm, &entities, progress).await?;
                entities.extend(older.iter().filter_map(|r| from_bitrix24(r, region)));
            }
            (entities, ReportInput::Bitrix24Api)
        }
        CrmInput::AmoCrm {
            settings,
            fields,
            find_older,
        } => {
            let (from, to) = request.api_period();
            let crm = AmoCrm::new((**settings).clone())?;
            let crm = match &request.store {
                Some(store) => crm.paced_in(store.clone()),
                None => crm,
            };
            let entities =
                from_amocrm_api(&crm, *fields, from, to, *find_older, region, progress).await?;
            (entities, ReportInput::AmoCrmApi)
        }
    };
    let executions = match &request.n8n {
        Some((source, workflow)) => {
            let (from, to) = request.period.unwrap_or_else(|| {
                let times = entities.iter().filter_map(|e| e.created);
                let from = times.clone().min().unwrap_or_else(Utc::now);
                let to = times.max().unwrap_or_else(Utc::now);
                (from - TimeDelta::days(1), to + TimeDelta::days(1))
            });
            let found = crate::store::n8n::executions(source, workflow.as_deref(), from, to)
                .await
                .with_context(|| format!("reading n8n's database {}", shown(source)))?;
            progress(format!("read {} n8n executions", found.len()));
            Some(found)
        }
        None => None,
    };
    let groups = diagnose(
        &entities,
        request.store.as_deref(),
        executions.as_deref(),
        &request.options,
        &mut |n, of| {
            if n == of || n % 50 == 0 {
                progress(format!("tied group {n} of {of} to its history"))
            }
        },
    )
    .await?;
    Ok(Diagnosis {
        generated_at: Utc::now(),
        input,
        period: request.period,
        entities_read: entities.len(),
        journal: request.store.is_some(),
        executions_read: executions.as_ref().map(Vec::len),
        groups,
    })
}

/// Saves the diagnosis's report (`report::data`) in the operations database for the
/// console's *Diagnosis* screen; returns its id.
pub async fn save(store: &dyn Upkeep, d: &Diagnosis) -> Result<i64, crate::store::StoreError> {
    let data = super::report::data(d);
    let summary = crate::store::DiagnosisSummary {
        id: 0,
        generated_at: data.generated_at,
        input: data.input.clone(),
        period_from: data.period_from,
        period_to: data.period_to,
        groups: data.groups.into(),
        pairs: data.pairs.into(),
        totals: data
            .per_verdict
            .iter()
            .map(|v| (v.verdict.clone(), i64::from(v.pairs)))
            .collect(),
    };
    let report = serde_json::to_value(&data)
        .map_err(|e| crate::store::StoreError::Corrupt(e.to_string()))?;
    store
        .save_diagnosis(&crate::store::NewDiagnosis { summary, report })
        .await
}

/// Leads outside the period that Bitrix24's duplicate search finds for the period's
/// phones and e-mails.
async fn older_duplicates(
    crm: &Bitrix24,
    entities: &[CrmEntity],
    progress: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut phones: Vec<String> = entities.iter().flat_map(|e| e.phones.clone()).collect();
    let mut emails: Vec<String> = entities.iter().flat_map(|e| e.emails.clone()).collect();
    phones.sort();
    phones.dedup();
    emails.sort();
    emails.dedup();
    let mut ids = crm.lead_duplicates("PHONE", &phones).await?;
    ids.extend(crm.lead_duplicates("EMAIL", &emails).await?);
    ids.sort();
    ids.dedup();
    ids.retain(|id| !entities.iter().any(|e| &e.id == id));
    progress(format!(
        "Bitrix24 crm.duplicate.findbycomm: {} phones, {} e-mails, {} older leads",
        phones.len(),
        emails.len(),
        ids.len()
    ));
    Ok(crm.leads_by_id(&ids).await?)
}

/// The leads of `[from, to)` with their contacts' phones and e-mails, and (with
/// `find_older`) the older leads whose contacts amoCRM's search finds for those phones
/// and e-mails — a match kept only when the contact holds the same normalized value.
async fn from_amocrm_api(
    crm: &AmoCrm,
    fields: AmoFields,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    find_older: bool,
    region: Region,
    progress: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<Vec<CrmEntity>> {
    let leads = crm
        .leads_created(from, to, &mut |p| {
            progress(format!(
                "amoCRM GET /api/v4/leads: page {}, {} leads",
                p.pages, p.rows
            ))
        })
        .await?;
    let mut contacts: BTreeMap<String, Value> = BTreeMap::new();
    read_contacts(crm, &leads, &mut contacts).await?;
    progress(format!(
        "amoCRM GET /api/v4/contacts: {} contacts of {} leads",
        contacts.len(),
        leads.len()
    ));
    let entity = |l: &Value, c: &BTreeMap<String, Value>| from_amocrm(l, c, fields, region);
    let mut entities: Vec<CrmEntity> = leads.iter().filter_map(|l| entity(l, &contacts)).collect();
    if find_older {
        let mut phones: Vec<String> = entities.iter().flat_map(|e| e.phones.clone()).collect();
        let mut emails: Vec<String> = entities.iter().flat_map(|e| e.emails.clone()).collect();
        phones.sort();
        phones.dedup();
        emails.sort();
        emails.dedup();
        let known: BTreeSet<String> = entities.iter().map(|e| e.id.clone()).collect();
        let mut older: BTreeSet<String> = BTreeSet::new();
        let searches = phones
            .iter()
            .map(|p| ("PHONE", p))
            .chain(emails.iter().map(|e| ("EMAIL", e)));
        for (code, value) in searches {
            for found in crm.contacts_matching(&search_text(code, value)).await? {
                let holds = amocrm::reads::contact_values(&found.contact, code)
                    .iter()
                    .any(|v| match code {
                        "PHONE" => normalize_phone(v, region).as_ref() == Some(value),
                        _ => normalize_email(v).as_ref() == Some(value),
                    });
                if !holds {
                    continue;
                }
                older.extend(
                    found
                        .lead_ids
                        .iter()
                        .filter(|id| !known.contains(*id))
                        .cloned(),
                );
                if let Some(id) = found.contact.get("id").and_then(amocrm::reads::entity_id) {
                    contacts.entry(id).or_insert(found.contact);
                }
            }
        }
        let older: Vec<String> = older.into_iter().collect();
        // Only the older ones: a lead after the period is not a cause of its leads.
        let found: Vec<Value> = crm
            .leads_by_id(&older)
            .await?
            .into_iter()
            .filter(|l| {
                l.get("created_at")
                    .and_then(Value::as_i64)
                    .is_some_and(|t| t < from.timestamp())
            })
            .collect();
        read_contacts(crm, &found, &mut contacts).await?;
        progress(format!(
            "amoCRM contact search: {} phones, {} e-mails, {} older leads",
            phones.len(),
            emails.len(),
            found.len()
        ));
        entities.extend(found.iter().filter_map(|l| entity(l, &contacts)));
    }
    Ok(entities)
}

/// Reads the contacts of `leads` not in `contacts` yet.
async fn read_contacts(
    crm: &AmoCrm,
    leads: &[Value],
    contacts: &mut BTreeMap<String, Value>,
) -> anyhow::Result<()> {
    let mut wanted: Vec<String> = leads
        .iter()
        .flat_map(amocrm::reads::contact_ids)
        .filter(|id| !contacts.contains_key(id))
        .collect();
    wanted.sort();
    wanted.dedup();
    for c in crm.contacts_by_id(&wanted).await? {
        if let Some(id) = c.get("id").and_then(amocrm::reads::entity_id) {
            contacts.insert(id, c);
        }
    }
    Ok(())
}

/// What amoCRM's contact search is asked for: an e-mail as it is, a phone by its last
/// ten digits (a contact may hold it as `8 (999) …` or `+7 999 …`).
fn search_text(code: &str, value: &str) -> String {
    match code {
        "PHONE" => {
            let digits: Vec<char> = value.chars().filter(char::is_ascii_digit).collect();
            digits[digits.len().saturating_sub(10)..].iter().collect()
        }
        _ => value.to_owned(),
    }
}

/// A database named for a message: a URL without its password.
fn shown(source: &str) -> String {
    match reqwest::Url::parse(source) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some("***"));
            url.to_string()
        }
        _ => source.to_owned(),
    }
}
