//! The write transaction's statements on a person's requests a gateway applies ([`RequestTx`](crate::ops::RequestTx)),
//! for one backend: SQL text and binds, no decisions. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module, where its imports and
//! its `DIALECT` are.

macro_rules! tx_requests {
    ($store:ident, $db:ty) => {
        impl $crate::ops::RequestTx for SqlTx<$db> {
            async fn lock_waiting_request(&mut self) -> Result<Option<$crate::review::requests::RequestRow>> {
                // In turn per login (migration 0026): each login's oldest waiting request,
                // the login served longest ago (or never) first, so one person's backlog
                // delays nobody else's request by more than one of theirs per turn. A head
                // another gateway is applying is skipped, and with it that login's turn.
                let sql = format!(
                    "{REQUEST_COLUMNS} r where r.applied_at is null \
                     and not exists (select 1 from human_requests e where e.actor = r.actor \
                        and e.applied_at is null and e.id < r.id) \
                     order by (select max(a.applied_at) from human_requests a \
                        where a.actor = r.actor and a.applied_at is not null) nulls first, r.id \
                     limit 1{}",
                    DIALECT.skip_locked
                );
                let row = sqlx::query(&sql).fetch_optional(&mut *self.0).await?;
                row.as_ref().map(request_from_row).transpose()
            }

            async fn lock_request(&mut self, id: i64) -> Result<Option<$crate::review::requests::RequestRow>> {
                let sql = format!("{REQUEST_COLUMNS} where id = $1 and applied_at is null{}", DIALECT.lock_row);
                let row = sqlx::query(&sql).bind(id).fetch_optional(&mut *self.0).await?;
                row.as_ref().map(request_from_row).transpose()
            }

            async fn role_of(&mut self, login: &str) -> Result<Option<leadgate_domain::roles::Role>> {
                let role: Option<String> = sqlx::query_scalar("select leadgate_role_of($1)")
                    .bind(login)
                    .fetch_one(&mut *self.0)
                    .await?;
                role.map(|r| r.trim_start_matches("leadgate_").parse().map_err(corrupt))
                    .transpose()
            }

            async fn answer_request(&mut self, id: i64, outcome: &str, now: DateTime<Utc>) -> Result<()> {
                // A subscriber's secret was the request's to carry, not the table's to keep:
                // gone with the answer (applied or declined), in the same statement.
                let sql = format!(
                    "update human_requests set applied_at = $1, outcome = $2, body = case \
                     when kind = 'feed_subscribe' then {} else body end where id = $3",
                    DIALECT.body_without_secret
                );
                sqlx::query(&sql)
                    .bind(now)
                    .bind(outcome)
                    .bind(id)
                    .execute(&mut *self.0)
                    .await?;
                Ok(())
            }
        }
    };
}
pub(crate) use tx_requests;
