//! The [`CrmAccess`] role: its trait, and (`sql.rs`) its implementation for both backends.

use crate::*;

pub(crate) mod pacing;
pub(crate) mod sql;

/// What the CRM adapters may do in the store, and nothing more: the shared request pace and amoCRM's rotating tokens.
#[async_trait::async_trait]
pub trait CrmAccess: Clock {
    /// A turn of `account`'s request pace (`domain::pacing`), shared by every process on
    /// this database: how long the request must wait before it leaves.
    async fn take_turn(
        &self,
        account: &str,
        pace: leadgate_domain::pacing::Pace,
        now: DateTime<Utc>,
    ) -> Result<std::time::Duration>;

    /// No request to `account` leaves before `until` (the CRM asked for quiet).
    async fn hold_turns(
        &self,
        account: &str,
        pace: leadgate_domain::pacing::Pace,
        until: DateTime<Utc>,
    ) -> Result<()>;

    /// The current OAuth tokens of `connector`, shared by every process of the
    /// installation (amoCRM rotates refresh tokens: a copy per process would be dead
    /// after the first refresh anywhere else).
    async fn crm_token(&self, connector: &str) -> Result<Option<CrmToken>>;

    /// Saves `token` (with its `version`, which the caller sets) for `connector`.
    /// `expected_version: None` inserts only if the connector has no row yet (seeding);
    /// `Some(v)` replaces the row only if its version is still `v` (compare-and-set).
    /// `false` means someone else saved first: re-read and use their tokens.
    async fn save_crm_token(
        &self,
        connector: &str,
        token: &CrmToken,
        expected_version: Option<i64>,
    ) -> Result<bool>;
}

/// A CRM connector's OAuth tokens as stored (see [`CrmAccess::crm_token`]). `Debug` never
/// shows the tokens.
#[derive(Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CrmToken {
    /// `None` until the first refresh (a row seeded from the configured refresh token).
    pub access_token: Option<String>,
    pub refresh_token: String,
    /// When the access token stops working.
    pub expires_at: Option<DateTime<Utc>>,
    /// Bumped by every save; what a compare-and-set compares.
    pub version: i64,
}

impl std::fmt::Debug for CrmToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrmToken")
            .field("access_token", &self.access_token.as_ref().map(|_| "***"))
            .field("refresh_token", &"***")
            .field("expires_at", &self.expires_at)
            .field("version", &self.version)
            .finish()
    }
}
