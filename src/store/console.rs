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

/// Splits `[from, to)` into `buckets` equal buckets (at least one, at most 500).
pub fn buckets(
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    buckets: u32,
) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    let n = buckets.clamp(1, 500) as i64;
    let span = (to - from).num_microseconds().unwrap_or(i64::MAX).max(n);
    let step = span / n;
    (0..n)
        .map(|i| {
            let lo = from + chrono::TimeDelta::microseconds(step * i);
            let hi = if i == n - 1 {
                to.max(lo)
            } else {
                lo + chrono::TimeDelta::microseconds(step)
            };
            (lo, hi)
        })
        .collect()
}
