//! [`CrmAccess`](crate::CrmAccess) for one backend: its SQL, and the write transactions it
//! runs through `crate::ops`. Expanded by [`sql_store!`](crate::sql::sql_store) in the
//! backend's module, where its imports and its `DIALECT` are.

macro_rules! crm_access_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::CrmAccess for $store {
            async fn take_turn(
                &self,
                account: &str,
                pace: leadgate_domain::pacing::Pace,
                now: DateTime<Utc>,
            ) -> Result<std::time::Duration> {
                $crate::crm_access::pacing::take_turn(self.write().await?, account, pace, now).await
            }

            async fn hold_turns(
                &self,
                account: &str,
                pace: leadgate_domain::pacing::Pace,
                until: DateTime<Utc>,
            ) -> Result<()> {
                $crate::crm_access::pacing::hold_turns(self.write().await?, account, pace, until)
                    .await
            }

            async fn crm_token(&self, connector: &str) -> Result<Option<CrmToken>> {
                Ok(sqlx::query_as::<_, CrmToken>(
                    "select access_token, refresh_token, expires_at, version from crm_tokens \
                     where tenant_id = $2 and connector = $1",
                )
                .bind(connector)
                .bind(self.tenant.0)
                .fetch_optional(&self.pool)
                .await?)
            }

            async fn save_crm_token(
                &self,
                connector: &str,
                token: &CrmToken,
                expected_version: Option<i64>,
            ) -> Result<bool> {
                let mut tx = self.begin_write().await?;
                let sql = match expected_version {
                    None => {
                        "insert into crm_tokens (connector, access_token, refresh_token, \
                         expires_at, version, updated_at, tenant_id) values ($1, $2, $3, $4, $5, $6, $7) \
                         on conflict (tenant_id, connector) do nothing"
                    }
                    Some(_) => {
                        "update crm_tokens set access_token = $2, refresh_token = $3, \
                         expires_at = $4, version = $5, updated_at = $6 \
                         where connector = $1 and version = $7 and tenant_id = $8"
                    }
                };
                let mut query = sqlx::query(sql)
                    .bind(connector)
                    .bind(&token.access_token)
                    .bind(&token.refresh_token)
                    .bind(token.expires_at)
                    .bind(token.version)
                    .bind(self.clock_now());
                if let Some(expected) = expected_version {
                    query = query.bind(expected);
                }
                let query = query.bind(self.tenant.0);
                let done = query.execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }
        }
    };
}
pub(crate) use crm_access_sql;
