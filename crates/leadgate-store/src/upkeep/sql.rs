//! [`Upkeep`](crate::Upkeep) for one backend: its SQL, and the write transactions it
//! runs through `crate::ops`. Expanded by [`sql_store!`](crate::sql::sql_store) in the
//! backend's module, where its imports and its `DIALECT` are.

macro_rules! upkeep_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Upkeep for $store {
            async fn ping(&self) -> Result<()> {
                sqlx::query("select 1").execute(&self.pool).await?;
                Ok(())
            }

            async fn beat(
                &self,
                owner: &str,
                kind: &str,
                started_at: DateTime<Utc>,
                now: DateTime<Utc>,
                spooled: $crate::Spooled,
            ) -> Result<()> {
                sqlx::query(
                    "insert into gateway_heartbeats (owner, kind, started_at, beat_at, spool_records, spool_oldest) \
                     values ($1, $2, $3, $4, $5, $6) on conflict (owner) do update set beat_at = excluded.beat_at, \
                     spool_records = excluded.spool_records, spool_oldest = excluded.spool_oldest",
                )
                .bind(owner)
                .bind(kind)
                .bind(started_at)
                .bind(now)
                .bind(spooled.records)
                .bind(spooled.oldest)
                .execute(&self.pool)
                .await?;
                sqlx::query("delete from gateway_heartbeats where beat_at < $1")
                    .bind(now - chrono::TimeDelta::days(1))
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn beats(&self) -> Result<$crate::Beats> {
                let (last, records, oldest): (Option<DateTime<Utc>>, i64, Option<DateTime<Utc>>) =
                    sqlx::query_as(
                        "select max(beat_at), cast(coalesce(sum(spool_records), 0) as bigint), \
                         min(case when spool_records > 0 then spool_oldest end) from gateway_heartbeats",
                    )
                    .fetch_one(&self.pool)
                    .await?;
                Ok($crate::Beats {
                    last,
                    spooled: $crate::Spooled { records, oldest },
                })
            }

            async fn forget_requests(
                &self,
                before: DateTime<Utc>,
                scope: Option<leadgate_domain::TenantId>,
            ) -> Result<u64> {
                if DIALECT.backend == crate::Backend::Sqlite {
                    return Ok(0);
                }
                let sql = format!(
                    "delete from human_requests where applied_at < $1 and {}",
                    $crate::sql::retention::in_scope("tenant_id", "$2")
                );
                Ok(sqlx::query(&sql)
                    .bind(before)
                    .bind(scope.map_or(-1, |t| t.0))
                    .execute(&self.pool)
                    .await?
                    .rows_affected())
            }

            async fn forget_feed_owed(&self, before: DateTime<Utc>) -> Result<u64> {
                let mut tx = self.begin_write().await?;
                let forgotten = sqlx::query(
                    "delete from feed_deliveries where event_seq in \
                       (select seq from feed_events where occurred_at < $1)",
                )
                .bind(before)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                sqlx::query(
                    "delete from feed_events where occurred_at < $1 and not exists \
                       (select 1 from feed_deliveries d where d.event_seq = feed_events.seq)",
                )
                .bind(before)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(forgotten)
            }

            async fn pause_connector(
                &self,
                name: &str,
                reason: &str,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<()> {
                let mut tx = self.write().await?;
                tx.pause_connector(name, reason, actor, now).await?;
                tx.commit().await
            }

            async fn purge_batch(
                &self,
                finished_before: DateTime<Utc>,
                batch: i64,
                now: DateTime<Utc>,
            ) -> Result<PurgeReport> {
                $crate::upkeep::retention::purge_batch(self.write().await?, None, finished_before, batch, now, false).await
            }

            async fn purge_tenant_batch(
                &self,
                finished_before: Option<DateTime<Utc>>,
                batch: i64,
                now: DateTime<Utc>,
            ) -> Result<PurgeReport> {
                let cutoff = finished_before.unwrap_or(now);
                let erasing = finished_before.is_none();
                $crate::upkeep::retention::purge_batch(self.write().await?, Some(self.tenant), cutoff, batch, now, erasing).await
            }

            async fn pull_mark(&self, source: &str) -> Result<Option<String>> {
                Ok(sqlx::query_scalar("select mark from pull_cursors where tenant_id = $2 and source = $1")
                    .bind(source)
                    .bind(self.tenant.0)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn save_pull_mark(&self, source: &str, mark: &str, now: DateTime<Utc>) -> Result<()> {
                sqlx::query(
                    "insert into pull_cursors (source, mark, updated_at, tenant_id) values ($1, $2, $3, $4) \
                     on conflict (tenant_id, source) do update set mark = excluded.mark, \
                     updated_at = excluded.updated_at",
                )
                .bind(source)
                .bind(mark)
                .bind(now)
                .bind(self.tenant.0)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn save_diagnosis(&self, d: &NewDiagnosis) -> Result<i64> {
                let s = &d.summary;
                let totals = serde_json::to_string(&s.totals).map_err(corrupt)?;
                Ok(sqlx::query_scalar(
                    "insert into diagnosis_reports (generated_at, input, period_from, period_to, \
                     group_count, pair_count, totals, report) \
                     values ($1, $2, $3, $4, $5, $6, $7, $8) returning id",
                )
                .bind(s.generated_at)
                .bind(&s.input)
                .bind(s.period_from)
                .bind(s.period_to)
                .bind(s.groups)
                .bind(s.pairs)
                .bind(totals)
                .bind(d.report.to_string())
                .fetch_one(&self.pool)
                .await?)
            }

            async fn compact_metrics(&self, before: DateTime<Utc>) -> Result<u64> {
                if DIALECT.backend != $crate::Backend::Postgres {
                    return Ok(0); // one writer, one shard: nothing to fold
                }
                // Folds the shards of slots before `before` into shard 0, one transaction.
                let slot = before.timestamp().div_euclid(SLOT_SECONDS);
                let done = sqlx::query(
                    "with moved as (delete from metric_series where slot < $1 and shard <> 0 \
                       returning tenant_id, slot, metric, label, value) \
                     insert into metric_series (tenant_id, slot, metric, label, shard, value) \
                     select tenant_id, slot, metric, label, 0, sum(value) from moved \
                     group by tenant_id, slot, metric, label \
                     on conflict (tenant_id, slot, metric, label, shard) \
                     do update set value = metric_series.value + excluded.value",
                )
                .bind(slot)
                .execute(&self.pool)
                .await?;
                // The counters' shards are sessions (backend pids, migration 0006): those of
                // sessions that ended are folded into shard 0, which no session writes.
                let folded = sqlx::query(
                    "with moved as (delete from metric_counters where shard <> 0 \
                       and shard not in (select pid from pg_stat_activity where pid is not null) \
                       returning tenant_id, metric, label, label2, value) \
                     insert into metric_counters (tenant_id, metric, label, label2, shard, value) \
                     select tenant_id, metric, label, label2, 0, sum(value) from moved \
                     group by tenant_id, metric, label, label2 \
                     on conflict (tenant_id, metric, label, label2, shard) \
                     do update set value = metric_counters.value + excluded.value",
                )
                .execute(&self.pool)
                .await?;
                Ok(done.rows_affected() + folded.rows_affected())
            }

            async fn resume_connector(
                &self,
                name: &str,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<bool> {
                let mut tx = self.write().await?;
                let done = tx.resume_connector(name, actor, now).await?;
                tx.commit().await?;
                Ok(done)
            }
        }
    };
}
pub(crate) use upkeep_sql;
