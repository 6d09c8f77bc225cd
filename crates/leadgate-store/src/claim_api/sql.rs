//! [`ClaimApi`](crate::ClaimApi) for one backend: its SQL, and the write transactions it
//! runs through `crate::ops`. Expanded by [`sql_store!`](crate::sql::sql_store) in the
//! backend's module, where its imports and its `DIALECT` are.

macro_rules! claim_api_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::ClaimApi for $store {
            async fn claim_external(&self, c: ExternalClaim) -> Result<ExternalClaimOutcome> {
                retrying(|| async { $crate::claim_api::ops::claim(self.write().await?, &c).await })
                    .await
            }

            async fn expire_external_leases(&self, now: DateTime<Utc>) -> Result<u64> {
                $crate::claim_api::ops::expire_leases(self.write().await?, now).await
            }

            async fn take_due_redeliveries(
                &self,
                source: &str,
                actor: &str,
                now: DateTime<Utc>,
                resend_at: DateTime<Utc>,
                limit: i64,
            ) -> Result<Vec<DueRedelivery>> {
                // A read first, without the writer: on SQLite a write transaction holds
                // the one writer lock, and this runs every poll interval.
                let any: Option<RedeliveryRow> = sqlx::query_as(PICK_REDELIVERY)
                    .bind(source)
                    .bind(now)
                    .bind(1_i64)
                    .bind(self.tenant.0)
                    .fetch_optional(&self.pool)
                    .await?;
                if any.is_none() {
                    return Ok(vec![]);
                }
                $crate::claim_api::ops::take_due_redeliveries(
                    self.write().await?,
                    source,
                    actor,
                    now,
                    resend_at,
                    limit,
                )
                .await
            }
        }
    };
}
pub(crate) use claim_api_sql;
