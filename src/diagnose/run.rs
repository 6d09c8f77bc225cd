//! One `leadgate diagnose` run: read the CRM (a CSV export or Bitrix24's API), read
//! n8n's history, tie, decide, and hand back the diagnosis. Progress goes to the
//! caller's `progress` (the CLI prints it on stderr).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, FixedOffset, TimeDelta, Utc};

use super::{diagnose, from_bitrix24, CrmEntity, Diagnosis, Options};
use crate::crm::bitrix24::{Bitrix24, Entity, DEFAULT_BURST, DEFAULT_RATE_LIMIT};
use crate::store::Store;

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

/// Runs the diagnosis.
pub async fn run(
    request: &Request,
    progress: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<Diagnosis> {
    let region = request.options.region;
    let (entities, input): (Vec<CrmEntity>, String) = match &request.crm {
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
            (entities, format!("CSV export {name}"))
        }
        CrmInput::Bitrix24 {
            webhook_url,
            rate_limit,
            burst,
            find_older,
        } => {
            let (from, to) = request
                .period
                .unwrap_or_else(|| (Utc::now() - TimeDelta::days(30), Utc::now()));
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
            (
                entities,
                "Bitrix24 crm.lead.list and crm.duplicate.findbycomm".into(),
            )
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
