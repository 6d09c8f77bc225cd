//! The statements of one write transaction, by resource: what `crate::ops` asks a
//! backend to do, implemented for each by `sql_store!` (`crate::sql`): SQL and binds, no
//! decisions. Row locks are the backend's (`for update` on PostgreSQL; SQLite's one
//! writer holds the whole database).

use std::future::Future;

use chrono::{DateTime, Utc};

use super::*;

/// One write transaction: every resource's statements, and its commit. The functions of
/// `crate::ops` take a `WriteTx`.
pub(crate) trait WriteTx:
    OperationTx
    + CaseTx
    + ContactTx
    + ConnectorTx
    + RequestTx
    + RulesTx
    + UpdateTx
    + RetentionTx
    + FeedTx
{
    fn commit(self) -> impl Future<Output = Result<()>> + Send;

    /// Writes the next rows as `tenant`'s: a group of deliveries shares one transaction
    /// and each is its tenant's.
    fn write_as(&mut self, tenant: leadgate_domain::TenantId);
}

/// The statements on operations, their timeline, deliveries, leases and claim-API redeliveries.
pub(crate) trait OperationTx: Send {
    /// The operation, locked until commit.
    fn lock_operation(&mut self, id: &str) -> impl Future<Output = Result<Option<Locked>>> + Send;
    /// Writes back every mutable column of `l` where the row is still at
    /// `l.read_version`; the rows written.
    fn update_operation(&mut self, l: &Locked) -> impl Future<Output = Result<u64>> + Send;
    /// Replaces the payload the CRM gets (*Fix and resend*); the fingerprint stays.
    fn replace_payload(
        &mut self,
        id: &str,
        payload: &Value,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Insert-if-absent on the unique key: true when this call created the operation.
    fn insert_operation(
        &mut self,
        d: &NewDelivery,
        executor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// A new operation from `original`'s row (its executor), keyed `new_id`: true when
    /// inserted.
    fn insert_accepted(
        &mut self,
        new_id: &OperationId,
        original: &Operation,
        data: &DeliveryData,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// The worker's next due operation on `connector` (none while it is paused).
    fn pick_due(
        &mut self,
        connector: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<String>>> + Send;
    /// A worker's operation whose lease ran out.
    fn pick_stale(
        &mut self,
        connector: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<String>>> + Send;
    /// Externally executed operations whose lease ran out (a bounded batch).
    fn pick_expired_external(
        &mut self,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;
    fn append(
        &mut self,
        operation_id: &str,
        actor: &str,
        event: &NewEvent,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    fn insert_delivery(
        &mut self,
        d: &NewDelivery,
        outcome: &str,
    ) -> impl Future<Output = Result<i64>> + Send;
    fn delivery_data(
        &mut self,
        delivery_id: i64,
    ) -> impl Future<Output = Result<DeliveryData>> + Send;
    fn record_grant(
        &mut self,
        operation_id: &str,
        token_sha256: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    fn was_granted(
        &mut self,
        operation_id: &str,
        token_sha256: &str,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// The kind and detail (JSON text) of the operation's latest `claimed`,
    /// `attempt_started` or `lease_taken_over` event: whether its current holder ever
    /// sent anything.
    fn last_lease_mark(
        &mut self,
        operation_id: &str,
    ) -> impl Future<Output = Result<Option<(String, String)>>> + Send;
    /// Due redeliveries of `source` (locked where the backend locks rows, skipping rows
    /// another process is taking): `(operation_id, payload, due at)`.
    fn pick_redeliveries(
        &mut self,
        source: &str,
        now: DateTime<Utc>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<RedeliveryRow>>> + Send;
    /// Marks one as sent unless another process did since it became due at `due`: the
    /// sending's number, or `None`.
    fn mark_redelivered(
        &mut self,
        operation_id: &str,
        due: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
        resend_at: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;
}

/// The statements on review cases.
pub(crate) trait CaseTx: Send {
    /// The open case of an operation that is not a payload conflict, if any.
    fn open_non_conflict_case(
        &mut self,
        operation_id: &str,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;
    fn insert_case(
        &mut self,
        operation_id: &str,
        reason: ReviewReason,
        delivery_id: Option<i64>,
        detail: &Value,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<i64>> + Send;
    /// The case, locked until commit.
    fn lock_case(&mut self, case_id: i64) -> impl Future<Output = Result<Option<CaseRow>>> + Send;
    fn close_case(
        &mut self,
        case_id: i64,
        resolution: &str,
        actor: &str,
        comment: Option<&str>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    fn open_case_count(&mut self, operation_id: &str) -> impl Future<Output = Result<i64>> + Send;
    fn has_open_conflict(
        &mut self,
        operation_id: &str,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// Resolves every open case of the operation that is not a payload conflict as
    /// `superseded`; the ids closed.
    fn supersede_cases(
        &mut self,
        operation_id: &str,
        actor: &str,
        why: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<i64>>> + Send;
}

/// The statements on contact matching and contact locks.
pub(crate) trait ContactTx: Send {
    /// Takes the transaction-level locks of these intake slots (`store::contact_slot`,
    /// sorted), where the backend needs them to serialise matching intakes.
    fn lock_contacts(&mut self, slots: &[i64]) -> impl Future<Output = Result<()>> + Send;
    /// How many operations other than `operation_id`, created since `since`, carry the
    /// phone and the e-mail: each counted up to `at_most`.
    fn contact_uses(
        &mut self,
        operation_id: &str,
        since: DateTime<Utc>,
        contact: &ContactKeys,
        at_most: i64,
    ) -> impl Future<Output = Result<(i64, i64)>> + Send;
    /// Up to ten operations created since `since` sharing the phone or e-mail, newest
    /// first.
    fn contact_matches(
        &mut self,
        operation_id: &str,
        since: DateTime<Utc>,
        contact: &ContactKeys,
    ) -> impl Future<Output = Result<Vec<ContactMatch>>> + Send;
    /// Takes contact lock `key` for `operation_id`'s attempt `holder` (its lease token's
    /// hash) until `until`, if it is free at `now` or the operation's own: the
    /// remembered contact and when it was remembered. `None`: another lead holds it.
    fn take_contact_lock(
        &mut self,
        key: i64,
        operation_id: &str,
        holder: &str,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<crate::work_queue::contacts::Remembered>>> + Send;
    /// Until when contact lock `key` is held.
    fn contact_lock_until(
        &mut self,
        key: i64,
    ) -> impl Future<Output = Result<Option<DateTime<Utc>>>> + Send;
    /// Where `holder` holds lock `key`: held until `until` (now: free), and the contact
    /// remembered with its time, when given.
    fn move_contact_lock(
        &mut self,
        key: i64,
        holder: &str,
        until: DateTime<Utc>,
        contact: Option<(&str, DateTime<Utc>)>,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The statements on connectors: pause, request pacing, health.
pub(crate) trait ConnectorTx: Send {
    /// An account's pacing `tat` (ms), locked until commit where the row exists.
    fn lock_pacing(&mut self, account: &str) -> impl Future<Output = Result<Option<f64>>> + Send;
    fn save_pacing(
        &mut self,
        account: &str,
        tat_ms: f64,
    ) -> impl Future<Output = Result<()>> + Send;
    fn connector_paused(&mut self, name: &str) -> impl Future<Output = Result<bool>> + Send;
    fn pause_connector(
        &mut self,
        name: &str,
        reason: &str,
        actor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Pauses a connector by hand (`by_hand`); false if it was paused already, which
    /// then stays as it was.
    fn pause_connector_by_hand(
        &mut self,
        name: &str,
        reason: &str,
        actor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// Resumes a paused connector; false if it was not paused.
    fn resume_connector(
        &mut self,
        name: &str,
        actor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// The connector's health, locked until commit (`None`: no row yet).
    fn lock_connector_health(
        &mut self,
        name: &str,
    ) -> impl Future<Output = Result<Option<leadgate_domain::outage::Health>>> + Send;
    /// Creates the connector's row, active and healthy, if there is none; waits for one
    /// another transaction is creating (so that [`lock_connector_health`] then has a row
    /// to lock).
    ///
    /// [`lock_connector_health`]: WriteTx::lock_connector_health
    fn add_connector_row(
        &mut self,
        name: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Writes the connector's health (creating its row, active, if there is none).
    fn save_connector_health(
        &mut self,
        name: &str,
        health: &leadgate_domain::outage::Health,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The statements on a person's requests a gateway applies.
pub(crate) trait RequestTx: Send {
    /// The oldest request no gateway has applied, locked; one another gateway is
    /// applying is skipped.
    fn lock_waiting_request(
        &mut self,
    ) -> impl Future<Output = Result<Option<crate::review::requests::RequestRow>>> + Send;
    /// Request `id`, locked, unless a gateway applied it already.
    fn lock_request(
        &mut self,
        id: i64,
    ) -> impl Future<Output = Result<Option<crate::review::requests::RequestRow>>> + Send;
    /// The Leadgate role `login` is in now (`leadgate_role_of`).
    fn role_of(
        &mut self,
        login: &str,
    ) -> impl Future<Output = Result<Option<leadgate_domain::roles::Role>>> + Send;
    /// Writes the answer (`store::requests::outcome_text`) and marks it applied.
    fn answer_request(
        &mut self,
        id: i64,
        outcome: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The statements on the event feed's subscribers (the `Feed` role's writes run them in a
/// transaction of their own; a person's request, in the one that answers it).
pub(crate) trait FeedTx: Send {
    /// Adds a subscriber; its id.
    fn insert_feed_subscriber(
        &mut self,
        url: &str,
        secret: &leadgate_domain::Secret,
        events: &[String],
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<i64>> + Send;
    /// Removes a subscriber with what it was owed and its attempts; false when there was none.
    fn delete_feed_subscriber(&mut self, id: i64) -> impl Future<Output = Result<bool>> + Send;
    /// Makes a subscriber active with a clean failure count; false when there is none.
    fn enable_feed_subscriber(&mut self, id: i64) -> impl Future<Output = Result<bool>> + Send;
}

/// The statements on business rules and their history.
pub(crate) trait RulesTx: Send {
    /// A source's rules, locked until commit (`None`: the source has none).
    fn lock_rules(
        &mut self,
        source: &str,
    ) -> impl Future<Output = Result<Option<crate::StoredRules>>> + Send;
    /// A source's first rules, at version 1, unless it has some: true when inserted.
    fn insert_rules(
        &mut self,
        rules: &crate::SourceRules,
        actor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// Writes a (locked) source's rules at `version`.
    fn save_rules(
        &mut self,
        rules: &crate::SourceRules,
        version: i64,
        actor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Appends a version to the rules' history.
    fn append_rule_change(
        &mut self,
        version: i64,
        actor: &str,
        now: DateTime<Utc>,
        before: Option<&crate::SourceRules>,
        after: &crate::SourceRules,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The statements on updates of CRM entities.
pub(crate) trait UpdateTx: Send {
    /// A pending update of `operation_id`'s entity `crm_id`, asked for on `case_id` with
    /// the fields of `delivery_id`, due now: false (nothing written) when the operation
    /// is not the worker's to send (claim API).
    fn insert_crm_update(
        &mut self,
        operation_id: &str,
        case_id: i64,
        delivery_id: i64,
        crm_id: &str,
        actor: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;
    /// Whether entity `crm_id` already has an update (pending or sent) carrying a delivery
    /// newer than `delivery_id`.
    fn newer_update_of_entity(
        &mut self,
        crm_id: &str,
        delivery_id: i64,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// The update, locked until commit.
    fn lock_crm_update(
        &mut self,
        id: i64,
    ) -> impl Future<Output = Result<Option<crate::updates::ops::UpdateRow>>> + Send;
    /// Writes how an update's try ended and drops its lease.
    fn write_crm_update(
        &mut self,
        id: i64,
        w: &crate::updates::ops::UpdateWrite<'_>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// The statements on retention: scrubbing finished operations. `scope` is the tenant
/// whose rows are scrubbed, or -1: every tenant's (the deployment's retention).
pub(crate) trait RetentionTx: Send {
    fn purge_candidates(
        &mut self,
        scope: i32,
        finished_before: DateTime<Utc>,
        batch: i64,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;
    /// Whether the (locked) operation is still finished, unpurged, older than
    /// `finished_before` and without an open case.
    fn still_purgeable(
        &mut self,
        operation_id: &str,
        finished_before: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool>> + Send;
    fn scrub_operation(
        &mut self,
        operation_id: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<()>> + Send;
    /// Scrubs the journal entries of one operation; how many.
    fn scrub_deliveries_of(
        &mut self,
        operation_id: &str,
    ) -> impl Future<Output = Result<u64>> + Send;
    /// Scrubs deliveries that came after their operation was purged, past retention.
    fn scrub_late_deliveries(
        &mut self,
        scope: i32,
        finished_before: DateTime<Utc>,
        batch: i64,
    ) -> impl Future<Output = Result<u64>> + Send;
    /// Scrubs refused deliveries past retention.
    fn scrub_rejected(
        &mut self,
        scope: i32,
        finished_before: DateTime<Utc>,
        batch: i64,
    ) -> impl Future<Output = Result<u64>> + Send;
    /// Deletes contact locks that ended before `before`; how many.
    fn purge_contact_locks(
        &mut self,
        scope: i32,
        before: DateTime<Utc>,
        batch: i64,
    ) -> impl Future<Output = Result<u64>> + Send;
    /// Operations of the scope not finished (or with an open case or a pending CRM
    /// update): what a purge at `finished_before` leaves whole.
    fn unpurgeable(&mut self, scope: i32) -> impl Future<Output = Result<u64>> + Send;
}
