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

/// One tenant's figures as `/metrics` shows them: with a `tenant` label on every series
/// (`tenant: Some`), or, for a deployment without tenants, without one.
pub struct Figures<'a> {
    pub tenant: Option<&'a str>,
    pub metrics: &'a MetricsSnapshot,
    pub connectors: &'a [crate::store::Connector],
}

impl Figures<'_> {
    /// `labels` with this tenant's first.
    fn labels(&self, mut labels: Labels) -> Labels {
        if let Some(t) = self.tenant {
            labels.insert(0, ("tenant", t.to_owned()));
        }
        labels
    }
}

/// Whether the figures are the one unlabelled tenant of a deployment without tenants:
/// then every figure is a plain counter or gauge, as before fleet mode.
fn unlabelled(figs: &[Figures]) -> bool {
    matches!(figs, [f] if f.tenant.is_none())
}

fn counter(
    reg: &mut Registry,
    name: &str,
    help: &str,
    figs: &[Figures],
    value: fn(&MetricsSnapshot) -> i64,
) {
    if unlabelled(figs) {
        let c = Counter::<u64>::default();
        c.inc_by(value(figs[0].metrics).max(0) as u64);
        reg.register(name, help, c);
    } else {
        let n: Vec<i64> = figs.iter().map(|f| value(f.metrics)).collect();
        counter_family(
            reg,
            name,
            help,
            figs.iter().zip(&n).map(|(f, n)| (f.labels(vec![]), n)),
        );
    }
}

fn gauge(
    reg: &mut Registry,
    name: &str,
    help: &str,
    figs: &[Figures],
    value: fn(&MetricsSnapshot) -> i64,
) {
    if unlabelled(figs) {
        let g = Gauge::<i64>::default();
        g.set(value(figs[0].metrics));
        reg.register(name, help, g);
    } else {
        let n: Vec<i64> = figs.iter().map(|f| value(f.metrics)).collect();
        gauge_family(
            reg,
            name,
            help,
            figs.iter().zip(&n).map(|(f, n)| (f.labels(vec![]), n)),
        );
    }
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

/// A gauge family over every tenant's connectors.
fn connector_gauge(
    reg: &mut Registry,
    name: &str,
    help: &str,
    figs: &[Figures],
    value: fn(&crate::store::Connector) -> i64,
) {
    let family = Family::<Labels, Gauge<i64>>::default();
    for f in figs {
        for c in f.connectors {
            family
                .get_or_create(&f.labels(vec![("connector", c.name.clone())]))
                .set(value(c));
        }
    }
    reg.register(name, help, family);
}

/// The figures in the Prometheus text exposition format: one tenant's, or every tenant's
/// labelled with its slug.
pub fn exposition(figs: &[Figures]) -> String {
    let mut reg = Registry::with_prefix("leadgate");
    counter_family(
        &mut reg,
        "deliveries",
        "Deliveries journaled, by source and outcome (new, duplicate, conflict, rejected)",
        figs.iter().flat_map(|f| {
            f.metrics.deliveries.iter().map(|((s, o), n)| {
                (
                    f.labels(vec![("source", s.clone()), ("outcome", o.clone())]),
                    n,
                )
            })
        }),
    );
    counter(&mut reg, "operations", "Unique operation ids", figs, |m| {
        m.unique_operations
    });
    counter(
        &mut reg,
        "crm_entities_created",
        "CRM entities created for operations (must not exceed unique operations)",
        figs,
        |m| m.crm_entities_created,
    );
    counter_family(
        &mut reg,
        "crm_steps",
        "Entities the steps of contact-and-deal creates produced, by kind and how \
         (contact: created, linked, recovered; deal: created, recovered)",
        figs.iter().flat_map(|f| {
            f.metrics
                .crm_steps
                .iter()
                .map(|((e, h), n)| (f.labels(vec![("entity", e.clone()), ("how", h.clone())]), n))
        }),
    );
    counter_family(
        &mut reg,
        "duplicates_absorbed",
        "Repeated deliveries answered with the saved result, by source",
        figs.iter().flat_map(|f| {
            f.metrics
                .duplicates_absorbed
                .iter()
                .map(|(s, n)| (f.labels(vec![("source", s.clone())]), n))
        }),
    );
    counter_family(
        &mut reg,
        "retries",
        "CRM attempts retried, by error class",
        figs.iter().flat_map(|f| {
            f.metrics
                .retries_by_class
                .iter()
                .map(|(c, n)| (f.labels(vec![("class", c.clone())]), n))
        }),
    );
    gauge_family(
        &mut reg,
        "operations_by_status",
        "Operations by status",
        figs.iter().flat_map(|f| {
            f.metrics
                .operations_by_status
                .iter()
                .map(|(s, n)| (f.labels(vec![("status", s.clone())]), n))
        }),
    );
    gauge(
        &mut reg,
        "stale_in_progress",
        "Operations in progress for longer than review.stale_after",
        figs,
        |m| m.stale_in_progress,
    );
    gauge(
        &mut reg,
        "unprocessed",
        "Accepted operations without a final status (received or in progress)",
        figs,
        |m| m.unprocessed,
    );
    gauge(
        &mut reg,
        "lost",
        "Accepted deliveries without an operation (must be 0)",
        figs,
        |m| m.lost,
    );
    gauge(
        &mut reg,
        "unreconstructable",
        "Completed operations whose timeline does not show how the result was obtained",
        figs,
        |m| m.unreconstructable,
    );
    gauge_family(
        &mut reg,
        "review_cases_open",
        "Open review cases, by reason",
        figs.iter().flat_map(|f| {
            f.metrics
                .open_cases_by_reason
                .iter()
                .map(|(r, n)| (f.labels(vec![("reason", r.clone())]), n))
        }),
    );
    counter(
        &mut reg,
        "review_cases_resolved",
        "Review cases resolved by a person",
        figs,
        |m| m.resolved_cases,
    );
    let (name, help) = (
        "review_resolve_seconds_mean",
        "Mean time from a review case opening to its resolution",
    );
    if unlabelled(figs) {
        let mean = Gauge::<f64, AtomicU64>::default();
        mean.set(figs[0].metrics.mean_seconds_to_resolve.unwrap_or(0.0));
        reg.register(name, help, mean);
    } else {
        let family = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        for f in figs {
            family
                .get_or_create(&f.labels(vec![]))
                .set(f.metrics.mean_seconds_to_resolve.unwrap_or(0.0));
        }
        reg.register(name, help, family);
    }
    connector_gauge(
        &mut reg,
        "connector_paused",
        "1 while a CRM connector is paused (an auth failure, or by hand), else 0",
        figs,
        |c| i64::from(c.paused),
    );
    connector_gauge(
        &mut reg,
        "connector_paused_by_hand",
        "1 while a CRM connector is paused by a person (leadgate connector pause, the console), else 0",
        figs,
        |c| i64::from(c.by_hand),
    );
    connector_gauge(
        &mut reg,
        "connector_unreachable_since_seconds",
        "Unix time since which a connector's CRM does not answer (an outage; leads wait for its probes), else 0",
        figs,
        |c| c.unreachable_since.map_or(0, |t| t.timestamp()),
    );
    let mut out = String::new();
    encode(&mut out, &reg).expect("writing to a String cannot fail");
    out
}

/// `/metrics` of a gateway: every tenant's figures (`fleet`), labelled with its slug once
/// a tenant other than the default one exists; without tenants, exactly as before fleet
/// mode.
pub fn fleet_exposition(fleet: &[crate::store::TenantMetrics]) -> String {
    let labelled = fleet.iter().any(|t| !t.tenant.is_default());
    let figs: Vec<Figures> = fleet
        .iter()
        .map(|t| Figures {
            tenant: labelled.then_some(t.slug.as_str()),
            metrics: &t.metrics,
            connectors: &t.connectors,
        })
        .collect();
    exposition(&figs)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::TenantId;
    use crate::store::TenantMetrics;

    fn tenant(id: i32, slug: &str, operations: i64) -> TenantMetrics {
        let mut t = TenantMetrics::new(TenantId(id), slug.to_owned());
        t.metrics
            .operations_by_status
            .insert("completed".into(), operations);
        t.metrics.unique_operations = operations;
        t.metrics.crm_entities_created = operations;
        t
    }

    /// Sample lines (not `#` comments) of an exposition.
    fn samples(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.starts_with('#')).collect()
    }

    #[test]
    fn without_tenants_the_figures_are_plain_as_before() {
        let one = [tenant(0, "default", 3)];
        let text = fleet_exposition(&one);
        assert!(!text.contains("tenant"), "{text}");
        assert!(text.contains("\nleadgate_operations_total 3\n"), "{text}");
        assert!(text.contains("\nleadgate_lost 0\n"), "{text}");
        assert!(
            text.contains("\nleadgate_operations_by_status{status=\"completed\"} 3\n"),
            "{text}"
        );
        // As one unlabelled tenant's exposition.
        let m = &one[0];
        let plain = exposition(&[Figures {
            tenant: None,
            metrics: &m.metrics,
            connectors: &m.connectors,
        }]);
        assert_eq!(text, plain);
    }

    #[test]
    fn with_tenants_every_series_carries_its_tenant() {
        let fleet = [tenant(0, "default", 2), tenant(1, "acme", 5)];
        let text = fleet_exposition(&fleet);
        assert!(
            text.contains("\nleadgate_operations_total{tenant=\"acme\"} 5\n"),
            "{text}"
        );
        assert!(
            text.contains("\nleadgate_operations_total{tenant=\"default\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("leadgate_operations_by_status{tenant=\"acme\",status=\"completed\"} 5"),
            "{text}"
        );
        let lines = samples(&text);
        assert!(lines.len() > 10, "{text}");
        for line in lines {
            assert!(line.contains("tenant=\""), "{line}");
        }
    }
}
