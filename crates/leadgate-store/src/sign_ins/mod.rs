//! The [`SignIns`] role: the web console's sign-in journal (migration 0028), and (`sql.rs`)
//! its implementation for both backends. Who tried to sign in, from where, and how it
//! ended; never a password.

use crate::*;

pub(crate) mod sql;

/// One attempt to sign in to the web console.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SignInAttempt {
    pub at: DateTime<Utc>,
    /// As typed, trimmed; `None` when it was not a plausible login (it may be a password
    /// typed into the login field, which is never written down).
    pub login: Option<String>,
    /// The client's address (with `behind_proxy`, the one the proxy names).
    pub client: String,
    /// `signed_in`; or refused: `failed` (a wrong login or password), `locked` (too
    /// many failures), `busy` (too many sign-ins at once), `too_many_sessions`,
    /// `unavailable` (the database did not answer) or `password_not_checked` (PostgreSQL
    /// lets the login in without its password).
    pub outcome: String,
}

#[async_trait::async_trait]
pub trait SignIns: Clock {
    async fn record_sign_in(&self, attempt: &SignInAttempt) -> Result<()>;

    /// The newest attempts first, of one login or of all, at most `limit`.
    async fn sign_ins(&self, login: Option<&str>, limit: i64) -> Result<Vec<SignInAttempt>>;

    /// Forgets the attempts made before `before`; how many.
    async fn forget_sign_ins(&self, before: DateTime<Utc>) -> Result<u64>;
}
