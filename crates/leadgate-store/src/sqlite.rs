//! SQLite backend: the embedded default. WAL mode lets readers (the console) work while
//! the gateway writes. SQLite has one writer at a time, so this process writes through a
//! pool of exactly one connection: writers queue fairly in the pool instead of spinning
//! in SQLite's busy handler, whose growing sleeps collapse throughput under concurrency.
//! Every write transaction starts with `BEGIN IMMEDIATE`, taking the writer lock up front,
//! so a transaction never fails on upgrading a read to a write; another process on the
//! same file (a second `leadgate worker`) waits on the busy timeout.
//!
//! Intake is grouped: deliveries that arrive while the writer is busy are journaled and
//! claimed together in one transaction by one task (`intake_writer`), and each caller is
//! answered only after that transaction committed, so an answer still means "durable".
//! Every statement is a hand-off to sqlx's connection thread; sharing `BEGIN` and
//! `COMMIT` (and the fsync) among a group is what lets intake keep up with the disk. A
//! group is up to 64 deliveries, all run through the steps of `store::journal::ops`; when
//! any of it fails, the group is rolled back and each of its deliveries is recorded on its
//! own, so one bad delivery fails alone.
//!
//! What PostgreSQL needs locks for, the one writer gives here: the row-lock clause, the
//! skip-locked suffix of due and stale picks and the intake contact lock are empty. The
//! clock is this machine's (`store::local_now`), which every process on the file shares;
//! a SQLite file is not shared between machines (it cannot safely be anyway). There are
//! no people's logins and no change notifications: whoever can open the file (created
//! 0600) writes directly, and the console polls.

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool};

use super::sql::sql_store;

#[derive(Clone)]
pub struct SqliteStore {
    /// Readers.
    pool: SqlitePool,
    /// The one writer connection of this process.
    writer: SqlitePool,
    /// Deliveries waiting for the intake writer.
    intake: super::intake_queue::IntakeQueue,
    /// The tenant its roles read and write (fleet mode; the default tenant unless
    /// `Tenants::for_tenant` made it).
    tenant: leadgate_domain::TenantId,
}

/// A database file this URL would create (`mode=rwc`) is created first, empty and
/// readable by its owner only (0600): it holds payloads and personal data. SQLite gives
/// its `-wal` and `-shm` files the same permissions. Existing files are left as they are.
fn create_private(url: &str, path: &std::path::Path) -> Result<(), super::StoreError> {
    let creates =
        url.contains("mode=rwc") && !url.contains(":memory:") && !url.contains("mode=memory");
    if !creates || path.as_os_str().is_empty() || path.exists() {
        return Ok(());
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        // Created by someone else meanwhile: theirs to keep.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(sqlx::Error::Io(e).into()),
    }
}

/// Opens a pool, again while SQLite answers "busy": a connection's first statements
/// (switching a new file to WAL) need a lock that SQLite does not wait for when another
/// process is doing the same, as two gateways started at once on a new file do.
async fn busy_retried<F, Fut>(open: F) -> Result<SqlitePool, super::StoreError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = sqlx::Result<SqlitePool>>,
{
    let mut tries = 0u64;
    loop {
        match open().await.map_err(super::StoreError::from) {
            Err(e) if e.is_transient() && tries < 20 => {
                tries += 1;
                tracing::debug!(error = %e, "the SQLite file is busy; opening again");
                tokio::time::sleep(Duration::from_millis(50 * tries)).await;
            }
            other => return other,
        }
    }
}

/// How every write transaction starts: with SQLite's writer lock.
const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

/// At most this many deliveries share one transaction.
const INTAKE_GROUP: usize = 64;

impl SqliteStore {
    pub async fn connect(url: &str) -> Result<Self, super::StoreError> {
        let store = Self::open(url).await?;
        store
            .migrate_with(sqlx::migrate!("migrations/sqlite"))
            .await?;
        Ok(store)
    }

    /// Brings this store's schema up to `migrator`'s newest version: `connect` with this
    /// build's migrations (tests with fewer or more).
    pub async fn migrate_with(
        &self,
        migrator: sqlx::migrate::Migrator,
    ) -> Result<(), super::StoreError> {
        self.wait_for_earlier_gateways(&migrator).await?;
        let mut conn = self.writer.acquire().await?;
        super::migrate(&mut *conn, migrator).await
    }

    /// Before a migration that gateways of an earlier version cannot run beside, waits
    /// for their heartbeats to stop (`super::NOT_BESIDE_EARLIER_GATEWAYS`).
    async fn wait_for_earlier_gateways(
        &self,
        migrator: &sqlx::migrate::Migrator,
    ) -> Result<(), super::StoreError> {
        let tables: Vec<String> = sqlx::query_scalar(
            "select name from sqlite_master where type = 'table' \
             and name in ('_sqlx_migrations', 'gateway_heartbeats')",
        )
        .fetch_all(&self.writer)
        .await?;
        if tables.len() < 2 {
            return Ok(()); // a new file, or no heartbeats before 0028
        }
        let applied: Vec<i64> =
            sqlx::query_scalar("select version from _sqlx_migrations where success")
                .fetch_all(&self.writer)
                .await?;
        let Some(version) = super::pending_not_beside(migrator, &applied) else {
            return Ok(());
        };
        super::wait_for_earlier_gateways(version, || async {
            let beats: Vec<(String, String, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
                "select owner, kind, beat_at from gateway_heartbeats order by owner",
            )
            .fetch_all(&self.writer)
            .await?;
            let since = super::local_now() - super::RUNNING_WITHIN;
            Ok(beats
                .into_iter()
                .filter(|(_, _, at)| *at > since)
                .map(|(owner, kind, _)| format!("{owner} ({kind})"))
                .collect())
        })
        .await
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
        create_private(url, options.get_filename())?;
        let writer = busy_retried(|| {
            SqlitePoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(60))
                .connect_with(options.clone())
        })
        .await?;
        // An in-memory database exists once per connection: read where it is written.
        let pool = if url.contains(":memory:") || url.contains("mode=memory") {
            writer.clone()
        } else {
            busy_retried(|| {
                SqlitePoolOptions::new()
                    .max_connections(8)
                    .connect_with(options.clone())
            })
            .await?
        };
        let (intake, jobs) = super::intake_queue::queue();
        tokio::spawn(intake_writer(writer.clone(), jobs));
        Ok(SqliteStore {
            pool,
            writer,
            intake,
            tenant: leadgate_domain::TenantId::DEFAULT,
        })
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The single writer connection (benchmarks measure the raw commit rate on it).
    pub fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    async fn begin_write(&self) -> sqlx::Result<sqlx::Transaction<'static, Sqlite>> {
        self.writer.begin_with(BEGIN_WRITE).await
    }

    /// Every process on one SQLite file runs on one machine and shares its clock.
    fn clock_now(&self) -> chrono::DateTime<chrono::Utc> {
        super::local_now()
    }
}

const DIALECT: super::sql::Dialect = super::sql::Dialect {
    backend: super::Backend::Sqlite,
    // The transaction holds SQLite's one writer lock from its first statement, so
    // nothing else can change the row before commit: no row lock needed.
    lock_row: "",
    // nothing to skip: one writer takes due work at a time
    skip_locked: "",
    resolve_seconds_avg: "avg((julianday(resolved_at) - julianday(opened_at)) * 86400.0)",
    // one writer: a second intake starts only after the first committed
    lock_contact: "",
    body_without_secret: "json_remove(body, '$.secret')",
};

sql_store!(SqliteStore, Sqlite);

impl SqliteStore {
    async fn record_delivery_now(&self, d: NewDelivery) -> Result<DeliveryRecord> {
        self.intake.record(self.tenant, d).await
    }
}

/// Takes what is waiting (up to `INTAKE_GROUP`) and records it in one transaction; when
/// any of it fails, the group is rolled back and each delivery is recorded on its own, so
/// one bad delivery fails alone.
async fn intake_writer(writer: SqlitePool, mut jobs: super::intake_queue::Jobs) {
    while let Some(group) = jobs.take(INTAKE_GROUP).await {
        let begin = || writer.begin_with(BEGIN_WRITE);
        if group.len() > 1 {
            let deliveries: Vec<_> = group.iter().map(|((t, d), _)| (*t, d)).collect();
            let together = async { record_all(begin().await?, deliveries).await };
            if let Ok(records) = together.await {
                for ((_, reply), record) in group.into_iter().zip(records) {
                    let _ = reply.send(Ok(record));
                }
                continue;
            }
        }
        for ((tenant, d), reply) in group {
            let alone = async {
                record_all(begin().await?, [(tenant, &d)])
                    .await
                    .map(|mut r| r.remove(0))
            };
            let _ = reply.send(alone.await);
        }
    }
}
