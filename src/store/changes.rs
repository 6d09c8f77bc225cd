//! What the store offers callers that must not speak SQL (the console's view model): a
//! subscription to changes the database pushes, and errors classified without looking at
//! driver types or database error codes.

use std::time::Duration;

use super::{Result, StoreError};

/// The PostgreSQL channel the database notifies on (migration 0004): the payload is the
/// name of the table that changed (a review case, a connector).
pub const CHANGES_CHANNEL: &str = "leadgate_console";

/// Whether the database at `url` pushes its changes ([`subscribe`] gives a [`Changes`]);
/// otherwise a caller polls. PostgreSQL does (LISTEN/NOTIFY); SQLite does not.
pub fn pushes_changes(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Listens for changes to the database at `url`. `None` when it pushes none (SQLite):
/// the caller polls.
pub async fn subscribe(url: &str) -> Result<Option<Changes>> {
    if !pushes_changes(url) {
        return Ok(None);
    }
    // The same TLS policy as the store's own connections.
    let pool = sqlx::PgPool::connect_lazy_with(super::postgres::connect_options(url)?);
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
    listener.listen(CHANGES_CHANNEL).await?;
    Ok(Some(Changes { listener }))
}

/// A live subscription to the database's change notifications.
pub struct Changes {
    listener: sqlx::postgres::PgListener,
}

impl Changes {
    /// The next change: the name of the table that changed. A broken connection is
    /// reconnected on the next try, after a pause that keeps a dead server from spinning
    /// the caller's loop; changes made while it was down are not replayed.
    pub async fn next(&mut self) -> String {
        loop {
            match self.listener.recv().await {
                Ok(n) => return n.payload().to_owned(),
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }
}

impl StoreError {
    /// An insert into `human_requests` that the database's own check refused (migration
    /// 0026: `leadgate: …`, a check violation or a raised exception) becomes
    /// [`StoreError::RequestRefused`] with its sentence; any other error stays as it was.
    pub(crate) fn refused_request(e: sqlx::Error) -> StoreError {
        if let sqlx::Error::Database(d) = &e {
            let ours = matches!(d.code().as_deref(), Some("P0001" | "23514"));
            if let Some(sentence) = d.message().strip_prefix("leadgate: ").filter(|_| ours) {
                return StoreError::RequestRefused(sentence.to_owned());
            }
        }
        StoreError::Database(e)
    }

    /// PostgreSQL refused this login what it asked (`42501`: no privilege on a table or
    /// column, or a row-level security policy): the database's message.
    pub fn forbidden(&self) -> Option<String> {
        let StoreError::Database(sqlx::Error::Database(d)) = self else {
            return None;
        };
        (d.code().as_deref() == Some("42501")).then(|| d.message().to_owned())
    }

    /// The database cannot be reached at all — no connection could be had (refused,
    /// timed out, TLS), the file cannot be opened, the database does not exist, or the
    /// credentials were refused — with the driver's message; `None` for any other error.
    pub fn unreachable(&self) -> Option<String> {
        let StoreError::Database(e) = self else {
            return None;
        };
        let unreachable = matches!(
            e,
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_)
        ) || matches!(e, sqlx::Error::Database(d) if d.code().is_some_and(|c| {
            // SQLite: cannot open; PostgreSQL: no such database, authentication failed.
            matches!(c.as_ref(), "14" | "3D000" | "28P01" | "28000")
        }));
        unreachable.then(|| e.to_string())
    }
}
