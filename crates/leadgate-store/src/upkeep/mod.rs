//! The [`Upkeep`] role: its trait, and (`sql.rs`) its implementation for both backends.

use crate::*;

pub(crate) mod retention;
pub(crate) mod sql;

/// What a gateway's durable intake spool holds, as the gateway says in its beat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spooled {
    /// Deliveries waiting for the database.
    pub records: i64,
    /// When the oldest of them arrived.
    pub oldest: Option<DateTime<Utc>>,
}

/// The gateways' and workers' beats, summed up ([`Upkeep::beats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Beats {
    /// The newest beat of any gateway or worker, if one ever beat.
    pub last: Option<DateTime<Utc>>,
    /// What the gateways' spools hold, as each said last: a gateway that stopped with
    /// deliveries spooled counts them until it drains them (or for the day its beat is
    /// kept).
    pub spooled: Spooled,
}

/// Keeping the database: health, retention, metric compaction, connector pause and resume, pull cursors, saved diagnoses.
#[async_trait::async_trait]
pub trait Upkeep: Clock {
    /// Answers when the database does.
    async fn ping(&self) -> Result<()>;

    /// A running gateway or worker (`owner`, of `kind` `serve` or `worker`, started at
    /// `started_at`) says it is alive at `now` (migration 0028), and what its intake
    /// spool holds (migration 0046); beats of processes gone for a day are removed.
    async fn beat(
        &self,
        owner: &str,
        kind: &str,
        started_at: DateTime<Utc>,
        now: DateTime<Utc>,
        spooled: Spooled,
    ) -> Result<()>;

    /// The gateways' and workers' beats, summed up.
    async fn beats(&self) -> Result<Beats>;

    async fn pull_mark(&self, source: &str) -> Result<Option<String>>;

    /// Saves a pull source's mark, replacing the one before.
    async fn save_pull_mark(&self, source: &str, mark: &str, now: DateTime<Utc>) -> Result<()>;

    /// Saves a `leadgate diagnose` report (migration 0020); returns its id.
    async fn save_diagnosis(&self, d: &NewDiagnosis) -> Result<i64>;

    /// Folds the per-connection shards of the dashboard's past time slots (before
    /// `before`) into one row each, so a month of figures stays a few thousand rows, and
    /// the counter shards of connections that ended into one. Returns the rows written.
    /// A no-op on SQLite.
    async fn compact_metrics(&self, before: DateTime<Utc>) -> Result<u64>;

    async fn pause_connector(
        &self,
        name: &str,
        reason: &str,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// Forgets people's requests a gateway answered before `before` (PostgreSQL; SQLite has
    /// none): a request's body may hold a lead's edited data (*Fix and resend*), and what it
    /// did stays on the operation's timeline. Waiting requests are kept. Returns how many.
    /// `scope`: one tenant's, or (none) every tenant's but those with a retention window of
    /// their own.
    async fn forget_requests(
        &self,
        before: DateTime<Utc>,
        scope: Option<leadgate_domain::TenantId>,
    ) -> Result<u64>;

    /// Forgets what the event feed still owes of events that happened before `before`
    /// (a subscriber disabled for longer than retention, or failing that long), and those
    /// events once nobody is owed them: a disabled subscriber's queue does not grow for
    /// ever. Returns how many deliveries owed were forgotten.
    async fn forget_feed_owed(&self, before: DateTime<Utc>) -> Result<u64>;

    /// Resumes a paused connector; returns false if it was not paused.
    async fn resume_connector(&self, name: &str, actor: &str, now: DateTime<Utc>) -> Result<bool>;

    /// One batch of retention: scrubs payloads and contact data of up to `batch`
    /// finished operations last changed before `finished_before` (a tombstone stays:
    /// key, payload hash, status, crm_id, dates), and the bodies of rejected deliveries
    /// received before it. Open operations and operations with an open review case are
    /// never touched. Small batches keep intake unblocked; call until empty. Every
    /// tenant's rows but those of a tenant with a window of its own
    /// (`Tenant::retention_full_secs`: `purge_tenant_batch`).
    async fn purge_batch(
        &self,
        finished_before: DateTime<Utc>,
        batch: i64,
        now: DateTime<Utc>,
    ) -> Result<PurgeReport>;

    /// One batch of retention's scrub of this store's tenant's rows alone: finished before
    /// `finished_before` (its own window), or (none) erasing it, cutoff `now` (`leadgate
    /// tenant erase`). Open work is left whole, and an erasure's last batch counts it
    /// (`PurgeReport::left_whole`).
    async fn purge_tenant_batch(
        &self,
        finished_before: Option<DateTime<Utc>>,
        batch: i64,
        now: DateTime<Utc>,
    ) -> Result<PurgeReport>;
}
