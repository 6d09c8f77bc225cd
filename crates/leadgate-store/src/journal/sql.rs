//! [`Journal`](crate::Journal) for one backend: its SQL, and the write transactions it
//! runs through `crate::ops`. Expanded by [`sql_store!`](crate::sql::sql_store) in the
//! backend's module, where its imports and its `DIALECT` are.

macro_rules! journal_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Journal for $store {
            async fn record_delivery(&self, d: NewDelivery) -> Result<DeliveryRecord> {
                self.record_delivery_now(d).await
            }

            async fn record_rejected(&self, d: RejectedDelivery) -> Result<i64> {
                let mut tx = self.begin_write().await?;
                let id: i64 = sqlx::query_scalar(
                    "insert into deliveries (source, operation_id, received_at, content_type, \
                     raw_body, outcome, reject_reason, transform_version, tenant_id) \
                     values ($1, $2, $3, $4, $5, 'rejected', $6, $7, $8) returning id",
                )
                .bind(&d.source)
                .bind(&d.operation_id)
                .bind(d.received_at)
                .bind(&d.content_type)
                .bind(&d.raw_body)
                .bind(&d.reason)
                .bind(d.transform_version)
                .bind(self.tenant.0)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(id)
            }

            async fn use_signature(
                &self,
                source: &str,
                signature_sha256: &str,
                operation_id: &str,
                expires_at: DateTime<Utc>,
                now: DateTime<Utc>,
            ) -> Result<String> {
                self.first_use($crate::journal::sql::FirstUse::SIGNATURE, source, signature_sha256, operation_id, expires_at, now)
                    .await
            }

            async fn quoted_before_the_draft(&self, id: &OperationId) -> Result<bool> {
                let found: Option<String> = sqlx::query_scalar(
                    "select operation_id from quoted_keys_before_the_draft where operation_id = $1",
                )
                .bind(id.as_str())
                .fetch_optional(&self.pool)
                .await?;
                Ok(found.is_some())
            }

            async fn use_content_key(
                &self,
                source: &str,
                content_sha256: &str,
                operation_id: &str,
                expires_at: DateTime<Utc>,
                now: DateTime<Utc>,
            ) -> Result<String> {
                self.first_use($crate::journal::sql::FirstUse::CONTENT, source, content_sha256, operation_id, expires_at, now)
                    .await
            }
        }

        impl $store {
            /// The operation a hash names while its row lasts: this one if the hash is new
            /// or its row expired, else the one it was first used for. Rows that expired
            /// are forgotten on the way, 100 at a time.
            async fn first_use(
                &self,
                t: $crate::journal::sql::FirstUse,
                source: &str,
                hash: &str,
                operation_id: &str,
                expires_at: DateTime<Utc>,
                now: DateTime<Utc>,
            ) -> Result<String> {
                let $crate::journal::sql::FirstUse { table, column } = t;
                let mut tx = self.begin_write().await?;
                // Forgetting is left to rows long over: `now` is the caller's arrival
                // time, and a slow request still inside a window must find that window's
                // row even after a quicker one, arriving later, tidied up.
                sqlx::query(&format!(
                    "delete from {table} where (tenant_id, source, {column}) in \
                       (select tenant_id, source, {column} from {table} where expires_at < $1 limit 100)"
                ))
                .bind(now - $crate::journal::sql::FirstUse::KEPT_AFTER)
                .execute(&mut *tx)
                .await?;
                // Of two at once, the second waits for the first's row, then keeps it; a
                // row whose time is over is taken over.
                sqlx::query(&format!(
                    "insert into {table} (source, {column}, operation_id, expires_at, tenant_id) \
                     values ($1, $2, $3, $4, $6) on conflict (tenant_id, source, {column}) do update \
                     set operation_id = excluded.operation_id, expires_at = excluded.expires_at \
                     where {table}.expires_at < $5"
                ))
                .bind(source)
                .bind(hash)
                .bind(operation_id)
                .bind(expires_at)
                .bind(now)
                .bind(self.tenant.0)
                .execute(&mut *tx)
                .await?;
                let first: String = sqlx::query_scalar(&format!(
                    "select operation_id from {table} where tenant_id = $3 and source = $1 and {column} = $2"
                ))
                .bind(source)
                .bind(hash)
                .bind(self.tenant.0)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(first)
            }
        }
    };
}
pub(crate) use journal_sql;

/// A table of first uses: a hash, the operation it names, until when.
#[derive(Clone, Copy)]
pub(crate) struct FirstUse {
    pub(crate) table: &'static str,
    pub(crate) column: &'static str,
}

impl FirstUse {
    /// How long a row is kept after its time is over: longer than any request takes
    /// between its arrival and its first use (the body timeout, the database's patience).
    pub(crate) const KEPT_AFTER: chrono::TimeDelta = chrono::TimeDelta::hours(1);

    /// A signed delivery's signature (migration 0027).
    pub(crate) const SIGNATURE: FirstUse = FirstUse {
        table: "signature_uses",
        column: "signature_sha256",
    };
    /// A content key's window (migration 0030).
    pub(crate) const CONTENT: FirstUse = FirstUse {
        table: "content_keys",
        column: "content_sha256",
    };
}
