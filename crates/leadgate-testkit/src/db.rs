//! A fresh database per test on each backend, and a scratch PostgreSQL database for a
//! benchmark run.
//!
//! SQLite always runs (a temp file per test). PostgreSQL runs against
//! `LEADGATE_TEST_DATABASE_URL` (a server URL; each test creates and drops its own
//! database there). Without that variable the PostgreSQL half FAILS, unless
//! `LEADGATE_SKIP_POSTGRES=1` says out loud that it is to be skipped: a missing service
//! must never look like a pass.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use leadgate::store::{self, Store};
use sqlx::Connection;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A database made for one test.
pub struct TestDb {
    pub url: String,
    pub backend: Backend,
    _dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
}

impl TestDb {
    pub async fn new(backend: Backend) -> Option<TestDb> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
                Some(TestDb {
                    url,
                    backend,
                    _dir: Some(dir),
                    pg: None,
                })
            }
            Backend::Postgres => {
                let Ok(server) = std::env::var("LEADGATE_TEST_DATABASE_URL") else {
                    if std::env::var("LEADGATE_SKIP_POSTGRES").as_deref() == Ok("1") {
                        eprintln!("PostgreSQL half SKIPPED (LEADGATE_SKIP_POSTGRES=1)");
                        return None;
                    }
                    panic!(
                        "LEADGATE_TEST_DATABASE_URL is not set: the PostgreSQL half of the \
                         suite cannot run (`make test` sets it; LEADGATE_SKIP_POSTGRES=1 skips it explicitly)"
                    );
                };
                let name = format!("lg_test_{}", uuid::Uuid::new_v4().simple());
                let mut admin = sqlx::PgConnection::connect(&server)
                    .await
                    .unwrap_or_else(|e| panic!("PostgreSQL at LEADGATE_TEST_DATABASE_URL: {e}"));
                sqlx::query(&format!("create database {name}"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
                let url = leadgate::store::postgres::with_database(&server, &name);
                Some(TestDb {
                    url,
                    backend,
                    _dir: None,
                    pg: Some((server, name)),
                })
            }
        }
    }

    pub async fn store(&self) -> Arc<dyn Store> {
        store::connect(&self.url).await.expect("connect")
    }

    /// The text column of each row `sql` returns (one text column), straight from the
    /// database: what a test checks that no store method reads.
    pub async fn texts(&self, sql: &str) -> Vec<String> {
        match self.backend {
            Backend::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&self.url).await.unwrap();
                sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap()
            }
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&self.url).await.unwrap();
                sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap()
            }
        }
    }

    /// Runs `sql` (statements separated by `;`) straight on the database, as an operator
    /// or an earlier version of Leadgate would.
    pub async fn execute(&self, sql: &str) {
        match self.backend {
            Backend::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&self.url).await.unwrap();
                sqlx::raw_sql(sql).execute(&pool).await.unwrap();
            }
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&self.url).await.unwrap();
                sqlx::raw_sql(sql).execute(&pool).await.unwrap();
            }
        }
    }

    /// Runs one statement straight on the database: `ok`, or the database's refusal.
    pub async fn outcome(&self, sql: &str) -> String {
        let result = match self.backend {
            Backend::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql).execute(&mut c).await.map(|_| ())
            }
            Backend::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
                sqlx::query(sql).execute(&mut c).await.map(|_| ())
            }
        };
        match result {
            Ok(()) => "ok".into(),
            Err(e) => e.to_string(),
        }
    }

    /// Applies migration `version` again, as if it had first run now: what it found then
    /// (the rows in the database now) is what it records.
    pub async fn run_migration_again(&self, version: i64, table: &str) {
        self.execute(&format!(
            "drop table {table}; delete from _sqlx_migrations where version = {version}"
        ))
        .await;
        self.store().await;
    }

    async fn drop_database(&self) {
        if let Some((server, name)) = &self.pg {
            let mut admin = sqlx::PgConnection::connect(server).await.unwrap();
            sqlx::query(&format!("drop database if exists {name} with (force)"))
                .execute(&mut admin)
                .await
                .unwrap();
        }
    }
}

/// Runs `test` against a fresh database of `backend` and drops the database after, even
/// when the test panics.
pub async fn run<F, Fut>(backend: Backend, test: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()>,
{
    let Some(mut db) = TestDb::new(backend).await else {
        return;
    };
    // The SQLite file's directory lives here, not in the value the test gets: a test
    // that only reads `db.url` would otherwise drop it (closures capture only the fields
    // they use) before the test even starts.
    let _dir = db._dir.take();
    let cleanup = TestDb {
        url: db.url.clone(),
        backend,
        _dir: None,
        pg: db.pg.clone(),
    };
    let result = AssertUnwindSafe(test(db)).catch_unwind().await;
    cleanup.drop_database().await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Declares one test per backend: `each_backend!(name, |db| async move { ... });`
/// expands to `name::sqlite` and `name::postgres`.
#[macro_export]
macro_rules! each_backend {
    ($(#[$meta:meta])* $name:ident, $body:expr) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                $crate::run($crate::Backend::Sqlite, $body).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                $crate::run($crate::Backend::Postgres, $body).await;
            }
        }
    };
}

/// A database `name` on the benchmarks' server (`LEADGATE_BENCH_DATABASE_URL`, else
/// `LEADGATE_TEST_DATABASE_URL`), created when missing and kept after: a benchmark's
/// large load, read again by its next run.
pub async fn kept_postgres(name: &str) -> String {
    let server = std::env::var("LEADGATE_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("LEADGATE_TEST_DATABASE_URL"))
        .expect("set LEADGATE_BENCH_DATABASE_URL (or LEADGATE_TEST_DATABASE_URL) to a PostgreSQL server");
    let mut admin = sqlx::PgConnection::connect(&server)
        .await
        .expect("PostgreSQL");
    let exists: bool =
        sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
            .bind(name)
            .fetch_one(&mut admin)
            .await
            .unwrap();
    if !exists {
        sqlx::query(&format!("create database {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    leadgate::store::postgres::with_database(&server, name)
}

/// Runs `bench` on a database created for it on the PostgreSQL server named by
/// `LEADGATE_BENCH_DATABASE_URL` (else `LEADGATE_TEST_DATABASE_URL`), dropped after.
pub async fn on_scratch_postgres<F, Fut>(prefix: &str, bench: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let server = std::env::var("LEADGATE_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("LEADGATE_TEST_DATABASE_URL"))
        .expect("set LEADGATE_BENCH_DATABASE_URL (or LEADGATE_TEST_DATABASE_URL) to a PostgreSQL server");
    let name = format!("{prefix}_{}", std::process::id());
    let mut admin = sqlx::PgConnection::connect(&server)
        .await
        .expect("PostgreSQL");
    sqlx::query(&format!("create database {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    bench(leadgate::store::postgres::with_database(&server, &name)).await;
    let mut admin = sqlx::PgConnection::connect(&server).await.unwrap();
    sqlx::query(&format!("drop database {name} with (force)"))
        .execute(&mut admin)
        .await
        .unwrap();
}
