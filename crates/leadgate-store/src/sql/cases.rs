//! The write transaction's statements on review cases ([`CaseTx`](crate::ops::CaseTx)),
//! for one backend: SQL text and binds, no decisions. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module, where its imports and
//! its `DIALECT` are.

macro_rules! tx_cases {
    ($store:ident, $db:ty) => {
        impl $crate::ops::CaseTx for SqlTx<$db> {
            async fn open_non_conflict_case(&mut self, operation_id: &str) -> Result<Option<i64>> {
                Ok(sqlx::query_scalar(
                    "select id from review_cases where operation_id = $1 and resolved_at is null \
                     and reason <> 'payload_conflict' order by id limit 1",
                )
                .bind(operation_id)
                .fetch_optional(&mut *self.0)
                .await?)
            }

            async fn insert_case(
                &mut self,
                operation_id: &str,
                reason: ReviewReason,
                delivery_id: Option<i64>,
                detail: &Value,
                now: DateTime<Utc>,
            ) -> Result<i64> {
                Ok(sqlx::query_scalar(
                    "insert into review_cases (operation_id, reason, opened_at, delivery_id, detail, tenant_id) \
                     values ($1, $2, $3, $4, $5, (select tenant_id from operations where operation_id = $1)) \
                     returning id",
                )
                .bind(operation_id)
                .bind(reason.as_str())
                .bind(now)
                .bind(delivery_id)
                .bind(detail.to_string())
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn lock_case(&mut self, case_id: i64) -> Result<Option<CaseRow>> {
                let sql = format!(
                    "select id, operation_id, reason, resolved_at, resolved_by, delivery_id \
                     from review_cases where id = $1{}",
                    DIALECT.lock_row
                );
                sqlx::query_as::<_, CaseLockRow>(&sql)
                    .bind(case_id)
                    .fetch_optional(&mut *self.0)
                    .await?
                    .map(CaseRow::try_from)
                    .transpose()
            }

            async fn close_case(
                &mut self,
                case_id: i64,
                resolution: &str,
                actor: &str,
                comment: Option<&str>,
                now: DateTime<Utc>,
            ) -> Result<()> {
                sqlx::query(
                    "update review_cases set resolved_at = $1, resolution = $2, resolved_by = $3, \
                     comment = $4 where id = $5",
                )
                .bind(now)
                .bind(resolution)
                .bind(actor)
                .bind(comment)
                .bind(case_id)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn open_case_count(&mut self, operation_id: &str) -> Result<i64> {
                Ok(sqlx::query_scalar(
                    "select count(*) from review_cases where operation_id = $1 and resolved_at is null",
                )
                .bind(operation_id)
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn has_open_conflict(&mut self, operation_id: &str) -> Result<bool> {
                let n: i64 = sqlx::query_scalar(
                    "select count(*) from review_cases where operation_id = $1 \
                     and resolved_at is null and reason = 'payload_conflict'",
                )
                .bind(operation_id)
                .fetch_one(&mut *self.0)
                .await?;
                Ok(n > 0)
            }

            async fn supersede_cases(
                &mut self,
                operation_id: &str,
                actor: &str,
                why: &str,
                now: DateTime<Utc>,
            ) -> Result<Vec<i64>> {
                Ok(sqlx::query_scalar(
                    "update review_cases set resolved_at = $1, resolution = $2, \
                     resolved_by = $3, comment = $4 where operation_id = $5 and resolved_at is null \
                     and reason <> 'payload_conflict' returning id",
                )
                .bind(now)
                .bind(Resolution::Superseded.as_str())
                .bind(actor)
                .bind(why)
                .bind(operation_id)
                .fetch_all(&mut *self.0)
                .await?)
            }
        }
    };
}
pub(crate) use tx_cases;
