//! The [`Tenants`] role (fleet mode, issue 35): the registry of tenants, one CRM portal
//! each, and their stored specs. Its implementation for both backends is `sql.rs`.
//!
//! Tenant 0 is the default tenant (leadgate.toml's `[crm]` and sources; it has no stored
//! spec). Others are written by `leadgate tenant apply`: the caller works out what a
//! tenants file changes and hands the changes over with the version each was worked out
//! from, and they are written in one transaction or not at all. A tenant is never deleted:
//! a removed one keeps its id and slug, since its tombstones keep its keys.

use crate::*;

pub(crate) mod sql;

#[async_trait::async_trait]
pub trait Tenants: Clock {
    /// This store, reading and writing `tenant`'s rows: the same pool, clock and intake
    /// queue.
    fn for_tenant(&self, tenant: leadgate_domain::TenantId) -> std::sync::Arc<dyn Store>;

    /// Every tenant, by id (the default tenant first).
    async fn tenants(&self) -> Result<Vec<Tenant>>;

    /// The tenants this store's login may see, by id (the default tenant first): every
    /// tenant for SQLite and the gateway's login, a person's own on PostgreSQL (row-level
    /// security, migration 0039). The console's switcher.
    async fn my_tenants(&self) -> Result<Vec<TenantChoice>>;

    /// Every stored spec (sealed) by slug. PostgreSQL: the gateway's login only.
    async fn tenant_specs(&self) -> Result<Vec<(String, String)>>;

    /// Writes `changes` in one transaction. `NotApplied` (nothing written) when a tenant
    /// moved from the version a change was worked out from, or a new one's slug is taken.
    async fn apply_tenants(
        &self,
        changes: &[TenantChange],
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// The active tenants other than the default one with work at `now` for a worker, and
    /// which: an operation or a CRM update due (its claim loops'), a lease run out, the
    /// worker's or an integration's (its reconciler's). One statement for every tenant, on
    /// the indexes that lead with the tenant (migration 0040); the fleet's board (`turns`)
    /// wakes those loops.
    async fn tenants_with_work(&self, now: DateTime<Utc>) -> Result<Vec<TenantWork>>;

    /// A person pauses or resumes a tenant; `false` when there is no such tenant, or it
    /// was removed.
    async fn set_tenant_state(
        &self,
        slug: &str,
        state: TenantState,
        reason: Option<&str>,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<bool>;
}

/// A tenant as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Tenant {
    pub id: i32,
    pub slug: String,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub state: TenantState,
    pub paused_reason: Option<String>,
    pub weight: i32,
    pub max_in_flight: i32,
    /// Its own retention window (`[tenant.retention] full`), in seconds; none: the
    /// deployment's.
    pub retention_full_secs: Option<i64>,
    /// Moves with every change.
    pub version: i64,
    pub changed_by: String,
    pub updated_at: DateTime<Utc>,
}

/// A tenant as a person picks it in the console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct TenantChoice {
    pub id: i32,
    pub slug: String,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub state: TenantState,
}

/// Where a tenant is: served, paused (its leads are taken and wait), removed (its spec
/// forgotten, its id and slug kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TenantState {
    Active,
    Paused,
    Removed,
}

impl TenantState {
    pub fn as_str(self) -> &'static str {
        match self {
            TenantState::Active => "active",
            TenantState::Paused => "paused",
            TenantState::Removed => "removed",
        }
    }
}

/// The registry's text (a check constraint allows these three).
impl TryFrom<String> for TenantState {
    type Error = StoreError;

    fn try_from(s: String) -> Result<Self> {
        match s.as_str() {
            "active" => Ok(TenantState::Active),
            "paused" => Ok(TenantState::Paused),
            "removed" => Ok(TenantState::Removed),
            other => Err(StoreError::Corrupt(format!("tenant state `{other}`"))),
        }
    }
}

impl std::fmt::Display for TenantState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tenant with work for its worker ([`Tenants::tenants_with_work`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct TenantWork {
    pub tenant: i32,
    /// An operation or a CRM update is due: for its claim loops.
    pub due: bool,
    /// A lease ran out: for its reconciler.
    pub stale: bool,
}

/// The settings a tenants file gives a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSettings {
    pub name: String,
    pub weight: i32,
    pub max_in_flight: i32,
    /// Its own retention window, in seconds.
    pub retention_full_secs: Option<i64>,
    /// The spec's canonical text, sealed.
    pub sealed_spec: String,
}

/// One change `leadgate tenant apply` makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantChange {
    /// A tenant the registry does not know: the next free id.
    Create {
        slug: String,
        settings: TenantSettings,
    },
    /// New settings, and the state it is in after (a tenant the file paused is resumed
    /// when the file names it again).
    Update {
        slug: String,
        expected_version: i64,
        settings: TenantSettings,
        state: TenantState,
        reason: Option<String>,
    },
    /// Only the state: paused when the file no longer names it, removed (its spec and
    /// credentials forgotten) with `--prune`.
    State {
        slug: String,
        expected_version: i64,
        state: TenantState,
        reason: Option<String>,
    },
}
