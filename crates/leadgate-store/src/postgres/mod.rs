//! PostgreSQL backend: for several gateway and worker machines sharing one store. Row
//! locks (`for update`) serialise changes to one operation; workers pick due work with
//! `for update skip locked`, so two never take the same row and none waits on another.
//!
//! **Sessions.** Every connection (`connect_options`) runs with `synchronous_commit = on`
//! whatever its role or database says, at READ COMMITTED (a startup option, for the
//! grouped intake's implicit transaction; the store's own write transactions also set it
//! as they begin, `begin_write`), with `lock_timeout` 5 s, `statement_timeout` 30 s and
//! server-side TCP keepalives, so a database that is away, held or silent is reported in
//! about that time. TLS fails closed (`tls_policy`). An intake transaction the server
//! aborts as a deadlock victim or for serialization (40P01, 40001) is run again
//! (`store::retrying`) before its sender would hear 503. Leases and due times are judged
//! by the server's clock (`DbClock`: read every 10 s, carried forward by this process's
//! monotonic clock).
//!
//! **Grouped intake** is in [`grouped`]: a group of deliveries in one statement.
//!
//! **Intake contact slots.** Two intakes of leads sharing a phone or e-mail serialize on
//! a row of `intake_contact_slots` (migration 0024: 65,536 rows; a contact's slot is the
//! low 16 bits of a SHA-256 of its normalized value, `store::contact_slot`), locked in
//! slot order before anything is looked up, so the second sees the first as under
//! SQLite's one writer. Only
//! the gateway's login can lock those rows (no person's role has UPDATE on them), unlike
//! an advisory lock, which any login could take and hold.
//!
//! **Migrations** run under a row lock of `leadgate_locks` (`migration_lock`), not under
//! sqlx's advisory lock, which any login could hold. Each statement waits at most 1 s for
//! a table's lock; a migration that could not get one is rolled back and tried again for
//! about a minute, then fails naming the sessions in its way (`store::migrate`,
//! [`PgStore::migrate_with`]). A person's transaction left open in front of an `ALTER`
//! therefore never stalls intake for longer than that.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime as ChronoDateTime, Utc as ChronoUtc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Postgres};

use super::sql::sql_store;

mod grouped;
use grouped::intake_writer;
pub use grouped::{GroupAnswer, IntakePath};

#[derive(Clone)]
pub struct PgStore {
    pub(crate) pool: PgPool,
    clock: Arc<DbClock>,
    /// Deliveries waiting for the intake writer.
    intake: super::intake_queue::IntakeQueue,
    /// The tenant its roles read and write (fleet mode; the default tenant unless
    /// `Tenants::for_tenant` made it).
    tenant: leadgate_domain::TenantId,
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
        store
            .migrate_with(url, sqlx::migrate!("migrations/postgres"))
            .await?;
        // It says so when its own login may do more than it needs.
        store.warn_about_own_login().await?;
        Ok(store)
    }

    /// Brings the schema at `url` (this store's database) up to `migrator`'s newest
    /// version: `connect` with this build's migrations (tests with one more).
    pub async fn migrate_with(
        &self,
        url: &str,
        migrator: sqlx::migrate::Migrator,
    ) -> Result<(), super::StoreError> {
        // A database with people's roles (0017) that never closed itself (0025): its
        // people keep CONNECT when it does.
        let upgrading = self.applied(17).await? && !self.applied(25).await?;
        let options = connect_options(url)?;
        // One process migrates at a time, on connections of their own: the lock's waits
        // for another process's migration as long as that takes; the migration's
        // statements wait a second for a table's lock (`super::migrate`) and may run long.
        let mut holder = PgConnection::connect_with(&options.clone().options([
            ("lock_timeout", "0"),
            ("statement_timeout", "0"),
            ("idle_in_transaction_session_timeout", "0"),
        ]))
        .await?;
        let held = migration_lock(&mut holder).await?;
        self.wait_for_earlier_gateways(&migrator).await?;
        let mut conn = PgConnection::connect_with(
            &options.options([("lock_timeout", "1s"), ("statement_timeout", "0")]),
        )
        .await?;
        match super::migrate(&mut conn, migrator).await {
            Err(super::StoreError::MigrationBlocked(_)) => {
                return Err(super::StoreError::MigrationBlocked(
                    sessions_in_a_transaction(&mut conn).await,
                ))
            }
            other => other?,
        }
        // Whoever migrates (serve, worker, migrate) is the schema's owner: it gives the
        // people's roles their grants and keeps the database closed to other logins.
        self.secure_database(upgrading).await?;
        held.commit().await?;
        Ok(())
    }

    /// Connects without touching the schema (the console checks the version instead).
    pub async fn open(url: &str) -> Result<Self, super::StoreError> {
        Self::open_pool(
            connect_options(url)?,
            PgPoolOptions::new().max_connections(16),
        )
        .await
    }

    /// [`PgStore::open`] as `login` with `password` instead of the URL's login, with at
    /// most `max_connections`, each closed after `idle` unused: a person's session of the
    /// web console, which holds no more of the server than it uses.
    pub async fn open_as(
        url: &str,
        login: &str,
        password: &str,
        max_connections: u32,
        idle: Duration,
    ) -> Result<Self, super::StoreError> {
        Self::open_pool(
            connect_options(url)?.username(login).password(password),
            few(max_connections, idle),
        )
        .await
    }

    /// [`PgStore::open`] with at most `max_connections`, each closed after `idle` unused.
    pub async fn open_few(
        url: &str,
        max_connections: u32,
        idle: Duration,
    ) -> Result<Self, super::StoreError> {
        Self::open_pool(connect_options(url)?, few(max_connections, idle)).await
    }

    async fn open_pool(
        options: PgConnectOptions,
        pool: PgPoolOptions,
    ) -> Result<Self, super::StoreError> {
        let pool = pool
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        let (server, at, _) = DbClock::read(&pool).await?;
        let clock = Arc::new(DbClock {
            anchor: RwLock::new((server, at)),
            syncing: AtomicBool::new(false),
        });
        let (intake, jobs) = super::intake_queue::queue();
        tokio::spawn(intake_writer(pool.clone(), jobs));
        Ok(PgStore {
            pool,
            clock,
            intake,
            tenant: leadgate_domain::TenantId::DEFAULT,
        })
    }

    /// Before a migration that gateways of an earlier version cannot run beside, waits
    /// for their heartbeats to stop (`super::NOT_BESIDE_EARLIER_GATEWAYS`).
    async fn wait_for_earlier_gateways(
        &self,
        migrator: &sqlx::migrate::Migrator,
    ) -> Result<(), super::StoreError> {
        if !self.applied(28).await? {
            return Ok(()); // no heartbeats before 0028
        }
        let applied: Vec<i64> =
            sqlx::query_scalar("select version from _sqlx_migrations where success")
                .fetch_all(&self.pool)
                .await?;
        let Some(version) = super::pending_not_beside(migrator, &applied) else {
            return Ok(());
        };
        let within = super::RUNNING_WITHIN.as_seconds_f64();
        super::wait_for_earlier_gateways(version, || async move {
            Ok(sqlx::query_scalar(
                "select owner || ' (' || kind || ')' from gateway_heartbeats \
                 where beat_at > now() - make_interval(secs => $1) order by owner",
            )
            .bind(within)
            .fetch_all(&self.pool)
            .await?)
        })
        .await
    }

    /// Whether migration `version` was applied.
    async fn applied(&self, version: i64) -> Result<bool, super::StoreError> {
        let exists: bool = sqlx::query_scalar("select to_regclass('_sqlx_migrations') is not null")
            .fetch_one(&self.pool)
            .await?;
        if !exists {
            return Ok(false);
        }
        Ok(sqlx::query_scalar(
            "select exists (select 1 from _sqlx_migrations where version = $1 and success)",
        )
        .bind(version)
        .fetch_one(&self.pool)
        .await?)
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Every write transaction runs at READ COMMITTED, whatever the server's or the
    /// database's default: the store's row locks and re-checks are written for it, and
    /// under REPEATABLE READ a writer that waited for a row lock fails (40001).
    async fn begin_write(&self) -> sqlx::Result<sqlx::Transaction<'static, Postgres>> {
        begin_write(&self.pool).await
    }

    fn clock_now(&self) -> ChronoDateTime<ChronoUtc> {
        self.clock.now(&self.pool)
    }
}

/// The options every Leadgate connection to PostgreSQL uses (the store's pool, the
/// console's listener): the URL under the TLS policy below.
pub fn connect_options(url: &str) -> Result<PgConnectOptions, super::StoreError> {
    Ok(tls_policy(url, PgConnectOptions::from_str(url)?)?
        .application_name("leadgate")
        .options([
            // The session's own transactions (the grouped intake runs in one) at READ
            // COMMITTED whatever the server's or the database's default; the store's
            // explicit transactions set it themselves.
            ("default_transaction_isolation", "read\\ committed"),
            // Commits wait for the WAL flush whatever an `alter role/database … set
            // synchronous_commit = off` says: a 2xx is answered only after the commit is
            // durable (the connection's options win over those settings).
            ("synchronous_commit", "on"),
            // Nothing waits for ever on what someone else holds (issue 32): a lock wait
            // fails after 5 s, a statement after 30 s (both mean "unavailable, try
            // again"); a session idle in a transaction for a minute is ended. The
            // migration's connections set their own (`PgStore::migrate_with`).
            ("lock_timeout", "5s"),
            ("statement_timeout", "30s"),
            ("idle_in_transaction_session_timeout", "60s"),
            // The server notices a gateway that vanished (no FIN) in about a minute.
            ("tcp_keepalives_idle", "30"),
            ("tcp_keepalives_interval", "10"),
            ("tcp_keepalives_count", "3"),
        ]))
}

/// TLS to PostgreSQL fails closed. `sslmode=prefer` and `allow` (which fall back to
/// clear text without telling) are refused: write `require`, `verify-ca` or
/// `verify-full` (with `sslrootcert=` for a private CA), or `disable` to choose clear
/// text explicitly. Without any `sslmode` (in the URL or `PGSSLMODE`), a server on
/// loopback or a Unix socket keeps sqlx's default, and any other host gets
/// `verify-full`.
fn tls_policy(url: &str, options: PgConnectOptions) -> Result<PgConnectOptions, sqlx::Error> {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
    let from_url = query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        matches!(k, "sslmode" | "ssl-mode").then(|| v.to_ascii_lowercase())
    });
    let mode = from_url.or_else(|| {
        std::env::var("PGSSLMODE")
            .ok()
            .map(|v| v.to_ascii_lowercase())
    });
    match mode.as_deref() {
        Some(m @ ("prefer" | "allow")) => Err(sqlx::Error::Configuration(
            format!(
                "sslmode={m} falls back to clear text without telling: use sslmode=require or \
                 verify-full (TLS), or sslmode=disable to choose clear text explicitly"
            )
            .into(),
        )),
        Some(_) => Ok(options),
        None => {
            let host = options.get_host();
            let local = host.starts_with('/')
                || host.eq_ignore_ascii_case("localhost")
                || host
                    .trim_matches(|c| c == '[' || c == ']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            Ok(if local {
                options
            } else {
                options.ssl_mode(sqlx::postgres::PgSslMode::VerifyFull)
            })
        }
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

const DIALECT: super::sql::Dialect = super::sql::Dialect {
    backend: super::Backend::Postgres,
    lock_row: " for update",
    skip_locked: " for update skip locked",
    resolve_seconds_avg: "avg(extract(epoch from resolved_at - opened_at))::float8",
    // held until commit, so a concurrent intake with the same contact sees this one: a
    // row only the gateway's login may lock (migration 0024), not an advisory lock
    lock_contact: "select 1 from intake_contact_slots where slot = $1 for update",
    body_without_secret: "(body::jsonb - 'secret')::text",
};

/// A pool that holds no more of the server than it uses.
fn few(max_connections: u32, idle: Duration) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(0)
        .idle_timeout(idle)
}

sql_store!(PgStore, Postgres);

/// Takes the migration lock: the row `migrate` of `leadgate_locks`, for update, in a
/// transaction on `conn` that the caller ends when its migration is done. Only the
/// gateway's login may lock it (no person's role has UPDATE on it), unlike sqlx's advisory
/// lock, which any login could take and hold to stop every gateway from starting. The
/// table is made by the first process that needs it (before the first migration, which
/// cannot make it under a lock it needs).
async fn migration_lock(
    conn: &mut PgConnection,
) -> Result<sqlx::Transaction<'_, Postgres>, super::StoreError> {
    for tries in 1..=10u64 {
        let Err(e) = make_migration_lock(&mut *conn).await else {
            break;
        };
        // two processes making it at once: one of them fails, and finds it made
        let raced = matches!(&e, sqlx::Error::Database(d)
            if matches!(d.code().as_deref(), Some("23505" | "42P07" | "42710")));
        if !raced || tries == 10 {
            return Err(e.into());
        }
        tokio::time::sleep(Duration::from_millis(20 * tries)).await;
    }
    let mut tx = conn.begin().await?;
    sqlx::query("select 1 from leadgate_locks where name = 'migrate' for update")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// Makes the migration lock's table and row if they are not there.
async fn make_migration_lock(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("create table if not exists leadgate_locks (name text primary key)")
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "insert into leadgate_locks (name) values ('migrate'), ('grants') on conflict do nothing",
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The sessions of this database in a transaction (the ones a blocked migration waits
/// for), oldest first, as "login (pid N, state since T)".
async fn sessions_in_a_transaction(conn: &mut PgConnection) -> String {
    let found: Vec<String> = sqlx::query_scalar(
        "select format('%s (pid %s, %s since %s)', usename, pid, state, \
                       to_char(xact_start, 'YYYY-MM-DD HH24:MI:SS TZ')) \
         from pg_stat_activity where datname = current_database() \
           and pid <> pg_backend_pid() and xact_start is not null \
         order by xact_start limit 5",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap_or_default();
    if found.is_empty() {
        "a session that has ended since".into()
    } else {
        format!("sessions in a transaction: {}", found.join(", "))
    }
}

/// A write transaction of the store.
async fn begin_write(pool: &PgPool) -> sqlx::Result<sqlx::Transaction<'static, Postgres>> {
    pool.begin_with("begin isolation level read committed")
        .await
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn clear_text_fallbacks_are_refused_and_remote_hosts_verify() {
        use sqlx::postgres::{PgConnectOptions, PgSslMode};
        use std::str::FromStr;
        let policy = |url: &str| super::tls_policy(url, PgConnectOptions::from_str(url).unwrap());
        for url in [
            "postgres://u@db.example.com/x?sslmode=prefer",
            "postgres://u@127.0.0.1/x?sslmode=allow",
            "postgres://u@db.example.com/x?application_name=a&ssl-mode=Prefer",
        ] {
            let err = policy(url).unwrap_err().to_string();
            assert!(err.contains("falls back to clear text"), "{url}: {err}");
        }
        let mode = |url: &str| policy(url).unwrap().get_ssl_mode();
        assert!(matches!(
            mode("postgres://u@db.example.com/x"),
            PgSslMode::VerifyFull
        ));
        assert!(matches!(
            mode("postgres://u@10.0.0.5:5432/x"),
            PgSslMode::VerifyFull
        ));
        assert!(matches!(
            mode("postgres://u@db.example.com/x?sslmode=require"),
            PgSslMode::Require
        ));
        assert!(matches!(
            mode("postgres://u@db.example.com/x?sslmode=disable"),
            PgSslMode::Disable
        ));
        // Loopback keeps sqlx's default (TLS when offered).
        assert!(matches!(
            mode("postgres://u@127.0.0.1/x"),
            PgSslMode::Prefer
        ));
        assert!(matches!(
            mode("postgres://u@localhost/x"),
            PgSslMode::Prefer
        ));
    }

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
