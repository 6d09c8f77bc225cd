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

// The write transaction's statements, by resource (`crate::ops::tx`).
pub(crate) mod cases;
pub(crate) mod connectors;
pub(crate) mod contacts;
pub(crate) mod operations;
pub(crate) mod requests;
pub(crate) mod retention;
pub(crate) mod rules;
pub(crate) mod updates;

/// Columns of `operations`, in the order `op_from_row` reads them by name.
/// An operation as every reader sees it: no lease or report token (people's logins may not
/// read those, migration 0017); the lock adds them (`lock_operation`).
pub(super) const OP_COLUMNS: &str = "operation_id, source, status, payload_hash, payload, crm_id, \
    crm_link, attempts, last_error, last_error_class, review_reason, lease_owner, \
    lease_expires_at, next_attempt_at, retry_grants, verify_first, quiet_after, contact_phone, \
    contact_email, contact_name, event_time, version, created_at, updated_at, purged_at";

/// The worker's next due operation: binds $1 = now, $2 = its connector, $3 = its tenant.
/// Nothing is due while the connector or the tenant is paused; externally executed
/// operations are never the worker's.
pub(super) const PICK_DUE: &str = "select operation_id from operations where status = 'received' \
    and executor = 'worker' and next_attempt_at <= $1 and tenant_id = $3 \
    and not exists (select 1 from connectors where tenant_id = $3 and name = $2 and state = 'paused') \
    and not exists (select 1 from tenants where id = $3 and state <> 'active') \
    order by next_attempt_at limit 1";

/// An operation whose lease ran out, for the reconciler: binds $1 = now, $2 = connector,
/// $3 = tenant.
pub(super) const PICK_STALE: &str =
    "select operation_id from operations where status = 'in_progress' \
    and executor = 'worker' and lease_expires_at <= $1 and tenant_id = $3 \
    and not exists (select 1 from connectors where tenant_id = $3 and name = $2 and state = 'paused') \
    and not exists (select 1 from tenants where id = $3 and state <> 'active') \
    order by lease_expires_at limit 1";

/// Due redeliveries of claim-API operations: binds $1 = source (also the connector),
/// $2 = now, $3 = limit, $4 = tenant.
pub(super) const PICK_REDELIVERY: &str = "select o.operation_id, o.payload, o.next_attempt_at \
    from operations o left join redeliveries r on r.operation_id = o.operation_id \
    where o.status = 'received' and o.executor = 'external' and o.source = $1 and o.tenant_id = $4 \
    and o.next_attempt_at <= $2 and o.payload is not null \
    and (r.operation_id is null or r.resend_at <= $2 or r.sent_at < o.next_attempt_at) \
    and not exists (select 1 from connectors c where c.tenant_id = $4 and c.name = $1 and c.state = 'paused') \
    and not exists (select 1 from tenants t where t.id = $4 and t.state <> 'active') \
    order by o.next_attempt_at limit $3";

/// A person's request as `store::review::requests` reads it (migration 0017).
pub(super) const REQUEST_COLUMNS: &str =
    "select id, actor, kind, case_id, operation_id, connector, \
     expected_version, body, tenant_id from human_requests";

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
/// A write transaction, and the tenant whose rows it writes.
pub(crate) struct SqlTx<DB: sqlx::Database>(
    pub(crate) sqlx::Transaction<'static, DB>,
    pub(crate) leadgate_domain::TenantId,
);

/// Where the two dialects differ, as each backend module states it in its `DIALECT`; the
/// rest of the SQL is one text for both.
pub(crate) struct Dialect {
    pub backend: crate::Backend,
    /// Appended to a `select` of one row to lock it until commit.
    pub lock_row: &'static str,
    /// Appended to the pick of due or stale work, so that concurrent workers skip the rows
    /// another one is taking instead of waiting for it.
    pub skip_locked: &'static str,
    /// The aggregate of the mean seconds from `opened_at` to `resolved_at` of review
    /// cases (a float, null over none).
    pub resolve_seconds_avg: &'static str,
    /// Takes a transaction-level lock on one contact key (`$1`, an i64) before matching;
    /// empty where the single writer already serialises intakes.
    pub lock_contact: &'static str,
    /// `human_requests.body` without its `secret` (a `feed_subscribe` request's, removed
    /// when the request is answered).
    pub body_without_secret: &'static str,
}

/// The store of one backend: `sql_store!(Store, Db)` in a module that defines `DIALECT`
/// expands to the imports and helpers every piece shares, then to each piece — the write
/// transaction's statements by resource (`sql/*.rs`) and each role's implementation
/// (`<role>/sql.rs`). The pieces are macros so that one SQL text serves both backends'
/// types; they name only what this macro brings into the module.
macro_rules! sql_store {
    ($store:ident, $db:ty) => {
        use std::collections::BTreeMap;

        use chrono::{DateTime, Utc};
        use serde_json::Value;

        use leadgate_domain::{OperationId, Resolution, ReviewReason, Status, TenantId};
        use $crate::ops::{
            CaseRow, ConnectorTx, ContactMatch, DeliveryData, Locked, RedeliveryRow, WriteTx,
        };
        use $crate::requests::outcome_of as requests_outcome_of;
        use $crate::rows::{
            case_from_row, delivery_from_row, diagnosis_from_row, event_from_row, op_from_row,
            request_from_row, rules_from_row, CaseLockRow, ChannelRow, ConnectorRow,
            DiagnosisReportRow, HealthRow, LockedRow, RuleChangeRow, SearchRow, UpdateRow,
            CHANNEL_COLUMNS,
        };
        use $crate::sql::{
            SqlTx, CASE_COLUMNS, OP_COLUMNS, PICK_DUE, PICK_REDELIVERY, PICK_STALE,
            REQUEST_COLUMNS, RULES_COLUMNS,
        };
        use $crate::*;

        type Tx = sqlx::Transaction<'static, $db>;

        fn corrupt(what: impl std::fmt::Display) -> StoreError {
            StoreError::Corrupt(what.to_string())
        }

        /// One keyset page of operations in `status` ordered by `(at, operation_id)`, the
        /// filters in the query so a page is always full.
        fn op_page_query(
            tenant: leadgate_domain::TenantId,
            status: Status,
            at: &'static str,
            below: Option<DateTime<Utc>>,
            page: &OperationPage,
        ) -> sqlx::QueryBuilder<'static, $db> {
            let mut q = sqlx::QueryBuilder::<$db>::new(format!(
                "select {OP_COLUMNS} from operations where tenant_id = "
            ));
            q.push_bind(tenant.0).push(" and status = ").push_bind(status.as_str());
            for bound in [below, page.before].into_iter().flatten() {
                q.push(format!(" and {at} < ")).push_bind(bound);
            }
            if let Some(source) = &page.source {
                q.push(" and source = ").push_bind(source.clone());
            }
            let (cmp, dir) = if page.newest_first {
                ("<", "desc")
            } else {
                (">", "asc")
            };
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
            deliveries: impl IntoIterator<Item = (leadgate_domain::TenantId, &'a NewDelivery)> + Send,
        ) -> Result<Vec<DeliveryRecord>> {
            $crate::journal::ops::record_all(SqlTx(tx, leadgate_domain::TenantId::DEFAULT), deliveries)
                .await
        }

        impl WriteTx for SqlTx<$db> {
            async fn commit(self) -> Result<()> {
                self.0.commit().await?;
                Ok(())
            }

            fn write_as(&mut self, tenant: leadgate_domain::TenantId) {
                self.1 = tenant;
            }
        }

        impl $store {
            async fn write(&self) -> Result<SqlTx<$db>> {
                Ok(SqlTx(self.begin_write().await?, self.tenant))
            }
        }

        impl $crate::Clock for $store {
            fn backend(&self) -> $crate::Backend {
                DIALECT.backend
            }

            fn now(&self) -> DateTime<Utc> {
                self.clock_now()
            }

            fn tenant(&self) -> leadgate_domain::TenantId {
                self.tenant
            }
        }

        $crate::sql::operations::tx_operations!($store, $db);
        $crate::sql::cases::tx_cases!($store, $db);
        $crate::sql::contacts::tx_contacts!($store, $db);
        $crate::sql::connectors::tx_connectors!($store, $db);
        $crate::sql::requests::tx_requests!($store, $db);
        $crate::sql::rules::tx_rules!($store, $db);
        $crate::sql::updates::tx_updates!($store, $db);
        $crate::sql::retention::tx_retention!($store, $db);
        $crate::feed::sql::tx_feed!($store, $db);

        $crate::journal::sql::journal_sql!($store, $db);
        $crate::work_queue::sql::work_queue_sql!($store, $db);
        $crate::crm_access::sql::crm_access_sql!($store, $db);
        $crate::review::sql::review_sql!($store, $db);
        $crate::claim_api::sql::claim_api_sql!($store, $db);
        $crate::updates::sql::updates_sql!($store, $db);
        $crate::alerts::sql::alerts_sql!($store, $db);
        $crate::rules::sql::rules_sql!($store, $db);
        $crate::reads::sql::reads_sql!($store, $db);
        $crate::dashboard::sql::dashboard_sql!($store, $db);
        $crate::upkeep::sql::upkeep_sql!($store, $db);
        $crate::sign_ins::sql::sign_ins_sql!($store, $db);
        $crate::feed::sql::feed_sql!($store, $db);
        $crate::tenants::sql::tenants_sql!($store, $db);
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
