//! The store's SQL, written once for both backends.
//!
//! `sql_store!` expands, for one sqlx backend, to the statements of a write transaction
//! ([`WriteTx`](super::ops::WriteTx) for [`SqlTx`]) and to the [`Store`](super::Store)
//! implementation: reads are SQL here; every write runs the backend-independent
//! orchestration in `store::ops` inside one `SqlTx`. The macro holds SQL text and binds
//! only — the decisions are `domain::rules`, the orchestration `store::ops`. The SQL is
//! shared text (both backends accept `$n` placeholders); the few places where the
//! dialects differ are passed in by the backend module: how a write transaction begins,
//! how a row is locked, how due work is picked without two workers taking the same row,
//! how seconds between two stored times are computed, and how contact keys are locked.

/// Columns of `operations`, in the order `op_from_row` reads them by name.
/// An operation as every reader sees it: no lease or report token (people's logins may not
/// read those, migration 0017); the lock adds them (`lock_operation`).
pub(super) const OP_COLUMNS: &str = "operation_id, source, status, payload_hash, payload, crm_id, \
    crm_link, attempts, last_error, last_error_class, review_reason, lease_owner, \
    lease_expires_at, next_attempt_at, retry_grants, verify_first, quiet_after, contact_phone, \
    contact_email, contact_name, event_time, version, created_at, updated_at, purged_at";

/// The worker's next due operation: binds $1 = now, $2 = its connector. Nothing is due
/// while the connector is paused; externally executed operations are never the
/// worker's.
pub(super) const PICK_DUE: &str = "select operation_id from operations where status = 'received' \
    and executor = 'worker' and next_attempt_at <= $1 \
    and not exists (select 1 from connectors where name = $2 and state = 'paused') \
    order by next_attempt_at limit 1";

/// An operation whose lease ran out, for the reconciler: binds $1 = now, $2 = connector.
pub(super) const PICK_STALE: &str =
    "select operation_id from operations where status = 'in_progress' \
    and executor = 'worker' and lease_expires_at <= $1 \
    and not exists (select 1 from connectors where name = $2 and state = 'paused') \
    order by lease_expires_at limit 1";

/// Due redeliveries of claim-API operations: binds $1 = source (also the connector),
/// $2 = now, $3 = limit.
pub(super) const PICK_REDELIVERY: &str = "select o.operation_id, o.payload, o.next_attempt_at \
    from operations o left join redeliveries r on r.operation_id = o.operation_id \
    where o.status = 'received' and o.executor = 'external' and o.source = $1 \
    and o.next_attempt_at <= $2 and o.payload is not null \
    and (r.operation_id is null or r.resend_at <= $2 or r.sent_at < o.next_attempt_at) \
    and not exists (select 1 from connectors c where c.name = $1 and c.state = 'paused') \
    order by o.next_attempt_at limit $3";

/// A person's request as `store::ops::requests` reads it (migration 0017).
pub(super) const REQUEST_COLUMNS: &str =
    "select id, actor, kind, case_id, operation_id, connector, \
     expected_version, body from human_requests";

/// A source's business rules (migration 0021), as `rules_from_row` reads them.
pub(super) const RULES_COLUMNS: &str = "select source, rule, window_secs, channel, version, \
     changed_at, changed_by from business_rules";

pub(super) const CASE_COLUMNS: &str = "c.id, c.operation_id, o.source, c.reason, o.status, \
    c.opened_at, c.resolved_at, c.resolution, c.resolved_by, c.comment, c.delivery_id, c.detail, \
    o.version";

/// The search words of a contact's name (`operation_names`, migration 0012).
pub(crate) fn name_words(contact: &super::ContactKeys) -> Vec<String> {
    contact
        .name
        .as_deref()
        .map(leadgate_domain::search::words)
        .unwrap_or_default()
}

/// One write transaction of a backend, as `store::ops` sees it.
pub(crate) struct SqlTx<DB: sqlx::Database>(pub(crate) sqlx::Transaction<'static, DB>);

macro_rules! sql_store {
    (
        store: $store:ident,
        db: $db:ty,
        row: $row:ty,
        backend: $backend:path,
        // appended to a `select` of one operation to lock its row until commit
        lock_row: $lock_row:literal,
        // appended to PICK_DUE / PICK_STALE
        skip_locked: $skip_locked:literal,
        // mean seconds from opened_at to resolved_at over resolved review cases
        mean_resolve_seconds: $mean_resolve:literal,
        // takes a transaction-level lock on one contact key ($1, an i64) before matching;
        // empty where the single writer already serialises intakes
        lock_contact: $lock_contact:literal $(,)?
    ) => {
        use std::collections::BTreeMap;

        use chrono::{DateTime, Utc};
        use serde_json::Value;
        use sqlx::Row;

        use leadgate_domain::{OperationId, Resolution, ReviewReason, Status};
        use $crate::ops::{
            self, CaseRow, ContactMatch, DeliveryData, Locked, RedeliveryRow, WriteTx,
        };
        use $crate::sql::{
            SqlTx, CASE_COLUMNS, OP_COLUMNS, PICK_DUE, PICK_REDELIVERY, PICK_STALE, REQUEST_COLUMNS,
            RULES_COLUMNS,
        };
        use $crate::requests::outcome_of as requests_outcome_of;
        use $crate::*;

        type Tx = sqlx::Transaction<'static, $db>;

        fn corrupt(what: impl std::fmt::Display) -> StoreError {
            StoreError::Corrupt(what.to_string())
        }

        fn parse_opt<T: std::str::FromStr>(v: Option<String>) -> Result<Option<T>>
        where
            T::Err: std::fmt::Display,
        {
            v.map(|s| s.parse::<T>().map_err(corrupt)).transpose()
        }

        fn json_text(v: Option<String>) -> Result<Option<Value>> {
            v.map(|s| serde_json::from_str(&s).map_err(corrupt)).transpose()
        }

        fn diagnosis_from_row(r: &$row) -> Result<DiagnosisSummary> {
            let totals: String = r.try_get("totals")?;
            Ok(DiagnosisSummary {
                id: r.try_get("id")?,
                generated_at: r.try_get("generated_at")?,
                input: r.try_get("input")?,
                period_from: r.try_get("period_from")?,
                period_to: r.try_get("period_to")?,
                groups: r.try_get("group_count")?,
                pairs: r.try_get("pair_count")?,
                totals: serde_json::from_str(&totals).map_err(corrupt)?,
            })
        }

        fn rules_from_row(r: &$row) -> Result<StoredRules> {
            Ok(StoredRules {
                rules: SourceRules {
                    source: r.try_get("source")?,
                    rule: r.try_get::<String, _>("rule")?.parse().map_err(corrupt)?,
                    window_secs: r.try_get("window_secs")?,
                    channel: r.try_get("channel")?,
                },
                version: r.try_get("version")?,
                changed_at: r.try_get("changed_at")?,
                changed_by: r.try_get("changed_by")?,
            })
        }

        fn event_from_row(r: &$row) -> Result<TimelineEvent> {
            Ok(TimelineEvent {
                id: r.try_get("id")?,
                at: r.try_get("at")?,
                kind: r.try_get("kind")?,
                actor: r.try_get("actor")?,
                error_class: r.try_get("error_class")?,
                detail: json_text(r.try_get("detail")?)?.unwrap_or(Value::Null),
            })
        }

        fn request_from_row(r: &$row) -> Result<ops::requests::RequestRow> {
            let kind: String = r.try_get("kind")?;
            let body: String = r.try_get("body")?;
            Ok(ops::requests::RequestRow {
                id: r.try_get("id")?,
                actor: r.try_get("actor")?,
                ask: Ask::from_row(
                    &kind,
                    r.try_get("case_id")?,
                    r.try_get("operation_id")?,
                    r.try_get("connector")?,
                    r.try_get("expected_version")?,
                    &body,
                ),
            })
        }

        fn op_from_row(r: &$row) -> Result<Operation> {
            Ok(Operation {
                operation_id: OperationId::try_from(r.try_get::<String, _>("operation_id")?)
                    .map_err(corrupt)?,
                source: r.try_get("source")?,
                status: r.try_get::<String, _>("status")?.parse().map_err(corrupt)?,
                payload_hash: r.try_get("payload_hash")?,
                payload: json_text(r.try_get("payload")?)?,
                crm_id: r.try_get("crm_id")?,
                crm_link: r.try_get("crm_link")?,
                attempts: r.try_get("attempts")?,
                last_error: r.try_get("last_error")?,
                last_error_class: parse_opt(r.try_get("last_error_class")?)?,
                review_reason: parse_opt(r.try_get("review_reason")?)?,
                lease_owner: r.try_get("lease_owner")?,
                lease_expires_at: r.try_get("lease_expires_at")?,
                next_attempt_at: r.try_get("next_attempt_at")?,
                retry_grants: r.try_get("retry_grants")?,
                verify_first: r.try_get("verify_first")?,
                contact: ContactKeys {
                    phone: r.try_get("contact_phone")?,
                    email: r.try_get("contact_email")?,
                    name: r.try_get("contact_name")?,
                },
                event_time: r.try_get("event_time")?,
                version: r.try_get("version")?,
                created_at: r.try_get("created_at")?,
                updated_at: r.try_get("updated_at")?,
                purged_at: r.try_get("purged_at")?,
            })
        }

        fn case_from_row(r: &$row) -> Result<ReviewCase> {
            Ok(ReviewCase {
                id: r.try_get("id")?,
                operation_id: r.try_get("operation_id")?,
                source: r.try_get("source")?,
                reason: r.try_get::<String, _>("reason")?.parse().map_err(corrupt)?,
                status: r.try_get::<String, _>("status")?.parse().map_err(corrupt)?,
                opened_at: r.try_get("opened_at")?,
                resolved_at: r.try_get("resolved_at")?,
                resolution: r.try_get("resolution")?,
                resolved_by: r.try_get("resolved_by")?,
                comment: r.try_get("comment")?,
                delivery_id: r.try_get("delivery_id")?,
                detail: json_text(r.try_get("detail")?)?.unwrap_or(Value::Null),
                version: r.try_get("version")?,
            })
        }

        /// One keyset page of operations in `status` ordered by `(at, operation_id)`, the
        /// filters in the query so a page is always full.
        fn op_page_query(
            status: Status,
            at: &'static str,
            below: Option<DateTime<Utc>>,
            page: &OperationPage,
        ) -> sqlx::QueryBuilder<'static, $db> {
            let mut q = sqlx::QueryBuilder::<$db>::new(format!(
                "select {OP_COLUMNS} from operations where status = "
            ));
            q.push_bind(status.as_str());
            for bound in [below, page.before].into_iter().flatten() {
                q.push(format!(" and {at} < ")).push_bind(bound);
            }
            if let Some(source) = &page.source {
                q.push(" and source = ").push_bind(source.clone());
            }
            let (cmp, dir) = if page.newest_first { ("<", "desc") } else { (">", "asc") };
            if let Some((t, id)) = &page.after {
                q.push(format!(" and ({at} {cmp} "))
                    .push_bind(*t)
                    .push(format!(" or ({at} = "))
                    .push_bind(*t)
                    .push(format!(" and operation_id {cmp} "))
                    .push_bind(id.clone())
                    .push("))");
            }
            q.push(format!(" order by {at} {dir}, operation_id {dir} limit "))
                .push_bind(page.limit.clamp(1, 1000));
            q
        }

        /// Records `deliveries` in one write transaction and commits it (the backend
        /// groups them: see its `record_delivery_now`).
        async fn record_all<'a>(
            tx: Tx,
            deliveries: impl IntoIterator<Item = &'a NewDelivery> + Send,
        ) -> Result<Vec<DeliveryRecord>> {
            ops::intake::record_all(SqlTx(tx), deliveries).await
        }

        impl WriteTx for SqlTx<$db> {
            async fn commit(self) -> Result<()> {
                self.0.commit().await?;
                Ok(())
            }

            async fn lock_operation(&mut self, id: &str) -> Result<Option<Locked>> {
                let sql = format!(
                    "select {OP_COLUMNS}, lease_token, finished_token from operations \
                     where operation_id = $1{}",
                    $lock_row
                );
                let row = sqlx::query(&sql).bind(id).fetch_optional(&mut *self.0).await?;
                row.map(|r| {
                    let op = op_from_row(&r)?;
                    Ok(Locked {
                        read_version: op.version,
                        lease_token: r.try_get("lease_token")?,
                        finished_token: r.try_get("finished_token")?,
                        quiet_after: r.try_get("quiet_after")?,
                        op,
                    })
                })
                .transpose()
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
                     updated_at, contact_name, name_words) \
                     values ($1, $2, 'received', $3, $4, $5, $6, $7, $9, $8, $8, $8, $10, $11) \
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
                .fetch_optional(&mut *self.0)
                .await?;
                if inserted.is_some() && !words.is_empty() {
                    // The name's words, for `Reads::search` (migration 0012).
                    let sql = if $backend == $crate::Backend::Postgres {
                        "insert into operation_names (word, created_at, operation_id) \
                         select value, $2, $3 from json_array_elements_text(cast($1 as json))"
                    } else {
                        "insert into operation_names (word, created_at, operation_id) \
                         select value, $2, $3 from json_each($1)"
                    };
                    sqlx::query(sql)
                        .bind(serde_json::to_string(&words).map_err(corrupt)?)
                        .bind(now)
                        .bind(d.operation_id.as_str())
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
                     event_time, next_attempt_at, created_at, updated_at, executor) \
                     select $1, $2, 'received', $3, $4, $5, $6, $6, $6, executor \
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
                let sql = format!("{PICK_DUE}{}", $skip_locked);
                Ok(sqlx::query_scalar(&sql)
                    .bind(now)
                    .bind(connector)
                    .fetch_optional(&mut *self.0)
                    .await?)
            }

            async fn pick_stale(&mut self, connector: &str, now: DateTime<Utc>) -> Result<Option<String>> {
                let sql = format!("{PICK_STALE}{}", $skip_locked);
                Ok(sqlx::query_scalar(&sql)
                    .bind(now)
                    .bind(connector)
                    .fetch_optional(&mut *self.0)
                    .await?)
            }

            async fn pick_expired_external(&mut self, now: DateTime<Utc>) -> Result<Vec<String>> {
                Ok(sqlx::query_scalar(
                    "select operation_id from operations where status = 'in_progress' \
                     and executor = 'external' and lease_expires_at <= $1 \
                     order by lease_expires_at limit 100",
                )
                .bind(now)
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
                    "insert into timeline (operation_id, at, kind, actor, error_class, detail) \
                     values ($1, $2, $3, $4, $5, $6)",
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
                     payload, payload_hash, outcome, transform_version, event_time) \
                     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) returning id",
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
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn delivery_data(&mut self, delivery_id: i64) -> Result<DeliveryData> {
                let row = sqlx::query(
                    "select payload, payload_hash, event_time from deliveries where id = $1",
                )
                .bind(delivery_id)
                .fetch_one(&mut *self.0)
                .await?;
                Ok(DeliveryData {
                    payload: row.try_get("payload")?,
                    payload_hash: row.try_get("payload_hash")?,
                    event_time: row.try_get("event_time")?,
                })
            }

            async fn record_grant(&mut self, operation_id: &str, token_sha256: &str, now: DateTime<Utc>) -> Result<()> {
                sqlx::query(
                    "insert into lease_grants (operation_id, token_sha256, granted_at) values ($1, $2, $3)",
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

            async fn open_non_conflict_case(&mut self, operation_id: &str) -> Result<Option<i64>> {
                Ok(sqlx::query_scalar(
                    "select id from review_cases where operation_id = $1 and resolved_at is null \
                     and reason <> 'payload_conflict' order by id limit 1",
                )
                .bind(operation_id)
                .fetch_optional(&mut *self.0)
                .await?)
            }

            async fn insert_case(
                &mut self,
                operation_id: &str,
                reason: ReviewReason,
                delivery_id: Option<i64>,
                detail: &Value,
                now: DateTime<Utc>,
            ) -> Result<i64> {
                Ok(sqlx::query_scalar(
                    "insert into review_cases (operation_id, reason, opened_at, delivery_id, detail) \
                     values ($1, $2, $3, $4, $5) returning id",
                )
                .bind(operation_id)
                .bind(reason.as_str())
                .bind(now)
                .bind(delivery_id)
                .bind(detail.to_string())
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn lock_case(&mut self, case_id: i64) -> Result<Option<CaseRow>> {
                let sql = format!(
                    "select id, operation_id, reason, resolved_at, resolved_by, delivery_id \
                     from review_cases where id = $1{}",
                    $lock_row
                );
                let row = sqlx::query(&sql).bind(case_id).fetch_optional(&mut *self.0).await?;
                row.map(|r| {
                    Ok(CaseRow {
                        operation_id: r.try_get("operation_id")?,
                        reason: r.try_get::<String, _>("reason")?.parse().map_err(corrupt)?,
                        resolved_at: r.try_get("resolved_at")?,
                        resolved_by: r.try_get("resolved_by")?,
                        delivery_id: r.try_get("delivery_id")?,
                    })
                })
                .transpose()
            }

            async fn close_case(
                &mut self,
                case_id: i64,
                resolution: &str,
                actor: &str,
                comment: Option<&str>,
                now: DateTime<Utc>,
            ) -> Result<()> {
                sqlx::query(
                    "update review_cases set resolved_at = $1, resolution = $2, resolved_by = $3, \
                     comment = $4 where id = $5",
                )
                .bind(now)
                .bind(resolution)
                .bind(actor)
                .bind(comment)
                .bind(case_id)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn open_case_count(&mut self, operation_id: &str) -> Result<i64> {
                Ok(sqlx::query_scalar(
                    "select count(*) from review_cases where operation_id = $1 and resolved_at is null",
                )
                .bind(operation_id)
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn has_open_conflict(&mut self, operation_id: &str) -> Result<bool> {
                let n: i64 = sqlx::query_scalar(
                    "select count(*) from review_cases where operation_id = $1 \
                     and resolved_at is null and reason = 'payload_conflict'",
                )
                .bind(operation_id)
                .fetch_one(&mut *self.0)
                .await?;
                Ok(n > 0)
            }

            async fn supersede_cases(
                &mut self,
                operation_id: &str,
                actor: &str,
                why: &str,
                now: DateTime<Utc>,
            ) -> Result<Vec<i64>> {
                Ok(sqlx::query_scalar(
                    "update review_cases set resolved_at = $1, resolution = $2, \
                     resolved_by = $3, comment = $4 where operation_id = $5 and resolved_at is null \
                     and reason <> 'payload_conflict' returning id",
                )
                .bind(now)
                .bind(Resolution::Superseded.as_str())
                .bind(actor)
                .bind(why)
                .bind(operation_id)
                .fetch_all(&mut *self.0)
                .await?)
            }

            async fn lock_contacts(&mut self, slots: &[i64]) -> Result<()> {
                if !$lock_contact.is_empty() {
                    for slot in slots {
                        sqlx::query($lock_contact).bind(*slot).execute(&mut *self.0).await?;
                    }
                }
                Ok(())
            }

            async fn contact_uses(
                &mut self,
                operation_id: &str,
                since: DateTime<Utc>,
                contact: &ContactKeys,
                at_most: i64,
            ) -> Result<(i64, i64)> {
                // Each from its index (contact, created_at), at most `at_most` entries long.
                Ok(sqlx::query_as(
                    "select \
                       (select count(*) from (select 1 from operations where contact_phone = $1 \
                          and created_at >= $3 and operation_id <> $4 limit $5) p), \
                       (select count(*) from (select 1 from operations where contact_email = $2 \
                          and created_at >= $3 and operation_id <> $4 limit $5) e)",
                )
                .bind(&contact.phone)
                .bind(&contact.email)
                .bind(since)
                .bind(operation_id)
                .bind(at_most)
                .fetch_one(&mut *self.0)
                .await?)
            }

            async fn take_contact_lock(
                &mut self,
                key: i64,
                operation_id: &str,
                holder: &str,
                until: DateTime<Utc>,
                now: DateTime<Utc>,
            ) -> Result<Option<ops::contacts::Remembered>> {
                // One statement: of two takers the second waits for the first's row and
                // then sees it held.
                Ok(sqlx::query_as(
                    "insert into contact_locks (key, operation_id, lease_token_sha256, expires_at) \
                     values ($1, $2, $3, $4) \
                     on conflict (key) do update set operation_id = excluded.operation_id, \
                       lease_token_sha256 = excluded.lease_token_sha256, expires_at = excluded.expires_at \
                     where contact_locks.expires_at <= $5 or contact_locks.operation_id = excluded.operation_id \
                     returning crm_contact_id, contact_at",
                )
                .bind(key)
                .bind(operation_id)
                .bind(holder)
                .bind(until)
                .bind(now)
                .fetch_optional(&mut *self.0)
                .await?)
            }

            async fn contact_lock_until(&mut self, key: i64) -> Result<Option<DateTime<Utc>>> {
                Ok(sqlx::query_scalar("select expires_at from contact_locks where key = $1")
                    .bind(key)
                    .fetch_optional(&mut *self.0)
                    .await?)
            }

            async fn move_contact_lock(
                &mut self,
                key: i64,
                holder: &str,
                until: DateTime<Utc>,
                contact: Option<(&str, DateTime<Utc>)>,
            ) -> Result<()> {
                sqlx::query(
                    "update contact_locks set expires_at = $3, \
                       crm_contact_id = coalesce($4, crm_contact_id), contact_at = coalesce($5, contact_at) \
                     where key = $1 and lease_token_sha256 = $2",
                )
                .bind(key)
                .bind(holder)
                .bind(until)
                .bind(contact.map(|(c, _)| c))
                .bind(contact.map(|(_, at)| at))
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn purge_contact_locks(&mut self, before: DateTime<Utc>, batch: i64) -> Result<u64> {
                Ok(sqlx::query(
                    "delete from contact_locks where key in \
                       (select key from contact_locks where expires_at < $1 limit $2)",
                )
                .bind(before)
                .bind(batch)
                .execute(&mut *self.0)
                .await?
                .rows_affected())
            }

            async fn contact_matches(
                &mut self,
                operation_id: &str,
                since: DateTime<Utc>,
                contact: &ContactKeys,
            ) -> Result<Vec<ContactMatch>> {
                let rows: Vec<(String, String, Option<String>, String)> = sqlx::query_as(
                    // Newest first from each index (contact, created_at), so a phone shared by
                    // thousands of leads (a switchboard) costs ten index entries, not thousands.
                    "select operation_id, source, crm_id, status from ( \
                       select * from (select operation_id, source, crm_id, status, created_at from operations \
                         where contact_phone = $3 and created_at >= $2 and operation_id <> $1 \
                         order by created_at desc limit 10) p \
                       union \
                       select * from (select operation_id, source, crm_id, status, created_at from operations \
                         where contact_email = $4 and created_at >= $2 and operation_id <> $1 \
                         order by created_at desc limit 10) e \
                     ) m order by created_at desc limit 10",
                )
                .bind(operation_id)
                .bind(since)
                .bind(&contact.phone)
                .bind(&contact.email)
                .fetch_all(&mut *self.0)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(operation_id, source, crm_id, status)| ContactMatch { operation_id, source, crm_id, status })
                    .collect())
            }

            async fn connector_paused(&mut self, name: &str) -> Result<bool> {
                let state: Option<String> =
                    sqlx::query_scalar("select state from connectors where name = $1")
                        .bind(name)
                        .fetch_optional(&mut *self.0)
                        .await?;
                Ok(state.as_deref() == Some("paused"))
            }

            async fn pause_connector(
                &mut self,
                name: &str,
                reason: &str,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<()> {
                sqlx::query(
                    "insert into connectors (name, state, reason, since, changed_by) \
                     values ($1, 'paused', $2, $3, $4) \
                     on conflict (name) do update set state = 'paused', reason = excluded.reason, \
                     since = case when connectors.state = 'paused' then connectors.since else excluded.since end, \
                     changed_by = excluded.changed_by",
                )
                .bind(name)
                // Support reads it: whatever the CRM or an integration wrote about a lead,
                // no phone number or e-mail address.
                .bind(leadgate_domain::text::mask_contacts(reason))
                .bind(now)
                .bind(actor)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn resume_connector(
                &mut self,
                name: &str,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<bool> {
                let done = sqlx::query(
                    "update connectors set state = 'active', reason = null, since = $1, \
                     changed_by = $2 where name = $3 and state = 'paused'",
                )
                .bind(now)
                .bind(actor)
                .bind(name)
                .execute(&mut *self.0)
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn lock_waiting_request(&mut self) -> Result<Option<ops::requests::RequestRow>> {
                // In turn per login (migration 0026): each login's oldest waiting request,
                // the login served longest ago (or never) first, so one person's backlog
                // delays nobody else's request by more than one of theirs per turn. A head
                // another gateway is applying is skipped, and with it that login's turn.
                let sql = format!(
                    "{REQUEST_COLUMNS} r where r.applied_at is null \
                     and not exists (select 1 from human_requests e where e.actor = r.actor \
                        and e.applied_at is null and e.id < r.id) \
                     order by (select max(a.applied_at) from human_requests a \
                        where a.actor = r.actor and a.applied_at is not null) nulls first, r.id \
                     limit 1{}",
                    $skip_locked
                );
                let row = sqlx::query(&sql).fetch_optional(&mut *self.0).await?;
                row.as_ref().map(request_from_row).transpose()
            }

            async fn lock_request(&mut self, id: i64) -> Result<Option<ops::requests::RequestRow>> {
                let sql = format!("{REQUEST_COLUMNS} where id = $1 and applied_at is null{}", $lock_row);
                let row = sqlx::query(&sql).bind(id).fetch_optional(&mut *self.0).await?;
                row.as_ref().map(request_from_row).transpose()
            }

            async fn role_of(&mut self, login: &str) -> Result<Option<leadgate_domain::roles::Role>> {
                let role: Option<String> = sqlx::query_scalar("select leadgate_role_of($1)")
                    .bind(login)
                    .fetch_one(&mut *self.0)
                    .await?;
                role.map(|r| r.trim_start_matches("leadgate_").parse().map_err(corrupt))
                    .transpose()
            }

            async fn answer_request(&mut self, id: i64, outcome: &str, now: DateTime<Utc>) -> Result<()> {
                sqlx::query("update human_requests set applied_at = $1, outcome = $2 where id = $3")
                    .bind(now)
                    .bind(outcome)
                    .bind(id)
                    .execute(&mut *self.0)
                    .await?;
                Ok(())
            }

            async fn lock_rules(&mut self, source: &str) -> Result<Option<StoredRules>> {
                let sql = format!("{RULES_COLUMNS} where source = $1{}", $lock_row);
                let row = sqlx::query(&sql).bind(source).fetch_optional(&mut *self.0).await?;
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
                     changed_at, changed_by) values ($1, $2, $3, $4, 1, $5, $6) \
                     on conflict (source) do nothing",
                )
                .bind(&rules.source)
                .bind(rules.rule.as_str())
                .bind(rules.window_secs)
                .bind(&rules.channel)
                .bind(now)
                .bind(actor)
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
                     version = $5, changed_at = $6, changed_by = $7 where source = $1",
                )
                .bind(&rules.source)
                .bind(rules.rule.as_str())
                .bind(rules.window_secs)
                .bind(&rules.channel)
                .bind(version)
                .bind(now)
                .bind(actor)
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
                     before, after) values ($1, $2, $3, $4, $5, $6)",
                )
                .bind(&after.source)
                .bind(version)
                .bind(actor)
                .bind(now)
                .bind(before.map(text).transpose()?)
                .bind(text(after)?)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn pick_redeliveries(
                &mut self,
                source: &str,
                now: DateTime<Utc>,
                limit: i64,
            ) -> Result<Vec<RedeliveryRow>> {
                // `of o`: the joined side may be null, and only the operation is locked.
                let lock = if $skip_locked.is_empty() { "" } else { " for update of o skip locked" };
                Ok(sqlx::query_as(&format!("{PICK_REDELIVERY}{lock}"))
                    .bind(source)
                    .bind(now)
                    .bind(limit)
                    .fetch_all(&mut *self.0)
                    .await?)
            }

            async fn insert_crm_update(
                &mut self,
                operation_id: &str,
                case_id: i64,
                delivery_id: i64,
                crm_id: &str,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<Option<i64>> {
                Ok(sqlx::query_scalar(
                    "insert into crm_updates (operation_id, case_id, delivery_id, crm_id, \
                     requested_by, due_at, created_at, updated_at) \
                     select operation_id, $2, $3, $4, $5, $6, $6, $6 from operations \
                     where operation_id = $1 and executor = 'worker' returning id",
                )
                .bind(operation_id)
                .bind(case_id)
                .bind(delivery_id)
                .bind(crm_id)
                .bind(actor)
                .bind(now)
                .fetch_optional(&mut *self.0)
                .await?)
            }

            async fn newer_update_of_entity(&mut self, crm_id: &str, delivery_id: i64) -> Result<bool> {
                let n: i64 = sqlx::query_scalar(
                    "select count(*) from crm_updates where crm_id = $1 and delivery_id > $2 \
                     and state in ('pending', 'done')",
                )
                .bind(crm_id)
                .bind(delivery_id)
                .fetch_one(&mut *self.0)
                .await?;
                Ok(n > 0)
            }

            async fn lock_crm_update(&mut self, id: i64) -> Result<Option<ops::updates::UpdateRow>> {
                let sql = format!(
                    "select state, lease_token, delivery_id, crm_id from crm_updates where id = $1{}",
                    $lock_row
                );
                let Some(r) = sqlx::query(&sql).bind(id).fetch_optional(&mut *self.0).await? else {
                    return Ok(None);
                };
                Ok(Some(ops::updates::UpdateRow {
                    state: r.try_get("state")?,
                    lease_token: r.try_get("lease_token")?,
                    delivery_id: r.try_get("delivery_id")?,
                    crm_id: r.try_get("crm_id")?,
                }))
            }

            async fn write_crm_update(
                &mut self,
                id: i64,
                w: &ops::updates::UpdateWrite<'_>,
                now: DateTime<Utc>,
            ) -> Result<()> {
                sqlx::query(
                    "update crm_updates set state = $2, due_at = coalesce($3, due_at), \
                     quiet_after = case when $4 then quiet_after else null end, \
                     last_error = coalesce($5, last_error), \
                     last_error_class = coalesce($6, last_error_class), \
                     lease_owner = null, lease_token = null, lease_expires_at = null, \
                     attempts = attempts - case when $8 then 1 else 0 end, \
                     updated_at = $7 where id = $1",
                )
                .bind(id)
                .bind(w.state)
                .bind(w.due_at)
                .bind(w.keep_quiet)
                .bind(w.error.map(|(m, _)| m.to_owned()))
                .bind(w.error.map(|(_, c)| c.as_str()))
                .bind(now)
                .bind(w.refund)
                .execute(&mut *self.0)
                .await?;
                Ok(())
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
                    "insert into redeliveries (operation_id, sent, sent_at, resend_at) \
                     values ($1, 1, $2, $3) \
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

            async fn lock_pacing(&mut self, account: &str) -> Result<Option<f64>> {
                let sql = format!(
                    "select tat_ms from request_pacing where account = $1{}",
                    $lock_row
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
                     where name = $1{}",
                    $lock_row
                );
                let row = sqlx::query(&sql).bind(name).fetch_optional(&mut *self.0).await?;
                row.map(|r| {
                    Ok(leadgate_domain::outage::Health {
                        failures: r.try_get("failures")?,
                        unreachable_since: r.try_get("unreachable_since")?,
                        probe_at: r.try_get("probe_at")?,
                        probes: r.try_get("probes")?,
                    })
                })
                .transpose()
            }

            async fn add_connector_row(&mut self, name: &str, now: DateTime<Utc>) -> Result<()> {
                sqlx::query(
                    "insert into connectors (name, state, since, changed_by) \
                     values ($1, 'active', $2, 'worker') on conflict (name) do nothing",
                )
                .bind(name)
                .bind(now)
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
                     unreachable_since, probe_at, probes) values ($1, 'active', $2, 'worker', $3, $4, $5, $6) \
                     on conflict (name) do update set failures = excluded.failures, \
                     unreachable_since = excluded.unreachable_since, probe_at = excluded.probe_at, \
                     probes = excluded.probes",
                )
                .bind(name)
                .bind(now)
                .bind(h.failures)
                .bind(h.unreachable_since)
                .bind(h.probe_at)
                .bind(h.probes)
                .execute(&mut *self.0)
                .await?;
                Ok(())
            }

            async fn purge_candidates(&mut self, finished_before: DateTime<Utc>, batch: i64) -> Result<Vec<String>> {
                Ok(sqlx::query_scalar(
                    "select o.operation_id from operations o \
                     where o.status in ('completed', 'failed_terminal') and o.purged_at is null \
                     and o.updated_at < $1 and not exists (select 1 from review_cases c \
                       where c.operation_id = o.operation_id and c.resolved_at is null) \
                     and not exists (select 1 from crm_updates u \
                       where u.operation_id = o.operation_id and u.state = 'pending') \
                     order by o.updated_at limit $2",
                )
                .bind(finished_before)
                .bind(batch)
                .fetch_all(&mut *self.0)
                .await?)
            }

            async fn still_purgeable(&mut self, operation_id: &str, finished_before: DateTime<Utc>) -> Result<bool> {
                let still: i64 = sqlx::query_scalar(
                    "select count(*) from operations o where o.operation_id = $1 \
                     and o.status in ('completed', 'failed_terminal') and o.purged_at is null \
                     and o.updated_at < $2 and not exists (select 1 from review_cases c \
                       where c.operation_id = o.operation_id and c.resolved_at is null) \
                     and not exists (select 1 from crm_updates u \
                       where u.operation_id = o.operation_id and u.state = 'pending')",
                )
                .bind(operation_id)
                .bind(finished_before)
                .fetch_one(&mut *self.0)
                .await?;
                Ok(still > 0)
            }

            async fn scrub_operation(&mut self, operation_id: &str, now: DateTime<Utc>) -> Result<()> {
                sqlx::query(
                    "update operations set payload = null, contact_phone = null, \
                     contact_email = null, contact_name = null, name_words = null, purged_at = $1 \
                     where operation_id = $2",
                )
                .bind(now)
                .bind(operation_id)
                .execute(&mut *self.0)
                .await?;
                sqlx::query("delete from operation_names where operation_id = $1")
                    .bind(operation_id)
                    .execute(&mut *self.0)
                    .await?;
                Ok(())
            }

            async fn scrub_deliveries_of(&mut self, operation_id: &str) -> Result<u64> {
                Ok(sqlx::query(
                    "update deliveries set raw_body = null, payload = null \
                     where operation_id = $1 and (raw_body is not null or payload is not null)",
                )
                .bind(operation_id)
                .execute(&mut *self.0)
                .await?
                .rows_affected())
            }

            async fn scrub_late_deliveries(&mut self, finished_before: DateTime<Utc>, batch: i64) -> Result<u64> {
                Ok(sqlx::query(
                    "update deliveries set raw_body = null, payload = null where id in \
                     (select d.id from deliveries d join operations o \
                        on o.operation_id = d.operation_id \
                      where (d.raw_body is not null or d.payload is not null) \
                      and d.received_at < $1 and o.purged_at is not null \
                      and not exists (select 1 from review_cases c \
                        where c.operation_id = d.operation_id and c.resolved_at is null) \
                      limit $2)",
                )
                .bind(finished_before)
                .bind(batch)
                .execute(&mut *self.0)
                .await?
                .rows_affected())
            }

            async fn scrub_rejected(&mut self, finished_before: DateTime<Utc>, batch: i64) -> Result<u64> {
                Ok(sqlx::query(
                    "update deliveries set raw_body = null, payload = null where id in \
                     (select id from deliveries where outcome = 'rejected' and received_at < $1 \
                      and (raw_body is not null or payload is not null) limit $2)",
                )
                .bind(finished_before)
                .bind(batch)
                .execute(&mut *self.0)
                .await?
                .rows_affected())
            }
        }

        impl $store {
            async fn write(&self) -> Result<SqlTx<$db>> {
                Ok(SqlTx(self.begin_write().await?))
            }
        }

        impl $crate::Clock for $store {
            fn backend(&self) -> $crate::Backend {
                $backend
            }

            fn now(&self) -> DateTime<Utc> {
                self.clock_now()
            }
        }

        #[async_trait::async_trait]
        impl $crate::Journal for $store {
            async fn record_delivery(&self, d: NewDelivery) -> Result<DeliveryRecord> {
                self.record_delivery_now(d).await
            }

            async fn record_rejected(&self, d: RejectedDelivery) -> Result<i64> {
                let mut tx = self.begin_write().await?;
                let id: i64 = sqlx::query_scalar(
                    "insert into deliveries (source, operation_id, received_at, content_type, \
                     raw_body, outcome, reject_reason, transform_version) \
                     values ($1, $2, $3, $4, $5, 'rejected', $6, $7) returning id",
                )
                .bind(&d.source)
                .bind(&d.operation_id)
                .bind(d.received_at)
                .bind(&d.content_type)
                .bind(&d.raw_body)
                .bind(&d.reason)
                .bind(d.transform_version)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(id)
            }

            async fn use_signature(
                &self,
                source: &str,
                signature_sha256: &str,
                operation_id: &str,
                expires_at: DateTime<Utc>,
                now: DateTime<Utc>,
            ) -> Result<String> {
                let mut tx = self.begin_write().await?;
                sqlx::query(
                    "delete from signature_uses where (source, signature_sha256) in \
                       (select source, signature_sha256 from signature_uses where expires_at < $1 limit 100)",
                )
                .bind(now)
                .execute(&mut *tx)
                .await?;
                // Of two at once, the second waits for the first's row, then keeps it.
                sqlx::query(
                    "insert into signature_uses (source, signature_sha256, operation_id, expires_at) \
                     values ($1, $2, $3, $4) on conflict (source, signature_sha256) do nothing",
                )
                .bind(source)
                .bind(signature_sha256)
                .bind(operation_id)
                .bind(expires_at)
                .execute(&mut *tx)
                .await?;
                let first: String = sqlx::query_scalar(
                    "select operation_id from signature_uses where source = $1 and signature_sha256 = $2",
                )
                .bind(source)
                .bind(signature_sha256)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(first)
            }
        }

        #[async_trait::async_trait]
        impl $crate::WorkQueue for $store {
            async fn claim_due(
                &self,
                connector: &str,
                owner: &str,
                lease_for: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Option<Claim>> {
                ops::attempts::claim_due(self.write().await?, connector, owner, lease_for, now).await
            }

            async fn has_due(&self, connector: &str, now: DateTime<Utc>) -> Result<bool> {
                let due: Option<String> = sqlx::query_scalar(PICK_DUE)
                    .bind(now)
                    .bind(connector)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(due.is_some())
            }

            async fn claim_due_many(
                &self,
                connector: &str,
                owner: &str,
                lease_for: std::time::Duration,
                limit: usize,
                now: DateTime<Utc>,
            ) -> Result<Vec<Claim>> {
                ops::attempts::claim_due_many(self.write().await?, connector, owner, lease_for, limit, now)
                    .await
            }

            async fn claim_stale(
                &self,
                connector: &str,
                owner: &str,
                lease_for: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Option<Claim>> {
                ops::attempts::claim_stale(self.write().await?, connector, owner, lease_for, now).await
            }

            async fn start_attempt(
                &self,
                lease: &Lease,
                lease_for: std::time::Duration,
                settle: std::time::Duration,
                events: Vec<NewEvent>,
                now: DateTime<Utc>,
            ) -> Result<Lease> {
                ops::attempts::start_attempt(self.write().await?, lease, lease_for, settle, events, now)
                    .await
            }

            async fn start_attempts(
                &self,
                leases: Vec<(Lease, Vec<NewEvent>)>,
                lease_for: std::time::Duration,
                settle: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Vec<Result<Lease>>> {
                ops::attempts::start_attempts(self.write().await?, leases, lease_for, settle, now).await
            }

            async fn record_step(
                &self,
                lease: &Lease,
                events: Vec<NewEvent>,
                now: DateTime<Utc>,
            ) -> Result<()> {
                ops::attempts::record_step(self.write().await?, lease, &events, now).await
            }

            async fn finish_attempt(
                &self,
                lease: &Lease,
                outcome: AttemptOutcome,
                events: Vec<NewEvent>,
                now: DateTime<Utc>,
            ) -> Result<Operation> {
                ops::attempts::finish_attempt(self.write().await?, lease, outcome, &events, now).await
            }

            async fn take_contact_locks(
                &self,
                claim: &Claim,
                remember: std::time::Duration,
                wait: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<ContactTurn> {
                match ops::contacts::take(self.write().await?, claim, remember, now).await? {
                    Ok(known) => Ok(ContactTurn::Taken { known }),
                    Err(held_until) => {
                        let at = ops::contacts::due_again(held_until, wait, now);
                        ops::contacts::hand_back(self.write().await?, claim, at, now).await
                    }
                }
            }

            async fn leave_contact_locks(
                &self,
                lease: &Lease,
                how: ContactLeave,
                now: DateTime<Utc>,
            ) -> Result<()> {
                ops::contacts::leave(self.write().await?, lease, how, now).await
            }

            async fn connector_failed(
                &self,
                name: &str,
                config: &leadgate_domain::outage::OutageConfig,
                now: DateTime<Utc>,
            ) -> Result<Option<leadgate_domain::outage::Unreachable>> {
                ops::outage::connector_failed(self.write().await?, name, config, now).await
            }

            async fn connector_answered(&self, name: &str, now: DateTime<Utc>) -> Result<bool> {
                // A read first, without the writer: this runs after every answer.
                let failures: Option<i32> =
                    sqlx::query_scalar("select failures from connectors where name = $1")
                        .bind(name)
                        .fetch_optional(&self.pool)
                        .await?;
                if failures.unwrap_or(0) == 0 {
                    return Ok(false);
                }
                ops::outage::connector_answered(self.write().await?, name, now).await
            }

            async fn probe_gate(
                &self,
                name: &str,
                config: &leadgate_domain::outage::OutageConfig,
                now: DateTime<Utc>,
            ) -> Result<leadgate_domain::outage::Gate> {
                // A read first, without the writer: this runs before every claim.
                let unreachable: Option<Option<DateTime<Utc>>> =
                    sqlx::query_scalar("select unreachable_since from connectors where name = $1")
                        .bind(name)
                        .fetch_optional(&self.pool)
                        .await?;
                if unreachable.flatten().is_none() {
                    return Ok(leadgate_domain::outage::Gate::Open);
                }
                ops::outage::probe_gate(self.write().await?, name, config, now).await
            }
        }

        #[async_trait::async_trait]
        impl $crate::CrmAccess for $store {
            async fn take_turn(
                &self,
                account: &str,
                pace: leadgate_domain::pacing::Pace,
                now: DateTime<Utc>,
            ) -> Result<std::time::Duration> {
                ops::pacing::take_turn(self.write().await?, account, pace, now).await
            }

            async fn hold_turns(
                &self,
                account: &str,
                pace: leadgate_domain::pacing::Pace,
                until: DateTime<Utc>,
            ) -> Result<()> {
                ops::pacing::hold_turns(self.write().await?, account, pace, until).await
            }

            async fn crm_token(&self, connector: &str) -> Result<Option<CrmToken>> {
                let row = sqlx::query(
                    "select access_token, refresh_token, expires_at, version from crm_tokens \
                     where connector = $1",
                )
                .bind(connector)
                .fetch_optional(&self.pool)
                .await?;
                row.map(|r| {
                    Ok(CrmToken {
                        access_token: r.try_get("access_token")?,
                        refresh_token: r.try_get("refresh_token")?,
                        expires_at: r.try_get("expires_at")?,
                        version: r.try_get("version")?,
                    })
                })
                .transpose()
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
                         expires_at, version, updated_at) values ($1, $2, $3, $4, $5, $6) \
                         on conflict (connector) do nothing"
                    }
                    Some(_) => {
                        "update crm_tokens set access_token = $2, refresh_token = $3, \
                         expires_at = $4, version = $5, updated_at = $6 \
                         where connector = $1 and version = $7"
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
                let done = query.execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }
        }

        #[async_trait::async_trait]
        impl $crate::Review for $store {
            async fn open_review(
                &self,
                operation_id: &OperationId,
                reason: ReviewReason,
                actor: &str,
                detail: Value,
                now: DateTime<Utc>,
            ) -> Result<i64> {
                ops::review::open_review(self.write().await?, operation_id, reason, actor, detail, now)
                    .await
            }

            async fn resolve(&self, req: Resolve) -> Result<Resolved> {
                ops::review::resolve(self.write().await?, req).await
            }

            async fn note(
                &self,
                id: &OperationId,
                actor: &str,
                event: NewEvent,
                now: DateTime<Utc>,
            ) -> Result<()> {
                ops::attempts::note(self.write().await?, id.as_str(), actor, &event, now).await
            }

            async fn identity(&self) -> Result<Identity> {
                if $backend == $crate::Backend::Sqlite {
                    return Ok(Identity::Local);
                }
                let (login, role, owner): (String, Option<String>, bool) = sqlx::query_as(
                    "select session_user::text, leadgate_role_of(session_user), \
                     pg_has_role(session_user, (select relowner from pg_class \
                       where oid = 'public.operations'::regclass), 'member')",
                )
                .fetch_one(&self.pool)
                .await?;
                Ok(match (owner, role) {
                    (true, _) => Identity::Owner { login },
                    (false, Some(r)) => Identity::Person {
                        login,
                        role: r.trim_start_matches("leadgate_").parse().map_err(corrupt)?,
                    },
                    (false, None) => Identity::Nobody { login },
                })
            }

            async fn ask(&self, ask: &Ask) -> Result<i64> {
                let (case_id, version, operation_id, connector) = ask.key_columns();
                sqlx::query_scalar(
                    "insert into human_requests (kind, case_id, expected_version, operation_id, \
                     connector, body) values ($1, $2, $3, $4, $5, $6) returning id",
                )
                .bind(ask.kind_name())
                .bind(case_id)
                .bind(version)
                .bind(operation_id)
                .bind(connector)
                .bind(ask.body())
                .fetch_one(&self.pool)
                .await
                .map_err(StoreError::refused_request)
            }

            async fn answer(&self, id: i64) -> Result<Option<Result<Answer>>> {
                let outcome: Option<Option<String>> =
                    sqlx::query_scalar("select outcome from human_requests where id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?;
                match outcome {
                    None => Err(StoreError::NotApplied(format!("request #{id} was withdrawn"))),
                    Some(None) => Ok(None),
                    Some(Some(text)) => requests_outcome_of(&text).map(Some),
                }
            }

            async fn withdraw(&self, id: i64) -> Result<bool> {
                Ok(sqlx::query_scalar("select leadgate_withdraw($1)")
                    .bind(id)
                    .fetch_one(&self.pool)
                    .await?)
            }

            async fn perform(&self, actor: &str, ask: Ask, now: DateTime<Utc>) -> Result<Answer> {
                ops::requests::perform(self.write().await?, actor, ask, now).await
            }

            async fn apply_next_request(&self, now: DateTime<Utc>) -> Result<Option<i64>> {
                use ops::requests::Applied;
                match ops::requests::apply_next(self.write().await?, now).await? {
                    Applied::Nothing => Ok(None),
                    Applied::Done(id) => Ok(Some(id)),
                    Applied::Declined(id, why) => {
                        ops::requests::decline(self.write().await?, id, why, now).await?;
                        Ok(Some(id))
                    }
                }
            }
        }

        #[async_trait::async_trait]
        impl $crate::ClaimApi for $store {
            async fn claim_external(&self, c: ExternalClaim) -> Result<ExternalClaimOutcome> {
                retrying(|| async { ops::claim_api::claim(self.write().await?, &c).await }).await
            }

            async fn expire_external_leases(&self, now: DateTime<Utc>) -> Result<u64> {
                ops::claim_api::expire_leases(self.write().await?, now).await
            }

            async fn take_due_redeliveries(
                &self,
                source: &str,
                actor: &str,
                now: DateTime<Utc>,
                resend_at: DateTime<Utc>,
                limit: i64,
            ) -> Result<Vec<DueRedelivery>> {
                // A read first, without the writer: on SQLite a write transaction holds
                // the one writer lock, and this runs every poll interval.
                let any: Option<RedeliveryRow> =
                    sqlx::query_as(PICK_REDELIVERY)
                        .bind(source)
                        .bind(now)
                        .bind(1_i64)
                        .fetch_optional(&self.pool)
                        .await?;
                if any.is_none() {
                    return Ok(vec![]);
                }
                ops::claim_api::take_due_redeliveries(
                    self.write().await?,
                    source,
                    actor,
                    now,
                    resend_at,
                    limit,
                )
                .await
            }
        }

        #[async_trait::async_trait]
        impl $crate::Updates for $store {
            async fn claim_update(
                &self,
                connector: &str,
                owner: &str,
                lease_for: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Option<UpdateClaim>> {
                // The first pending update of its entity (several operations may share
                // one: a link, a merge), in the order of the deliveries they carry, past
                // its own quiet window, with no earlier one of the entity still pending or
                // possibly landing: an older update never lands after a newer one.
                let pick = "select u.id from crm_updates u join operations o on o.operation_id = u.operation_id \
                     where u.state = 'pending' and u.due_at <= $1 \
                     and (u.lease_expires_at is null or u.lease_expires_at <= $1) \
                     and (u.quiet_after is null or u.quiet_after <= $1) \
                     and o.executor = 'worker' \
                     and not exists (select 1 from crm_updates e where e.crm_id = u.crm_id \
                       and e.id <> u.id \
                       and (e.delivery_id < u.delivery_id or (e.delivery_id = u.delivery_id and e.id < u.id)) \
                       and (e.state = 'pending' or e.quiet_after > $1)) \
                     and not exists (select 1 from connectors c where c.name = $2 and c.state = 'paused') \
                     order by u.due_at, u.id limit 1";
                // A read first: an idle poll takes no write lock (SQLite has one writer).
                let due: Option<i64> = sqlx::query_scalar(pick)
                    .bind(now)
                    .bind(connector)
                    .fetch_optional(&self.pool)
                    .await?;
                if due.is_none() {
                    return Ok(None);
                }
                let mut tx = self.write().await?;
                let lock = if $skip_locked.is_empty() { "" } else { " for update of u skip locked" };
                let sql = format!("{pick}{lock}");
                let Some(id): Option<i64> = sqlx::query_scalar(&sql)
                    .bind(now)
                    .bind(connector)
                    .fetch_optional(&mut *tx.0)
                    .await?
                else {
                    return Ok(None);
                };
                let token = uuid::Uuid::new_v4().to_string();
                let expires_at = after(now, lease_for);
                sqlx::query(
                    "update crm_updates set attempts = attempts + 1, lease_owner = $2, \
                     lease_token = $3, lease_expires_at = $4, updated_at = $5 where id = $1",
                )
                .bind(id)
                .bind(owner)
                .bind(&token)
                .bind(expires_at)
                .bind(now)
                .execute(&mut *tx.0)
                .await?;
                let r = sqlx::query(
                    "select u.id, u.operation_id, o.source, u.crm_id, u.case_id, u.delivery_id, \
                     u.attempts, o.payload as original, d.payload as later \
                     from crm_updates u join operations o on o.operation_id = u.operation_id \
                     join deliveries d on d.id = u.delivery_id where u.id = $1",
                )
                .bind(id)
                .fetch_one(&mut *tx.0)
                .await?;
                let claim = UpdateClaim {
                    id,
                    operation_id: OperationId::try_from(r.try_get::<String, _>("operation_id")?)
                        .map_err(corrupt)?,
                    source: r.try_get("source")?,
                    crm_id: r.try_get("crm_id")?,
                    case_id: r.try_get("case_id")?,
                    delivery_id: r.try_get("delivery_id")?,
                    original: json_text(r.try_get("original")?)?,
                    later: json_text(r.try_get("later")?)?,
                    attempts: r.try_get("attempts")?,
                    owner: owner.to_owned(),
                    token,
                    expires_at,
                };
                tx.commit().await?;
                Ok(Some(claim))
            }

            async fn start_update(
                &self,
                claim: &UpdateClaim,
                lease_for: std::time::Duration,
                settle: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<()> {
                let mut tx = self.write().await?;
                let done = sqlx::query(
                    "update crm_updates set lease_expires_at = $3, quiet_after = $4, updated_at = $5 \
                     where id = $1 and state = 'pending' and lease_token = $2 and lease_expires_at > $5",
                )
                .bind(claim.id)
                .bind(&claim.token)
                .bind(after(now, lease_for))
                .bind(after(after(now, lease_for), settle))
                .bind(now)
                .execute(&mut *tx.0)
                .await?;
                tx.commit().await?;
                if done.rows_affected() == 1 {
                    Ok(())
                } else {
                    Err(StoreError::LeaseLost(format!("update {}", claim.id)))
                }
            }

            async fn finish_update(
                &self,
                claim: &UpdateClaim,
                outcome: UpdateOutcome,
                events: Vec<NewEvent>,
                now: DateTime<Utc>,
            ) -> Result<()> {
                ops::updates::finish(self.write().await?, claim, outcome, events, now).await
            }
        }

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
                    "insert into alert_channels (channel, case_cursor) \
                     select $1, coalesce(max(id), 0) from review_cases \
                     where true on conflict (channel) do nothing",
                )
                .bind(channel)
                .execute(&mut *tx)
                .await?;
                let sql = format!(
                    "select case_cursor, last_group_at, recent_sends, pending, pending_cursor, \
                     pending_conditions, failures, next_try_at, lease_token, lease_until \
                     from alert_channels where channel = $1{}",
                    $lock_row
                );
                let r = sqlx::query(&sql).bind(channel).fetch_one(&mut *tx).await?;
                let held: Option<String> = r.try_get("lease_token")?;
                let until: Option<DateTime<Utc>> = r.try_get("lease_until")?;
                if held.is_some() && until.is_some_and(|u| u > now) {
                    tx.commit().await?;
                    return Ok(None);
                }
                let token = uuid::Uuid::new_v4().simple().to_string();
                let lease_until = after(now, lease_for);
                sqlx::query(
                    "update alert_channels set lease_owner = $2, lease_token = $3, lease_until = $4 \
                     where channel = $1",
                )
                .bind(channel)
                .bind(owner)
                .bind(&token)
                .bind(lease_until)
                .execute(&mut *tx)
                .await?;
                let conditions = sqlx::query(
                    "select key, firing, since, notified_at from alert_conditions \
                     where channel = $1 order by key",
                )
                .bind(channel)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|c| {
                    Ok(AlertCondition {
                        key: c.try_get("key")?,
                        firing: c.try_get("firing")?,
                        since: c.try_get("since")?,
                        notified_at: c.try_get("notified_at")?,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
                tx.commit().await?;
                let recent: Vec<i64> =
                    serde_json::from_str(&r.try_get::<String, _>("recent_sends")?).map_err(corrupt)?;
                let pending = match r.try_get::<Option<String>, _>("pending")? {
                    None => None,
                    Some(body) => Some(PendingAlert {
                        body,
                        cursor: r.try_get("pending_cursor")?,
                        conditions: serde_json::from_str(
                            r.try_get::<Option<String>, _>("pending_conditions")?
                                .as_deref()
                                .unwrap_or("[]"),
                        )
                        .map_err(corrupt)?,
                    }),
                };
                Ok(Some(AlertTurn {
                    token,
                    lease_until,
                    case_cursor: r.try_get("case_cursor")?,
                    last_group_at: r.try_get("last_group_at")?,
                    recent_sends: recent
                        .into_iter()
                        .filter_map(DateTime::<Utc>::from_timestamp_millis)
                        .collect(),
                    pending,
                    failures: r.try_get("failures")?,
                    next_try_at: r.try_get("next_try_at")?,
                    conditions,
                }))
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
                         where channel = $1 and lease_token = $2 and lease_until > $7",
                    )
                    .bind(channel)
                    .bind(token)
                    .bind(until)
                    .bind(&p.body)
                    .bind(p.cursor)
                    .bind(serde_json::to_string(&p.conditions).map_err(corrupt)?)
                    .bind(now),
                    None => sqlx::query(
                        "update alert_channels set lease_until = $3 \
                         where channel = $1 and lease_token = $2 and lease_until > $4 \
                         and pending is not null",
                    )
                    .bind(channel)
                    .bind(token)
                    .bind(until)
                    .bind(now),
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
                    "select recent_sends, pending, pending_cursor, pending_conditions \
                     from alert_channels where channel = $1 and lease_token = $2{}",
                    $lock_row
                );
                let Some(r) = sqlx::query(&sql)
                    .bind(channel)
                    .bind(token)
                    .fetch_optional(&mut *tx)
                    .await?
                else {
                    return Err(StoreError::LeaseLost(format!("alert channel {channel}")));
                };
                let release = "lease_owner = null, lease_token = null, lease_until = null";
                if let AlertOutcome::Retry { at } = outcome {
                    sqlx::query(&format!(
                        "update alert_channels set failures = failures + 1, next_try_at = $2, \
                         {release} where channel = $1"
                    ))
                    .bind(channel)
                    .bind(at)
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    return Ok(());
                }
                let mut recent: Vec<i64> =
                    serde_json::from_str(&r.try_get::<String, _>("recent_sends")?).map_err(corrupt)?;
                let minute_ago = (now - chrono::TimeDelta::minutes(1)).timestamp_millis();
                recent.retain(|ms| *ms > minute_ago);
                if outcome == AlertOutcome::Accepted {
                    recent.push(now.timestamp_millis());
                }
                let cursor: Option<i64> = r.try_get("pending_cursor")?;
                let conditions: Vec<(String, bool)> = match r.try_get::<Option<String>, _>("pending")? {
                    None => vec![],
                    Some(_) => serde_json::from_str(
                        r.try_get::<Option<String>, _>("pending_conditions")?
                            .as_deref()
                            .unwrap_or("[]"),
                    )
                    .map_err(corrupt)?,
                };
                sqlx::query(&format!(
                    "update alert_channels set recent_sends = $2, \
                     case_cursor = coalesce($3, case_cursor), \
                     last_group_at = case when $3 is null then last_group_at else $4 end, \
                     pending = null, pending_cursor = null, pending_conditions = null, \
                     failures = 0, next_try_at = null, {release} where channel = $1"
                ))
                .bind(channel)
                .bind(serde_json::to_string(&recent).map_err(corrupt)?)
                .bind(cursor)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                for (key, firing) in conditions {
                    sqlx::query(
                        "insert into alert_conditions (channel, key, firing, since, notified_at) \
                         values ($1, $2, $3, $4, $4) on conflict (channel, key) do update set \
                         since = case when alert_conditions.firing = excluded.firing \
                           then alert_conditions.since else excluded.since end, \
                         firing = excluded.firing, notified_at = excluded.notified_at",
                    )
                    .bind(channel)
                    .bind(key)
                    .bind(firing)
                    .bind(now)
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
                     lease_until = null where channel = $1 and lease_token = $2",
                )
                .bind(channel)
                .bind(token)
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
                let groups: Vec<(String, String, i64, i64, DateTime<Utc>)> = sqlx::query_as(
                    "select c.reason, o.source, count(*), max(c.id), min(c.opened_at) \
                     from review_cases c join operations o on o.operation_id = c.operation_id \
                     where c.id > $1 and c.opened_at <= $2 \
                     group by c.reason, o.source order by c.reason, o.source",
                )
                .bind(after_case)
                .bind(cases_until)
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
                         order by id limit $3",
                    )
                    .bind(after_case)
                    .bind(max_id)
                    .bind(ALERT_CASE_IDS)
                    .fetch_all(p)
                    .await?;
                }
                f.lost = sqlx::query_scalar(
                    "select cast(coalesce(sum(value), 0) as bigint) from metric_counters \
                     where metric = 'lost'",
                )
                .fetch_one(p)
                .await?;
                f.stale_in_progress = sqlx::query_scalar(
                    "select count(*) from operations where status = 'in_progress' and updated_at < $1",
                )
                .bind(stale_before)
                .fetch_one(p)
                .await?;
                let (old, oldest): (i64, Option<DateTime<Utc>>) = sqlx::query_as(
                    "select count(*), min(opened_at) from review_cases \
                     where resolved_at is null and opened_at < $1",
                )
                .bind(review_before)
                .fetch_one(p)
                .await?;
                f.old_open_cases = old;
                f.oldest_open_case_at = oldest;
                f.connectors = self.connectors().await?;
                Ok(f)
            }
        }

        #[async_trait::async_trait]
        impl $crate::Rules for $store {
            async fn publish_crm_links(&self, links: &CrmLinks, now: DateTime<Utc>) -> Result<()> {
                sqlx::query(
                    "insert into crm_links (connector, entity_url, search_url, contact_url, updated_at) \
                     values ($1, $2, $3, $4, $5) on conflict (connector) do update set \
                     entity_url = excluded.entity_url, search_url = excluded.search_url, \
                     contact_url = excluded.contact_url, updated_at = excluded.updated_at",
                )
                .bind(&links.connector)
                .bind(&links.entity_url)
                .bind(&links.search_url)
                .bind(&links.contact_url)
                .bind(now)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn crm_links(&self) -> Result<Vec<CrmLinks>> {
                let rows = sqlx::query(
                    "select connector, entity_url, search_url, contact_url from crm_links \
                     order by updated_at desc, connector",
                )
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|r| {
                        Ok(CrmLinks {
                            connector: r.try_get("connector")?,
                            entity_url: r.try_get("entity_url")?,
                            search_url: r.try_get("search_url")?,
                            contact_url: r.try_get("contact_url")?,
                        })
                    })
                    .collect()
            }

            async fn business_rules(&self) -> Result<Vec<StoredRules>> {
                let sql = format!("{RULES_COLUMNS} order by source");
                let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
                rows.iter().map(rules_from_row).collect()
            }

            async fn rules_version(&self) -> Result<i64> {
                Ok(sqlx::query_scalar(
                    "select cast(count(*) as bigint) from business_rule_history",
                )
                .fetch_one(&self.pool)
                .await?)
            }

            async fn rules_history(&self, source: Option<&str>, limit: i64) -> Result<Vec<RuleChange>> {
                let rows = sqlx::query(
                    "select id, source, version, actor, changed_at, before, after \
                     from business_rule_history where (cast($1 as text) is null or source = $1) \
                     order by id desc limit $2",
                )
                .bind(source)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
                let rules = |text: Option<String>| -> Result<Option<SourceRules>> {
                    text.map(|t| serde_json::from_str(&t).map_err(corrupt)).transpose()
                };
                rows.iter()
                    .map(|r| {
                        Ok(RuleChange {
                            id: r.try_get("id")?,
                            source: r.try_get("source")?,
                            version: r.try_get("version")?,
                            actor: r.try_get("actor")?,
                            changed_at: r.try_get("changed_at")?,
                            before: rules(r.try_get("before")?)?,
                            after: rules(Some(r.try_get("after")?))?
                                .ok_or_else(|| corrupt("a rules change without its rules"))?,
                        })
                    })
                    .collect()
            }

            async fn seed_rules(&self, seeds: &[SourceRules], now: DateTime<Utc>) -> Result<Vec<String>> {
                ops::rules::seed(self.write().await?, seeds, now).await
            }
        }

        #[async_trait::async_trait]
        impl $crate::Reads for $store {
            async fn operation(&self, id: &OperationId) -> Result<Option<Operation>> {
                let sql = format!("select {OP_COLUMNS} from operations where operation_id = $1");
                let row = sqlx::query(&sql)
                    .bind(id.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(op_from_row).transpose()
            }

            async fn diagnoses(&self, limit: i64) -> Result<Vec<DiagnosisSummary>> {
                let rows = sqlx::query(
                    "select id, generated_at, input, period_from, period_to, group_count, \
                     pair_count, totals from diagnosis_reports \
                     order by generated_at desc, id desc limit $1",
                )
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(diagnosis_from_row).collect()
            }

            async fn diagnosis(&self, id: i64) -> Result<Option<(DiagnosisSummary, Value)>> {
                let row = sqlx::query(
                    "select id, generated_at, input, period_from, period_to, group_count, \
                     pair_count, totals, report from diagnosis_reports where id = $1",
                )
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
                match row {
                    None => Ok(None),
                    Some(r) => {
                        let report: String = r.try_get("report")?;
                        Ok(Some((
                            diagnosis_from_row(&r)?,
                            serde_json::from_str(&report).map_err(corrupt)?,
                        )))
                    }
                }
            }

            async fn operations(&self, ids: &[OperationId]) -> Result<Vec<Operation>> {
                let mut found = vec![];
                for chunk in ids.chunks(500) {
                    let marks = (1..=chunk.len())
                        .map(|i| format!("${i}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    let sql = format!(
                        "select {OP_COLUMNS} from operations where operation_id in ({marks})"
                    );
                    let mut q = sqlx::query(&sql);
                    for id in chunk {
                        q = q.bind(id.as_str());
                    }
                    for row in q.fetch_all(&self.pool).await? {
                        found.push(op_from_row(&row)?);
                    }
                }
                Ok(found)
            }

            async fn timeline(&self, id: &OperationId) -> Result<Vec<TimelineEvent>> {
                let rows = sqlx::query(
                    "select id, at, kind, actor, error_class, detail from timeline \
                     where operation_id = $1 order by id",
                )
                .bind(id.as_str())
                .fetch_all(&self.pool)
                .await?;
                rows.iter().map(event_from_row).collect()
            }

            async fn timeline_page(
                &self,
                id: &OperationId,
                before: Option<i64>,
                limit: i64,
            ) -> Result<TimelinePage> {
                let limit = limit.clamp(1, TIMELINE_PAGE_MAX);
                let rows = sqlx::query(
                    "select id, at, kind, actor, error_class, detail from timeline \
                     where operation_id = $1 and id < $2 order by id desc limit $3",
                )
                .bind(id.as_str())
                .bind(before.unwrap_or(i64::MAX))
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
                let mut events = rows.iter().map(event_from_row).collect::<Result<Vec<_>>>()?;
                events.reverse();
                // Counted only when the page is full: a shorter page is the whole rest.
                let older = match events.first() {
                    Some(first) if events.len() as i64 == limit => {
                        sqlx::query_scalar(
                            "select count(*) from timeline where operation_id = $1 and id < $2",
                        )
                        .bind(id.as_str())
                        .bind(first.id)
                        .fetch_one(&self.pool)
                        .await?
                    }
                    _ => 0,
                };
                Ok(TimelinePage { events, older })
            }

            async fn timeline_of_kind(
                &self,
                id: &OperationId,
                kind: &str,
                limit: i64,
            ) -> Result<Vec<TimelineEvent>> {
                let rows = sqlx::query(
                    "select id, at, kind, actor, error_class, detail from timeline \
                     where operation_id = $1 and kind = $2 order by id desc limit $3",
                )
                .bind(id.as_str())
                .bind(kind)
                .bind(limit.clamp(1, TIMELINE_PAGE_MAX))
                .fetch_all(&self.pool)
                .await?;
                let mut events = rows.iter().map(event_from_row).collect::<Result<Vec<_>>>()?;
                events.reverse();
                Ok(events)
            }

            async fn cases_of(&self, id: &OperationId) -> Result<Vec<ReviewCase>> {
                let sql = format!(
                    "select {CASE_COLUMNS} from review_cases c join operations o \
                     on o.operation_id = c.operation_id where c.operation_id = $1 order by c.id"
                );
                let rows = sqlx::query(&sql).bind(id.as_str()).fetch_all(&self.pool).await?;
                rows.iter().map(case_from_row).collect()
            }

            async fn case(&self, case_id: i64) -> Result<Option<ReviewCase>> {
                let sql = format!(
                    "select {CASE_COLUMNS} from review_cases c join operations o \
                     on o.operation_id = c.operation_id where c.id = $1"
                );
                let row = sqlx::query(&sql).bind(case_id).fetch_optional(&self.pool).await?;
                row.as_ref().map(case_from_row).transpose()
            }

            async fn review_cases(&self, f: &CaseFilter, page: Page) -> Result<Vec<ReviewCase>> {
                let mut q = sqlx::QueryBuilder::<$db>::new(format!(
                    "select {CASE_COLUMNS} from review_cases c join operations o \
                     on o.operation_id = c.operation_id where "
                ));
                q.push(if f.resolved { "c.resolved_at is not null" } else { "c.resolved_at is null" });
                if let Some(reason) = f.reason {
                    q.push(" and c.reason = ").push_bind(reason.as_str());
                }
                if let Some(reason) = f.except_reason {
                    q.push(" and c.reason <> ").push_bind(reason.as_str());
                }
                if let Some(source) = &f.source {
                    q.push(" and o.source = ").push_bind(source.clone());
                }
                if let Some(before) = f.opened_before {
                    q.push(" and c.opened_at < ").push_bind(before);
                }
                if let Some(after_id) = page.after_id {
                    q.push(if f.newest_first { " and c.id < " } else { " and c.id > " })
                        .push_bind(after_id);
                }
                q.push(if f.newest_first { " order by c.id desc limit " } else { " order by c.id limit " })
                    .push_bind(page.limit.clamp(1, 1000));
                let rows = q.build().fetch_all(&self.pool).await?;
                rows.iter().map(case_from_row).collect()
            }

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

            async fn operations_with_status(
                &self,
                status: Status,
                page: OperationPage,
            ) -> Result<Vec<Operation>> {
                // Served by the operations_status index (status, updated_at).
                let mut q = op_page_query(status, "updated_at", None, &page);
                let rows = q.build().fetch_all(&self.pool).await?;
                rows.iter().map(op_from_row).collect()
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

            async fn link_candidates(&self, id: &OperationId, limit: i64) -> Result<Vec<Operation>> {
                // The newest `limit` from each index (operations_phone, operations_email: contact,
                // created_at), joined by union: bounded however many leads share a phone.
                let sql = format!(
                    "select {OP_COLUMNS} from operations where operation_id in ( \
                       select operation_id from (select o.operation_id from operations o \
                         join operations me on me.operation_id = $1 and o.contact_phone = me.contact_phone \
                         where o.operation_id <> $1 order by o.created_at desc limit $2) p \
                       union \
                       select operation_id from (select o.operation_id from operations o \
                         join operations me on me.operation_id = $1 and o.contact_email = me.contact_email \
                         where o.operation_id <> $1 order by o.created_at desc limit $2) e) \
                     order by created_at desc, operation_id limit $2"
                );
                let rows = sqlx::query(&sql)
                    .bind(id.as_str())
                    .bind(limit.clamp(1, 200))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map(op_from_row).collect()
            }

            async fn delivery(&self, delivery_id: i64) -> Result<Option<DeliveryView>> {
                let row = sqlx::query(
                    "select id, source, operation_id, received_at, outcome, payload, payload_hash \
                     from deliveries where id = $1",
                )
                .bind(delivery_id)
                .fetch_optional(&self.pool)
                .await?;
                row.map(|r| {
                    Ok(DeliveryView {
                        id: r.try_get("id")?,
                        source: r.try_get("source")?,
                        operation_id: r.try_get("operation_id")?,
                        received_at: r.try_get("received_at")?,
                        outcome: r.try_get("outcome")?,
                        payload: json_text(r.try_get("payload")?)?,
                        payload_hash: r.try_get("payload_hash")?,
                    })
                })
                .transpose()
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

            async fn schema_version(&self) -> Result<Option<i64>> {
                // sqlx's own bookkeeping table; absent on a database never migrated.
                match sqlx::query_scalar::<_, Option<i64>>(
                    "select max(version) from _sqlx_migrations where success",
                )
                .fetch_one(&self.pool)
                .await
                {
                    Ok(v) => Ok(v),
                    Err(sqlx::Error::Database(_)) => Ok(None),
                    Err(e) => Err(e.into()),
                }
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
                Ok(self.connectors().await?.into_iter().find(|c| c.name == name))
            }

            async fn connectors(&self) -> Result<Vec<Connector>> {
                let rows = sqlx::query(
                    "select name, state, reason, since, changed_by, unreachable_since from connectors \
                     order by name",
                )
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|r| {
                        Ok(Connector {
                            name: r.try_get("name")?,
                            paused: r.try_get::<String, _>("state")? == "paused",
                            reason: r.try_get("reason")?,
                            since: r.try_get("since")?,
                            changed_by: r.try_get("changed_by")?,
                            unreachable_since: r.try_get("unreachable_since")?,
                        })
                    })
                    .collect()
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
                m.mean_seconds_to_resolve = sqlx::query_scalar($mean_resolve).fetch_one(p).await?;
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

            // Search

            async fn search(
                &self,
                query: &SearchQuery,
                after: Option<&SearchCursor>,
                limit: i64,
                plan: SearchPlan,
            ) -> Result<SearchPage> {
                use leadgate_domain::search::prefix_end;
                use $crate::sql::like_escape;
                type Q = sqlx::QueryBuilder<'static, $db>;
                let limit = limit.clamp(1, 200);
                // A key prefix is a byte range: SQLite's primary key is BINARY; on
                // PostgreSQL, whatever the database's collation, the "C" expression index
                // of migration 0012.
                let key = if $backend == $crate::Backend::Postgres { "(o.operation_id collate \"C\")" } else { "o.operation_id" };
                // Newest first, after the cursor: `(at, id) < (cursor)`, written so that the
                // first half is an index bound.
                let keyset = |q: &mut Q, at: &str, id: &str| {
                    if let Some(c) = after {
                        q.push(format!(" and {at} <= ")).push_bind(c.created_at)
                            .push(format!(" and ({at} < ")).push_bind(c.created_at)
                            .push(format!(" or {id} < ")).push_bind(c.operation_id.clone())
                            .push(")");
                    }
                };
                let range = |q: &mut Q, col: &str, prefix: &str| {
                    q.push(format!("{col} >= ")).push_bind(prefix.to_owned());
                    if let Some(end) = prefix_end(prefix) {
                        q.push(format!(" and {col} < ")).push_bind(end);
                    }
                };
                // The row's name has a word starting with `w` (words are letters and
                // digits only; escaped all the same).
                let word_like = |q: &mut Q, w: &str| {
                    q.push("o.name_words like ").push_bind(format!("% {}%", like_escape(w)))
                        .push(" escape '\\'");
                };
                let select = |q: &mut Q| {
                    q.push(
                        "select o.operation_id, o.source, o.status, o.created_at, o.updated_at, o.crm_id, \
                         o.review_reason, o.contact_name, o.contact_phone, o.contact_email, \
                         (select max(c.id) from review_cases c where c.operation_id = o.operation_id \
                           and c.resolved_at is null) as open_case_id from ",
                    );
                };
                let order = |q: &mut Q| {
                    q.push(" order by o.created_at desc, o.operation_id desc limit ").push_bind(limit + 1);
                };
                // Walk: operations newest first (operations_created), each tested; only the
                // newest `window` of them when given.
                let walk = |text: &str, words: &[String], window: Option<i64>| {
                    let mut q = Q::new("");
                    select(&mut q);
                    q.push("operations o where 1 = 1");
                    keyset(&mut q, "o.created_at", "o.operation_id");
                    if let Some(w) = window {
                        // No older than the w-th newest after the cursor (read in the index;
                        // none when fewer are left: then nothing is walked, and it ranges).
                        q.push(" and o.created_at >= (select o2.created_at from operations o2 where 1 = 1");
                        keyset(&mut q, "o2.created_at", "o2.operation_id");
                        q.push(" order by o2.created_at desc, o2.operation_id desc limit 1 offset ")
                            .push_bind(w - 1)
                            .push(")");
                    }
                    q.push(" and ((");
                    range(&mut q, key, text);
                    q.push(") or o.crm_id = ").push_bind(text.to_owned());
                    if !words.is_empty() {
                        q.push(" or (");
                        for (i, w) in words.iter().enumerate() {
                            q.push(if i == 0 { "" } else { " and " });
                            word_like(&mut q, w);
                        }
                        q.push(")");
                    }
                    q.push(")");
                    order(&mut q);
                    q
                };
                // Ranges: each index (key prefix, crm_id, name words) gives its newest
                // `limit + 1` rows after the cursor; the union is sorted. The name's rows
                // are the range of the `lead` word with the others tested on the row, or
                // (no lead) the intersection of every word's range.
                let ranges = |text: &str, words: &[String], lead: Option<usize>| {
                    let mut q = Q::new("");
                    select(&mut q);
                    q.push("operations o where o.operation_id in (select operation_id from (");
                    q.push("select operation_id from (select o.operation_id from operations o where ");
                    range(&mut q, key, text);
                    keyset(&mut q, "o.created_at", "o.operation_id");
                    q.push(" order by o.created_at desc, o.operation_id desc limit ").push_bind(limit + 1);
                    q.push(") k union select operation_id from (select o.operation_id from operations o where o.crm_id = ")
                        .push_bind(text.to_owned());
                    keyset(&mut q, "o.created_at", "o.operation_id");
                    q.push(" order by o.created_at desc, o.operation_id desc limit ").push_bind(limit + 1);
                    q.push(") c");
                    match lead {
                        _ if words.is_empty() => {}
                        Some(l) => {
                            q.push(" union select operation_id from (select n.operation_id from operation_names n");
                            if words.len() > 1 {
                                q.push(" join operations o on o.operation_id = n.operation_id");
                            }
                            q.push(" where ");
                            range(&mut q, "n.word", &words[l]);
                            for (i, w) in words.iter().enumerate() {
                                if i != l {
                                    q.push(" and ");
                                    word_like(&mut q, w);
                                }
                            }
                            keyset(&mut q, "n.created_at", "n.operation_id");
                            q.push(" order by n.created_at desc, n.operation_id desc limit ").push_bind(limit + 1);
                            q.push(") w");
                        }
                        None => {
                            q.push(" union select operation_id from (select operation_id, created_at from (");
                            for (i, w) in words.iter().enumerate() {
                                q.push(if i == 0 { "" } else { " intersect " });
                                q.push("select n.operation_id, n.created_at from operation_names n where ");
                                range(&mut q, "n.word", w);
                                keyset(&mut q, "n.created_at", "n.operation_id");
                            }
                            q.push(") i order by created_at desc, operation_id desc limit ").push_bind(limit + 1);
                            q.push(") w");
                        }
                    }
                    q.push(") u)");
                    order(&mut q);
                    q
                };
                let rows = match query {
                    SearchQuery::Phone(v) | SearchQuery::Email(v) => {
                        let col = if matches!(query, SearchQuery::Phone(_)) { "o.contact_phone" } else { "o.contact_email" };
                        let mut q = Q::new("");
                        select(&mut q);
                        q.push(format!("operations o where {col} = ")).push_bind(v.clone());
                        keyset(&mut q, "o.created_at", "o.operation_id");
                        order(&mut q);
                        q.build().fetch_all(&self.pool).await?
                    }
                    SearchQuery::Text { text, words } => {
                        // (Window: when the newest `w` operations hold a full page, it is
                        // the page: every older match is older than all of them.)
                        let window = |w: i64| async move {
                            let rows = walk(text, words, Some(w)).build().fetch_all(&self.pool).await?;
                            if rows.len() as i64 > limit {
                                return Ok::<_, StoreError>(rows);
                            }
                            Ok(ranges(text, words, None).build().fetch_all(&self.pool).await?)
                        };
                        match plan {
                            SearchPlan::Walk => walk(text, words, None).build().fetch_all(&self.pool).await?,
                            SearchPlan::Ranges => ranges(text, words, None).build().fetch_all(&self.pool).await?,
                            SearchPlan::Window(w) => window(w.max(1)).await?,
                            SearchPlan::Auto => {
                                // Each range counted in its index, up to SEARCH_WALK_AFTER rows
                                // and no further.
                                let mut q = Q::new("select count(*) from (select 1 from operations o where ");
                                range(&mut q, key, text);
                                q.push(" limit ").push_bind(SEARCH_WALK_AFTER).push(") k");
                                let keys: i64 = q.build_query_scalar().fetch_one(&self.pool).await?;
                                let mut rarest: Option<(usize, i64)> = None;
                                for (i, w) in words.iter().enumerate() {
                                    let mut q = Q::new("select count(*) from (select 1 from operation_names n where ");
                                    range(&mut q, "n.word", w);
                                    q.push(" limit ").push_bind(SEARCH_WALK_AFTER).push(") w");
                                    let n: i64 = q.build_query_scalar().fetch_one(&self.pool).await?;
                                    if rarest.is_none_or(|(_, m)| n < m) {
                                        rarest = Some((i, n));
                                    }
                                }
                                let dense = |n: i64| n >= SEARCH_WALK_AFTER;
                                if dense(keys) || rarest.is_some_and(|(_, n)| dense(n)) {
                                    window(SEARCH_WINDOW).await?
                                } else {
                                    ranges(text, words, rarest.map(|(i, _)| i)).build().fetch_all(&self.pool).await?
                                }
                            }
                        }
                    }
                };
                let mut hits = rows
                    .iter()
                    .map(|r| {
                        let operation_id: String = r.try_get("operation_id")?;
                        let crm_id: Option<String> = r.try_get("crm_id")?;
                        let matched = match query {
                            SearchQuery::Phone(_) => MatchedField::Phone,
                            SearchQuery::Email(_) => MatchedField::Email,
                            SearchQuery::Text { text, .. } if operation_id.starts_with(text.as_str()) => {
                                MatchedField::OperationId
                            }
                            SearchQuery::Text { text, .. } if crm_id.as_deref() == Some(text.as_str()) => {
                                MatchedField::CrmId
                            }
                            SearchQuery::Text { .. } => MatchedField::Name,
                        };
                        Ok(SearchHit {
                            operation_id,
                            source: r.try_get("source")?,
                            status: r.try_get::<String, _>("status")?.parse().map_err(corrupt)?,
                            created_at: r.try_get("created_at")?,
                            updated_at: r.try_get("updated_at")?,
                            crm_id,
                            review_reason: parse_opt(r.try_get("review_reason")?)?,
                            open_case_id: r.try_get("open_case_id")?,
                            name: r.try_get("contact_name")?,
                            phone: r.try_get("contact_phone")?,
                            email: r.try_get("contact_email")?,
                            matched,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let next = (hits.len() as i64 > limit).then(|| {
                    hits.truncate(limit as usize);
                    let last = &hits[hits.len() - 1];
                    SearchCursor { created_at: last.created_at, operation_id: last.operation_id.clone() }
                });
                Ok(SearchPage { hits, next })
            }
        }

        #[async_trait::async_trait]
        impl $crate::Upkeep for $store {
            async fn ping(&self) -> Result<()> {
                sqlx::query("select 1").execute(&self.pool).await?;
                Ok(())
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
                ops::retention::purge_batch(self.write().await?, finished_before, batch, now).await
            }

            async fn pull_mark(&self, source: &str) -> Result<Option<String>> {
                Ok(sqlx::query_scalar("select mark from pull_cursors where source = $1")
                    .bind(source)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn save_pull_mark(&self, source: &str, mark: &str, now: DateTime<Utc>) -> Result<()> {
                sqlx::query(
                    "insert into pull_cursors (source, mark, updated_at) values ($1, $2, $3) \
                     on conflict (source) do update set mark = excluded.mark, \
                     updated_at = excluded.updated_at",
                )
                .bind(source)
                .bind(mark)
                .bind(now)
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
                if $backend != $crate::Backend::Postgres {
                    return Ok(0); // one writer, one shard: nothing to fold
                }
                // Folds the shards of slots before `before` into shard 0, one transaction.
                let slot = before.timestamp().div_euclid(SLOT_SECONDS);
                let done = sqlx::query(
                    "with moved as (delete from metric_series where slot < $1 and shard <> 0 \
                       returning slot, metric, label, value) \
                     insert into metric_series (slot, metric, label, shard, value) \
                     select slot, metric, label, 0, sum(value) from moved group by slot, metric, label \
                     on conflict (slot, metric, label, shard) \
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
                       returning metric, label, label2, value) \
                     insert into metric_counters (metric, label, label2, shard, value) \
                     select metric, label, label2, 0, sum(value) from moved \
                     group by metric, label, label2 \
                     on conflict (metric, label, label2, shard) \
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
pub(super) use sql_store;

/// `text` with LIKE's wildcards and the escape character escaped (for `escape '\'`).
pub(crate) fn like_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
