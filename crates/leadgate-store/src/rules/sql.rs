//! [`Rules`](crate::Rules) for one backend: its SQL, and the write transactions it
//! runs through `crate::ops`. Expanded by [`sql_store!`](crate::sql::sql_store) in the
//! backend's module, where its imports and its `DIALECT` are.

macro_rules! rules_sql {
    ($store:ident, $db:ty) => {
        #[async_trait::async_trait]
        impl $crate::Rules for $store {
            async fn publish_crm_links(&self, links: &CrmLinks, now: DateTime<Utc>) -> Result<()> {
                sqlx::query(
                    "insert into crm_links (connector, entity_url, search_url, contact_url, updated_at, tenant_id) \
                     values ($1, $2, $3, $4, $5, $6) on conflict (tenant_id, connector) do update set \
                     entity_url = excluded.entity_url, search_url = excluded.search_url, \
                     contact_url = excluded.contact_url, updated_at = excluded.updated_at",
                )
                .bind(&links.connector)
                .bind(&links.entity_url)
                .bind(&links.search_url)
                .bind(&links.contact_url)
                .bind(now)
                .bind(self.tenant.0)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn crm_links(&self) -> Result<Vec<CrmLinks>> {
                Ok(sqlx::query_as::<_, CrmLinks>(
                    "select connector, entity_url, search_url, contact_url from crm_links \
                     where tenant_id = $1 order by updated_at desc, connector",
                )
                .bind(self.tenant.0)
                .fetch_all(&self.pool)
                .await?)
            }

            async fn business_rules(&self) -> Result<Vec<StoredRules>> {
                let sql = format!("{RULES_COLUMNS} where tenant_id = $1 order by source");
                let rows = sqlx::query(&sql).bind(self.tenant.0).fetch_all(&self.pool).await?;
                rows.iter().map(rules_from_row).collect()
            }

            async fn rules_version(&self) -> Result<i64> {
                Ok(sqlx::query_scalar(
                    "select cast(count(*) as bigint) from business_rule_history where tenant_id = $1",
                )
                .bind(self.tenant.0)
                .fetch_one(&self.pool)
                .await?)
            }

            async fn rules_history(&self, source: Option<&str>, limit: i64) -> Result<Vec<RuleChange>> {
                let rows = sqlx::query_as::<_, RuleChangeRow>(
                    "select id, source, version, actor, changed_at, before, after \
                     from business_rule_history where (cast($1 as text) is null or source = $1) \
                     and tenant_id = $3 order by id desc limit $2",
                )
                .bind(source)
                .bind(limit)
                .bind(self.tenant.0)
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter().map(RuleChange::try_from).collect()
            }

            async fn seed_rules(&self, seeds: &[SourceRules], now: DateTime<Utc>) -> Result<Vec<String>> {
                $crate::rules::ops::seed(self.write().await?, seeds, now).await
            }
        }
    };
}
pub(crate) use rules_sql;
