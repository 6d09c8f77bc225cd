//! The write transaction's statements on operations, their timeline, deliveries, leases and claim-API redeliveries ([`OperationTx`](crate::ops::OperationTx)),
//! for one backend: SQL text and binds, no decisions. Expanded by
//! [`sql_store!`](crate::sql::sql_store) in the backend's module, where its imports and
//! its `DIALECT` are.

macro_rules! tx_operations {
    ($store:ident, $db:ty) => {
        impl $crate::ops::OperationTx for SqlTx<$db> {
            async fn lock_operation(&mut self, id: &str) -> Result<Option<Locked>> {
                let sql = format!(
                    "select {OP_COLUMNS}, lease_token, finished_token from operations \
                     where operation_id = $1{}",
                    DIALECT.lock_row
                );
                sqlx::query_as::<_, LockedRow>(&sql)
                    .bind(id)
                    .fetch_optional(&mut *self.0)
                    .await?
                    .map(Locked::try_from)
                    .transpose()
            }

            async fn replace_payload(&mut self, id: &str, payload: &Value) -> Result<()> {
                sqlx::query("update operations set payload = $1 where operation_id = $2")
                    .bind(payload.to_string())
                    .bind(id)
                    .execute(&mut *self.0)
                    .await?;
                Ok(())
            }

            async fn update_operation(&mut self, l: &Locked) -> Result<u64> {
                let op = &l.op;
                let done = sqlx::query(
                    "update operations set status = $1, crm_id = $2, crm_link = $3, attempts = $4, \
                     last_error = $5, last_error_class = $6, review_reason = $7, lease_owner = $8, \
                     lease_token = $9, lease_expires_at = $10, next_attempt_at = $11, \
                     retry_grants = $12, version = $13, updated_at = $14, verify_first = $17, \
                     finished_token = $18, quiet_after = $19 \
                     where operation_id = $15 and version = $16",
                )
                .bind(op.status.as_str())
                .bind(&op.crm_id)
                .bind(&op.crm_link)
                .bind(op.attempts)
                .bind(&op.last_error)
                .bind(op.last_error_class.map(|c| c.as_str()))
                .bind(op.review_reason.map(|r| r.as_str()))
                .bind(&op.lease_owner)
                .bind(&l.lease_token)
                .bind(op.lease_expires_at)
                .bind(op.next_attempt_at)
                .bind(op.retry_grants)
                .bind(op.version)
                .bind(op.updated_at)
                .bind(op.operation_id.as_str())
                .bind(l.read_version)
                .bind(op.verify_first)
                .bind(&l.finished_token)
                .bind(l.quiet_after)
                .execute(&mut *self.0)
                .await?;
                Ok(done.rows_affected())
            }

            async fn insert_operation(
                &mut self,
                d: &NewDelivery,
                executor: &str,
                now: DateTime<Utc>,
            ) -> Result<bool> {
                let words = $crate::sql::name_words(&d.contact);
                let inserted = sqlx::query(
                    "insert into operations (operation_id, source, status, payload_hash, payload, \
                     contact_phone, contact_email, event_time, executor, next_attempt_at, created_at, \
                     updated_at, contact_name, name_words, tenant_id) \
                     values ($1, $2, 'received', $3, $4, $5, $6, $7, $9, $8, $8, $8, $10, $11, $12) \
                     on conflict (operation_id) do nothing returning version",
                )
                .bind(d.operation_id.as_str())
                .bind(&d.source)
                .bind(d.payload_hash.as_str())
                .bind(d.payload.to_string())
                .bind(&d.contact.phone)
                .bind(&d.contact.email)
                .bind(d.event_time)
                .bind(now)
                .bind(executor)
                .bind(&d.contact.name)
                .bind(leadgate_domain::search::words_text(&words))
                .bind(self.1 .0)
                .fetch_optional(&mut *self.0)
                .await?;
                if inserted.is_some() && !words.is_empty() {
                    // The name's words, for `Reads::search` (migration 0012).
                    let sql = if DIALECT.backend == $crate::Backend::Postgres {
                        "insert into operation_names (word, created_at, operation_id, tenant_id) \
                         select value, $2, $3, $4 from json_array_elements_text(cast($1 as json))"
                    } else {
                        "insert into operation_names (word, created_at, operation_id, tenant_id) \
                         select value, $2, $3, $4 from json_each($1)"
                    };
                    sqlx::query(sql)
                        .bind(serde_json::to_string(&words).map_err(corrupt)?)
                        .bind(now)
                        .bind(d.operation_id.as_str())
                        .bind(self.1 .0)
                        .execute(&mut *self.0)
                        .await?;
                }
                Ok(inserted.is_some())
            }

            async fn insert_accepted(
                &mut self,
                new_id: &OperationId,
                original: &Operation,
                data: &DeliveryData,
                now: DateTime<Utc>,
            ) -> Result<bool> {
                let inserted = sqlx::query(
                    "insert into operations (operation_id, source, status, payload_hash, payload, \
                     event_time, next_attempt_at, created_at, updated_at, executor, tenant_id) \
                     select $1, $2, 'received', $3, $4, $5, $6, $6, $6, executor, tenant_id \
                     from operations where operation_id = $7 \
                     on conflict (operation_id) do nothing",
                )
                .bind(new_id.as_str())
                .bind(&original.source)
                .bind(&data.payload_hash)
                .bind(&data.payload)
                .bind(data.event_time)
                .bind(now)
                .bind(original.operation_id.as_str())
                .execute(&mut *self.0)
                .await?;
                Ok(inserted.rows_affected() == 1)
            }

            async fn pick_due(&mut self, connector: &str, now: DateTime<Utc>) -> Result<Option<String>> {
                let sql = format!("{PICK_DUE}{}", DIALECT.skip_locked);
                Ok(sqlx::query_scalar(&sql)
                    .bind(now)
                    .bind(connector)
                    .bind(self.1 .0)
                    .fetch_optional(&mut *self.0)
                    .await?)
            }

            async fn pick_stale(&mut self, connector: &str, now: DateTime<Utc>) -> Result<Option<String>> {
                let sql = format!("{PICK_STALE}{}", DIALECT.skip_locked);
                Ok(sqlx::query_scalar(&sql)
                    .bind(now)
                    .bind(connector)
                    .bind(self.1 .0)
                    .fetch_optional(&mut *self.0)
                    .await?)
            }

            async fn pick_expired_external(&mut self, now: DateTime<Utc>) -> Result<Vec<String>> {
                Ok(sqlx::query_scalar(
                    "select operation_id from operations where status = 'in_progress' \
                     and executor = 'external' and lease_expires_at <= $1 and tenant_id = $2 \
                     order by lease_expires_at limit 100",
                )
                .bind(now)
                .bind(self.1 .0)
                .fetch_all(&mut *self.0)
                .await?)
            }

            async fn append(
                &mut self,
                operation_id: &str,
                actor: &str,
                event: &NewEvent,
                now: DateTime<Utc>,
            ) -> Result<()> {
                sqlx::query(
                    "insert into timeline (operation_id, at, kind, actor, error_class, detail, tenant_id) \
                     values ($1, $2, $3, $4, $5, $6, (select tenant_id from operations where operation_id = $1))",
                )
                .bind(operation_id)
                .bind(now)
                .bind(event.kind.as_str())
                .bind(actor)
                .bind(event.error_class.map(|c| c.as_str()))
                .bind(event.detail.to_string())
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn insert_delivery(&mut self, d: &NewDelivery, outcome: &str) -> Result<i64> {
                Ok(sqlx::query_scalar(
                    "insert into deliveries (source, operation_id, received_at, content_type, raw_body, \
                     payload, payload_hash, outcome, transform_version, event_time, tenant_id) \
                     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) returning id",
                )
                .bind(&d.source)
                .bind(d.operation_id.as_str())
                .bind(d.received_at)
                .bind(&d.content_type)
                .bind(&d.raw_body)
                .bind(d.payload.to_string())
                .bind(d.payload_hash.as_str())
                .bind(outcome)
                .bind(d.transform_version)
                .bind(d.event_time)
                .bind(self.1 .0)
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn delivery_data(&mut self, delivery_id: i64) -> Result<DeliveryData> {
                Ok(sqlx::query_as::<_, DeliveryData>(
                    "select payload, payload_hash, event_time from deliveries where id = $1",
                )
                .bind(delivery_id)
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn record_grant(&mut self, operation_id: &str, token_sha256: &str, now: DateTime<Utc>) -> Result<()> {
                sqlx::query(
                    "insert into lease_grants (operation_id, token_sha256, granted_at, tenant_id) \
                     values ($1, $2, $3, (select tenant_id from operations where operation_id = $1))",
                )
                .bind(operation_id)
                .bind(token_sha256)
                .bind(now)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn was_granted(&mut self, operation_id: &str, token_sha256: &str) -> Result<bool> {
                let n: i64 = sqlx::query_scalar(
                    "select count(*) from lease_grants where operation_id = $1 and token_sha256 = $2",
                )
                .bind(operation_id)
                .bind(token_sha256)
                .fetch_one(&mut *self.0)
                .await?;
                Ok(n > 0)
            }

            async fn last_lease_mark(&mut self, operation_id: &str) -> Result<Option<(String, String)>> {
                Ok(sqlx::query_as(
                    "select kind, detail from timeline where operation_id = $1 \
                     and kind in ('claimed', 'attempt_started', 'lease_taken_over') \
                     order by id desc limit 1",
                )
                .bind(operation_id)
                .fetch_optional(&mut *self.0)
                .await?)
            }

            async fn pick_redeliveries(
                &mut self,
                source: &str,
                now: DateTime<Utc>,
                limit: i64,
            ) -> Result<Vec<RedeliveryRow>> {
                // `of o`: the joined side may be null, and only the operation is locked.
                let lock = if DIALECT.skip_locked.is_empty() { "" } else { " for update of o skip locked" };
                Ok(sqlx::query_as(&format!("{PICK_REDELIVERY}{lock}"))
                    .bind(source)
                    .bind(now)
                    .bind(limit)
                    .bind(self.1 .0)
                    .fetch_all(&mut *self.0)
                    .await?)
            }

            async fn mark_redelivered(
                &mut self,
                operation_id: &str,
                due: Option<DateTime<Utc>>,
                now: DateTime<Utc>,
                resend_at: DateTime<Utc>,
            ) -> Result<Option<i64>> {
                // A compare-and-set: the conflicting row is read as last committed, under
                // its lock; no row comes back when another process took it first.
                let sent: Option<i32> = sqlx::query_scalar(
                    "insert into redeliveries (operation_id, sent, sent_at, resend_at, tenant_id) \
                     values ($1, 1, $2, $3, (select tenant_id from operations where operation_id = $1)) \
                     on conflict (operation_id) do update set sent = redeliveries.sent + 1, \
                     sent_at = excluded.sent_at, resend_at = excluded.resend_at \
                     where redeliveries.resend_at <= $2 or redeliveries.sent_at < $4 \
                     returning sent",
                )
                .bind(operation_id)
                .bind(now)
                .bind(resend_at)
                .bind(due)
                .fetch_optional(&mut *self.0)
                .await?;
                Ok(sent.map(i64::from))
            }
        }
    };
}
pub(crate) use tx_operations;
