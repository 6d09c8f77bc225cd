//! The diagnosis report as data: what `leadgate diagnose` shows in its HTML and
//! Markdown, kept in the operations database for the console's *Diagnosis* screen.
//! Only the shape lives here (the store keeps it as JSON, the console reads it); the
//! diagnosis that fills it is `leadgate::diagnose`.
//!
//! Each sentence is kept twice: as English text (what the HTML and Markdown show, and
//! what reports saved before the codes carry alone) and as its code with arguments
//! ([`said`]), which the console says in the operator's language. The English is
//! rendered from the code, in one place ([`said`]'s `Display`s).

pub mod said;
pub use said::{
    duration, ContentMeasure, Evidence, KeyKind, LineDetail, LineText, ReportInput, SourcesRead,
    Trigger,
};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};

/// The report as data: what the HTML and Markdown show, kept in the operations
/// database (`Upkeep::save_diagnosis`) for the console's *Diagnosis* screen. Contacts
/// are masked here as in the reports; the texts are untrusted and shown as text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
pub struct ReportData {
    pub generated_at: DateTime<Utc>,
    /// What was read: "CSV export leads.csv", "amoCRM leads and contact search (API v4)".
    pub input: String,
    /// [`ReportData::input`] as a code (none in reports saved before the codes).
    #[serde(default, deserialize_with = "lenient")]
    pub input_code: Option<ReportInput>,
    pub period_from: Option<DateTime<Utc>>,
    pub period_to: Option<DateTime<Utc>>,
    /// What was read, in words ("132 CRM entities (…), Leadgate's journal, no n8n history").
    pub sources_read: String,
    /// [`ReportData::sources_read`] as a code (none in reports saved before the codes).
    #[serde(default, deserialize_with = "lenient")]
    pub sources_read_code: Option<SourcesRead>,
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
    /// What set it off, the cause after the verdict's title (none in reports saved
    /// before the codes, and for causes that are the verdict alone).
    #[serde(default, deserialize_with = "lenient")]
    pub trigger: Option<Trigger>,
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
    /// As in [`CauseCount::trigger`].
    #[serde(default, deserialize_with = "lenient")]
    pub trigger: Option<Trigger>,
    pub source: String,
    pub evidence: Vec<String>,
    /// [`PairData::evidence`] as codes, line for line (empty in reports saved before
    /// the codes).
    #[serde(default, deserialize_with = "lenient")]
    pub evidence_codes: Vec<Evidence>,
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
    /// [`LineData::text`] as a code (none in reports saved before the codes).
    #[serde(default, deserialize_with = "lenient")]
    pub text_code: Option<LineText>,
}

/// A code as saved, or none when it is not one this version knows (a report saved by a
/// newer Leadgate): the console then shows the English text saved beside it, as for a
/// report saved before the codes.
fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let v = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(v).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report saved before the codes (its JSON as 0.x wrote it) still reads, with no
    /// code anywhere: the console shows its English text.
    #[test]
    fn a_report_saved_before_the_codes_still_reads() {
        let saved = serde_json::json!({
            "generated_at": "2026-12-02T06:00:00Z", "input": "CSV export leads.csv",
            "period_from": null, "period_to": null,
            "sources_read": "3 CRM entities (CSV export leads.csv), no Leadgate journal, no n8n history",
            "entities_read": 3, "groups": 1, "pairs": 1,
            "per_verdict": [{"verdict": "technical_duplicate", "title": "Technical duplicate", "pairs": 1}],
            "per_source": [{"source": "WEB", "pairs": [1]}],
            "causes": [{"verdict": "technical_duplicate", "cause": "Technical duplicate: two workers", "pairs": 1}],
            "pair_list": [{"number": 1, "earlier": "1", "later": "2", "shared": [], "verdict": "technical_duplicate",
                "cause": "Technical duplicate: two workers", "source": "WEB",
                "evidence": ["attempts by worker:a and worker:b"],
                "timeline": [{"at": null, "origin": "CRM", "entity": "1", "text": "entity 1 created in the CRM (no ORIGIN_ID)"}]}]
        });
        let r: ReportData = serde_json::from_value(saved).unwrap();
        assert_eq!((&r.input_code, &r.sources_read_code), (&None, &None));
        assert_eq!(r.causes[0].trigger, None);
        let p = &r.pair_list[0];
        assert_eq!(p.evidence, ["attempts by worker:a and worker:b"]);
        assert!(p.evidence_codes.is_empty() && p.trigger.is_none());
        assert_eq!(p.timeline[0].text_code, None);
    }

    /// A code this version does not know (from a newer Leadgate) is no code: the report
    /// still reads, and the console shows that sentence's English text.
    #[test]
    fn a_code_from_a_newer_version_is_read_as_none() {
        let line: LineData = serde_json::from_value(serde_json::json!({
            "at": null, "origin": "n8n", "entity": "1", "text": "a newer line",
            "text_code": {"code": "from_a_newer_leadgate", "args": {"x": 1}}
        }))
        .unwrap();
        assert_eq!((line.text.as_str(), line.text_code), ("a newer line", None));
        let pair: PairData = serde_json::from_value(serde_json::json!({
            "number": 1, "earlier": "1", "later": "2", "shared": [], "verdict": "technical_duplicate",
            "cause": "Technical duplicate: a newer trigger", "trigger": "a_newer_trigger", "source": "WEB",
            "evidence": ["the source delivered it 2 times", "a newer sentence"],
            "evidence_codes": [{"code": "delivered_times", "args": {"n": 2}}, {"code": "a_newer_one"}],
            "timeline": []
        }))
        .unwrap();
        assert_eq!(pair.trigger, None);
        assert!(
            pair.evidence_codes.is_empty(),
            "all the text, not half of it"
        );
        let known: PairData = serde_json::from_value(serde_json::json!({
            "number": 1, "earlier": "1", "later": "2", "shared": [], "verdict": "technical_duplicate",
            "cause": "Technical duplicate: redelivery of the same event", "trigger": "redelivery", "source": "WEB",
            "evidence": ["the source delivered it 2 times"],
            "evidence_codes": [{"code": "delivered_times", "args": {"n": 2}}],
            "timeline": []
        }))
        .unwrap();
        assert_eq!(known.trigger, Some(Trigger::Redelivery));
        assert_eq!(known.evidence_codes, [Evidence::DeliveredTimes { n: 2 }]);
    }
}
