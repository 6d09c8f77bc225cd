//! PostgreSQL backend: for several gateway and worker machines sharing one store. Row
//! locks (`for update`) serialise changes to one operation; workers pick due work with
//! `for update skip locked`, so two never take the same row and none waits on another.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime as ChronoDateTime, Utc as ChronoUtc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres};

use super::sql::sql_store;

pub struct PgStore {
    pool: PgPool,
    clock: Arc<DbClock>,
}

/// How often the server's clock is read again.
const CLOCK_RESYNC: Duration = Duration::from_secs(10);

/// The database server's clock as this process sees it: the server's time read at one
/// instant, carried forward by this process's monotonic clock (which a wrong or stepped
/// wall clock does not disturb), read again every `CLOCK_RESYNC`. Leases, due times
/// and takeovers are judged by it, so gateways whose own clocks disagree by minutes
/// still agree on when a lease ends (to within a round trip).
struct DbClock {
    anchor: RwLock<(ChronoDateTime<ChronoUtc>, Instant)>,
    syncing: AtomicBool,
}

impl DbClock {
    /// A reading slower than this says little about when the server read its clock:
    /// kept only when there is none yet.
    const MAX_ROUND_TRIP: Duration = Duration::from_millis(500);

    async fn read(pool: &PgPool) -> sqlx::Result<(ChronoDateTime<ChronoUtc>, Instant, Duration)> {
        // The connection first: waiting for one (or for a reconnect) is not part of the
        // round trip the server's reading sits in.
        let mut conn = pool.acquire().await?;
        let asked = Instant::now();
        let server: ChronoDateTime<ChronoUtc> = sqlx::query_scalar("select clock_timestamp()")
            .fetch_one(&mut *conn)
            .await?;
        let round_trip = asked.elapsed();
        // The server read its clock somewhere in the round trip: take the middle.
        Ok((server, asked + round_trip / 2, round_trip))
    }

    async fn resync(&self, pool: &PgPool) {
        match tokio::time::timeout(Duration::from_secs(5), Self::read(pool)).await {
            Ok(Ok((server, at, rtt))) if rtt <= Self::MAX_ROUND_TRIP => {
                *self.anchor.write().expect("clock anchor") = (server, at);
            }
            Ok(Ok(_)) => tracing::debug!("database clock reading too slow; kept the last one"),
            Ok(Err(e)) => tracing::debug!(error = %e, "reading the database clock failed"),
            Err(_) => tracing::debug!("reading the database clock timed out"),
        }
    }

    fn now(self: &Arc<Self>, pool: &PgPool) -> ChronoDateTime<ChronoUtc> {
        let (server, at) = *self.anchor.read().expect("clock anchor");
        if at.elapsed() > CLOCK_RESYNC && !self.syncing.swap(true, Ordering::AcqRel) {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let (clock, pool) = (self.clone(), pool.clone());
                rt.spawn(async move {
                    clock.resync(&pool).await;
                    clock.syncing.store(false, Ordering::Release);
                });
            } else {
                self.syncing.store(false, Ordering::Release);
            }
        }
        let elapsed = chrono::TimeDelta::from_std(at.elapsed()).unwrap_or_default();
        super::truncate_micros(server + elapsed)
    }
}

impl PgStore {
    pub async fn connect(url: &str) -> Result<Self, super::StoreError> {
        let store = Self::open(url).await?;
        super::migrate(&store.pool, sqlx::migrate!("migrations/postgres")).await?;
        Ok(store)
    }

    /// Connects without touching the schema (the console checks the version instead).
    pub async fn open(url: &str) -> Result<Self, super::StoreError> {
        let options = PgConnectOptions::from_str(url)?.application_name("leadgate");
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        let (server, at, _) = DbClock::read(&pool).await?;
        let clock = Arc::new(DbClock {
            anchor: RwLock::new((server, at)),
            syncing: AtomicBool::new(false),
        });
        Ok(PgStore { pool, clock })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Every write transaction runs at READ COMMITTED, whatever the server's or the
    /// database's default: the store's row locks and re-checks are written for it, and
    /// under REPEATABLE READ a writer that waited for a row lock fails (40001).
    async fn begin_write(&self) -> sqlx::Result<sqlx::Transaction<'static, Postgres>> {
        self.pool
            .begin_with("begin isolation level read committed")
            .await
    }

    fn clock_now(&self) -> ChronoDateTime<ChronoUtc> {
        self.clock.now(&self.pool)
    }
}

/// The URL of database `name` on the server of `server_url` (credentials and query kept):
/// how the test suite and the benchmarks reach the scratch databases they create.
pub fn with_database(server_url: &str, name: &str) -> String {
    let (base, query) = match server_url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (server_url, String::new()),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let root = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    format!("{root}/{name}{query}")
}

sql_store! {
    store: PgStore,
    db: Postgres,
    row: sqlx::postgres::PgRow,
    backend: "postgres",
    lock_row: " for update",
    // appended to the pick of due or stale work, so that concurrent workers skip the
    // rows another one is taking instead of waiting for it
    skip_locked: " for update skip locked",
    mean_resolve_seconds: "select avg(extract(epoch from resolved_at - opened_at))::float8 \
                           from review_cases where resolved_at is not null",
    // held until commit, so a concurrent intake with the same contact sees this one
    lock_contact: "select pg_advisory_xact_lock($1)",
}

impl PgStore {
    /// One transaction per delivery: concurrent intakes commit together (PostgreSQL's
    /// group commit) and lock only their own rows. A transaction PostgreSQL aborts as a
    /// deadlock victim or for serialization is run again before the sender hears of it.
    async fn record_delivery_now(&self, d: NewDelivery) -> Result<DeliveryRecord> {
        super::retrying(|| async {
            let mut records = record_all(self.begin_write().await?, [&d]).await?;
            Ok(records.remove(0))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_is_replaced_in_server_urls() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/test", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h/db?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:1", "x"), "postgres://h:1/x");
    }
}
