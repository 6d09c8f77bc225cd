//! The current queue tab with its filters, as a CSV file a manager opens in Excel: UTF-8
//! with a byte-order mark (without one Excel reads Cyrillic as mojibake), one row per
//! case or operation, times in the operator's time zone.
//!
//! Column headers and status/reason names come from the console's own translations
//! (`labels`), so the file reads in the operator's language; a missing label falls back to
//! the English header or the code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, FixedOffset};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::{ApiResult, Console, ConsoleError, Selection};

/// At most this many rows in one file.
pub const MAX_EXPORT: usize = 100_000;

/// The columns, by label key and English header.
const COLUMNS: &[(&str, &str)] = &[
    ("case", "Case"),
    ("operation", "Operation"),
    ("name", "Name"),
    ("phone", "Phone"),
    ("email", "E-mail"),
    ("form", "Form"),
    ("source", "Source"),
    ("status", "Status"),
    ("reason", "Reason"),
    ("since", "Waiting since"),
    ("attempts", "Attempts"),
    ("crm_id", "CRM id"),
    ("note", "Details"),
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ExportRequest {
    /// The tab and its filters, or a search (cursor and limit are ignored: every
    /// matching row).
    pub selection: Selection,
    /// Headers (`col.<key>`), statuses (`status.<code>`) and reasons or error classes
    /// (`reason.<code>`) in the operator's language.
    pub labels: BTreeMap<String, String>,
    /// The operator's offset from UTC, in minutes east (Moscow: 180).
    pub utc_offset_minutes: i32,
    /// Fields separated by `;` instead of `,`: what Excel expects where the decimal
    /// separator is a comma (a Russian locale), else it opens the file in one column.
    #[serde(default)]
    #[ts(optional)]
    pub semicolons: Option<bool>,
}

impl Console {
    /// The rows of `req`'s tab and filters as CSV bytes (with the BOM), and how many rows.
    pub async fn export_csv(&self, req: &ExportRequest) -> ApiResult<(Vec<u8>, usize)> {
        let offset = FixedOffset::east_opt(req.utc_offset_minutes * 60).ok_or_else(|| {
            ConsoleError::Invalid {
                message: format!("bad UTC offset: {} minutes", req.utc_offset_minutes),
            }
        })?;
        let (rows, _) = self.rows_of(&req.selection, MAX_EXPORT).await?;
        let label = |key: String, fallback: &str| -> String {
            req.labels
                .get(&key)
                .cloned()
                .unwrap_or_else(|| fallback.to_owned())
        };
        let mut out = b"\xEF\xBB\xBF".to_vec();
        {
            let delimiter = if req.semicolons == Some(true) {
                b';'
            } else {
                b','
            };
            let mut w = csv::WriterBuilder::new()
                .delimiter(delimiter)
                .from_writer(&mut out);
            let zone = zone_name(offset);
            let header: Vec<String> = COLUMNS
                .iter()
                .map(|(key, en)| {
                    let h = label(format!("col.{key}"), en);
                    if *key == "since" {
                        format!("{h} ({zone})")
                    } else {
                        h
                    }
                })
                .collect();
            w.write_record(&header).map_err(csv_err)?;
            for r in &rows {
                let since = DateTime::parse_from_rfc3339(&r.since)
                    .map(|t| {
                        t.with_timezone(&offset)
                            .format("%Y-%m-%d %H:%M:%S")
                            .to_string()
                    })
                    .unwrap_or_else(|_| r.since.clone());
                let record = [
                    r.case_id.map(|c| c.to_string()).unwrap_or_default(),
                    r.operation_id.clone().unwrap_or_default(),
                    r.lead.name.clone().unwrap_or_default(),
                    r.lead.phone.clone().unwrap_or_default(),
                    r.lead.email.clone().unwrap_or_default(),
                    r.lead.form.clone().unwrap_or_default(),
                    r.source.clone(),
                    label(format!("status.{}", r.status), &r.status),
                    r.reason
                        .as_ref()
                        .map(|x| label(format!("reason.{x}"), x))
                        .unwrap_or_default(),
                    since,
                    r.attempts.to_string(),
                    r.crm_id.clone().unwrap_or_default(),
                    r.note.clone().unwrap_or_default(),
                ]
                .map(defuse);
                w.write_record(&record).map_err(csv_err)?;
            }
            w.flush().map_err(|e| ConsoleError::Failed {
                message: e.to_string(),
            })?;
        }
        Ok((out, rows.len()))
    }

    /// Writes [`Console::export_csv`] into `dir` as `leadgate-<tab>-<time>.csv`; returns
    /// the file's path and the number of rows.
    pub async fn export_to(&self, dir: &Path, req: &ExportRequest) -> ApiResult<(PathBuf, usize)> {
        let (bytes, n) = self.export_csv(req).await?;
        let tab = match req.selection.search {
            Some(_) => "search".to_owned(),
            None => serde_json::to_value(req.selection.tab)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "queue".into()),
        };
        let stamp = self.store.now().format("%Y%m%d-%H%M%S%.3f");
        let path = dir.join(format!("leadgate-{tab}-{stamp}.csv"));
        // Names and phones: readable by the operator only, as the settings file is.
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(dir)?;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(0o600);
            }
            use std::io::Write;
            options.open(&path)?.write_all(&bytes)
        };
        write().map_err(|e| ConsoleError::Failed {
            message: format!("cannot write {}: {e}", path.display()),
        })?;
        Ok((path, n))
    }
}

fn csv_err(e: csv::Error) -> ConsoleError {
    ConsoleError::Failed {
        message: e.to_string(),
    }
}

/// "UTC+3", "UTC-4:30", "UTC".
fn zone_name(offset: FixedOffset) -> String {
    let secs = offset.local_minus_utc();
    if secs == 0 {
        return "UTC".into();
    }
    let sign = if secs < 0 { '-' } else { '+' };
    let (h, m) = (secs.abs() / 3600, secs.abs() % 3600 / 60);
    if m == 0 {
        format!("UTC{sign}{h}")
    } else {
        format!("UTC{sign}{h}:{m:02}")
    }
}

/// A cell a spreadsheet would run as a formula (`=`, `+`, `-`, `@`, a tab or CR first:
/// a lead's name is whatever a web form sent) is prefixed with `'`, OWASP's advice
/// against CSV injection (and so that `+7 (916) 123-45-67` is not read as arithmetic). A
/// normalized phone (`+` and digits only) is the one exception kept as it is.
fn defuse(cell: String) -> String {
    let phone_like =
        cell.len() > 1 && cell.starts_with('+') && cell[1..].chars().all(|c| c.is_ascii_digit());
    match cell.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') if !phone_like => format!("'{cell}"),
        _ => cell,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_are_defused_and_phones_kept() {
        assert_eq!(defuse("=HYPERLINK(\"x\")".into()), "'=HYPERLINK(\"x\")");
        assert_eq!(defuse("@SUM(A1)".into()), "'@SUM(A1)");
        assert_eq!(defuse("-1+2".into()), "'-1+2");
        assert_eq!(defuse("+79161234567".into()), "+79161234567");
        assert_eq!(defuse("+7 (916) 123-45-67".into()), "'+7 (916) 123-45-67");
        assert_eq!(defuse("+1+cmd".into()), "'+1+cmd");
        assert_eq!(defuse("Ольга".into()), "Ольга");
    }

    #[test]
    fn zones_are_named_by_offset() {
        let z = |m: i32| zone_name(FixedOffset::east_opt(m * 60).unwrap());
        assert_eq!(z(0), "UTC");
        assert_eq!(z(180), "UTC+3");
        assert_eq!(z(-270), "UTC-4:30");
    }
}
