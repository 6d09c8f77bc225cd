//! SQLite backend: the embedded default. WAL mode lets readers (the console) work while
//! the gateway writes; every write transaction starts with `BEGIN IMMEDIATE`, taking the
//! single writer lock up front, so concurrent writers queue on the busy timeout instead
//! of failing when a read would have to be upgraded to a write.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool};

use super::sql::sql_store;

pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    pub async fn connect(url: &str) -> Result<Self, super::StoreError> {
        let store = Self::open(url).await?;
        super::migrate(&store.pool, sqlx::migrate!("migrations/sqlite")).await?;
        Ok(store)
    }

    /// Connects without touching the schema (the console checks the version instead).
    pub async fn open(url: &str) -> Result<Self, super::StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .journal_mode(SqliteJournalMode::Wal)
            // With WAL, NORMAL loses no committed transaction on a process crash, only on
            // power loss; FULL makes every commit durable at the cost of an fsync.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        Ok(SqliteStore { pool })
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn begin_write(&self) -> sqlx::Result<sqlx::Transaction<'static, Sqlite>> {
        self.pool.begin_with("BEGIN IMMEDIATE").await
    }
}

sql_store! {
    store: SqliteStore,
    db: Sqlite,
    row: sqlx::sqlite::SqliteRow,
    backend: "sqlite",
    // The transaction holds SQLite's one writer lock from its first statement, so
    // nothing else can change the row before commit: no row lock needed.
    lock_row: "",
    pick_due: "select operation_id from operations where status = 'received' \
               and next_attempt_at <= $1 \
               and not exists (select 1 from connectors where name = $2 and state = 'paused') \
               order by next_attempt_at limit 1",
    pick_stale: "select operation_id from operations where status = 'in_progress' \
                 and lease_expires_at <= $1 order by lease_expires_at limit 1",
    mean_resolve_seconds: "select avg((julianday(resolved_at) - julianday(opened_at)) * 86400.0) \
                           from review_cases where resolved_at is not null",
}
