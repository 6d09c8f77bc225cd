//! [`Tenants`](crate::Tenants) for one backend. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module.

macro_rules! tenants_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Tenants for $store {
            fn for_tenant(&self, tenant: leadgate_domain::TenantId) -> std::sync::Arc<dyn $crate::Store> {
                std::sync::Arc::new($store { tenant, ..self.clone() })
            }

            async fn tenants(&self) -> Result<Vec<$crate::Tenant>> {
                Ok(sqlx::query_as::<_, $crate::Tenant>(
                    "select id, slug, name, state, paused_reason, weight, max_in_flight, \
                     retention_full_secs, version, changed_by, updated_at from tenants order by id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            async fn my_tenants(&self) -> Result<Vec<$crate::TenantChoice>> {
                Ok(sqlx::query_as::<_, $crate::TenantChoice>(
                    "select id, slug, name, state from tenants order by id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            async fn tenants_with_work(&self, now: DateTime<Utc>) -> Result<Vec<$crate::TenantWork>> {
                // A probe per tenant and index, written `(select 1 … limit 1) is not null`
                // and not `exists`: PostgreSQL turns an `exists` into a hashed subplan that
                // reads every tenant's rows (56 ms behind a dead portal's 50,000 leads
                // queued, against 2.6 ms; `make fleet`), and the board runs every poll.
                Ok(sqlx::query_as::<_, $crate::TenantWork>(
                    "select tenant, due, stale from (select t.id as tenant, \
                       ((select 1 from operations o where o.tenant_id = t.id \
                          and o.status = 'received' and o.executor = 'worker' \
                          and o.next_attempt_at <= $1 limit 1) is not null \
                        or (select 1 from crm_updates u where u.tenant_id = t.id \
                          and u.state = 'pending' and u.due_at <= $1 limit 1) is not null) as due, \
                       (select 1 from operations o where o.tenant_id = t.id \
                          and o.status = 'in_progress' and o.lease_expires_at <= $1 \
                          limit 1) is not null as stale \
                     from tenants t where t.id <> 0 and t.state = 'active') w \
                     where due or stale order by tenant",
                )
                .bind(now)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn tenant_specs(&self) -> Result<Vec<(String, String)>> {
                Ok(sqlx::query_as::<_, (String, String)>(
                    "select t.slug, s.sealed from tenant_specs s \
                     join tenants t on t.id = s.tenant_id order by t.id",
                )
                .fetch_all(&self.pool)
                .await?)
            }

            async fn apply_tenants(
                &self,
                changes: &[$crate::TenantChange],
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<()> {
                use $crate::TenantChange as C;
                let mut tx = self.begin_write().await?;
                let moved = |slug: &str| {
                    StoreError::NotApplied(format!(
                        "tenant `{slug}` changed while the file was applied; apply it again"
                    ))
                };
                for change in changes {
                    match change {
                        C::Create { slug, settings } => {
                            let id: i32 = sqlx::query_scalar(
                                "insert into tenants (id, slug, name, weight, max_in_flight, \
                                 changed_by, created_at, updated_at, retention_full_secs) \
                                 select coalesce(max(id), 0) + 1, $1, $2, $3, $4, $5, $6, $6, $7 \
                                 from tenants where true on conflict (slug) do nothing returning id",
                            )
                            .bind(slug)
                            .bind(&settings.name)
                            .bind(settings.weight)
                            .bind(settings.max_in_flight)
                            .bind(actor)
                            .bind(now)
                            .bind(settings.retention_full_secs)
                            .fetch_optional(&mut *tx)
                            .await?
                            .ok_or_else(|| moved(slug))?;
                            sqlx::query("insert into tenant_specs (tenant_id, sealed) values ($1, $2)")
                                .bind(id)
                                .bind(&settings.sealed_spec)
                                .execute(&mut *tx)
                                .await?;
                        }
                        C::Update {
                            slug,
                            expected_version,
                            settings,
                            state,
                            reason,
                        } => {
                            let id: i32 = sqlx::query_scalar(
                                "update tenants set name = $1, weight = $2, max_in_flight = $3, \
                                 state = $4, paused_reason = $5, changed_by = $6, updated_at = $7, \
                                 retention_full_secs = $10, version = version + 1 \
                                 where slug = $8 and version = $9 and state <> 'removed' returning id",
                            )
                            .bind(&settings.name)
                            .bind(settings.weight)
                            .bind(settings.max_in_flight)
                            .bind(state.as_str())
                            .bind(reason)
                            .bind(actor)
                            .bind(now)
                            .bind(slug)
                            .bind(expected_version)
                            .bind(settings.retention_full_secs)
                            .fetch_optional(&mut *tx)
                            .await?
                            .ok_or_else(|| moved(slug))?;
                            sqlx::query(
                                "insert into tenant_specs (tenant_id, sealed) values ($1, $2) \
                                 on conflict (tenant_id) do update set sealed = excluded.sealed",
                            )
                            .bind(id)
                            .bind(&settings.sealed_spec)
                            .execute(&mut *tx)
                            .await?;
                        }
                        C::State {
                            slug,
                            expected_version,
                            state,
                            reason,
                        } => {
                            let id: i32 = sqlx::query_scalar(
                                "update tenants set state = $1, paused_reason = $2, changed_by = $3, \
                                 updated_at = $4, version = version + 1 \
                                 where slug = $5 and version = $6 and id <> 0 returning id",
                            )
                            .bind(state.as_str())
                            .bind(reason)
                            .bind(actor)
                            .bind(now)
                            .bind(slug)
                            .bind(expected_version)
                            .fetch_optional(&mut *tx)
                            .await?
                            .ok_or_else(|| moved(slug))?;
                            if *state == $crate::TenantState::Removed {
                                sqlx::query("delete from tenant_specs where tenant_id = $1")
                                    .bind(id)
                                    .execute(&mut *tx)
                                    .await?;
                            }
                        }
                    }
                }
                tx.commit().await?;
                Ok(())
            }

            async fn set_tenant_state(
                &self,
                slug: &str,
                state: $crate::TenantState,
                reason: Option<&str>,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<bool> {
                let done = sqlx::query(
                    "update tenants set state = $1, paused_reason = $2, changed_by = $3, \
                     updated_at = $4, version = version + 1 \
                     where slug = $5 and state <> 'removed' and (state <> $1 or \
                     coalesce(paused_reason, '') <> coalesce(cast($2 as text), ''))",
                )
                .bind(state.as_str())
                .bind(reason)
                .bind(actor)
                .bind(now)
                .bind(slug)
                .execute(&self.pool)
                .await?
                .rows_affected();
                if done > 0 {
                    return Ok(true);
                }
                // unchanged (already in that state) or no such tenant
                Ok(sqlx::query_scalar::<_, i64>(
                    "select count(*) from tenants where slug = $1 and state <> 'removed'",
                )
                .bind(slug)
                .fetch_one(&self.pool)
                .await?
                    > 0)
            }
        }
    };
}
pub(crate) use tenants_sql;
