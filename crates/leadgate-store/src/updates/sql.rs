//! [`Updates`](crate::Updates) for one backend: its SQL, and the write transactions it
//! runs through `crate::ops`. Expanded by [`sql_store!`](crate::sql::sql_store) in the
//! backend's module, where its imports and its `DIALECT` are.

macro_rules! updates_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Updates for $store {
            async fn claim_update(
                &self,
                connector: &str,
                owner: &str,
                lease_for: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Option<UpdateClaim>> {
                // The first pending update of its entity (several operations may share
                // one: a link, a merge), in the order of the deliveries they carry, past
                // its own quiet window, with no earlier one of the entity still pending or
                // possibly landing: an older update never lands after a newer one.
                let pick = "select u.id from crm_updates u join operations o on o.operation_id = u.operation_id \
                     where u.state = 'pending' and u.due_at <= $1 \
                     and (u.lease_expires_at is null or u.lease_expires_at <= $1) \
                     and (u.quiet_after is null or u.quiet_after <= $1) \
                     and o.executor = 'worker' \
                     and not exists (select 1 from crm_updates e where e.crm_id = u.crm_id \
                       and e.tenant_id = u.tenant_id and e.id <> u.id \
                       and (e.delivery_id < u.delivery_id or (e.delivery_id = u.delivery_id and e.id < u.id)) \
                       and (e.state = 'pending' or e.quiet_after > $1)) \
                     and o.tenant_id = $3 \
                     and not exists (select 1 from connectors c where c.tenant_id = $3 and c.name = $2 and c.state = 'paused') \
                     and not exists (select 1 from tenants t where t.id = $3 and t.state <> 'active') \
                     order by u.due_at, u.id limit 1";
                // A read first: an idle poll takes no write lock (SQLite has one writer).
                let due: Option<i64> = sqlx::query_scalar(pick)
                    .bind(now)
                    .bind(connector)
                    .bind(self.tenant.0)
                    .fetch_optional(&self.pool)
                    .await?;
                if due.is_none() {
                    return Ok(None);
                }
                let mut tx = self.write().await?;
                let lock = if DIALECT.skip_locked.is_empty() { "" } else { " for update of u skip locked" };
                let sql = format!("{pick}{lock}");
                let Some(id): Option<i64> = sqlx::query_scalar(&sql)
                    .bind(now)
                    .bind(connector)
                    .bind(self.tenant.0)
                    .fetch_optional(&mut *tx.0)
                    .await?
                else {
                    return Ok(None);
                };
                let token = uuid::Uuid::new_v4().to_string();
                let expires_at = after(now, lease_for);
                sqlx::query(
                    "update crm_updates set attempts = attempts + 1, lease_owner = $2, \
                     lease_token = $3, lease_expires_at = $4, updated_at = $5 where id = $1",
                )
                .bind(id)
                .bind(owner)
                .bind(&token)
                .bind(expires_at)
                .bind(now)
                .execute(&mut *tx.0)
                .await?;
                let row = sqlx::query_as::<_, UpdateRow>(
                    "select u.id, u.operation_id, o.source, u.crm_id, u.case_id, u.delivery_id, \
                     u.attempts, o.payload as original, d.payload as later \
                     from crm_updates u join operations o on o.operation_id = u.operation_id \
                     join deliveries d on d.id = u.delivery_id where u.id = $1",
                )
                .bind(id)
                .fetch_one(&mut *tx.0)
                .await?;
                let claim = row.claim(owner, token, expires_at)?;
                tx.commit().await?;
                Ok(Some(claim))
            }

            async fn start_update(
                &self,
                claim: &UpdateClaim,
                lease_for: std::time::Duration,
                settle: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<()> {
                let mut tx = self.write().await?;
                let done = sqlx::query(
                    "update crm_updates set lease_expires_at = $3, quiet_after = $4, updated_at = $5 \
                     where id = $1 and state = 'pending' and lease_token = $2 and lease_expires_at > $5",
                )
                .bind(claim.id)
                .bind(&claim.token)
                .bind(after(now, lease_for))
                .bind(after(after(now, lease_for), settle))
                .bind(now)
                .execute(&mut *tx.0)
                .await?;
                tx.commit().await?;
                if done.rows_affected() == 1 {
                    Ok(())
                } else {
                    Err(StoreError::LeaseLost(format!("update {}", claim.id)))
                }
            }

            async fn finish_update(
                &self,
                claim: &UpdateClaim,
                outcome: UpdateOutcome,
                events: Vec<NewEvent>,
                now: DateTime<Utc>,
            ) -> Result<()> {
                $crate::updates::ops::finish(self.write().await?, claim, outcome, events, now).await
            }
        }
    };
}
pub(crate) use updates_sql;
