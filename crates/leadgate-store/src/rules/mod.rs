//! The [`Rules`] role: its trait, and (`sql.rs`) its implementation for both backends.

use crate::*;

pub(crate) mod ops;
pub(crate) mod sql;

/// The business rules (the database's, read live by intake) and the CRM links people publish.
#[async_trait::async_trait]
pub trait Rules: Clock {
    /// Publishes where a person opens this connector's CRM (the gateway, at start).
    async fn publish_crm_links(&self, links: &CrmLinks, now: DateTime<Utc>) -> Result<()>;

    /// Every connector's published web pages, the most recently published first.
    async fn crm_links(&self) -> Result<Vec<CrmLinks>>;

    /// A pull source's mark in its sender's queue (migration 0018), `None` before the first.
    /// Every source's business rules (migration 0021), by source.
    async fn business_rules(&self) -> Result<Vec<StoredRules>>;

    /// How many versions the rules' history holds: grows with every committed change
    /// of any source's rules (a gateway polls it, and reads the rules again when it
    /// moved). Not the newest id: PostgreSQL hands ids out at insert, so a smaller id can
    /// commit after a larger one was read; the history is append-only, so its count
    /// cannot miss a commit.
    async fn rules_version(&self) -> Result<i64>;

    /// The rules' history, newest first, of one source or all.
    async fn rules_history(&self, source: Option<&str>, limit: i64) -> Result<Vec<RuleChange>>;

    /// Gives each source that has no rules yet these (a gateway's TOML values), recorded in
    /// the history as seeded by [`SEEDED_BY`]; the sources seeded. Rules a source has
    /// are never changed here.
    async fn seed_rules(&self, seeds: &[SourceRules], now: DateTime<Utc>) -> Result<Vec<String>>;
}

/// A source's business rules as stored (migration 0021).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRules {
    pub rules: SourceRules,
    /// Each edit names the version it was made from.
    pub version: i64,
    pub changed_at: DateTime<Utc>,
    /// The login (or OS user) of the last edit; `configuration` when seeded.
    pub changed_by: String,
}

/// One version in the business rules' history: who changed what, when, from what to what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleChange {
    pub id: i64,
    pub source: String,
    pub version: i64,
    pub actor: String,
    pub changed_at: DateTime<Utc>,
    /// `None`: seeded from the configuration.
    pub before: Option<SourceRules>,
    pub after: SourceRules,
}

/// The actor of rules a gateway seeded from its TOML.
pub const SEEDED_BY: &str = "configuration";
