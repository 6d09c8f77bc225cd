//! The store's logic, written once for both backends.
//!
//! `sql_store!` expands to the [`Store`](super::Store) implementation for one sqlx
//! backend. The SQL is shared text (both backends accept `$n` placeholders); the few
//! places where the dialects differ are passed in by the backend module: how a write
//! transaction begins, how a row is locked, how due work is picked without two workers
//! taking the same row, and how seconds between two stored times are computed. Changes
//! to an operation are made on the Rust value under the row lock and written back with
//! one `update`, so the state machine lives in Rust and is checked by `Status::check`.

/// Columns of `operations`, in the order `op_from_row` reads them by name.
pub(super) const OP_COLUMNS: &str = "operation_id, source, status, payload_hash, payload, crm_id, \
    crm_link, attempts, last_error, last_error_class, review_reason, lease_owner, lease_token, \
    lease_expires_at, next_attempt_at, retry_grants, verify_first, finished_token, quiet_after, contact_phone, \
    contact_email, event_time, version, created_at, updated_at, purged_at";

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

pub(super) const CASE_COLUMNS: &str = "c.id, c.operation_id, o.source, c.reason, o.status, \
    c.opened_at, c.resolved_at, c.resolution, c.resolved_by, c.comment, c.delivery_id, c.detail, \
    o.version";

macro_rules! sql_store {
    (
        store: $store:ident,
        db: $db:ty,
        row: $row:ty,
        backend: $backend:literal,
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
        use serde_json::{json, Value};
        use sqlx::Row;

        use $crate::domain::{ErrorClass, MatchRule, OperationId, Resolution, ReviewReason, Status};
        use $crate::store::sql::{CASE_COLUMNS, OP_COLUMNS, PICK_DUE, PICK_STALE};
        use $crate::store::*;

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

        /// The operation together with the lease token it carries (not part of
        /// `Operation`: only the store compares tokens).
        struct Locked {
            op: Operation,
            lease_token: Option<String>,
            /// The token of the last attempt whose outcome was recorded.
            finished_token: Option<String>,
            /// Until when a create sent under the last lease may still land.
            quiet_after: Option<DateTime<Utc>>,
            /// `version` as read, to write back under.
            read_version: i64,
        }

        async fn lock_operation(tx: &mut Tx, id: &str) -> Result<Option<Locked>> {
            let sql = format!(
                "select {OP_COLUMNS} from operations where operation_id = $1{}",
                $lock_row
            );
            let row = sqlx::query(&sql).bind(id).fetch_optional(&mut **tx).await?;
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

        /// Journals one delivery and claims its key, inside the caller's write transaction
        /// (the backend decides how transactions are grouped: see `record_delivery`).
        async fn record_in(tx: &mut Tx, d: &NewDelivery) -> Result<DeliveryRecord> {
            let id = d.operation_id.as_str().to_owned();
            let now = d.received_at;
            let outcome;
            let delivery_id;
            if insert_operation(tx, &id, &d, "worker", now).await? {
                delivery_id = insert_delivery(tx, &d, "new").await?;
                let event = NewEvent::new(
                    "delivery",
                    json!({"delivery_id": delivery_id, "outcome": "new", "payload_hash": d.payload_hash}),
                );
                append(tx, &id, "gateway", event, now).await?;
                // The common path (a plain new lead) stops here, without reading the
                // row back: four statements per delivery.
                let mut status = Status::Received;
                if let Some(reason) = d.review {
                    let mut l = must_lock(tx, &id).await?;
                    open_case(tx, &mut l, reason, Some(delivery_id), "gateway", json!({}), now)
                        .await?;
                    save(tx, &mut l, now).await?;
                    status = l.op.status;
                } else if let Some(m) = d.matching {
                    if let Some(mut l) = match_contacts(tx, &id, &d.contact, m, now).await? {
                        save(tx, &mut l, now).await?;
                        status = l.op.status;
                    }
                }
                outcome = DeliveryOutcome::New { status };
            } else {
                let mut l = must_lock(tx, &id).await?;
                if l.op.payload_hash == d.payload_hash.as_str() {
                    delivery_id = insert_delivery(tx, &d, "duplicate").await?;
                    let event = NewEvent::new(
                        "delivery",
                        json!({"delivery_id": delivery_id, "outcome": "duplicate"}),
                    );
                    append(tx, &id, "gateway", event, now).await?;
                    outcome = DeliveryOutcome::Duplicate {
                        status: l.op.status,
                        crm_id: l.op.crm_id.clone(),
                    };
                } else {
                    delivery_id = insert_delivery(tx, &d, "conflict").await?;
                    let event = NewEvent {
                        kind: "delivery",
                        error_class: Some(ErrorClass::Conflict),
                        detail: json!({"delivery_id": delivery_id, "outcome": "conflict",
                            "payload_hash": d.payload_hash, "original_hash": l.op.payload_hash}),
                    };
                    append(tx, &id, "gateway", event, now).await?;
                    let case_id = open_case(
                        tx,
                        &mut l,
                        ReviewReason::PayloadConflict,
                        Some(delivery_id),
                        "gateway",
                        json!({"delivery_id": delivery_id}),
                        now,
                    )
                    .await?;
                    save(tx, &mut l, now).await?;
                    outcome = DeliveryOutcome::Conflict {
                        status: l.op.status,
                        case_id,
                    };
                }
            }
            Ok(DeliveryRecord {
                delivery_id,
                outcome,
            })
        }

        /// Records `deliveries` in order in the write transaction `tx` and commits it: all of
        /// them or, on the first error, none.
        async fn record_all<'a>(
            mut tx: Tx,
            deliveries: impl IntoIterator<Item = &'a NewDelivery>,
        ) -> Result<Vec<DeliveryRecord>> {
            let mut records = vec![];
            for d in deliveries {
                records.push(record_in(&mut tx, d).await?);
            }
            tx.commit().await?;
            Ok(records)
        }

        /// Writes back every mutable column of a locked operation and bumps its version.
        async fn save(tx: &mut Tx, l: &mut Locked, now: DateTime<Utc>) -> Result<()> {
            let op = &mut l.op;
            op.version = l.read_version + 1;
            op.updated_at = now;
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
            .bind(now)
            .bind(op.operation_id.as_str())
            .bind(l.read_version)
            .bind(op.verify_first)
            .bind(&l.finished_token)
            .bind(l.quiet_after)
            .execute(&mut **tx)
            .await?;
            if done.rows_affected() != 1 {
                // Unreachable while the row lock is held; kept as a tripwire.
                return Err(StoreError::StaleVersion {
                    expected: l.read_version,
                    current: -1,
                });
            }
            l.read_version = op.version;
            Ok(())
        }

        async fn append(
            tx: &mut Tx,
            operation_id: &str,
            actor: &str,
            event: NewEvent,
            now: DateTime<Utc>,
        ) -> Result<()> {
            sqlx::query(
                "insert into timeline (operation_id, at, kind, actor, error_class, detail) \
                 values ($1, $2, $3, $4, $5, $6)",
            )
            .bind(operation_id)
            .bind(now)
            .bind(event.kind)
            .bind(actor)
            .bind(event.error_class.map(|c| c.as_str()))
            .bind(event.detail.to_string())
            .execute(&mut **tx)
            .await?;
            Ok(())
        }

        /// Changes the status, checked against the one transition table, and records the
        /// change on the timeline.
        async fn set_status(
            tx: &mut Tx,
            l: &mut Locked,
            to: Status,
            actor: &str,
            now: DateTime<Utc>,
        ) -> Result<()> {
            let from = l.op.status;
            from.check(to)?;
            l.op.status = to;
            if to != Status::NeedsReview {
                l.op.review_reason = None;
            }
            let event = NewEvent::new("status_changed", json!({"from": from, "to": to}));
            append(tx, l.op.operation_id.as_str(), actor, event, now).await
        }

        fn clear_lease(l: &mut Locked) {
            l.lease_token = None;
            l.op.lease_owner = None;
            l.op.lease_expires_at = None;
        }

        /// Opens a review case on a locked operation. At most one case that is not a
        /// payload conflict is open per operation: while one is, a new reason to review
        /// is added to that case's timeline (`review_noted`) and its id returned. Payload
        /// conflicts always get a case of their own (each concerns another delivery).
        async fn open_case(
            tx: &mut Tx,
            l: &mut Locked,
            reason: ReviewReason,
            delivery_id: Option<i64>,
            actor: &str,
            detail: Value,
            now: DateTime<Utc>,
        ) -> Result<i64> {
            if reason != ReviewReason::PayloadConflict {
                let open: Option<i64> = sqlx::query_scalar(
                    "select id from review_cases where operation_id = $1 and resolved_at is null \
                     and reason <> 'payload_conflict' order by id limit 1",
                )
                .bind(l.op.operation_id.as_str())
                .fetch_optional(&mut **tx)
                .await?;
                if let Some(id) = open {
                    let event = NewEvent::new(
                        "review_noted",
                        json!({"case_id": id, "reason": reason, "detail": detail}),
                    );
                    append(tx, l.op.operation_id.as_str(), actor, event, now).await?;
                    if !l.op.status.is_final() && l.op.status != Status::NeedsReview {
                        set_status(tx, l, Status::NeedsReview, actor, now).await?;
                        l.op.review_reason = Some(reason);
                    }
                    return Ok(id);
                }
            }
            let id: i64 = sqlx::query_scalar(
                "insert into review_cases (operation_id, reason, opened_at, delivery_id, detail) \
                 values ($1, $2, $3, $4, $5) returning id",
            )
            .bind(l.op.operation_id.as_str())
            .bind(reason.as_str())
            .bind(now)
            .bind(delivery_id)
            .bind(detail.to_string())
            .fetch_one(&mut **tx)
            .await?;
            let event = NewEvent::new(
                "review_opened",
                json!({"case_id": id, "reason": reason, "detail": detail}),
            );
            append(tx, l.op.operation_id.as_str(), actor, event, now).await?;
            // A final operation stays as it is (a conflict on a completed lead changes
            // nothing in the CRM); anything else waits for the person.
            if !l.op.status.is_final() && l.op.status != Status::NeedsReview {
                set_status(tx, l, Status::NeedsReview, actor, now).await?;
                l.op.review_reason = Some(reason);
            }
            Ok(id)
        }

        async fn insert_delivery(
            tx: &mut Tx,
            d: &NewDelivery,
            outcome: &str,
        ) -> Result<i64> {
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
            .fetch_one(&mut **tx)
            .await?)
        }

        /// Insert-if-absent on the unique key: true when this call created the operation.
        async fn insert_operation(
            tx: &mut Tx,
            id: &str,
            d: &NewDelivery,
            executor: &str,
            now: DateTime<Utc>,
        ) -> Result<bool> {
            let inserted = sqlx::query(
                "insert into operations (operation_id, source, status, payload_hash, payload, \
                 contact_phone, contact_email, event_time, executor, next_attempt_at, created_at, \
                 updated_at) \
                 values ($1, $2, 'received', $3, $4, $5, $6, $7, $9, $8, $8, $8) \
                 on conflict (operation_id) do nothing returning version",
            )
            .bind(id)
            .bind(&d.source)
            .bind(d.payload_hash.as_str())
            .bind(d.payload.to_string())
            .bind(&d.contact.phone)
            .bind(&d.contact.email)
            .bind(d.event_time)
            .bind(now)
            .bind(executor)
            .fetch_optional(&mut **tx)
            .await?;
            Ok(inserted.is_some())
        }

        async fn must_lock(tx: &mut Tx, id: &str) -> Result<Locked> {
            lock_operation(tx, id)
                .await?
                .ok_or_else(|| StoreError::UnknownOperation(id.to_owned()))
        }

        /// Puts a claimed operation back in the hands of `owner` with a fresh lease.
        fn take_lease(
            l: &mut Locked,
            owner: &str,
            lease_for: std::time::Duration,
            now: DateTime<Utc>,
        ) -> Lease {
            let lease = Lease {
                operation_id: l.op.operation_id.clone(),
                token: uuid::Uuid::new_v4().to_string(),
                owner: owner.to_owned(),
                expires_at: after(now, lease_for),
            };
            l.lease_token = Some(lease.token.clone());
            l.op.lease_owner = Some(owner.to_owned());
            l.op.lease_expires_at = Some(lease.expires_at);
            lease
        }

        fn token_hash(token: &str) -> String {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(token.as_bytes()))
        }

        /// Remembers that `lease` was granted (its token's hash), for late reports.
        async fn record_grant(tx: &mut Tx, lease: &Lease, now: DateTime<Utc>) -> Result<()> {
            sqlx::query(
                "insert into lease_grants (operation_id, token_sha256, granted_at) values ($1, $2, $3)",
            )
            .bind(lease.operation_id.as_str())
            .bind(token_hash(&lease.token))
            .bind(now)
            .execute(&mut **tx)
            .await?;
            Ok(())
        }

        async fn was_granted(tx: &mut Tx, id: &OperationId, token: &str) -> Result<bool> {
            let n: i64 = sqlx::query_scalar(
                "select count(*) from lease_grants where operation_id = $1 and token_sha256 = $2",
            )
            .bind(id.as_str())
            .bind(token_hash(token))
            .fetch_one(&mut **tx)
            .await?;
            Ok(n > 0)
        }

        /// Starts an attempt on a locked `received` operation: `in_progress`, attempts
        /// counted, a person's grant consumed, a fresh lease — persisted in `tx`.
        async fn claim_locked(
            tx: &mut Tx,
            l: &mut Locked,
            owner: &str,
            lease_for: std::time::Duration,
            now: DateTime<Utc>,
        ) -> Result<Claim> {
            let granted = l.op.retry_grants > 0;
            l.op.retry_grants = (l.op.retry_grants - 1).max(0);
            l.op.attempts += 1;
            l.op.next_attempt_at = None;
            let lease = take_lease(l, owner, lease_for, now);
            record_grant(tx, &lease, now).await?;
            let event = NewEvent::new(
                "claimed",
                json!({"attempt": l.op.attempts, "lease_expires_at": lease.expires_at, "granted": granted}),
            );
            append(tx, l.op.operation_id.as_str(), owner, event, now).await?;
            set_status(tx, l, Status::InProgress, owner, now).await?;
            save(tx, l, now).await?;
            Ok(Claim {
                operation: l.op.clone(),
                lease,
                granted,
            })
        }

        /// Applies the source's matching rule to a new operation whose contact matches
        /// earlier operations; true when the operation changed.
        async fn match_contacts(
            tx: &mut Tx,
            id: &str,
            contact: &ContactKeys,
            m: Matching,
            now: DateTime<Utc>,
        ) -> Result<Option<Locked>> {
            if contact.phone.is_none() && contact.email.is_none() {
                return Ok(None);
            }
            if !$lock_contact.is_empty() {
                // Two concurrent intakes sharing a phone would each look before the other
                // committed and see nothing. The second waits here until the first commits
                // and then sees it, as under SQLite's single writer. Keys in one order: no
                // deadlock between a phone and an e-mail lock.
                let mut keys: Vec<i64> = [("phone", &contact.phone), ("email", &contact.email)]
                    .into_iter()
                    .filter_map(|(kind, v)| v.as_deref().map(|v| contact_lock_key(kind, v)))
                    .collect();
                keys.sort_unstable();
                keys.dedup();
                for key in keys {
                    sqlx::query($lock_contact).bind(key).execute(&mut **tx).await?;
                }
            }
            let rows: Vec<(String, Option<String>, String)> = sqlx::query_as(
                // Newest first from each index (contact, created_at), so a phone shared by
                // thousands of leads (a switchboard) costs ten index entries, not thousands.
                "select operation_id, crm_id, status from ( \
                   select * from (select operation_id, crm_id, status, created_at from operations \
                     where contact_phone = $3 and created_at >= $2 and operation_id <> $1 \
                     order by created_at desc limit 10) p \
                   union \
                   select * from (select operation_id, crm_id, status, created_at from operations \
                     where contact_email = $4 and created_at >= $2 and operation_id <> $1 \
                     order by created_at desc limit 10) e \
                 ) m order by created_at desc limit 10",
            )
            .bind(id)
            .bind(m.since)
            .bind(&contact.phone)
            .bind(&contact.email)
            .fetch_all(&mut **tx)
            .await?;
            if rows.is_empty() {
                return Ok(None);
            }
            let matches: Vec<Value> = rows
                .iter()
                .map(|(id, crm, status)| json!({"operation_id": id, "crm_id": crm, "status": status}))
                .collect();
            let event = NewEvent::new("contact_match", json!({"rule": m.rule, "matches": matches}));
            append(tx, id, "gateway", event, now).await?;
            if m.rule == MatchRule::Create {
                return Ok(None);
            }
            let mut locked = must_lock(tx, id).await?;
            let l = &mut locked;
            let linked = rows.iter().find_map(|(_, crm, _)| crm.clone());
            match (m.rule, linked) {
                (MatchRule::Link, Some(crm_id)) => {
                    let event = NewEvent::new("linked", json!({"crm_id": crm_id, "by_rule": "link"}));
                    append(tx, id, "gateway", event, now).await?;
                    l.op.crm_id = Some(crm_id);
                    l.op.crm_link = Some("linked".into());
                    set_status(tx, l, Status::Completed, "gateway", now).await?;
                }
                // Nothing to link to yet (the earlier lead is still on its way): a
                // person decides rather than a guess.
                _ => {
                    let detail = json!({"matches": matches});
                    open_case(tx, l, ReviewReason::CrossChannelMatch, None, "gateway", detail, now)
                        .await?;
                }
            }
            Ok(Some(locked))
        }

        async fn connector_paused(tx: &mut Tx, name: &str) -> Result<bool> {
            let state: Option<String> =
                sqlx::query_scalar("select state from connectors where name = $1")
                    .bind(name)
                    .fetch_optional(&mut **tx)
                    .await?;
            Ok(state.as_deref() == Some("paused"))
        }

        /// Where a payload-conflict resolution leaves the original operation.
        fn unblocked_status(l: &Locked) -> Option<Status> {
            let op = &l.op;
            if op.status != Status::NeedsReview {
                return None;
            }
            Some(if op.crm_id.is_some() {
                Status::Completed
            } else if l.lease_token.is_some() {
                // An attempt was in flight when the conflict arrived: its worker reports
                // the outcome, or, once the lease runs out, the reconciler asks the CRM.
                // Never a blind new attempt.
                Status::InProgress
            } else {
                Status::Received
            })
        }

        #[async_trait::async_trait]
        impl Store for $store {
            fn backend(&self) -> &'static str {
                $backend
            }

            fn now(&self) -> DateTime<Utc> {
                self.clock_now()
            }

            async fn ping(&self) -> Result<()> {
                sqlx::query("select 1").execute(&self.pool).await?;
                Ok(())
            }

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

            async fn claim_due(
                &self,
                connector: &str,
                owner: &str,
                lease_for: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Option<Claim>> {
                let mut tx = self.begin_write().await?;
                let sql = format!("{PICK_DUE}{}", $skip_locked);
                let picked: Option<String> = sqlx::query_scalar(&sql)
                    .bind(now)
                    .bind(connector)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(id) = picked else {
                    return Ok(None);
                };
                let mut l = must_lock(&mut tx, &id).await?;
                let claim = claim_locked(&mut tx, &mut l, owner, lease_for, now).await?;
                tx.commit().await?;
                Ok(Some(claim))
            }

            async fn claim_stale(
                &self,
                connector: &str,
                owner: &str,
                lease_for: std::time::Duration,
                now: DateTime<Utc>,
            ) -> Result<Option<Claim>> {
                let mut tx = self.begin_write().await?;
                let sql = format!("{PICK_STALE}{}", $skip_locked);
                let picked: Option<String> = sqlx::query_scalar(&sql)
                    .bind(now)
                    .bind(connector)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(id) = picked else {
                    return Ok(None);
                };
                let mut l = must_lock(&mut tx, &id).await?;
                let previous = json!({"previous_owner": l.op.lease_owner, "expired_at": l.op.lease_expires_at});
                let lease = take_lease(&mut l, owner, lease_for, now);
                record_grant(&mut tx, &lease, now).await?;
                let event = NewEvent::new("lease_taken_over", previous);
                append(&mut tx, &id, owner, event, now).await?;
                save(&mut tx, &mut l, now).await?;
                tx.commit().await?;
                Ok(Some(Claim {
                    operation: l.op,
                    lease,
                    granted: false,
                }))
            }

            async fn start_attempt(
                &self,
                lease: &Lease,
                lease_for: std::time::Duration,
                settle: std::time::Duration,
                events: Vec<NewEvent>,
                now: DateTime<Utc>,
            ) -> Result<Lease> {
                let mut tx = self.begin_write().await?;
                let id = lease.operation_id.as_str();
                let mut l = must_lock(&mut tx, id).await?;
                // A holder whose lease ran out never starts the call, even if nobody has
                // taken the operation over yet: the reconciler may be about to.
                if l.lease_token.as_deref() != Some(lease.token.as_str())
                    || l.op.status != Status::InProgress
                    || l.op.lease_expires_at.is_none_or(|t| t <= now)
                {
                    return Err(StoreError::LeaseLost(id.to_owned()));
                }
                for e in events {
                    append(&mut tx, id, &lease.owner, e, now).await?;
                }
                let expires_at = after(now, lease_for).max(l.op.lease_expires_at.unwrap_or(now));
                l.op.lease_expires_at = Some(expires_at);
                l.quiet_after = Some(after(expires_at, settle));
                save(&mut tx, &mut l, now).await?;
                tx.commit().await?;
                Ok(Lease {
                    expires_at,
                    ..lease.clone()
                })
            }

            async fn finish_attempt(
                &self,
                lease: &Lease,
                outcome: AttemptOutcome,
                events: Vec<NewEvent>,
                now: DateTime<Utc>,
            ) -> Result<Operation> {
                let mut tx = self.begin_write().await?;
                let id = lease.operation_id.as_str().to_owned();
                let actor = lease.owner.as_str();
                let mut l = must_lock(&mut tx, &id).await?;
                if l.finished_token.as_deref() == Some(lease.token.as_str()) {
                    let brings_id = match &outcome {
                        AttemptOutcome::Created { crm_id } | AttemptOutcome::Recovered { crm_id } => {
                            l.op.crm_id.as_deref() != Some(crm_id.as_str())
                        }
                        _ => false,
                    };
                    if !brings_id {
                        // Recorded before: the answer to that commit was lost and the worker
                        // reported again. Nothing to write.
                        return Ok(l.op);
                    }
                    // A second report under a finished token that brings a CRM id (an
                    // integration reported `fail`, then learnt the id): never dropped.
                    for e in events {
                        append(&mut tx, &id, actor, e, now).await?;
                    }
                    late_outcome(&mut tx, &mut l, actor, outcome, now).await?;
                    tx.commit().await?;
                    return Ok(l.op);
                }
                for e in events {
                    append(&mut tx, &id, actor, e, now).await?;
                }
                if l.lease_token.as_deref() != Some(lease.token.as_str()) {
                    // Someone else owns the operation now (the reconciler took over an
                    // expired lease, or a person resolved it). Only a token that once held
                    // it may still report; any other writes nothing.
                    if !was_granted(&mut tx, &lease.operation_id, &lease.token).await? {
                        // Not a late report: a token never handed out for this operation
                        // (the claim API takes tokens from anyone). Nothing is written.
                        return Err(StoreError::UnknownLease(id));
                    }
                    late_outcome(&mut tx, &mut l, actor, outcome, now).await?;
                    tx.commit().await?;
                    return Err(StoreError::LeaseLost(id));
                }
                // A conflicting delivery may have blocked the operation while the attempt was
                // in flight: the outcome is recorded, the status stays for the person.
                let blocked = l.op.status != Status::InProgress;
                clear_lease(&mut l);
                l.finished_token = Some(lease.token.clone());
                // Set again below by `Verify`; kept through a pause (the lookup still owes).
                if !matches!(outcome, AttemptOutcome::PauseConnector { .. }) {
                    l.op.verify_first = false;
                }
                // The call is over. Unless its outcome is unknown, nothing of it can land
                // later, and a person's grant need not wait.
                let unknown = match &outcome {
                    AttemptOutcome::Verify { .. } => true,
                    AttemptOutcome::Review { reason, failure, .. } => {
                        matches!(reason, ReviewReason::UncertainOutcome | ReviewReason::AmbiguousMatch)
                            || failure.as_ref().is_some_and(|f| f.class == ErrorClass::Uncertain)
                    }
                    _ => false,
                };
                if !unknown {
                    l.quiet_after = None;
                }
                let failure_event = |kind: &'static str, f: &Failure, extra: Value| {
                    let mut detail = json!({"class": f.class, "error": f.message});
                    if let (Value::Object(d), Value::Object(e)) = (&mut detail, extra) {
                        d.extend(e);
                    }
                    NewEvent { kind, error_class: Some(f.class), detail }
                };
                let record_failure = |l: &mut Locked, f: &Failure| {
                    l.op.last_error = Some(f.message.clone());
                    l.op.last_error_class = Some(f.class);
                };
                let target = match outcome {
                    AttemptOutcome::Created { crm_id } => {
                        let event = NewEvent::new("crm_created", json!({"crm_id": crm_id}));
                        append(&mut tx, &id, actor, event, now).await?;
                        l.op.crm_id = Some(crm_id);
                        l.op.crm_link = Some("created".into());
                        Some(Status::Completed)
                    }
                    AttemptOutcome::Recovered { crm_id } => {
                        let event = NewEvent::new("recovered", json!({"crm_id": crm_id}));
                        append(&mut tx, &id, actor, event, now).await?;
                        l.op.crm_id = Some(crm_id);
                        l.op.crm_link = Some("recovered".into());
                        Some(Status::Completed)
                    }
                    AttemptOutcome::Retry { failure, at } => {
                        let event = match &failure {
                            Some(f) => {
                                record_failure(&mut l, f);
                                failure_event("retry_scheduled", f, json!({"at": at}))
                            }
                            None => NewEvent::new("retry_scheduled", json!({"at": at})),
                        };
                        append(&mut tx, &id, actor, event, now).await?;
                        l.op.next_attempt_at = Some(at);
                        Some(Status::Received)
                    }
                    AttemptOutcome::Verify { failure, at } => {
                        let detail = json!({"at": at});
                        let event = match &failure {
                            Some(f) => {
                                record_failure(&mut l, f);
                                failure_event("verify_scheduled", f, detail)
                            }
                            None => NewEvent::new("verify_scheduled", detail),
                        };
                        append(&mut tx, &id, actor, event, now).await?;
                        l.op.next_attempt_at = Some(at);
                        l.op.verify_first = true;
                        Some(Status::Received)
                    }
                    AttemptOutcome::Terminal { failure } => {
                        record_failure(&mut l, &failure);
                        append(&mut tx, &id, actor, failure_event("failed", &failure, json!({})), now)
                            .await?;
                        Some(Status::FailedTerminal)
                    }
                    AttemptOutcome::Review { reason, failure, detail } => {
                        if let Some(f) = &failure {
                            record_failure(&mut l, f);
                        }
                        open_case(&mut tx, &mut l, reason, None, actor, detail, now).await?;
                        None
                    }
                    AttemptOutcome::PauseConnector { connector, failure } => {
                        record_failure(&mut l, &failure);
                        // The call never executed: it does not use up the retry budget.
                        l.op.attempts = (l.op.attempts - 1).max(0);
                        l.op.next_attempt_at = Some(now);
                        pause(&mut tx, &connector, &failure.message, actor, now).await?;
                        append(&mut tx, &id, actor,
                            failure_event("connector_paused", &failure, json!({"connector": connector})), now)
                            .await?;
                        let note = NewEvent::new(
                            "notification",
                            json!({"what": "connector_paused", "connector": connector}),
                        );
                        append(&mut tx, &id, actor, note, now).await?;
                        Some(Status::Received)
                    }
                };
                if let Some(to) = target {
                    if !blocked {
                        set_status(&mut tx, &mut l, to, actor, now).await?;
                        if to.is_final() {
                            let why = "the attempt's outcome settled the operation";
                            supersede_open_cases(&mut tx, &l, actor, None, why, now).await?;
                        }
                    }
                }
                save(&mut tx, &mut l, now).await?;
                tx.commit().await?;
                Ok(l.op)
            }

            async fn open_review(
                &self,
                operation_id: &OperationId,
                reason: ReviewReason,
                actor: &str,
                detail: Value,
                now: DateTime<Utc>,
            ) -> Result<i64> {
                let mut tx = self.begin_write().await?;
                let mut l = must_lock(&mut tx, operation_id.as_str()).await?;
                if l.op.lease_expires_at.is_some_and(|t| t > now) {
                    return Err(StoreError::InvalidAction(
                        "an attempt is in flight (its lease is live); wait for its outcome".into(),
                    ));
                }
                let id = open_case(&mut tx, &mut l, reason, None, actor, detail, now).await?;
                save(&mut tx, &mut l, now).await?;
                tx.commit().await?;
                Ok(id)
            }

            async fn resolve(&self, req: Resolve) -> Result<Resolved> {
                let mut tx = self.begin_write().await?;
                let now = req.now;
                let case_sql = format!(
                    "select id, operation_id, reason, resolved_at, resolved_by, delivery_id \
                     from review_cases where id = $1{}",
                    $lock_row
                );
                let case = sqlx::query(&case_sql)
                    .bind(req.case_id)
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or(StoreError::UnknownCase(req.case_id))?;
                if case.try_get::<Option<DateTime<Utc>>, _>("resolved_at")?.is_some() {
                    let by: Option<String> = case.try_get("resolved_by")?;
                    return Err(StoreError::CaseAlreadyResolved(
                        req.case_id,
                        by.unwrap_or_else(|| "someone".into()),
                    ));
                }
                let reason: ReviewReason = case
                    .try_get::<String, _>("reason")?
                    .parse()
                    .map_err(corrupt)?;
                let delivery_id: Option<i64> = case.try_get("delivery_id")?;
                let op_id: String = case.try_get("operation_id")?;
                let mut l = must_lock(&mut tx, &op_id).await?;
                if l.op.version != req.expected_version {
                    return Err(StoreError::StaleVersion {
                        expected: req.expected_version,
                        current: l.op.version,
                    });
                }
                let actor = req.actor.trim();
                if actor.is_empty() {
                    return Err(StoreError::InvalidAction("the operator's name is required".into()));
                }
                let invalid = |m: String| Err(StoreError::InvalidAction(m));
                let mut new_operation = None;
                let mut crm_id_set = None;
                let target = match &req.action {
                    HumanAction::ConfirmCrmResult { crm_id } | HumanAction::LinkExisting { crm_id } => {
                        let crm_id = crm_id.trim();
                        if crm_id.is_empty() {
                            return invalid("a CRM id is required".into());
                        }
                        // Two entities under one key (a late answer, or a lookup that found
                        // several): the person says which one stands, even on a completed
                        // operation.
                        if l.op.status == Status::Completed && reason != ReviewReason::AmbiguousMatch {
                            return invalid(format!(
                                "the operation is already completed with CRM id {}",
                                l.op.crm_id.as_deref().unwrap_or("?")
                            ));
                        }
                        // On a completed operation the entities stay counted as Leadgate
                        // made them: only which id stands changes.
                        let counted = matches!(l.op.crm_link.as_deref(), Some("created" | "recovered"));
                        if l.op.status != Status::Completed && !counted {
                            l.op.crm_link = Some(
                                if matches!(req.action, HumanAction::LinkExisting { .. }) { "linked" } else { "confirmed" }
                                    .into(),
                            );
                        }
                        l.op.crm_id = Some(crm_id.to_owned());
                        crm_id_set = Some(crm_id.to_owned());
                        clear_lease(&mut l);
                        Some(Status::Completed)
                    }
                    HumanAction::AuthorizeRetry => {
                        if !matches!(l.op.status, Status::NeedsReview | Status::FailedTerminal) {
                            return invalid(format!(
                                "a retry can only be authorized for an operation in review or failed, not `{}`",
                                l.op.status
                            ));
                        }
                        if l.op.lease_expires_at.is_some_and(|t| t > now) {
                            return invalid("an attempt is still in flight; wait for its outcome".into());
                        }
                        if reason == ReviewReason::PayloadConflict {
                            return invalid("a payload conflict is resolved by keeping the original or accepting the new data".into());
                        }
                        // Never a second create on top of a known result.
                        if let Some(crm_id) = &l.op.crm_id {
                            return invalid(format!(
                                "the operation already has CRM id {crm_id}; a retry would create a second entity"
                            ));
                        }
                        if reason == ReviewReason::AmbiguousMatch {
                            return invalid("the CRM already holds several entities under this key; confirm the one that stands instead of creating another".into());
                        }
                        if l.op.payload.is_none() || l.op.purged_at.is_some() {
                            return invalid("the lead's data was removed by retention; a retry would create an empty lead".into());
                        }
                        l.op.retry_grants = 1;
                        // A create sent under an earlier lease may still land: the granted
                        // attempt is not due before its settle window is over.
                        l.op.next_attempt_at = Some(l.quiet_after.map_or(now, |q| q.max(now)));
                        // An earlier attempt may have landed meanwhile: the granted attempt
                        // looks the key up before it creates.
                        l.op.verify_first = l.op.attempts > 0;
                        clear_lease(&mut l);
                        Some(Status::Received)
                    }
                    HumanAction::KeepOriginal | HumanAction::AcceptAsNew => {
                        if reason != ReviewReason::PayloadConflict {
                            return invalid(format!(
                                "keep original / accept as new apply to payload conflicts, not `{reason}`"
                            ));
                        }
                        if req.action == HumanAction::AcceptAsNew {
                            let delivery_id = delivery_id
                                .ok_or_else(|| corrupt("payload conflict without its delivery"))?;
                            new_operation = Some(
                                accept_delivery_as_new(&mut tx, &l.op, delivery_id, actor, req.case_id, now)
                                    .await?,
                            );
                        }
                        unblocked_status(&l)
                    }
                    HumanAction::CreateNew => {
                        if !matches!(reason, ReviewReason::CrossChannelMatch | ReviewReason::LateDuplicate) {
                            return invalid(format!(
                                "create new applies to cross-channel matches and late duplicates, not `{reason}`"
                            ));
                        }
                        if l.op.status != Status::NeedsReview || l.op.attempts > 0 {
                            return invalid("this operation was already attempted; use confirm, link or authorize retry".into());
                        }
                        l.op.next_attempt_at = Some(now);
                        Some(Status::Received)
                    }
                    HumanAction::Reject => {
                        if l.op.status != Status::NeedsReview {
                            return invalid(format!("only an operation in review can be rejected, not `{}`", l.op.status));
                        }
                        // The CRM call may still create the lead: a failed operation holding
                        // a crm_id. Wait for its outcome (or for the lease to run out).
                        if let Some(until) = l.op.lease_expires_at.filter(|t| *t > now) {
                            return Err(StoreError::AttemptInFlight(op_id.clone(), until));
                        }
                        // A report under the ran-out lease is then only kept on the timeline.
                        clear_lease(&mut l);
                        // The failed list shows why, as it does for a CRM's refusal.
                        l.op.last_error = Some(match &req.comment {
                            Some(c) => format!("rejected by {actor}: {c}"),
                            None => format!("rejected by {actor}"),
                        });
                        Some(Status::FailedTerminal)
                    }
                };
                let resolution = req.action.resolution();
                sqlx::query(
                    "update review_cases set resolved_at = $1, resolution = $2, resolved_by = $3, \
                     comment = $4 where id = $5",
                )
                .bind(now)
                .bind(resolution.as_str())
                .bind(actor)
                .bind(&req.comment)
                .bind(req.case_id)
                .execute(&mut *tx)
                .await?;
                let event = NewEvent::new(
                    "human_action",
                    json!({"case_id": req.case_id, "action": resolution, "comment": req.comment,
                           "crm_id": crm_id_set, "new_operation": new_operation}),
                );
                append(&mut tx, &op_id, actor, event, now).await?;
                let others_open: i64 = sqlx::query_scalar(
                    "select count(*) from review_cases where operation_id = $1 and resolved_at is null",
                )
                .bind(&op_id)
                .fetch_one(&mut *tx)
                .await?;
                if let Some(to) = target {
                    // Another open case still holds the operation, unless the person
                    // settled the CRM result itself.
                    if (others_open == 0 || to == Status::Completed) && l.op.status != to {
                        set_status(&mut tx, &mut l, to, actor, now).await?;
                    }
                }
                if l.op.status.is_final() {
                    let why = format!("case #{} settled the operation", req.case_id);
                    supersede_open_cases(&mut tx, &l, actor, Some(req.case_id), &why, now).await?;
                }
                save(&mut tx, &mut l, now).await?;
                tx.commit().await?;
                Ok(Resolved {
                    operation: l.op,
                    new_operation,
                })
            }

            async fn operation(&self, id: &OperationId) -> Result<Option<Operation>> {
                let sql = format!("select {OP_COLUMNS} from operations where operation_id = $1");
                let row = sqlx::query(&sql)
                    .bind(id.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map(op_from_row).transpose()
            }

            async fn timeline(&self, id: &OperationId) -> Result<Vec<TimelineEvent>> {
                let rows = sqlx::query(
                    "select id, at, kind, actor, error_class, detail from timeline \
                     where operation_id = $1 order by id",
                )
                .bind(id.as_str())
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|r| {
                        Ok(TimelineEvent {
                            id: r.try_get("id")?,
                            at: r.try_get("at")?,
                            kind: r.try_get("kind")?,
                            actor: r.try_get("actor")?,
                            error_class: r.try_get("error_class")?,
                            detail: json_text(r.try_get("detail")?)?.unwrap_or(Value::Null),
                        })
                    })
                    .collect()
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

            async fn compact_metrics(&self, before: DateTime<Utc>) -> Result<u64> {
                if $backend != "postgres" {
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

            async fn note(
                &self,
                id: &OperationId,
                actor: &str,
                event: NewEvent,
                now: DateTime<Utc>,
            ) -> Result<()> {
                let mut tx = self.begin_write().await?;
                must_lock(&mut tx, id.as_str()).await?;
                append(&mut tx, id.as_str(), actor, event, now).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn connector(&self, name: &str) -> Result<Option<Connector>> {
                Ok(self.connectors().await?.into_iter().find(|c| c.name == name))
            }

            async fn connectors(&self) -> Result<Vec<Connector>> {
                let rows = sqlx::query(
                    "select name, state, reason, since, changed_by from connectors order by name",
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
                        })
                    })
                    .collect()
            }

            async fn pause_connector(
                &self,
                name: &str,
                reason: &str,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<()> {
                let mut tx = self.begin_write().await?;
                pause(&mut tx, name, reason, actor, now).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn resume_connector(
                &self,
                name: &str,
                actor: &str,
                now: DateTime<Utc>,
            ) -> Result<bool> {
                let mut tx = self.begin_write().await?;
                let done = sqlx::query(
                    "update connectors set state = 'active', reason = null, since = $1, \
                     changed_by = $2 where name = $3 and state = 'paused'",
                )
                .bind(now)
                .bind(actor)
                .bind(name)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
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
                Ok(m)
            }

            async fn purge_batch(
                &self,
                finished_before: DateTime<Utc>,
                batch: i64,
                now: DateTime<Utc>,
            ) -> Result<PurgeReport> {
                let mut tx = self.begin_write().await?;
                let ids: Vec<String> = sqlx::query_scalar(
                    "select o.operation_id from operations o \
                     where o.status in ('completed', 'failed_terminal') and o.purged_at is null \
                     and o.updated_at < $1 and not exists (select 1 from review_cases c \
                       where c.operation_id = o.operation_id and c.resolved_at is null) \
                     order by o.updated_at limit $2",
                )
                .bind(finished_before)
                .bind(batch)
                .fetch_all(&mut *tx)
                .await?;
                let mut report = PurgeReport::default();
                for id in &ids {
                    // Checked again under the row lock: the pick above did not lock, and a
                    // conflicting delivery may have opened a case since. Whoever opens a
                    // case locks the row first, so none can open until this commits.
                    lock_operation(&mut tx, id).await?;
                    let still: i64 = sqlx::query_scalar(
                        "select count(*) from operations o where o.operation_id = $1 \
                         and o.status in ('completed', 'failed_terminal') and o.purged_at is null \
                         and o.updated_at < $2 and not exists (select 1 from review_cases c \
                           where c.operation_id = o.operation_id and c.resolved_at is null)",
                    )
                    .bind(id)
                    .bind(finished_before)
                    .fetch_one(&mut *tx)
                    .await?;
                    if still == 0 {
                        continue;
                    }
                    report.operations += 1;
                    sqlx::query(
                        "update operations set payload = null, contact_phone = null, \
                         contact_email = null, purged_at = $1 where operation_id = $2",
                    )
                    .bind(now)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                    report.deliveries += sqlx::query(
                        "update deliveries set raw_body = null, payload = null \
                         where operation_id = $1 and (raw_body is not null or payload is not null)",
                    )
                    .bind(id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    let event = NewEvent::new("purged", json!({"finished_before": finished_before}));
                    append(&mut tx, id, "retention", event, now).await?;
                }
                // Deliveries that came after their operation was purged (a late repeat or
                // conflict), once they are past retention themselves and no case is open.
                report.deliveries += sqlx::query(
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
                .execute(&mut *tx)
                .await?
                .rows_affected();
                // Refused deliveries never became operations; their bodies may still hold
                // personal data.
                report.deliveries += sqlx::query(
                    "update deliveries set raw_body = null, payload = null where id in \
                     (select id from deliveries where outcome = 'rejected' and received_at < $1 \
                      and (raw_body is not null or payload is not null) limit $2)",
                )
                .bind(finished_before)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                tx.commit().await?;
                Ok(report)
            }

            async fn claim_external(&self, c: ExternalClaim) -> Result<ExternalClaimOutcome> {
                retrying(|| self.claim_external_once(&c)).await
            }

            async fn expire_external_leases(&self, now: DateTime<Utc>) -> Result<u64> {
                let mut tx = self.begin_write().await?;
                let ids: Vec<String> = sqlx::query_scalar(
                    "select operation_id from operations where status = 'in_progress' \
                     and executor = 'external' and lease_expires_at <= $1 \
                     order by lease_expires_at limit 100",
                )
                .bind(now)
                .fetch_all(&mut *tx)
                .await?;
                let mut expired = 0;
                for id in &ids {
                    let Some(mut l) = lock_operation(&mut tx, id).await? else {
                        continue;
                    };
                    // Checked again under the lock: a late `complete` or another process's
                    // expiry may have come between the pick and the lock.
                    if l.op.status != Status::InProgress
                        || !l.op.lease_expires_at.is_some_and(|t| t <= now)
                    {
                        continue;
                    }
                    let detail = json!({"lease_expired_at": l.op.lease_expires_at, "owner": l.op.lease_owner});
                    // The lease token stays: a late `complete` from the integration is
                    // still recorded, for the person to confirm.
                    open_case(&mut tx, &mut l, ReviewReason::UncertainOutcome, None, "reconciler", detail, now)
                        .await?;
                    save(&mut tx, &mut l, now).await?;
                    expired += 1;
                }
                tx.commit().await?;
                Ok(expired)
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
                    .bind(now());
                if let Some(expected) = expected_version {
                    query = query.bind(expected);
                }
                let done = query.execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }
        }

        impl $store {
            /// One try of [`Store::claim_external`] (retried as a whole on a deadlock).
            async fn claim_external_once(&self, c: &ExternalClaim) -> Result<ExternalClaimOutcome> {
                let mut tx = self.begin_write().await?;
                let d = &c.delivery;
                let id = d.operation_id.as_str().to_owned();
                let now = d.received_at;
                let paused = connector_paused(&mut tx, &c.connector).await?;
                let created = insert_operation(&mut tx, &id, d, "external", now).await?;
                let mut l = must_lock(&mut tx, &id).await?;
                let outcome_name = if created {
                    "new"
                } else if l.op.payload_hash == d.payload_hash.as_str() {
                    "duplicate"
                } else {
                    "conflict"
                };
                let delivery_id = insert_delivery(&mut tx, d, outcome_name).await?;
                let mut event = NewEvent::new(
                    "delivery",
                    json!({"delivery_id": delivery_id, "outcome": outcome_name, "via": "claim_api"}),
                );
                if outcome_name == "conflict" {
                    event.error_class = Some(ErrorClass::Conflict);
                }
                append(&mut tx, &id, &c.owner, event, now).await?;
                let outcome = match (outcome_name, l.op.status) {
                    ("conflict", _) => {
                        let detail = json!({"delivery_id": delivery_id});
                        open_case(&mut tx, &mut l, ReviewReason::PayloadConflict, Some(delivery_id), &c.owner, detail, now)
                            .await?;
                        save(&mut tx, &mut l, now).await?;
                        ExternalClaimOutcome::Conflict
                    }
                    (_, Status::Completed) => ExternalClaimOutcome::Completed { crm_id: l.op.crm_id.clone() },
                    (_, Status::FailedTerminal) => ExternalClaimOutcome::Failed { last_error: l.op.last_error.clone() },
                    (_, Status::NeedsReview) => ExternalClaimOutcome::NeedsReview { reason: l.op.review_reason },
                    (_, Status::InProgress) => match l.op.lease_expires_at {
                        Some(until) if until > now => ExternalClaimOutcome::InFlight { until },
                        _ => {
                            let detail = json!({"lease_expired_at": l.op.lease_expires_at, "owner": l.op.lease_owner});
                            open_case(&mut tx, &mut l, ReviewReason::UncertainOutcome, None, &c.owner, detail, now)
                                .await?;
                            save(&mut tx, &mut l, now).await?;
                            ExternalClaimOutcome::NeedsReview { reason: Some(ReviewReason::UncertainOutcome) }
                        }
                    },
                    (_, Status::Received) => match l.op.next_attempt_at {
                        Some(at) if at > now => ExternalClaimOutcome::InFlight { until: at },
                        _ if paused => ExternalClaimOutcome::ConnectorPaused,
                        _ => {
                            // The integration's call may land until its lease ends, and (with
                            // no settle window known for it) as long again.
                            l.quiet_after = Some(after(after(now, c.lease_for), c.lease_for));
                            let claim = claim_locked(&mut tx, &mut l, &c.owner, c.lease_for, now).await?;
                            ExternalClaimOutcome::Claimed { attempts: claim.operation.attempts, lease: claim.lease }
                        }
                    },
                };
                tx.commit().await?;
                Ok(outcome)
            }
        }

        async fn pause(
            tx: &mut Tx,
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
            .bind(reason)
            .bind(now)
            .bind(actor)
            .execute(&mut **tx)
            .await?;
            Ok(())
        }

        /// An attempt's outcome reported after its lease was lost (the reconciler took
        /// over, a person decided, another attempt ran). A CRM id is never thrown away:
        /// an operation without one is completed with it (whoever holds it now loses the
        /// lease, open non-conflict cases are superseded); one that has another id gets a
        /// review case listing both, and the second entity is counted. Anything else is
        /// kept on the timeline and changes nothing.
        async fn late_outcome(
            tx: &mut Tx,
            l: &mut Locked,
            actor: &str,
            outcome: AttemptOutcome,
            now: DateTime<Utc>,
        ) -> Result<()> {
            let id = l.op.operation_id.as_str().to_owned();
            let (crm_id, kind, link) = match outcome {
                AttemptOutcome::Created { crm_id } => (crm_id, "crm_created", "created"),
                AttemptOutcome::Recovered { crm_id } => (crm_id, "recovered", "recovered"),
                other => {
                    let event = NewEvent::new("late_outcome", json!({"outcome": format!("{other:?}")}));
                    return append(tx, &id, actor, event, now).await;
                }
            };
            match l.op.crm_id.clone() {
                Some(known) if known == crm_id => {
                    let event = NewEvent::new("late_outcome", json!({"crm_id": crm_id, "same_as_known": true}));
                    append(tx, &id, actor, event, now).await?;
                }
                None => {
                    let event = NewEvent::new(kind, json!({"crm_id": crm_id, "late": true}));
                    append(tx, &id, actor, event, now).await?;
                    l.op.crm_id = Some(crm_id);
                    l.op.crm_link = Some(link.into());
                    l.op.verify_first = false;
                    l.op.next_attempt_at = None;
                    clear_lease(l);
                    supersede_open_cases(tx, l, actor, None, "a late CRM answer brought the result", now).await?;
                    if l.op.status != Status::Completed && !has_open_conflict(tx, &id).await? {
                        set_status(tx, l, Status::Completed, actor, now).await?;
                    }
                }
                Some(known) => {
                    let event = NewEvent::new("extra_crm_entity", json!({"crm_id": crm_id, "known_crm_id": known}));
                    append(tx, &id, actor, event, now).await?;
                    let detail = json!({"crm_ids": [known, crm_id], "cause": "late_answer"});
                    open_case(tx, l, ReviewReason::AmbiguousMatch, None, actor, detail, now).await?;
                }
            }
            save(tx, l, now).await
        }

        async fn has_open_conflict(tx: &mut Tx, operation_id: &str) -> Result<bool> {
            let n: i64 = sqlx::query_scalar(
                "select count(*) from review_cases where operation_id = $1 \
                 and resolved_at is null and reason = 'payload_conflict'",
            )
            .bind(operation_id)
            .fetch_one(&mut **tx)
            .await?;
            Ok(n > 0)
        }

        /// Closes the open review cases of an operation whose result became known without
        /// them, or that another case's resolution settled (payload conflicts stay: they
        /// are about another delivery's data, and a person decides them). Each is resolved
        /// as `superseded` by `actor`, with `why` as its comment and a `review_superseded`
        /// event naming the case that settled the operation (`by_case`, if one did). Every
        /// store path that settles an operation (completed or failed) calls it: with at
        /// most one open non-conflict case per operation, none is ever stranded open.
        async fn supersede_open_cases(
            tx: &mut Tx,
            l: &Locked,
            actor: &str,
            by_case: Option<i64>,
            why: &str,
            now: DateTime<Utc>,
        ) -> Result<()> {
            let id = l.op.operation_id.as_str().to_owned();
            let closed: Vec<i64> = sqlx::query_scalar(
                "update review_cases set resolved_at = $1, resolution = $2, \
                 resolved_by = $3, comment = $4 where operation_id = $5 and resolved_at is null \
                 and reason <> 'payload_conflict' returning id",
            )
            .bind(now)
            .bind(Resolution::Superseded.as_str())
            .bind(actor)
            .bind(why)
            .bind(&id)
            .fetch_all(&mut **tx)
            .await?;
            for case_id in closed {
                let event = NewEvent::new(
                    "review_superseded",
                    json!({"case_id": case_id, "by_case": by_case, "why": why, "status": l.op.status}),
                );
                append(tx, &id, actor, event, now).await?;
            }
            Ok(())
        }

        /// Makes the conflicting delivery of a payload-conflict case an operation of its
        /// own, keyed `<original>#accepted-<delivery id>` (`OperationId::accepted_as_new`:
        /// bounded, never a real key), due now, executed by whoever executes the original
        /// (an operation claimed through the claim API stays the integration's).
        async fn accept_delivery_as_new(
            tx: &mut Tx,
            original: &Operation,
            delivery_id: i64,
            actor: &str,
            case_id: i64,
            now: DateTime<Utc>,
        ) -> Result<OperationId> {
            let row = sqlx::query(
                "select payload, payload_hash, event_time from deliveries where id = $1",
            )
            .bind(delivery_id)
            .fetch_one(&mut **tx)
            .await?;
            let payload: Option<String> = row.try_get("payload")?;
            let hash: Option<String> = row.try_get("payload_hash")?;
            let (Some(payload), Some(hash)) = (payload, hash) else {
                return Err(StoreError::InvalidAction(
                    "the conflicting delivery's payload was already purged".into(),
                ));
            };
            let new_id = OperationId::accepted_as_new(&original.operation_id, delivery_id);
            let inserted = sqlx::query(
                "insert into operations (operation_id, source, status, payload_hash, payload, \
                 event_time, next_attempt_at, created_at, updated_at, executor) \
                 select $1, $2, 'received', $3, $4, $5, $6, $6, $6, executor \
                 from operations where operation_id = $7 \
                 on conflict (operation_id) do nothing",
            )
            .bind(new_id.as_str())
            .bind(&original.source)
            .bind(&hash)
            .bind(&payload)
            .bind(row.try_get::<Option<DateTime<Utc>>, _>("event_time")?)
            .bind(now)
            .bind(original.operation_id.as_str())
            .execute(&mut **tx)
            .await?;
            if inserted.rows_affected() != 1 {
                return Err(StoreError::InvalidAction(format!("`{new_id}` exists already")));
            }
            let event = NewEvent::new(
                "accepted_as_new",
                json!({"from_operation": original.operation_id, "case_id": case_id, "delivery_id": delivery_id}),
            );
            append(tx, new_id.as_str(), actor, event, now).await?;
            Ok(new_id)
        }
    };
}
pub(super) use sql_store;
