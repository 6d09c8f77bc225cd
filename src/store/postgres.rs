//! PostgreSQL backend: for several gateway and worker machines sharing one store. Row
//! locks (`for update`) serialise changes to one operation; workers pick due work with
//! `for update skip locked`, so two never take the same row and none waits on another.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres};

use super::sql::sql_store;

pub struct PgStore {
    pool: PgPool,
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
        Ok(PgStore { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn begin_write(&self) -> sqlx::Result<sqlx::Transaction<'static, Postgres>> {
        self.pool.begin().await
    }
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
}

impl PgStore {
    /// One transaction per delivery: concurrent intakes commit together (PostgreSQL's
    /// group commit) and lock only their own rows.
    async fn record_delivery_now(&self, d: NewDelivery) -> Result<DeliveryRecord> {
        let mut tx = self.begin_write().await?;
        let record = record_in(&mut tx, &d).await?;
        tx.commit().await?;
        Ok(record)
    }
}
