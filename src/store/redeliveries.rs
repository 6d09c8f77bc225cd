//! The redelivery queue of claim-API operations (migration 0007), for `crate::redeliver`.
//!
//! An operation an integration claimed and reported `not_sent` or `rate_limited` is
//! `received` again with a due time, and one first seen while its connector was paused
//! is `received` and due at once; neither is the worker's to call the CRM for. The
//! worker's redelivery loop takes those that are due and sends their stored payload back
//! to the integration's webhook, which claims them again like any delivery. Taking one
//! is a compare-and-set on `redeliveries.resend_at` in a write transaction: however many
//! processes share the database, one of them sends it per due time.
//!
//! Kept apart from `sql.rs` on purpose: it adds a table and two queries and changes none
//! of the store's own paths.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::{Result, Store, StoreError};
use crate::domain::OperationId;

/// One operation taken for a redelivery: the timeline says `redelivered` already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueRedelivery {
    pub operation_id: OperationId,
    /// The payload the integration claimed it with (JSON text), to be sent back as is.
    pub payload: String,
    /// How many times it has been sent back, this one included.
    pub sent: i64,
}

#[async_trait::async_trait]
pub trait Redeliveries: Send + Sync + 'static {
    /// Takes up to `limit` operations of the claim-API `source` that are due for a
    /// redelivery at `now`: `received`, executed externally, due, their connector (the
    /// source's name) not paused, and not sent back since they became due unless that
    /// was before `resend_at` of the last sending ran out (the integration never claimed
    /// it: its webhook was down, or its run died before the claim). Each taken one is
    /// not due for a redelivery again before `resend_at` unless it is claimed and due
    /// again, and gets a `redelivered` event on its timeline.
    async fn take_due_redeliveries(
        &self,
        source: &str,
        actor: &str,
        now: DateTime<Utc>,
        resend_at: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<DueRedelivery>>;
}

/// Due redeliveries: binds $1 = source (also the connector), $2 = now, $3 = limit.
const PICK: &str = "select o.operation_id, o.payload, o.next_attempt_at from operations o \
    left join redeliveries r on r.operation_id = o.operation_id \
    where o.status = 'received' and o.executor = 'external' and o.source = $1 \
    and o.next_attempt_at <= $2 and o.payload is not null \
    and (r.operation_id is null or r.resend_at <= $2 or r.sent_at < o.next_attempt_at) \
    and not exists (select 1 from connectors c where c.name = $1 and c.state = 'paused') \
    order by o.next_attempt_at limit $3";

/// Marks one as sent, if nobody else did since it was picked (a compare-and-set: the
/// conflicting row is read as last committed, under its lock): binds $1 = operation_id,
/// $2 = now, $3 = resend_at, $4 = the due time it was picked with. Returns `sent`, or
/// no row when another process took it first.
const MARK: &str = "insert into redeliveries (operation_id, sent, sent_at, resend_at) \
    values ($1, 1, $2, $3) \
    on conflict (operation_id) do update set sent = redeliveries.sent + 1, \
    sent_at = excluded.sent_at, resend_at = excluded.resend_at \
    where redeliveries.resend_at <= $2 or redeliveries.sent_at < $4 \
    returning sent";

const EVENT: &str = "insert into timeline (operation_id, at, kind, actor, detail) \
    values ($1, $2, 'redelivered', $3, $4)";

macro_rules! redeliveries_impl {
    ($store:ty, $writer:ident, $begin:literal, $lock:literal) => {
        #[async_trait::async_trait]
        impl Redeliveries for $store {
            async fn take_due_redeliveries(
                &self,
                source: &str,
                actor: &str,
                now: DateTime<Utc>,
                resend_at: DateTime<Utc>,
                limit: i64,
            ) -> Result<Vec<DueRedelivery>> {
                use sqlx::Row;
                // A read first, without the writer: on SQLite a write transaction holds
                // the one writer lock, and this runs every poll interval.
                let any: Option<String> = sqlx::query_scalar(PICK)
                    .bind(source)
                    .bind(now)
                    .bind(1_i64)
                    .fetch_optional(self.pool())
                    .await?;
                if any.is_none() {
                    return Ok(Vec::new());
                }
                let mut tx = self.$writer().begin_with($begin).await?;
                let rows = sqlx::query(&format!("{PICK}{}", $lock))
                    .bind(source)
                    .bind(now)
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?;
                let mut taken = Vec::with_capacity(rows.len());
                for row in rows {
                    let id: String = row.try_get("operation_id")?;
                    let payload: String = row.try_get("payload")?;
                    let due: Option<DateTime<Utc>> = row.try_get("next_attempt_at")?;
                    let sent: Option<i32> = sqlx::query_scalar(MARK)
                        .bind(&id)
                        .bind(now)
                        .bind(resend_at)
                        .bind(due)
                        .fetch_optional(&mut *tx)
                        .await?;
                    let Some(sent) = sent.map(i64::from) else {
                        continue;
                    };
                    let detail = json!({"redelivery": sent, "due_at": due});
                    sqlx::query(EVENT)
                        .bind(&id)
                        .bind(now)
                        .bind(actor)
                        .bind(detail.to_string())
                        .execute(&mut *tx)
                        .await?;
                    let operation_id = OperationId::try_from(id)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                    taken.push(DueRedelivery {
                        operation_id,
                        payload,
                        sent,
                    });
                }
                tx.commit().await?;
                Ok(taken)
            }
        }
    };
}

redeliveries_impl!(
    SqliteStore,
    writer,
    "BEGIN IMMEDIATE",
    // the transaction holds SQLite's one writer lock: nobody changes the rows meanwhile
    ""
);

redeliveries_impl!(
    PgStore,
    pool,
    "begin isolation level read committed",
    // a row another process is taking is skipped, not waited for; one it took and
    // committed meanwhile fails the compare-and-set of MARK
    " for update of o skip locked"
);

/// [`super::connect`], and the same store's redelivery queue.
pub async fn connect(url: &str) -> Result<(Arc<dyn Store>, Arc<dyn Redeliveries>)> {
    if url.starts_with("sqlite:") {
        let s = Arc::new(SqliteStore::connect(url).await?);
        Ok((s.clone(), s))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let s = Arc::new(PgStore::connect(url).await?);
        Ok((s.clone(), s))
    } else {
        let scheme = url.split(':').next().unwrap_or(url);
        Err(StoreError::UnknownScheme(scheme.to_owned()))
    }
}
