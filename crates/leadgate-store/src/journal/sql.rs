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
                     raw_body, outcome, reject_reason, transform_version) \
                     values ($1, $2, $3, $4, $5, 'rejected', $6, $7) returning id",
                )
                .bind(&d.source)
                .bind(&d.operation_id)
                .bind(d.received_at)
                .bind(&d.content_type)
                .bind(&d.raw_body)
                .bind(&d.reason)
                .bind(d.transform_version)
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
                let mut tx = self.begin_write().await?;
                sqlx::query(
                    "delete from signature_uses where (source, signature_sha256) in \
                       (select source, signature_sha256 from signature_uses where expires_at < $1 limit 100)",
                )
                .bind(now)
                .execute(&mut *tx)
                .await?;
                // Of two at once, the second waits for the first's row, then keeps it.
                sqlx::query(
                    "insert into signature_uses (source, signature_sha256, operation_id, expires_at) \
                     values ($1, $2, $3, $4) on conflict (source, signature_sha256) do nothing",
                )
                .bind(source)
                .bind(signature_sha256)
                .bind(operation_id)
                .bind(expires_at)
                .execute(&mut *tx)
                .await?;
                let first: String = sqlx::query_scalar(
                    "select operation_id from signature_uses where source = $1 and signature_sha256 = $2",
                )
                .bind(source)
                .bind(signature_sha256)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(first)
            }
        }
    };
}
pub(crate) use journal_sql;
