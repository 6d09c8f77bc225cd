//! What both benchmarks share: a scratch PostgreSQL database for one run.

use std::future::Future;

use leadgate::store::postgres::with_database;
use sqlx::Connection;

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
    bench(with_database(&server, &name)).await;
    let mut admin = sqlx::PgConnection::connect(&server).await.unwrap();
    sqlx::query(&format!("drop database {name} with (force)"))
        .execute(&mut admin)
        .await
        .unwrap();
}
