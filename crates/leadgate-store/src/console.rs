//! Types of the store queries the operator console needs beyond the review queue: other
//! queue tabs, link candidates, the conflicting delivery, dashboard time series and the
//! schema check.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

/// Keyset paging over operations ordered by a time column and `operation_id` (oldest
/// first, or newest first): pass the last pair seen to get the next page. Stays fast at
/// any depth (no offset); the filters are part of the query, so every page is full.
#[derive(Debug, Clone, Default)]
pub struct OperationPage {
    pub after: Option<(DateTime<Utc>, String)>,
    pub limit: i64,
    pub newest_first: bool,
    pub source: Option<String>,
    /// Only operations whose time column is before this (older than an age).
    pub before: Option<DateTime<Utc>>,
}

/// Counts of the queue tabs that are not review cases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QueueCounts {
    pub failed_terminal: i64,
    /// `in_progress` whose lease ran out before the given time.
    pub stale_in_progress: i64,
}

/// One journaled delivery, as the console shows it (a payload conflict's other side).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeliveryView {
    pub id: i64,
    pub source: String,
    pub operation_id: Option<String>,
    pub received_at: DateTime<Utc>,
    pub outcome: String,
    pub payload: Option<Value>,
    pub payload_hash: Option<String>,
}

/// The dashboard's figures for one time bucket `[start, end)`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SeriesPoint {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// Deliveries accepted (not rejected).
    pub deliveries: i64,
    /// Operations created (deliveries that claimed a new key).
    pub new_operations: i64,
    /// CRM entities created or found again by key.
    pub crm_entities: i64,
    pub duplicates_absorbed: i64,
    pub cases_opened: i64,
    pub cases_resolved: i64,
    /// `class -> retries scheduled`.
    pub retries_by_class: BTreeMap<String, i64>,
}

/// The dashboard's time resolution: figures over time are kept per 5-minute slot
/// (`metric_series`, migration 0004).
pub const SLOT_SECONDS: i64 = 300;

/// Whole slots `[lo, hi)` (unix seconds / `SLOT_SECONDS`) for `buckets` equal buckets
/// covering `[from, to)`: `to` is rounded up and `from` down to a slot, and a bucket is a
/// whole number of slots (at least one), so every slot falls in exactly one bucket.
pub fn slot_buckets(from: DateTime<Utc>, to: DateTime<Utc>, buckets: u32) -> Vec<(i64, i64)> {
    let n = buckets.clamp(1, 500) as i64;
    let first = from.timestamp().div_euclid(SLOT_SECONDS);
    let end = (to.timestamp() + SLOT_SECONDS - 1)
        .div_euclid(SLOT_SECONDS)
        .max(first + 1);
    let step = ((end - first) + n - 1) / n;
    let start = end - step * n;
    (0..n)
        .map(|i| (start + step * i, start + step * (i + 1)))
        .collect()
}

/// The start of a slot as a time.
pub fn slot_time(slot: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(slot * SLOT_SECONDS, 0).unwrap_or_default()
}

/// A saved `leadgate diagnose` report (migration 0020), as the console lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiagnosisSummary {
    pub id: i64,
    pub generated_at: DateTime<Utc>,
    /// What was read ("amoCRM leads and contact search (API v4)", "CSV export x.csv").
    pub input: String,
    pub period_from: Option<DateTime<Utc>>,
    pub period_to: Option<DateTime<Utc>>,
    pub groups: i64,
    pub pairs: i64,
    /// Verdict code → pairs.
    pub totals: BTreeMap<String, i64>,
}

/// A report to save: its summary (the `id` is the database's) and the report itself
/// (`diagnose::report::ReportData` as JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct NewDiagnosis {
    pub summary: DiagnosisSummary,
    pub report: Value,
}
