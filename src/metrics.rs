//! The figures of docs/SPEC.md "Metrics", for `/metrics` (Prometheus text format) and for
//! `leadgate metrics` (a table support can read). Both come from one store snapshot,
//! so every process sharing the database reports the same totals.
//!
//! The figures are counters the database keeps, not scans. `metric_counters` (migration
//! 0004) holds what would otherwise be counted over operations, deliveries and the
//! timeline (operations by status, deliveries by source and outcome, CRM entities
//! created, retries by class, lost and unreconstructable leads); triggers on those tables
//! keep it in the writing transaction, so a figure cannot disagree with its rows
//! whichever process wrote them. The one writer that counts for itself is PostgreSQL's
//! grouped intake (see `store::postgres`). On PostgreSQL each counter is sharded by the
//! session's backend pid (migration 0006), so two sessions never write the same row:
//! writers neither queue on a hot row nor deadlock over two; a figure is the sum of its
//! shards. SQLite has one writer and one shard. Lost and unreconstructable are judged when
//! the row is written (a delivery without its operation; a completion without a
//! `crm_created`, `recovered`, `linked` or `human_action` event), so writes that bypass the
//! store are counted too.
//!
//! So `/metrics`, `leadgate metrics` and the dashboard read a bounded number of rows
//! however large the tables grow. The dashboard's charts read `metric_series` the same
//! way: the same figures per 5-minute slot (a month is 8,640 slots). The retention loop
//! folds the PostgreSQL shards of past slots into one row each (`Upkeep::compact_metrics`),
//! and the counter shards of sessions that ended into one.

use std::fmt::Write;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::store::MetricsSnapshot;

type Labels = Vec<(&'static str, String)>;

fn counter(reg: &mut Registry, name: &str, help: &str, value: i64) {
    let c = Counter::<u64>::default();
    c.inc_by(value.max(0) as u64);
    reg.register(name, help, c);
}

fn gauge(reg: &mut Registry, name: &str, help: &str, value: i64) {
    let g = Gauge::<i64>::default();
    g.set(value);
    reg.register(name, help, g);
}

fn counter_family<'a>(
    reg: &mut Registry,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, &'a i64)>,
) {
    let f = Family::<Labels, Counter<u64>>::default();
    for (labels, n) in rows {
        f.get_or_create(&labels).inc_by((*n).max(0) as u64);
    }
    reg.register(name, help, f);
}

fn gauge_family<'a>(
    reg: &mut Registry,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, &'a i64)>,
) {
    let f = Family::<Labels, Gauge<i64>>::default();
    for (labels, n) in rows {
        f.get_or_create(&labels).set(*n);
    }
    reg.register(name, help, f);
}

/// The snapshot in the Prometheus text exposition format.
pub fn exposition(m: &MetricsSnapshot, connectors: &[crate::store::Connector]) -> String {
    let mut reg = Registry::with_prefix("leadgate");
    counter_family(
        &mut reg,
        "deliveries",
        "Deliveries journaled, by source and outcome (new, duplicate, conflict, rejected)",
        m.deliveries
            .iter()
            .map(|((s, o), n)| (vec![("source", s.clone()), ("outcome", o.clone())], n)),
    );
    counter(
        &mut reg,
        "operations",
        "Unique operation ids",
        m.unique_operations,
    );
    counter(
        &mut reg,
        "crm_entities_created",
        "CRM entities created for operations (must not exceed unique operations)",
        m.crm_entities_created,
    );
    counter_family(
        &mut reg,
        "crm_steps",
        "Entities the steps of contact-and-deal creates produced, by kind and how \
         (contact: created, linked, recovered; deal: created, recovered)",
        m.crm_steps
            .iter()
            .map(|((e, h), n)| (vec![("entity", e.clone()), ("how", h.clone())], n)),
    );
    counter_family(
        &mut reg,
        "duplicates_absorbed",
        "Repeated deliveries answered with the saved result, by source",
        m.duplicates_absorbed
            .iter()
            .map(|(s, n)| (vec![("source", s.clone())], n)),
    );
    counter_family(
        &mut reg,
        "retries",
        "CRM attempts retried, by error class",
        m.retries_by_class
            .iter()
            .map(|(c, n)| (vec![("class", c.clone())], n)),
    );
    gauge_family(
        &mut reg,
        "operations_by_status",
        "Operations by status",
        m.operations_by_status
            .iter()
            .map(|(s, n)| (vec![("status", s.clone())], n)),
    );
    gauge(
        &mut reg,
        "stale_in_progress",
        "Operations in progress for longer than review.stale_after",
        m.stale_in_progress,
    );
    gauge(
        &mut reg,
        "unprocessed",
        "Accepted operations without a final status (received or in progress)",
        m.unprocessed,
    );
    gauge(
        &mut reg,
        "lost",
        "Accepted deliveries without an operation (must be 0)",
        m.lost,
    );
    gauge(
        &mut reg,
        "unreconstructable",
        "Completed operations whose timeline does not show how the result was obtained",
        m.unreconstructable,
    );
    gauge_family(
        &mut reg,
        "review_cases_open",
        "Open review cases, by reason",
        m.open_cases_by_reason
            .iter()
            .map(|(r, n)| (vec![("reason", r.clone())], n)),
    );
    counter(
        &mut reg,
        "review_cases_resolved",
        "Review cases resolved by a person",
        m.resolved_cases,
    );
    let mean = Gauge::<f64, AtomicU64>::default();
    mean.set(m.mean_seconds_to_resolve.unwrap_or(0.0));
    reg.register(
        "review_resolve_seconds_mean",
        "Mean time from a review case opening to its resolution",
        mean,
    );
    let paused = Family::<Labels, Gauge<i64>>::default();
    for c in connectors {
        paused
            .get_or_create(&vec![("connector", c.name.clone())])
            .set(i64::from(c.paused));
    }
    reg.register(
        "connector_paused",
        "1 while a CRM connector is paused (an auth failure, or by hand), else 0",
        paused,
    );
    let by_hand = Family::<Labels, Gauge<i64>>::default();
    for c in connectors {
        by_hand
            .get_or_create(&vec![("connector", c.name.clone())])
            .set(i64::from(c.by_hand));
    }
    reg.register(
        "connector_paused_by_hand",
        "1 while a CRM connector is paused by a person (leadgate connector pause, the console), else 0",
        by_hand,
    );
    let unreachable = Family::<Labels, Gauge<i64>>::default();
    for c in connectors {
        unreachable
            .get_or_create(&vec![("connector", c.name.clone())])
            .set(c.unreachable_since.map_or(0, |t| t.timestamp()));
    }
    reg.register(
        "connector_unreachable_since_seconds",
        "Unix time since which a connector's CRM does not answer (an outage; leads wait for its probes), else 0",
        unreachable,
    );
    let mut out = String::new();
    encode(&mut out, &reg).expect("writing to a String cannot fail");
    out
}

/// The snapshot as a table for a terminal.
pub fn table(m: &MetricsSnapshot) -> String {
    let mut out = String::new();
    let mut row = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<44} {v:>10}");
    };
    row("unique operations", m.unique_operations.to_string());
    row("CRM entities created", m.crm_entities_created.to_string());
    for ((e, h), n) in &m.crm_steps {
        row(&format!("  {e}s {h}"), n.to_string());
    }
    let absorbed: i64 = m.duplicates_absorbed.values().sum();
    row("duplicates absorbed", absorbed.to_string());
    for (s, n) in &m.duplicates_absorbed {
        row(&format!("  from {s}"), n.to_string());
    }
    for ((s, o), n) in &m.deliveries {
        row(&format!("deliveries {s} / {o}"), n.to_string());
    }
    for (c, n) in &m.retries_by_class {
        row(&format!("retries ({c})"), n.to_string());
    }
    for (s, n) in &m.operations_by_status {
        row(&format!("operations {s}"), n.to_string());
    }
    row(
        "in progress too long (stale)",
        m.stale_in_progress.to_string(),
    );
    row(
        "unprocessed (received or in progress)",
        m.unprocessed.to_string(),
    );
    row("lost (accepted without an operation)", m.lost.to_string());
    row(
        "results the journal cannot reconstruct",
        m.unreconstructable.to_string(),
    );
    let open: i64 = m.open_cases_by_reason.values().sum();
    row("review cases open", open.to_string());
    for (r, n) in &m.open_cases_by_reason {
        row(&format!("  {r}"), n.to_string());
    }
    row("review cases resolved", m.resolved_cases.to_string());
    for (o, n) in &m.feed_deliveries {
        row(&format!("event-feed deliveries ({o})"), n.to_string());
    }
    row(
        "mean time to resolve",
        m.mean_seconds_to_resolve
            .map(|s| format!("{s:.0}s"))
            .unwrap_or_else(|| "-".into()),
    );
    row(
        "unreachable CRMs",
        if m.unreachable_connectors.is_empty() {
            "none".into()
        } else {
            m.unreachable_connectors
                .iter()
                .map(|(c, since)| {
                    format!(
                        "{c} since {}, {} leads waiting",
                        since.format("%Y-%m-%d %H:%M UTC"),
                        m.unprocessed
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        },
    );
    row(
        "paused connectors",
        if m.paused_connectors.is_empty() {
            "none".into()
        } else {
            m.paused_connectors.join(", ")
        },
    );
    out
}
