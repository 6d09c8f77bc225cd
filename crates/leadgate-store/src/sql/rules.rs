//! The write transaction's statements on business rules and their history ([`RulesTx`](crate::ops::RulesTx)),
//! for one backend: SQL text and binds, no decisions. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module, where its imports and
//! its `DIALECT` are.

macro_rules! tx_rules {
    ($store:ident, $db:ty) => {
        impl $crate::ops::RulesTx for SqlTx<$db> {
            async fn lock_rules(&mut self, source: &str) -> Result<Option<StoredRules>> {
                let sql = format!("{RULES_COLUMNS} where tenant_id = $2 and source = $1{}", DIALECT.lock_row);
                let row = sqlx::query(&sql)
                    .bind(source)
                    .bind(self.1 .0)
                    .fetch_optional(&mut *self.0)
                    .await?;
                row.as_ref().map(rules_from_row).transpose()
            }

            async fn insert_rules(
                &mut self,
                rules: &SourceRules,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<bool> {
                let done = sqlx::query(
                    "insert into business_rules (source, rule, window_secs, channel, version, \
                     changed_at, changed_by, tenant_id) values ($1, $2, $3, $4, 1, $5, $6, $7) \
                     on conflict (tenant_id, source) do nothing",
                )
                .bind(&rules.source)
                .bind(rules.rule.as_str())
                .bind(rules.window_secs)
                .bind(&rules.channel)
                .bind(now)
                .bind(actor)
                .bind(self.1 .0)
                .execute(&mut *self.0)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn save_rules(
                &mut self,
                rules: &SourceRules,
                version: i64,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<()> {
                sqlx::query(
                    "update business_rules set rule = $2, window_secs = $3, channel = $4, \
                     version = $5, changed_at = $6, changed_by = $7 where tenant_id = $8 and source = $1",
                )
                .bind(&rules.source)
                .bind(rules.rule.as_str())
                .bind(rules.window_secs)
                .bind(&rules.channel)
                .bind(version)
                .bind(now)
                .bind(actor)
                .bind(self.1 .0)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn append_rule_change(
                &mut self,
                version: i64,
                actor: &str,
                now: DateTime<Utc>,
                before: Option<&SourceRules>,
                after: &SourceRules,
            ) -> Result<()> {
                let text = |r: &SourceRules| serde_json::to_string(r).map_err(corrupt);
                sqlx::query(
                    "insert into business_rule_history (source, version, actor, changed_at, \
                     before, after, tenant_id) values ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(&after.source)
                .bind(version)
                .bind(actor)
                .bind(now)
                .bind(before.map(text).transpose()?)
                .bind(text(after)?)
                .bind(self.1 .0)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }
        }
    };
}
pub(crate) use tx_rules;
