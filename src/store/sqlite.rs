//! SQLite backend: the embedded default. WAL mode lets readers (the console) work while
//! the gateway writes. SQLite has one writer at a time, so this process writes through a
//! pool of exactly one connection: writers queue fairly in the pool instead of spinning
//! in SQLite's busy handler, whose growing sleeps collapse throughput under concurrency.
//! Every write transaction starts with `BEGIN IMMEDIATE`, taking the writer lock up front,
//! so a transaction never fails on upgrading a read to a write; another process on the
//! same file (a second `leadgate worker`) waits on the busy timeout.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool};

use super::sql::sql_store;

pub struct SqliteStore {
    /// Readers.
    pool: SqlitePool,
    /// The one writer connection of this process.
    writer: SqlitePool,
}

impl SqliteStore {
    pub async fn connect(url: &str) -> Result<Self, super::StoreError> {
        let store = Self::open(url).await?;
        super::migrate(&store.writer, sqlx::migrate!("migrations/sqlite")).await?;
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
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options.clone())
            .await?;
        // An in-memory database exists once per connection: read where it is written.
        let pool = if url.contains(":memory:") || url.contains("mode=memory") {
            writer.clone()
        } else {
            SqlitePoolOptions::new()
                .max_connections(8)
                .connect_with(options)
                .await?
        };
        Ok(SqliteStore { pool, writer })
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The single writer connection (benchmarks measure the raw commit rate on it).
    pub fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    async fn begin_write(&self) -> sqlx::Result<sqlx::Transaction<'static, Sqlite>> {
        self.writer.begin_with("BEGIN IMMEDIATE").await
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
    // appended to the pick of due or stale work, so that concurrent workers skip the
    // rows another one is taking instead of waiting for it
    skip_locked: "",
    mean_resolve_seconds: "select avg((julianday(resolved_at) - julianday(opened_at)) * 86400.0) \
                           from review_cases where resolved_at is not null",
}
