//! The write transaction's statements on connectors: pause, request pacing, health ([`ConnectorTx`](crate::ops::ConnectorTx)),
//! for one backend: SQL text and binds, no decisions. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module, where its imports and
//! its `DIALECT` are.

macro_rules! tx_connectors {
    ($store:ident, $db:ty) => {
        impl $crate::ops::ConnectorTx for SqlTx<$db> {
            async fn connector_paused(&mut self, name: &str) -> Result<bool> {
                // A tenant paused (by a person or its tenants file) or removed pauses its
                // connectors.
                let paused: bool = sqlx::query_scalar(
                    "select exists (select 1 from connectors where tenant_id = $2 and name = $1 \
                       and state = 'paused') \
                     or exists (select 1 from tenants where id = $2 and state <> 'active')",
                )
                .bind(name)
                .bind(self.1 .0)
                .fetch_one(&mut *self.0)
                .await?;
                Ok(paused)
            }

            async fn pause_connector(
                &mut self,
                name: &str,
                reason: &str,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<()> {
                sqlx::query(
                    "insert into connectors (name, state, reason, since, changed_by, by_hand, tenant_id) \
                     values ($1, 'paused', $2, $3, $4, false, $5) \
                     on conflict (tenant_id, name) do update set state = 'paused', reason = excluded.reason, \
                     since = case when connectors.state = 'paused' then connectors.since else excluded.since end, \
                     changed_by = excluded.changed_by, by_hand = false",
                )
                .bind(name)
                // Support reads it: whatever the CRM or an integration wrote about a lead,
                // no phone number or e-mail address.
                .bind(leadgate_domain::text::mask_contacts(reason))
                .bind(now)
                .bind(actor)
                .bind(self.1 .0)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn pause_connector_by_hand(
                &mut self,
                name: &str,
                reason: &str,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<bool> {
                // A pause already in place (by hand or after an auth failure) stays as it
                // is: its reason is what resuming must answer.
                let done = sqlx::query(
                    "insert into connectors (name, state, reason, since, changed_by, by_hand, tenant_id) \
                     values ($1, 'paused', $2, $3, $4, true, $5) \
                     on conflict (tenant_id, name) do update set state = 'paused', reason = excluded.reason, \
                     since = excluded.since, changed_by = excluded.changed_by, by_hand = true \
                     where connectors.state <> 'paused'",
                )
                .bind(name)
                .bind(leadgate_domain::text::mask_contacts(reason))
                .bind(now)
                .bind(actor)
                .bind(self.1 .0)
                .execute(&mut *self.0)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn resume_connector(
                &mut self,
                name: &str,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<bool> {
                let done = sqlx::query(
                    "update connectors set state = 'active', reason = null, since = $1, \
                     changed_by = $2, by_hand = false where tenant_id = $4 and name = $3 and state = 'paused'",
                )
                .bind(now)
                .bind(actor)
                .bind(name)
                .bind(self.1 .0)
                .execute(&mut *self.0)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn lock_pacing(&mut self, account: &str) -> Result<Option<f64>> {
                let sql = format!(
                    "select tat_ms from request_pacing where account = $1{}",
                    DIALECT.lock_row
                );
                Ok(sqlx::query_scalar(&sql).bind(account).fetch_optional(&mut *self.0).await?)
            }

            async fn save_pacing(&mut self, account: &str, tat_ms: f64) -> Result<()> {
                sqlx::query(
                    "insert into request_pacing (account, tat_ms) values ($1, $2) \
                     on conflict (account) do update set tat_ms = excluded.tat_ms",
                )
                .bind(account)
                .bind(tat_ms)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn lock_connector_health(
                &mut self,
                name: &str,
            ) -> Result<Option<leadgate_domain::outage::Health>> {
                let sql = format!(
                    "select failures, unreachable_since, probe_at, probes from connectors \
                     where tenant_id = $2 and name = $1{}",
                    DIALECT.lock_row
                );
                let row = sqlx::query_as::<_, HealthRow>(&sql)
                    .bind(name)
                    .bind(self.1 .0)
                    .fetch_optional(&mut *self.0)
                    .await?;
                Ok(row.map(Into::into))
            }

            async fn add_connector_row(&mut self, name: &str, now: DateTime<Utc>) -> Result<()> {
                sqlx::query(
                    "insert into connectors (name, state, since, changed_by, tenant_id) \
                     values ($1, 'active', $2, 'worker', $3) on conflict (tenant_id, name) do nothing",
                )
                .bind(name)
                .bind(now)
                .bind(self.1 .0)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn save_connector_health(
                &mut self,
                name: &str,
                h: &leadgate_domain::outage::Health,
                now: DateTime<Utc>,
            ) -> Result<()> {
                sqlx::query(
                    "insert into connectors (name, state, since, changed_by, failures, \
                     unreachable_since, probe_at, probes, tenant_id) \
                     values ($1, 'active', $2, 'worker', $3, $4, $5, $6, $7) \
                     on conflict (tenant_id, name) do update set failures = excluded.failures, \
                     unreachable_since = excluded.unreachable_since, probe_at = excluded.probe_at, \
                     probes = excluded.probes",
                )
                .bind(name)
                .bind(now)
                .bind(h.failures)
                .bind(h.unreachable_since)
                .bind(h.probe_at)
                .bind(h.probes)
                .bind(self.1 .0)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }
        }
    };
}
pub(crate) use tx_connectors;
