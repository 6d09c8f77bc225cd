//! The diagnosis report as data: what `leadgate diagnose` shows in its HTML and
//! Markdown, kept in the operations database for the console's *Diagnosis* screen.
//! Only the shape lives here (the store keeps it as JSON, the console reads it); the
//! diagnosis that fills it is `leadgate::diagnose`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The report as data: what the HTML and Markdown show, kept in the operations
/// database (`Upkeep::save_diagnosis`) for the console's *Diagnosis* screen. Contacts
/// are masked here as in the reports; the texts are untrusted and shown as text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct ReportData {
    pub generated_at: DateTime<Utc>,
    /// What was read: "CSV export leads.csv", "amoCRM leads and contact search (API v4)".
    pub input: String,
    pub period_from: Option<DateTime<Utc>>,
    pub period_to: Option<DateTime<Utc>>,
    /// What was read, in words ("132 CRM entities (…), Leadgate's journal, no n8n history").
    pub sources_read: String,
    pub entities_read: u32,
    pub groups: u32,
    pub pairs: u32,
    /// Every verdict, in the order of the rules, with its pairs (zeros included).
    pub per_verdict: Vec<VerdictCount>,
    /// Per source: pairs per verdict, in the order of [`ReportData::per_verdict`].
    pub per_source: Vec<SourceCounts>,
    /// The most frequent first.
    pub causes: Vec<CauseCount>,
    pub pair_list: Vec<PairData>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct VerdictCount {
    /// `Verdict::code`: `technical_duplicate`, `same_submission_without_key`, …
    pub verdict: String,
    pub title: String,
    pub pairs: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct SourceCounts {
    pub source: String,
    pub pairs: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct CauseCount {
    pub verdict: String,
    /// "Technical duplicate: timeout after a successful create".
    pub cause: String,
    pub pairs: u32,
}

/// One pair: the earlier and the later entity, its verdict, evidence and merged timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct PairData {
    pub number: u32,
    pub earlier: String,
    pub later: String,
    /// The phones and e-mails the group shares, masked.
    pub shared: Vec<String>,
    pub verdict: String,
    pub cause: String,
    pub source: String,
    pub evidence: Vec<String>,
    pub timeline: Vec<LineData>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct LineData {
    pub at: Option<DateTime<Utc>>,
    /// `CRM`, `Leadgate` or `n8n`.
    pub origin: String,
    pub entity: String,
    pub text: String,
}
