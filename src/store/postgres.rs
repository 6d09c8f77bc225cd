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
use crate::domain::roles::Role;

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
        let before = store.applied_version().await?;
        super::migrate(&store.pool, sqlx::migrate!("migrations/postgres")).await?;
        if store.applied_version().await? > before {
            store.refresh_role_grants().await?;
        }
        Ok(store)
    }

    /// Connects without touching the schema (the console checks the version instead).
    pub async fn open(url: &str) -> Result<Self, super::StoreError> {
        let options = connect_options(url)?;
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

    async fn applied_version(&self) -> Result<Option<i64>, super::StoreError> {
        let exists: bool = sqlx::query_scalar("select to_regclass('_sqlx_migrations') is not null")
            .fetch_one(&self.pool)
            .await?;
        if !exists {
            return Ok(None);
        }
        Ok(
            sqlx::query_scalar("select max(version) from _sqlx_migrations where success")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Gives the people's roles what they may read of the tables a migration just added
    /// (`leadgate_install_roles`, migration 0017), when this login may manage roles and
    /// they are installed; otherwise `leadgate user add` does it.
    async fn refresh_role_grants(&self) -> Result<(), super::StoreError> {
        let mut tx = self.pool.begin().await?;
        // One process at a time: concurrent GRANTs on one table can fail.
        sqlx::query("select pg_advisory_xact_lock(7417001)")
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "select leadgate_install_roles() from pg_roles \
             where rolname = current_user and (rolsuper or rolcreaterole) \
               and exists (select 1 from pg_roles where rolname = 'leadgate_support')",
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Creates the login of a person in `role` (and the roles and grants first, which
    /// needs a login that may create roles: the gateway's). Returns its password.
    pub async fn add_user(&self, login: &str, role: Role) -> Result<String, super::StoreError> {
        check_login(login)?;
        sqlx::query("select leadgate_install_roles()")
            .execute(&self.pool)
            .await?;
        let password = rand::distr::SampleString::sample_string(
            &rand::distr::Alphanumeric,
            &mut rand::rng(),
            24,
        );
        let create: String = sqlx::query_scalar(
            "select format('create role %I login password %L in role %I', $1, $2, $3)",
        )
        .bind(login)
        .bind(&password)
        .bind(role.group())
        .fetch_one(&self.pool)
        .await?;
        match sqlx::raw_sql(&create).execute(&self.pool).await {
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42710") => Err(
                super::StoreError::NotApplied(format!("a login `{login}` exists already")),
            ),
            other => other.map(|_| password).map_err(Into::into),
        }
    }

    /// The people's logins (members of Leadgate's roles, superusers left out).
    pub async fn users(&self) -> Result<Vec<User>, super::StoreError> {
        // What leadgate_role_of answers, asked by the roles' oids instead of their names: a
        // login this scan of pg_roles saw may be dropped by another session before its name
        // is looked up, which failed the whole list (42704; seen when two tests' logins came
        // and went at once); an oid that is gone is simply in no role.
        let rows: Vec<(String, String)> = sqlx::query_as(
            "select m.rolname::text, r.rolname::text from pg_roles m \
             cross join lateral ( \
                 select g.rolname from unnest(array['leadgate_admin', 'leadgate_manager', \
                     'leadgate_sales_ops', 'leadgate_support']) with ordinality as w(name, n) \
                 join pg_roles g on g.rolname = w.name \
                 where pg_has_role(m.oid, g.oid, 'member') order by w.n limit 1) r \
             where m.rolcanlogin and not m.rolsuper order by m.rolname",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(login, role)| {
                Ok(User {
                    login,
                    role: role
                        .trim_start_matches("leadgate_")
                        .parse()
                        .map_err(|e| super::StoreError::Corrupt(format!("{e}")))?,
                })
            })
            .collect()
    }

    /// Drops a person's login; false if there is no such person (a login in none of
    /// Leadgate's roles is never dropped from here).
    pub async fn remove_user(&self, login: &str) -> Result<bool, super::StoreError> {
        if !self.users().await?.iter().any(|u| u.login == login) {
            return Ok(false);
        }
        let drop: String = sqlx::query_scalar("select format('drop role %I', $1)")
            .bind(login)
            .fetch_one(&self.pool)
            .await?;
        sqlx::raw_sql(&drop).execute(&self.pool).await?;
        Ok(true)
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

/// The options every Leadgate connection to PostgreSQL uses (the store's pool, the
/// console's listener): the URL under the TLS policy below.
pub fn connect_options(url: &str) -> Result<PgConnectOptions, super::StoreError> {
    Ok(tls_policy(url, PgConnectOptions::from_str(url)?)?
        .application_name("leadgate")
        // The session's own transactions (the one-statement intake runs in one) at READ
        // COMMITTED whatever the server's or the database's default; the store's explicit
        // transactions set it themselves.
        .options([("default_transaction_isolation", "read\\ committed")]))
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

/// A person's login (`leadgate user list`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub login: String,
    pub role: Role,
}

/// A login name `leadgate user add` accepts: lower case, no room for confusion with
/// PostgreSQL's or Leadgate's own roles.
fn check_login(login: &str) -> Result<(), super::StoreError> {
    let ok = (1..=63).contains(&login.len())
        && login.starts_with(|c: char| c.is_ascii_lowercase())
        && login
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c))
        && !login.starts_with("pg_")
        && !login.starts_with("leadgate")
        // the names the system itself acts under on timelines
        && !["gateway", "worker", "claim_api", "console", "cli", "reconciler", "retention", "system", "postgres"]
            .contains(&login);
    if ok {
        Ok(())
    } else {
        Err(super::StoreError::NotApplied(format!(
            "`{login}` is not a login name Leadgate creates: 1–63 of a–z, 0–9, `_`, `.`, `-`, \
             starting with a letter, not `pg_…` or `leadgate…`, and not a name the system acts \
             under (`gateway`, `worker`, `claim_api`, `console`, `cli`, …)"
        )))
    }
}

/// How PostgreSQL records a delivery (see [`PgStore::record_delivery_by`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntakePath {
    /// `leadgate_record_delivery` (migration 0008): one statement, one round trip, for a
    /// new key whose contact matches nothing and for a duplicate; anything else goes on
    /// to `Steps`. What `Store::record_delivery` does.
    OneStatement,
    /// The store's steps (`store::ops::intake`), one statement each, in one transaction:
    /// what SQLite runs, and what `OneStatement` must match row for row.
    Steps,
}

/// The one-statement intake: the delivery's columns, the matching window and lock keys
/// (`store::ops::intake::one_statement`), the name and its search words (migration
/// 0012). Prepared once per connection (sqlx caches it).
const RECORD_DELIVERY: &str = "select r_outcome, r_delivery_id, r_status, r_crm_id \
     from leadgate_record_delivery($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)";

impl PgStore {
    /// One transaction per delivery: concurrent intakes commit together (PostgreSQL's
    /// group commit) and lock only their own rows. A transaction PostgreSQL aborts as a
    /// deadlock victim or for serialization is run again before the sender hears of it.
    async fn record_delivery_now(&self, d: NewDelivery) -> Result<DeliveryRecord> {
        let (record, _) = self.record_delivery_by(d, IntakePath::OneStatement).await?;
        Ok(record)
    }

    /// Records a delivery, trying `path` first, and says which path recorded it.
    /// `Store::record_delivery` tries [`IntakePath::OneStatement`]; this is public so
    /// that a test can compare both on the same deliveries.
    pub async fn record_delivery_by(
        &self,
        d: NewDelivery,
        path: IntakePath,
    ) -> Result<(DeliveryRecord, IntakePath)> {
        super::retrying(|| async {
            if path == IntakePath::OneStatement {
                if let Some(record) = self.record_in_one_statement(&d).await? {
                    return Ok((record, IntakePath::OneStatement));
                }
            }
            let mut records = record_all(self.begin_write().await?, [&d]).await?;
            Ok((records.remove(0), IntakePath::Steps))
        })
        .await
    }

    /// `leadgate_record_delivery` in its own transaction (the session is at READ
    /// COMMITTED: `connect_options`). `None`: it wrote nothing, the steps must run.
    async fn record_in_one_statement(&self, d: &NewDelivery) -> Result<Option<DeliveryRecord>> {
        let Some(one) = super::ops::intake::one_statement(d) else {
            return Ok(None);
        };
        let (since, keys) = one.matching.unzip();
        let row: (String, Option<i64>, Option<String>, Option<String>) =
            sqlx::query_as(RECORD_DELIVERY)
                .bind(d.operation_id.as_str())
                .bind(&d.source)
                .bind(&d.content_type)
                .bind(&d.raw_body)
                .bind(d.payload.to_string())
                .bind(d.payload_hash.as_str())
                .bind(d.transform_version)
                .bind(&d.contact.phone)
                .bind(&d.contact.email)
                .bind(d.event_time)
                .bind(d.received_at)
                .bind(since)
                .bind(keys.unwrap_or_default())
                .bind(&d.contact.name)
                .bind(super::sql::name_words(&d.contact))
                .fetch_one(&self.pool)
                .await?;
        let corrupt =
            |what: &str| super::StoreError::Corrupt(format!("leadgate_record_delivery: {what}"));
        let (outcome, delivery_id, status, crm_id) = row;
        let status = || -> Result<crate::domain::Status> {
            status
                .as_deref()
                .ok_or_else(|| corrupt("no status"))?
                .parse()
                .map_err(|e| corrupt(&format!("{e}")))
        };
        let outcome = match outcome.as_str() {
            "steps" => return Ok(None),
            "new" => DeliveryOutcome::New { status: status()? },
            "duplicate" => DeliveryOutcome::Duplicate {
                status: status()?,
                crm_id,
            },
            other => return Err(corrupt(&format!("outcome `{other}`"))),
        };
        Ok(Some(DeliveryRecord {
            delivery_id: delivery_id.ok_or_else(|| corrupt("no delivery id"))?,
            outcome,
        }))
    }
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
