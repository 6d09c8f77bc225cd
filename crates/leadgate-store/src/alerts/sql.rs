//! [`Alerts`](crate::Alerts) for one backend: its SQL, and the write transactions it
//! runs through `crate::ops`. Expanded by [`sql_store!`](crate::sql::sql_store) in the
//! backend's module, where its imports and its `DIALECT` are.

macro_rules! alerts_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Alerts for $store {
            // Team alerts

            async fn alert_turn(
                &self,
                channel: &str,
                owner: &str,
                lease_for: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Option<AlertTurn>> {
                let mut tx = self.begin_write().await?;
                // `where true`: SQLite's parser needs it between a select and `on conflict`.
                sqlx::query(
                    "insert into alert_channels (tenant_id, channel, case_cursor) \
                     select $2, $1, coalesce(max(id), 0) from review_cases \
                     where true on conflict (tenant_id, channel) do nothing",
                )
                .bind(channel)
                .bind(self.tenant.0)
                .execute(&mut *tx)
                .await?;
                let sql = format!(
                    "select {CHANNEL_COLUMNS} from alert_channels where channel = $1 and tenant_id = $2{}",
                    DIALECT.lock_row
                );
                let r: ChannelRow = sqlx::query_as(&sql)
                    .bind(channel)
                    .bind(self.tenant.0)
                    .fetch_one(&mut *tx)
                    .await?;
                if r.leased_at(now) {
                    tx.commit().await?;
                    return Ok(None);
                }
                let token = uuid::Uuid::new_v4().simple().to_string();
                let lease_until = after(now, lease_for);
                sqlx::query(
                    "update alert_channels set lease_owner = $2, lease_token = $3, lease_until = $4 \
                     where channel = $1 and tenant_id = $5",
                )
                .bind(channel)
                .bind(owner)
                .bind(&token)
                .bind(lease_until)
                .bind(self.tenant.0)
                .execute(&mut *tx)
                .await?;
                let conditions: Vec<AlertCondition> = sqlx::query_as(
                    "select key, firing, since, notified_at from alert_conditions \
                     where channel = $1 and tenant_id = $2 order by key",
                )
                .bind(channel)
                .bind(self.tenant.0)
                .fetch_all(&mut *tx)
                .await?;
                tx.commit().await?;
                r.turn(token, lease_until, conditions).map(Some)
            }

            async fn alert_arm(
                &self,
                channel: &str,
                token: &str,
                pending: Option<&PendingAlert>,
                lease_for: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<()> {
                let mut tx = self.begin_write().await?;
                let until = after(now, lease_for);
                let done = match pending {
                    Some(p) => sqlx::query(
                        "update alert_channels set lease_until = $3, pending = $4, \
                         pending_cursor = $5, pending_conditions = $6, failures = 0, next_try_at = null \
                         where channel = $1 and lease_token = $2 and lease_until > $7 and tenant_id = $8",
                    )
                    .bind(channel)
                    .bind(token)
                    .bind(until)
                    .bind(&p.body)
                    .bind(p.cursor)
                    .bind(serde_json::to_string(&p.conditions).map_err(corrupt)?)
                    .bind(now)
                    .bind(self.tenant.0),
                    None => sqlx::query(
                        "update alert_channels set lease_until = $3 \
                         where channel = $1 and lease_token = $2 and lease_until > $4 \
                         and pending is not null and tenant_id = $5",
                    )
                    .bind(channel)
                    .bind(token)
                    .bind(until)
                    .bind(now)
                    .bind(self.tenant.0),
                }
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                if done.rows_affected() == 1 {
                    Ok(())
                } else {
                    Err(StoreError::LeaseLost(format!("alert channel {channel}")))
                }
            }

            async fn alert_done(
                &self,
                channel: &str,
                token: &str,
                outcome: AlertOutcome,
                now: DateTime<Utc>,
            ) -> Result<()> {
                let mut tx = self.begin_write().await?;
                let sql = format!(
                    "select {CHANNEL_COLUMNS} from alert_channels \
                     where channel = $1 and lease_token = $2 and tenant_id = $3{}",
                    DIALECT.lock_row
                );
                let Some(r): Option<ChannelRow> = sqlx::query_as(&sql)
                    .bind(channel)
                    .bind(token)
                    .bind(self.tenant.0)
                    .fetch_optional(&mut *tx)
                    .await?
                else {
                    return Err(StoreError::LeaseLost(format!("alert channel {channel}")));
                };
                let release = "lease_owner = null, lease_token = null, lease_until = null";
                if let AlertOutcome::Retry { at } = outcome {
                    sqlx::query(&format!(
                        "update alert_channels set failures = failures + 1, next_try_at = $2, \
                         {release} where channel = $1 and tenant_id = $3"
                    ))
                    .bind(channel)
                    .bind(at)
                    .bind(self.tenant.0)
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    return Ok(());
                }
                let mut recent = r.recent_sends()?;
                let minute_ago = (now - chrono::TimeDelta::minutes(1)).timestamp_millis();
                recent.retain(|ms| *ms > minute_ago);
                if outcome == AlertOutcome::Accepted {
                    recent.push(now.timestamp_millis());
                }
                let cursor = r.pending_cursor;
                let conditions = r.pending()?.map(|p| p.conditions).unwrap_or_default();
                sqlx::query(&format!(
                    "update alert_channels set recent_sends = $2, \
                     case_cursor = coalesce($3, case_cursor), \
                     last_group_at = case when $3 is null then last_group_at else $4 end, \
                     pending = null, pending_cursor = null, pending_conditions = null, \
                     failures = 0, next_try_at = null, {release} where channel = $1 and tenant_id = $5"
                ))
                .bind(channel)
                .bind(serde_json::to_string(&recent).map_err(corrupt)?)
                .bind(cursor)
                .bind(now)
                .bind(self.tenant.0)
                .execute(&mut *tx)
                .await?;
                for (key, firing) in conditions {
                    sqlx::query(
                        "insert into alert_conditions (tenant_id, channel, key, firing, since, notified_at) \
                         values ($5, $1, $2, $3, $4, $4) on conflict (tenant_id, channel, key) do update set \
                         since = case when alert_conditions.firing = excluded.firing \
                           then alert_conditions.since else excluded.since end, \
                         firing = excluded.firing, notified_at = excluded.notified_at",
                    )
                    .bind(channel)
                    .bind(key)
                    .bind(firing)
                    .bind(now)
                    .bind(self.tenant.0)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn alert_release(&self, channel: &str, token: &str) -> Result<()> {
                let mut tx = self.begin_write().await?;
                sqlx::query(
                    "update alert_channels set lease_owner = null, lease_token = null, \
                     lease_until = null where channel = $1 and lease_token = $2 and tenant_id = $3",
                )
                .bind(channel)
                .bind(token)
                .bind(self.tenant.0)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn alert_facts(
                &self,
                after_case: i64,
                cases_until: DateTime<Utc>,
                stale_before: DateTime<Utc>,
                review_before: DateTime<Utc>,
            ) -> Result<AlertFacts> {
                let p = &self.pool;
                let mut f = AlertFacts::default();
                // The default tenant's alerts (the deployment's) watch every tenant; another
                // tenant's, its own.
                let scope = if self.tenant == leadgate_domain::TenantId::DEFAULT { -1 } else { self.tenant.0 };
                let groups: Vec<(String, String, i64, i64, DateTime<Utc>)> = sqlx::query_as(
                    "select c.reason, o.source, count(*), max(c.id), min(c.opened_at) \
                     from review_cases c join operations o on o.operation_id = c.operation_id \
                     where c.id > $1 and c.opened_at <= $2 and ($3 < 0 or c.tenant_id = $3) \
                     group by c.reason, o.source order by c.reason, o.source",
                )
                .bind(after_case)
                .bind(cases_until)
                .bind(scope)
                .fetch_all(p)
                .await?;
                for (reason, source, count, max_id, first_at) in groups {
                    f.new_cases_max_id = f.new_cases_max_id.max(Some(max_id));
                    f.new_cases_first_at = Some(f.new_cases_first_at.map_or(first_at, |t| t.min(first_at)));
                    f.new_cases.push(NewCaseCount { reason, source, count });
                }
                if let Some(max_id) = f.new_cases_max_id {
                    f.new_case_ids = sqlx::query_scalar(
                        "select id from review_cases where id > $1 and id <= $2 \
                         and ($4 < 0 or tenant_id = $4) order by id limit $3",
                    )
                    .bind(after_case)
                    .bind(max_id)
                    .bind(ALERT_CASE_IDS)
                    .bind(scope)
                    .fetch_all(p)
                    .await?;
                }
                f.lost = sqlx::query_scalar(
                    "select cast(coalesce(sum(value), 0) as bigint) from metric_counters \
                     where metric = 'lost' and ($1 < 0 or tenant_id = $1)",
                )
                .bind(scope)
                .fetch_one(p)
                .await?;
                f.stale_in_progress = sqlx::query_scalar(
                    "select count(*) from operations where status = 'in_progress' and updated_at < $1 \
                     and ($2 < 0 or tenant_id = $2)",
                )
                .bind(stale_before)
                .bind(scope)
                .fetch_one(p)
                .await?;
                let (old, oldest): (i64, Option<DateTime<Utc>>) = sqlx::query_as(
                    "select count(*), min(opened_at) from review_cases \
                     where resolved_at is null and opened_at < $1 and ($2 < 0 or tenant_id = $2)",
                )
                .bind(review_before)
                .bind(scope)
                .fetch_one(p)
                .await?;
                f.old_open_cases = old;
                f.oldest_open_case_at = oldest;
                f.connectors = self.connectors().await?;
                // The event feed is every tenant's: the deployment's alerts say how it fares.
                // So are the gateways and their spools.
                if scope < 0 {
                    f.feeds = $crate::Feed::feed_subscribers(self).await?;
                    f.spooled = $crate::Upkeep::beats(self).await?.spooled;
                }
                Ok(f)
            }
        }
    };
}
pub(crate) use alerts_sql;
