//! The *Diagnosis* screen: the reports `leadgate diagnose` saved in the operations
//! database (migration 0020), listed and shown as the HTML report shows them. The
//! console makes no diagnosis itself (it holds no CRM credentials); it reads what the
//! command line saved, through the store like every other screen. Who may read them is
//! the database's decision (casework roles; migration 0020).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use leadgate_domain::report::{ReportData, ReportInput};
use leadgate_store::DiagnosisSummary;

use crate::{ts, ApiResult, Console, ConsoleError};

/// At most this many reports are listed.
pub const MAX_DIAGNOSES: i64 = 200;

/// A saved report in the list: when, what was read, the period, the totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct DiagnosisRow {
    #[ts(type = "number")]
    pub id: i64,
    pub generated_at: String,
    pub input: String,
    /// [`DiagnosisRow::input`] as a code, for the console's language (none when the
    /// text names no input this version knows).
    pub input_code: Option<ReportInput>,
    pub period_from: Option<String>,
    pub period_to: Option<String>,
    #[ts(type = "number")]
    pub groups: i64,
    #[ts(type = "number")]
    pub pairs: i64,
    /// Verdict code → pairs.
    #[ts(type = "Record<string, number>")]
    pub totals: BTreeMap<String, i64>,
}

impl DiagnosisRow {
    fn of(s: DiagnosisSummary) -> DiagnosisRow {
        DiagnosisRow {
            id: s.id,
            generated_at: ts(s.generated_at),
            input_code: ReportInput::parse(&s.input),
            input: s.input,
            period_from: s.period_from.map(ts),
            period_to: s.period_to.map(ts),
            groups: s.groups,
            pairs: s.pairs,
            totals: s.totals,
        }
    }
}

/// One saved report: its row and the report itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct DiagnosisView {
    pub row: DiagnosisRow,
    pub report: ReportData,
}

impl Console {
    /// The saved reports, the newest first.
    pub async fn diagnoses(&self) -> ApiResult<Vec<DiagnosisRow>> {
        Ok(self
            .store()
            .diagnoses(MAX_DIAGNOSES)
            .await?
            .into_iter()
            .map(DiagnosisRow::of)
            .collect())
    }

    /// One saved report.
    pub async fn diagnosis(&self, id: i64) -> ApiResult<DiagnosisView> {
        let (summary, report) =
            self.store()
                .diagnosis(id)
                .await?
                .ok_or_else(|| ConsoleError::NotFound {
                    message: format!("there is no saved diagnosis {id}"),
                })?;
        let report = serde_json::from_value(report).map_err(|e| ConsoleError::Failed {
            message: format!(
                "diagnosis {id} was saved by another version of leadgate and cannot be shown: {e}"
            ),
        })?;
        Ok(DiagnosisView {
            row: DiagnosisRow::of(summary),
            report,
        })
    }
}
