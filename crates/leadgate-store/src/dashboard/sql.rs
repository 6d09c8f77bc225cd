//! [`Dashboard`](crate::Dashboard) for one backend: its SQL. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module, where its imports and
//! its `DIALECT` are.

macro_rules! dashboard_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Dashboard for $store {
            async fn case_counts(&self) -> Result<BTreeMap<ReviewReason, i64>> {
                let rows: Vec<(String, i64)> = sqlx::query_as(
                    "select reason, count(*) from review_cases where resolved_at is null group by reason",
                )
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter()
                    .map(|(r, n)| Ok((r.parse().map_err(corrupt)?, n)))
                    .collect()
            }

            async fn queue_counts(&self, lease_expired_before: DateTime<Utc>) -> Result<QueueCounts> {
                let failed_terminal: i64 = sqlx::query_scalar(
                    "select count(*) from operations where status = 'failed_terminal'",
                )
                .fetch_one(&self.pool)
                .await?;
                let stale_in_progress: i64 = sqlx::query_scalar(
                    "select count(*) from operations where status = 'in_progress' \
                     and lease_expires_at < $1",
                )
                .bind(lease_expired_before)
                .fetch_one(&self.pool)
                .await?;
                Ok(QueueCounts { failed_terminal, stale_in_progress })
            }

            async fn series(
                &self,
                from: DateTime<Utc>,
                to: DateTime<Utc>,
                n: u32,
            ) -> Result<Vec<SeriesPoint>> {
                // Per-slot figures kept by triggers (metric_series): one index range.
                let edges = slot_buckets(from, to, n);
                let (first, end) = (edges[0].0, edges[edges.len() - 1].1);
                let step = edges[0].1 - edges[0].0;
                let mut points: Vec<SeriesPoint> = edges
                    .iter()
                    .map(|(lo, hi)| SeriesPoint {
                        start: slot_time(*lo),
                        end: slot_time(*hi),
                        ..Default::default()
                    })
                    .collect();
                let rows: Vec<(i64, String, String, i64)> = sqlx::query_as(
                    "select slot, metric, label, cast(sum(value) as bigint) from metric_series \
                     where slot >= $1 and slot < $2 group by slot, metric, label",
                )
                .bind(first)
                .bind(end)
                .fetch_all(&self.pool)
                .await?;
                for (slot, metric, label, count) in rows {
                    let Some(p) = points.get_mut(((slot - first) / step) as usize) else {
                        continue;
                    };
                    match metric.as_str() {
                        "deliveries" => p.deliveries += count,
                        "new_operations" => p.new_operations += count,
                        "duplicates" => p.duplicates_absorbed += count,
                        "crm_entities" => p.crm_entities += count,
                        "cases_opened" => p.cases_opened += count,
                        "cases_resolved" => p.cases_resolved += count,
                        "retries" => *p.retries_by_class.entry(label).or_default() += count,
                        _ => {}
                    }
                }
                Ok(points)
            }

            async fn stale_in_progress(
                &self,
                lease_expired_before: DateTime<Utc>,
                page: OperationPage,
            ) -> Result<Vec<Operation>> {
                // Served by the operations_leases index (lease_expires_at, in_progress only).
                let mut q = op_page_query(
                    Status::InProgress,
                    "lease_expires_at",
                    Some(lease_expired_before),
                    &page,
                );
                let rows = q.build().fetch_all(&self.pool).await?;
                rows.iter().map(op_from_row).collect()
            }

            async fn connector(&self, name: &str) -> Result<Option<Connector>> {
                // A tenant that is not active holds its connectors, this one too when it
                // has no row yet (no call has failed): its calls wait as a paused one's.
                let sql = format!(
                    "select cast($2 as text) as name, {} from (select 1 as one) o \
                     left join connectors c on c.tenant_id = $1 and c.name = $2 \
                     left join tenants t on t.id = $1 \
                     where c.name is not null or t.state <> 'active'",
                    $crate::dashboard::sql::HELD_BY_THE_TENANT
                );
                let row = sqlx::query_as::<_, ConnectorRow>(&sql)
                    .bind(self.tenant.0)
                    .bind(name)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(row.map(Into::into))
            }

            async fn connectors(&self) -> Result<Vec<Connector>> {
                let sql = format!(
                    "select c.name, {} from connectors c left join tenants t on t.id = c.tenant_id \
                     where c.tenant_id = $1 order by c.name",
                    $crate::dashboard::sql::HELD_BY_THE_TENANT
                );
                let rows = sqlx::query_as::<_, ConnectorRow>(&sql)
                    .bind(self.tenant.0)
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows.into_iter().map(Into::into).collect())
            }

            async fn metrics(
                &self,
                now: DateTime<Utc>,
                stale_after: std::time::Duration,
            ) -> Result<MetricsSnapshot> {
                let p = &self.pool;
                let pairs = |rows: Vec<(String, i64)>| rows.into_iter().collect::<BTreeMap<_, _>>();
                let mut m = MetricsSnapshot::default();
                // The counted figures come from `metric_counters`, kept by triggers in the
                // writing transactions (migration 0004): a few rows, whatever the volume.
                let counters: Vec<(String, String, String, i64)> = sqlx::query_as(
                    "select metric, label, label2, cast(sum(value) as bigint) from metric_counters \
                     group by metric, label, label2",
                )
                .fetch_all(p)
                .await?;
                for (metric, label, label2, n) in counters {
                    match metric.as_str() {
                        "operations" if n != 0 => {
                            m.operations_by_status.insert(label, n);
                        }
                        "deliveries" if n != 0 => {
                            if label2 == "duplicate" {
                                m.duplicates_absorbed.insert(label.clone(), n);
                            }
                            m.deliveries.insert((label, label2), n);
                        }
                        "retries" if n != 0 => {
                            m.retries_by_class.insert(label, n);
                        }
                        "crm_steps" if n != 0 => {
                            m.crm_steps.insert((label, label2), n);
                        }
                        "feed_deliveries" if n != 0 => {
                            m.feed_deliveries.insert(label, n);
                        }
                        "crm_entities" => m.crm_entities_created = n,
                        "lost" => m.lost = n,
                        "unreconstructable" => m.unreconstructable = n,
                        _ => {}
                    }
                }
                m.unique_operations = m.operations_by_status.values().sum();
                let stale_since = now - chrono::TimeDelta::from_std(stale_after).unwrap_or(chrono::TimeDelta::MAX);
                m.stale_in_progress = sqlx::query_scalar(
                    "select count(*) from operations where status = 'in_progress' and updated_at < $1",
                )
                .bind(stale_since)
                .fetch_one(p)
                .await?;
                m.unprocessed = ["received", "in_progress"]
                    .iter()
                    .filter_map(|s| m.operations_by_status.get(*s))
                    .sum();
                m.open_cases_by_reason = pairs(
                    sqlx::query_as(
                        "select reason, count(*) from review_cases where resolved_at is null group by reason",
                    )
                    .fetch_all(p)
                    .await?,
                );
                m.resolved_cases = sqlx::query_scalar(
                    "select count(*) from review_cases where resolved_at is not null",
                )
                .fetch_one(p)
                .await?;
                m.mean_seconds_to_resolve = sqlx::query_scalar(DIALECT.mean_resolve_seconds).fetch_one(p).await?;
                m.paused_connectors = sqlx::query_scalar(
                    "select name from connectors where state = 'paused' order by name",
                )
                .fetch_all(p)
                .await?;
                let unreachable: Vec<(String, DateTime<Utc>)> = sqlx::query_as(
                    "select name, unreachable_since from connectors \
                     where unreachable_since is not null order by name",
                )
                .fetch_all(p)
                .await?;
                m.unreachable_connectors = unreachable.into_iter().collect();
                Ok(m)
            }
        }
    };
}
pub(crate) use dashboard_sql;

/// A connector's columns (`c`) as its tenant (`t`, none when it is not registered) leaves
/// them: a tenant that is not active (paused by a person or by its tenants file) holds its
/// connectors, which read as paused by hand, with its reason.
pub(crate) const HELD_BY_THE_TENANT: &str = "\
    case when coalesce(t.state, 'active') = 'active' then c.state else 'paused' end as state, \
    case when coalesce(t.state, 'active') = 'active' then c.reason \
      else coalesce(t.paused_reason, 'the tenant is ' || t.state) end as reason, \
    case when coalesce(t.state, 'active') = 'active' then c.since else t.updated_at end as since, \
    case when coalesce(t.state, 'active') = 'active' then c.changed_by else t.changed_by end \
      as changed_by, \
    c.unreachable_since, \
    case when coalesce(t.state, 'active') = 'active' then c.by_hand else true end as by_hand";
