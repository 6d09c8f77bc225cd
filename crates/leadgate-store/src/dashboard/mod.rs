//! The [`Dashboard`] role: its trait, and (`sql.rs`) its implementation for both backends.

use crate::*;

pub(crate) mod sql;

/// The dashboard's, `/metrics`' and the alerts' counts: deliveries and operations by outcome, review
/// cases by reason, the queues, the connectors' health, time series. Each the store's
/// tenant's, but `fleet_metrics` (every tenant's).
#[async_trait::async_trait]
pub trait Dashboard: Clock {
    /// Open cases per reason.
    async fn case_counts(&self) -> Result<BTreeMap<ReviewReason, i64>>;

    /// Counts of the console's operation tabs; stale = lease ran out before the time given.
    async fn queue_counts(&self, lease_expired_before: DateTime<Utc>) -> Result<QueueCounts>;

    /// Dashboard figures per bucket over `[from, to)`, at 5-minute resolution (see
    /// `slot_buckets`: the range is widened to whole slots).
    async fn series(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        buckets: u32,
    ) -> Result<Vec<SeriesPoint>>;

    /// `in_progress` operations whose lease ran out before `lease_expired_before`, keyset-
    /// paged on `(lease_expires_at, operation_id)`.
    async fn stale_in_progress(
        &self,
        lease_expired_before: DateTime<Utc>,
        page: OperationPage,
    ) -> Result<Vec<Operation>>;

    async fn connector(&self, name: &str) -> Result<Option<Connector>>;

    async fn connectors(&self) -> Result<Vec<Connector>>;

    /// This store's tenant's figures (any login that may read the figures may call it).
    async fn metrics(
        &self,
        now: DateTime<Utc>,
        stale_after: std::time::Duration,
    ) -> Result<MetricsSnapshot>;

    /// Every registered tenant's figures and connectors, by tenant id (`/metrics` of a
    /// fleet; whatever this store's tenant). The gateway's login: it reads the tenants'
    /// slugs.
    async fn fleet_metrics(
        &self,
        now: DateTime<Utc>,
        stale_after: std::time::Duration,
    ) -> Result<Vec<TenantMetrics>>;
}
