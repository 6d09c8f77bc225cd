//! [`SignIns`](crate::SignIns) for one backend. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module.

macro_rules! sign_ins_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::SignIns for $store {
            async fn record_sign_in(&self, a: &$crate::SignInAttempt) -> Result<()> {
                sqlx::query(
                    "insert into console_sign_ins (at, login, client, outcome) \
                     values ($1, $2, $3, $4)",
                )
                .bind(a.at)
                .bind(&a.login)
                .bind(&a.client)
                .bind(&a.outcome)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn sign_ins(
                &self,
                login: Option<&str>,
                limit: i64,
            ) -> Result<Vec<$crate::SignInAttempt>> {
                Ok(sqlx::query_as::<_, $crate::SignInAttempt>(
                    "select at, login, client, outcome from console_sign_ins \
                     where (cast($1 as text) is null or login = $1) order by id desc limit $2",
                )
                .bind(login)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn forget_sign_ins(&self, before: DateTime<Utc>) -> Result<u64> {
                Ok(sqlx::query("delete from console_sign_ins where at < $1")
                    .bind(before)
                    .execute(&self.pool)
                    .await?
                    .rows_affected())
            }
        }
    };
}
pub(crate) use sign_ins_sql;
