//! The write transaction's statements on retention: scrubbing finished operations ([`RetentionTx`](crate::ops::RetentionTx)),
//! for one backend: SQL text and binds, no decisions. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module, where its imports and
//! its `DIALECT` are.

macro_rules! tx_retention {
    ($store:ident, $db:ty) => {
        impl $crate::ops::RetentionTx for SqlTx<$db> {
            async fn purge_candidates(&mut self, scope: i32, finished_before: DateTime<Utc>, batch: i64) -> Result<Vec<String>> {
                let sql = format!(
                    "select o.operation_id from operations o \
                     where o.purged_at is null and {} \
                     and o.updated_at < $1 and {} \
                     order by o.updated_at limit $2",
                    $crate::sql::retention::in_scope("o.tenant_id", "$3"),
                    $crate::sql::retention::SETTLED
                );
                Ok(sqlx::query_scalar(&sql)
                .bind(finished_before)
                .bind(batch)
                .bind(scope)
                .fetch_all(&mut *self.0)
                .await?)
            }

            async fn still_purgeable(&mut self, operation_id: &str, finished_before: DateTime<Utc>) -> Result<bool> {
                let sql = format!(
                    "select count(*) from operations o where o.operation_id = $1 \
                     and o.purged_at is null and o.updated_at < $2 and {}",
                    $crate::sql::retention::SETTLED
                );
                let still: i64 = sqlx::query_scalar(&sql)
                .bind(operation_id)
                .bind(finished_before)
                .fetch_one(&mut *self.0)
                .await?;
                Ok(still > 0)
            }

            async fn scrub_operation(&mut self, operation_id: &str, now: DateTime<Utc>) -> Result<()> {
                sqlx::query(
                    "update operations set payload = null, contact_phone = null, \
                     contact_email = null, contact_name = null, name_words = null, purged_at = $1 \
                     where operation_id = $2",
                )
                .bind(now)
                .bind(operation_id)
                .execute(&mut *self.0)
                .await?;
                sqlx::query("delete from operation_names where operation_id = $1")
                    .bind(operation_id)
                    .execute(&mut *self.0)
                    .await?;
                Ok(())
            }

            async fn scrub_deliveries_of(&mut self, operation_id: &str) -> Result<u64> {
                Ok(sqlx::query(
                    "update deliveries set raw_body = null, payload = null \
                     where operation_id = $1 and (raw_body is not null or payload is not null)",
                )
                .bind(operation_id)
                .execute(&mut *self.0)
                .await?
                .rows_affected())
            }

            async fn scrub_late_deliveries(&mut self, scope: i32, finished_before: DateTime<Utc>, batch: i64) -> Result<u64> {
                let sql = format!(
                    "update deliveries set raw_body = null, payload = null where id in \
                     (select d.id from deliveries d join operations o \
                        on o.operation_id = d.operation_id \
                      where (d.raw_body is not null or d.payload is not null) \
                      and {} \
                      and d.received_at < $1 and o.purged_at is not null \
                      and not exists (select 1 from review_cases c \
                        where c.operation_id = d.operation_id and c.resolved_at is null) \
                      limit $2)",
                    $crate::sql::retention::in_scope("d.tenant_id", "$3")
                );
                Ok(sqlx::query(&sql)
                .bind(finished_before)
                .bind(batch)
                .bind(scope)
                .execute(&mut *self.0)
                .await?
                .rows_affected())
            }

            async fn scrub_rejected(&mut self, scope: i32, finished_before: DateTime<Utc>, batch: i64) -> Result<u64> {
                let sql = format!(
                    "update deliveries set raw_body = null, payload = null where id in \
                     (select id from deliveries where outcome = 'rejected' and received_at < $1 \
                      and {} \
                      and (raw_body is not null or payload is not null) limit $2)",
                    $crate::sql::retention::in_scope("tenant_id", "$3")
                );
                Ok(sqlx::query(&sql)
                .bind(finished_before)
                .bind(batch)
                .bind(scope)
                .execute(&mut *self.0)
                .await?
                .rows_affected())
            }

            async fn purge_contact_locks(&mut self, scope: i32, before: DateTime<Utc>, batch: i64) -> Result<u64> {
                let sql = format!(
                    "delete from contact_locks where (tenant_id, key) in \
                       (select tenant_id, key from contact_locks where expires_at < $1 \
                        and {} limit $2)",
                    $crate::sql::retention::in_scope("tenant_id", "$3")
                );
                Ok(sqlx::query(&sql)
                .bind(before)
                .bind(batch)
                .bind(scope)
                .execute(&mut *self.0)
                .await?
                .rows_affected())
            }

            async fn unpurgeable(&mut self, scope: i32) -> Result<u64> {
                let sql = format!(
                    "select count(*) from operations o where o.purged_at is null \
                     and ($1 < 0 or o.tenant_id = $1) and not ({})",
                    $crate::sql::retention::SETTLED
                );
                let n: i64 = sqlx::query_scalar(&sql)
                .bind(scope)
                .fetch_one(&mut *self.0)
                .await?;
                Ok(n as u64)
            }
        }
    };
}
pub(crate) use tx_retention;

/// An operation (`o`) retention may scrub, its age aside: finished, with no open case
/// and no pending CRM update (what a person may still act on keeps its data).
pub(crate) const SETTLED: &str = "o.status in ('completed', 'failed_terminal') \
     and not exists (select 1 from review_cases c \
       where c.operation_id = o.operation_id and c.resolved_at is null) \
     and not exists (select 1 from crm_updates u \
       where u.operation_id = o.operation_id and u.state = 'pending')";

/// Whether a row of tenant `col` is in the scrub's scope (the parameter `scope`): that
/// tenant's, or (-1) every tenant's that keeps the deployment's window — a tenant with its
/// own window (`tenants.retention_full_secs`, migration 0042) is scrubbed by a pass of its
/// own.
pub(crate) fn in_scope(col: &str, scope: &str) -> String {
    format!(
        "({col} = {scope} or ({scope} < 0 and {col} not in \
           (select t.id from tenants t where t.retention_full_secs is not null)))"
    )
}
