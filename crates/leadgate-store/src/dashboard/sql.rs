//! [`Dashboard`](crate::Dashboard) for one backend: its SQL. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module, where its imports and
//! its `DIALECT` are.

macro_rules! dashboard_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Dashboard for $store {
            async fn case_counts(&self) -> Result<BTreeMap<ReviewReason, i64>> {
                let rows: Vec<(String, i64)> = sqlx::query_as(
                    "select reason, count(*) from review_cases where resolved_at is null \
                     and tenant_id = $1 group by reason",
                )
                .bind(self.tenant.0)
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter()
                    .map(|(r, n)| Ok((r.parse().map_err(corrupt)?, n)))
                    .collect()
            }

            async fn queue_counts(&self, lease_expired_before: DateTime<Utc>) -> Result<QueueCounts> {
                let failed_terminal: i64 = sqlx::query_scalar(
                    "select count(*) from operations where status = 'failed_terminal' and tenant_id = $1",
                )
                .bind(self.tenant.0)
                .fetch_one(&self.pool)
                .await?;
                let stale_in_progress: i64 = sqlx::query_scalar(
                    "select count(*) from operations where status = 'in_progress' \
                     and lease_expires_at < $1 and tenant_id = $2",
                )
                .bind(lease_expired_before)
                .bind(self.tenant.0)
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
                     where tenant_id = $3 and slot >= $1 and slot < $2 group by slot, metric, label",
                )
                .bind(first)
                .bind(end)
                .bind(self.tenant.0)
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
                    self.tenant,
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
                let mut figures = self.figures(Some(self.tenant), now, stale_after).await?;
                Ok(figures.pop().map(|t| t.metrics).unwrap_or_default())
            }

            async fn fleet_metrics(
                &self,
                now: DateTime<Utc>,
                stale_after: std::time::Duration,
            ) -> Result<Vec<TenantMetrics>> {
                self.figures(None, now, stale_after).await
            }
        }

        impl $store {
            /// The figures of `only` (none: of every registered tenant), one statement per
            /// kind of figure, grouped by tenant.
            async fn figures(
                &self,
                only: Option<TenantId>,
                now: DateTime<Utc>,
                stale_after: std::time::Duration,
            ) -> Result<Vec<TenantMetrics>> {
                let p = &self.pool;
                // -1: every tenant.
                let only = only.map_or(-1, |t| t.0);
                // Every tenant's slug (the gateway's `/metrics`; a person's login may not
                // read slugs, and one tenant's figures need none).
                let tenants: Vec<(i32, String)> = if only < 0 {
                    sqlx::query_as("select id, slug from tenants order by id")
                        .fetch_all(p)
                        .await?
                } else {
                    vec![]
                };
                let mut by_tenant: BTreeMap<i32, TenantMetrics> = tenants
                    .into_iter()
                    .map(|(id, slug)| (id, TenantMetrics::new(TenantId(id), slug)))
                    .collect();
                let of = $crate::dashboard::sql::figures_of;
                if only >= 0 {
                    of(&mut by_tenant, only);
                }
                // The counted figures come from `metric_counters`, kept by triggers in the
                // writing transactions (migration 0004): a few rows, whatever the volume.
                let counters: Vec<(i32, String, String, String, i64)> = sqlx::query_as(
                    "select tenant_id, metric, label, label2, cast(sum(value) as bigint) \
                     from metric_counters where $1 < 0 or tenant_id = $1 \
                     group by tenant_id, metric, label, label2",
                )
                .bind(only)
                .fetch_all(p)
                .await?;
                for (tenant, metric, label, label2, n) in counters {
                    let m = &mut of(&mut by_tenant, tenant).metrics;
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
                let stale_since = now - chrono::TimeDelta::from_std(stale_after).unwrap_or(chrono::TimeDelta::MAX);
                let stale: Vec<(i32, i64)> = sqlx::query_as(
                    "select tenant_id, count(*) from operations where status = 'in_progress' \
                     and updated_at < $1 and ($2 < 0 or tenant_id = $2) group by tenant_id",
                )
                .bind(stale_since)
                .bind(only)
                .fetch_all(p)
                .await?;
                for (tenant, n) in stale {
                    of(&mut by_tenant, tenant).metrics.stale_in_progress = n;
                }
                let open: Vec<(i32, String, i64)> = sqlx::query_as(
                    "select tenant_id, reason, count(*) from review_cases where resolved_at is null \
                     and ($1 < 0 or tenant_id = $1) group by tenant_id, reason",
                )
                .bind(only)
                .fetch_all(p)
                .await?;
                for (tenant, reason, n) in open {
                    of(&mut by_tenant, tenant).metrics.open_cases_by_reason.insert(reason, n);
                }
                let resolved: Vec<(i32, i64, Option<f64>)> = sqlx::query_as(&format!(
                    "select tenant_id, count(*), {} from review_cases \
                     where resolved_at is not null and ($1 < 0 or tenant_id = $1) group by tenant_id",
                    DIALECT.resolve_seconds_avg
                ))
                .bind(only)
                .fetch_all(p)
                .await?;
                for (tenant, n, mean) in resolved {
                    let m = &mut of(&mut by_tenant, tenant).metrics;
                    m.resolved_cases = n;
                    m.mean_seconds_to_resolve = mean;
                }
                let sql = format!(
                    "select c.tenant_id, c.name, {} from connectors c \
                     left join tenants t on t.id = c.tenant_id \
                     where $1 < 0 or c.tenant_id = $1 order by c.tenant_id, c.name",
                    $crate::dashboard::sql::HELD_BY_THE_TENANT
                );
                let connectors = sqlx::query_as::<_, $crate::rows::TenantConnectorRow>(&sql)
                    .bind(only)
                    .fetch_all(p)
                    .await?;
                for row in connectors {
                    of(&mut by_tenant, row.tenant_id).connectors.push(row.row.into());
                }
                let mut out: Vec<TenantMetrics> = by_tenant.into_values().collect();
                for t in &mut out {
                    let m = &mut t.metrics;
                    m.unique_operations = m.operations_by_status.values().sum();
                    m.unprocessed = ["received", "in_progress"]
                        .iter()
                        .filter_map(|s| m.operations_by_status.get(*s))
                        .sum();
                    m.paused_connectors =
                        t.connectors.iter().filter(|c| c.paused).map(|c| c.name.clone()).collect();
                    m.unreachable_connectors = t
                        .connectors
                        .iter()
                        .filter_map(|c| c.unreachable_since.map(|at| (c.name.clone(), at)))
                        .collect();
                }
                Ok(out)
            }
        }
    };
}
pub(crate) use dashboard_sql;

/// `id`'s figures in `by_tenant`: a tenant without a registry row (the default one, before
/// it is written) still has figures.
pub(crate) fn figures_of(
    by_tenant: &mut std::collections::BTreeMap<i32, crate::TenantMetrics>,
    id: i32,
) -> &mut crate::TenantMetrics {
    by_tenant.entry(id).or_insert_with(|| {
        let slug = if id == 0 {
            leadgate_domain::TenantSlug::DEFAULT.to_owned()
        } else {
            id.to_string()
        };
        crate::TenantMetrics::new(leadgate_domain::TenantId(id), slug)
    })
}

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
