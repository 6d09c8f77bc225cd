//! The write transaction's statements on updates of CRM entities ([`UpdateTx`](crate::ops::UpdateTx)),
//! for one backend: SQL text and binds, no decisions. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module, where its imports and
//! its `DIALECT` are.

macro_rules! tx_updates {
    ($store:ident, $db:ty) => {
        impl $crate::ops::UpdateTx for SqlTx<$db> {
            async fn insert_crm_update(
                &mut self,
                operation_id: &str,
                case_id: i64,
                delivery_id: i64,
                crm_id: &str,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<Option<i64>> {
                Ok(sqlx::query_scalar(
                    "insert into crm_updates (operation_id, case_id, delivery_id, crm_id, \
                     requested_by, due_at, created_at, updated_at, tenant_id) \
                     select operation_id, $2, $3, $4, $5, $6, $6, $6, tenant_id from operations \
                     where operation_id = $1 and executor = 'worker' returning id",
                )
                .bind(operation_id)
                .bind(case_id)
                .bind(delivery_id)
                .bind(crm_id)
                .bind(actor)
                .bind(now)
                .fetch_optional(&mut *self.0)
                .await?)
            }

            async fn newer_update_of_entity(&mut self, crm_id: &str, delivery_id: i64) -> Result<bool> {
                let n: i64 = sqlx::query_scalar(
                    // An entity id is its portal's: only the same tenant's updates count.
                    "select count(*) from crm_updates where crm_id = $1 and delivery_id > $2 \
                     and tenant_id = (select tenant_id from deliveries where id = $2) \
                     and state in ('pending', 'done')",
                )
                .bind(crm_id)
                .bind(delivery_id)
                .fetch_one(&mut *self.0)
                .await?;
                Ok(n > 0)
            }

            async fn lock_crm_update(&mut self, id: i64) -> Result<Option<$crate::updates::ops::UpdateRow>> {
                let sql = format!(
                    "select state, lease_token, delivery_id, crm_id from crm_updates where id = $1{}",
                    DIALECT.lock_row
                );
                Ok(sqlx::query_as(&sql).bind(id).fetch_optional(&mut *self.0).await?)
            }

            async fn write_crm_update(
                &mut self,
                id: i64,
                w: &$crate::updates::ops::UpdateWrite<'_>,
                now: DateTime<Utc>,
            ) -> Result<()> {
                sqlx::query(
                    "update crm_updates set state = $2, due_at = coalesce($3, due_at), \
                     quiet_after = case when $4 then quiet_after else null end, \
                     last_error = coalesce($5, last_error), \
                     last_error_class = coalesce($6, last_error_class), \
                     lease_owner = null, lease_token = null, lease_expires_at = null, \
                     attempts = attempts - case when $8 then 1 else 0 end, \
                     updated_at = $7 where id = $1",
                )
                .bind(id)
                .bind(w.state)
                .bind(w.due_at)
                .bind(w.keep_quiet)
                .bind(w.error.map(|(m, _)| m.to_owned()))
                .bind(w.error.map(|(_, c)| c.as_str()))
                .bind(now)
                .bind(w.refund)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }
        }
    };
}
pub(crate) use tx_updates;
