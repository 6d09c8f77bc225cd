//! The operations store: the only crate of Leadgate that speaks SQL.
//!
//! **Roles.** Each kind of caller takes one role trait, in a folder of its own with its
//! SQL: [`Journal`] (intake), [`WorkQueue`] (the worker), [`CrmAccess`] (the CRM
//! adapters), [`Review`] (people's decisions), [`ClaimApi`], [`Updates`], [`Alerts`],
//! [`Rules`], [`Reads`], [`Dashboard`] and [`Upkeep`]; [`Store`] is their sum
//! (`roles.rs`). [`sqlite`] and [`postgres`] implement every role through one SQL text (`sql/`: `sql_store!`, the
//! dialects' few differences in each backend's `DIALECT`), each with its own migration
//! folder; rows become values through `FromRow` structs (`rows.rs`). Writes run the
//! backend-independent orchestration of `ops/` inside one write transaction, whose
//! statements are split by resource (`ops/tx.rs`). [`connect`] picks the backend from the
//! URL scheme and runs the migrations. Every method that changes an operation appends the
//! matching timeline events in the same transaction. Outside the roles: [`logins`]
//! (people's PostgreSQL logins, administered by `leadgate user`) and [`n8n`] (a reader of
//! n8n's own database for `leadgate diagnose`, here because only this crate speaks SQL).
//!
//! **Time.** Running code takes the time from [`Clock::now`] and binds it into queries, at
//! microsecond precision in UTC, so both backends compare the same values and tests can
//! move the clock. On PostgreSQL that is the database server's clock (read every 10 s,
//! carried forward by this process's monotonic clock, so a wrong or stepped wall clock
//! does not matter); on SQLite it is this machine's ([`local_now`], the one name for this
//! machine's clock; the few other places that use it say why). Timestamps are
//! `timestamptz` on PostgreSQL and RFC 3339 text on SQLite (written by sqlx, so text order
//! is time order).
//!
//! **Timelines** are read a page at a time by people and clients:
//! [`Reads::timeline_page`] (at most [`TIMELINE_PAGE_MAX`] events before an event id, and
//! how many are older) behind the console's *Older events…* (200 a page), `GET
//! /v1/operations/{id}/timeline` (`?before=&limit=`) and `ops show` (`--events`,
//! `--before`). [`Reads::timeline`], the whole of it, is for the gateway's own reads.
//!
//! **Search** reads indexes, never a table scan it cannot bound: [`Reads::search`] reads
//! index ranges (key prefix, `crm_id`, phone, e-mail, `operation_names` for name words;
//! migration 0012; `operation_name_pairs` for two of them at once, 0045) or walks the
//! tenant's operations newest first (`operations_tenant_created`, 0044); every index it
//! reads leads with the tenant, so a small tenant's search costs what its own rows cost.
//! [`SearchPlan::Auto`] counts the ranges first (capped) and walks only a bounded window
//! before it ranges. Every plan returns the same rows (`tests/it/search.rs` runs each
//! query under every plan on both backends, in two tenants).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use leadgate_domain::{
    ErrorClass, Fingerprint, MatchRule, OperationId, ReviewReason, Status, TenantId,
};

pub use leadgate_domain::{after, before, AttemptOutcome, EventKind, Failure, HumanAction};

mod alerts;
mod backend;
pub mod changes;
mod claim_api;
mod console;
mod crm_access;
mod dashboard;
mod error;
mod feed;
mod intake_queue;
mod journal;
pub mod logins;
pub mod n8n;
mod ops;
pub mod postgres;
mod reads;
mod requests;
mod review;
mod roles;
mod rows;
mod rules;
mod sign_ins;
mod sql;
pub mod sqlite;
mod tenants;
mod updates;
mod upkeep;
mod work_queue;

pub use backend::{connect, open, Backend};
pub use console::*;
pub use error::{DbError, DbFault, ErrorKind, Result, StoreError};
pub use requests::{ask_and_wait, Answer, Ask, Identity};
pub use roles::{Clock, Store};
// Each role's trait and the types only it speaks in.
pub use {
    alerts::*, claim_api::*, crm_access::*, dashboard::*, feed::*, journal::*, reads::*, review::*,
    rules::*, sign_ins::*, tenants::*, updates::*, upkeep::*, work_queue::*,
};

/// Contact data normalized at intake: phone and e-mail for cross-channel matching and
/// search, the name for search and display (never matched on). Scrubbed by retention.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ContactKeys {
    pub phone: Option<String>,
    pub email: Option<String>,
    /// The name as the source's field map reads it (`domain::search::display_name`).
    pub name: Option<String>,
}

/// A delivery whose operation key and fingerprint were derived.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub operation_id: OperationId,
    pub source: String,
    pub content_type: Option<String>,
    pub raw_body: Vec<u8>,
    pub payload: Value,
    pub payload_hash: Fingerprint,
    pub transform_version: i32,
    pub contact: ContactKeys,
    pub event_time: Option<DateTime<Utc>>,
    pub received_at: DateTime<Utc>,
    /// When set, a *new* operation starts in `needs_review` with a case for this reason
    /// (a late delivery) instead of going to the worker.
    pub review: Option<ReviewReason>,
    /// Cross-channel matching for a *new* operation with contact keys: what to do when
    /// another operation created since `since` shares the phone or e-mail.
    pub matching: Option<Matching>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matching {
    pub rule: MatchRule,
    pub since: DateTime<Utc>,
    /// The other sources of the delivery's channel (`domain::business::step_for`): empty
    /// when the source is its own channel.
    pub same_channel: Vec<String>,
    /// A phone or e-mail that this many other operations since `since` carry already is
    /// shared (a placeholder, a switchboard), not one person's: it is neither matched nor
    /// locked. 0: none is (`[matching] shared_after`).
    pub shared_after: u32,
}

impl Matching {
    /// `[matching] shared_after`'s default.
    pub const SHARED_AFTER: u32 = leadgate_domain::SHARED_CONTACT_AFTER;
}

pub use leadgate_domain::business::SourceRules;

/// A delivery refused before it could become an operation. Kept all the same: nothing
/// that reached the gateway is lost.
#[derive(Debug, Clone)]
pub struct RejectedDelivery {
    pub source: String,
    pub operation_id: Option<String>,
    pub content_type: Option<String>,
    pub raw_body: Vec<u8>,
    pub reason: String,
    pub received_at: DateTime<Utc>,
    pub transform_version: i32,
}

/// What `record_delivery` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The delivery claimed a new operation.
    New { status: Status },
    /// A technical repeat: the operation existed with the same fingerprint.
    Duplicate {
        status: Status,
        crm_id: Option<String>,
    },
    /// The key existed with another fingerprint: a review case was opened.
    Conflict { status: Status, case_id: i64 },
}

impl DeliveryOutcome {
    pub fn name(&self) -> &'static str {
        match self {
            DeliveryOutcome::New { .. } => "new",
            DeliveryOutcome::Duplicate { .. } => "duplicate",
            DeliveryOutcome::Conflict { .. } => "conflict",
        }
    }

    pub fn status(&self) -> Status {
        match self {
            DeliveryOutcome::New { status }
            | DeliveryOutcome::Duplicate { status, .. }
            | DeliveryOutcome::Conflict { status, .. } => *status,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    pub delivery_id: i64,
    pub outcome: DeliveryOutcome,
}

/// One operation as stored.
#[derive(Debug, Clone, Serialize)]
pub struct Operation {
    pub operation_id: OperationId,
    pub source: String,
    pub status: Status,
    pub payload_hash: String,
    pub payload: Option<Value>,
    pub crm_id: Option<String>,
    pub crm_link: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub last_error_class: Option<ErrorClass>,
    pub review_reason: Option<ReviewReason>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub retry_grants: i32,
    /// The last attempt's outcome is unknown and nothing was found under the key yet:
    /// when it is due (after the connector's settle window) the worker looks the key up
    /// again before it may create.
    pub verify_first: bool,
    pub contact: ContactKeys,
    pub event_time: Option<DateTime<Utc>>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub purged_at: Option<DateTime<Utc>>,
}

impl Operation {
    /// What the domain's rules see of it from outside the store (the settle window is
    /// the store's own: a granted retry's due time is decided under the row lock).
    pub fn facts(&self) -> leadgate_domain::rules::OpFacts<'_> {
        leadgate_domain::rules::OpFacts {
            status: self.status,
            crm_id: self.crm_id.as_deref(),
            crm_link: self.crm_link.as_deref(),
            attempts: self.attempts,
            lease_expires_at: self.lease_expires_at,
            lease_held: self.lease_owner.is_some(),
            quiet_after: None,
            has_payload: self.payload.is_some() && self.purged_at.is_none(),
        }
    }
}

/// A worker's exclusive right to report the outcome of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub operation_id: OperationId,
    pub token: String,
    pub owner: String,
    pub expires_at: DateTime<Utc>,
}

/// Work handed to a worker: the operation (already `in_progress`, attempts counted) and
/// its lease.
#[derive(Debug, Clone)]
pub struct Claim {
    pub operation: Operation,
    pub lease: Lease,
    /// This attempt uses a person's single-use grant.
    pub granted: bool,
}

/// What [`WorkQueue::take_contact_locks`] found (migration 0023, `store/work_queue/contacts.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContactTurn {
    /// The claim holds the locks of its phone and e-mail until its lease ends (or it
    /// leaves them): `known` are the contacts the last holders made or linked within the
    /// window asked for, which the CRM's search may not show yet.
    Taken { known: Vec<String> },
    /// Another lead holds one: the claim was handed back, nothing counted, due again at
    /// `at`.
    Held { at: DateTime<Utc> },
}

/// How an attempt leaves its contact locks ([`WorkQueue::leave_contact_locks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContactLeave {
    /// The contact is settled (made or linked, and its id remembered when given; or
    /// nothing of it was sent): the locks are free.
    Settled(Option<String>),
    /// A contact create of this attempt may still land (its outcome is unknown): the
    /// locks stay until the operation's `quiet_after`, when it can no longer land.
    Unsettled,
}

/// An event to append to an operation's timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: EventKind,
    pub error_class: Option<ErrorClass>,
    pub detail: Value,
}

impl NewEvent {
    pub fn new(kind: EventKind, detail: Value) -> Self {
        NewEvent {
            kind,
            error_class: None,
            detail,
        }
    }
}

/// A page of a timeline ([`Reads::timeline_page`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelinePage {
    /// Oldest first.
    pub events: Vec<TimelineEvent>,
    /// How many events are older than the first of `events`: read them with `before` =
    /// its id.
    pub older: i64,
}

/// The most events one read of a timeline returns.
pub const TIMELINE_PAGE_MAX: i64 = 500;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineEvent {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// Text, not an [`EventKind`]: a timeline may hold a kind a newer Leadgate wrote.
    pub kind: String,
    pub actor: String,
    pub error_class: Option<String>,
    pub detail: Value,
}

impl TimelineEvent {
    /// Whether this event is of kind `k`.
    pub fn is(&self, k: EventKind) -> bool {
        self.kind == k.as_str()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ReviewCase {
    pub id: i64,
    pub operation_id: String,
    pub source: String,
    pub reason: ReviewReason,
    pub status: Status,
    pub opened_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
    pub resolution: Option<String>,
    pub resolved_by: Option<String>,
    pub comment: Option<String>,
    pub delivery_id: Option<i64>,
    pub detail: Value,
    /// The operation's version when this case was read: send it back with a resolution.
    pub version: i64,
}

/// A connector's web pages (migration 0013): `{id}` in `entity_url` is the CRM id, `{q}`
/// in `search_url` what to search for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct CrmLinks {
    pub connector: String,
    pub entity_url: String,
    pub search_url: Option<String>,
    /// The contact page (`{id}`), for the contact of a contact-and-deal create.
    pub contact_url: Option<String>,
}

/// Which review cases to list.
#[derive(Debug, Clone, Default)]
pub struct CaseFilter {
    pub reason: Option<ReviewReason>,
    pub source: Option<String>,
    /// Only cases opened before this time (older than an age).
    pub opened_before: Option<DateTime<Utc>>,
    /// Open cases (the default) or resolved ones.
    pub resolved: bool,
    /// Leaves one reason out (the console's "needs review" tab skips payload conflicts,
    /// which have a tab of their own).
    pub except_reason: Option<ReviewReason>,
    /// Newest first instead of oldest first (`Page::after_id` then pages downwards).
    pub newest_first: bool,
}

/// Keyset paging: cases come oldest first; pass the last id seen to get the next page.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub after_id: Option<i64>,
    pub limit: i64,
}

impl Default for Page {
    fn default() -> Self {
        Page {
            after_id: None,
            limit: 50,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Connector {
    pub name: String,
    pub paused: bool,
    pub reason: Option<String>,
    pub since: DateTime<Utc>,
    pub changed_by: String,
    /// The CRM has not answered since then (an outage, `domain::outage`).
    pub unreachable_since: Option<DateTime<Utc>>,
    /// Paused by a person (`changed_by`, for `reason`), not by the worker after an auth
    /// failure.
    pub by_hand: bool,
}

/// The figures of docs/SPEC.md "Metrics", as of one moment.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MetricsSnapshot {
    pub unique_operations: i64,
    /// Entities the CRM created for operations (created or found again by key).
    pub crm_entities_created: i64,
    /// `(entity, how) -> count` of the entities the steps of stepped creates produced
    /// (Bitrix24 `contact_deal`): contacts `created`, `linked` or `recovered`, deals
    /// `created` or `recovered`.
    pub crm_steps: BTreeMap<(String, String), i64>,
    /// `(source, outcome) -> count` of journaled deliveries.
    pub deliveries: BTreeMap<(String, String), i64>,
    /// `source -> count` of deliveries answered with the saved result.
    pub duplicates_absorbed: BTreeMap<String, i64>,
    /// `class -> count` of attempts that failed and were retried.
    pub retries_by_class: BTreeMap<String, i64>,
    pub operations_by_status: BTreeMap<String, i64>,
    /// `in_progress` for longer than `stale_after`.
    pub stale_in_progress: i64,
    /// Accepted but not finished (received or in progress).
    pub unprocessed: i64,
    /// Accepted deliveries without an operation row: must stay 0.
    pub lost: i64,
    pub open_cases_by_reason: BTreeMap<String, i64>,
    pub resolved_cases: i64,
    /// Mean seconds from a case opening to its resolution.
    pub mean_seconds_to_resolve: Option<f64>,
    /// Completed operations whose timeline does not show how the result was obtained.
    pub unreconstructable: i64,
    pub paused_connectors: Vec<String>,
    /// Connectors whose CRM does not answer (an outage), and since when.
    pub unreachable_connectors: BTreeMap<String, DateTime<Utc>>,
    /// `outcome -> count` of the event feed's delivery attempts (`delivered`, `failed`).
    pub feed_deliveries: BTreeMap<String, i64>,
}

/// One tenant's figures and connectors (`Dashboard::fleet_metrics`).
#[derive(Debug, Clone, Serialize)]
pub struct TenantMetrics {
    pub tenant: TenantId,
    pub slug: String,
    pub metrics: MetricsSnapshot,
    pub connectors: Vec<Connector>,
}

impl TenantMetrics {
    /// A tenant with no figures yet.
    pub fn new(tenant: TenantId, slug: String) -> Self {
        TenantMetrics {
            tenant,
            slug,
            metrics: MetricsSnapshot::default(),
            connectors: vec![],
        }
    }
}

/// What one purge batch scrubbed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PurgeReport {
    /// Finished operations reduced to tombstones.
    pub operations: u64,
    /// Journal entries whose body and payload were scrubbed.
    pub deliveries: u64,
    /// Web console sign-ins forgotten (they name a login and an address).
    pub sign_ins: u64,
    /// People's answered requests forgotten (a resend's holds a lead's data).
    pub requests: u64,
    /// Event-feed deliveries still owed of events older than retention, forgotten.
    pub feed_owed: u64,
    /// Of an erasure (`erase`): the tenant's operations left whole because they are not
    /// finished, or have an open case or a pending CRM update.
    pub left_whole: u64,
    /// Contact locks that ended before the cutoff, deleted.
    pub contact_locks: u64,
    /// Operations the batch picked (some may have been left, rechecked under their lock):
    /// fewer than the batch size means none is left to pick.
    #[serde(skip)]
    pub(crate) picked: u64,
}

impl PurgeReport {
    pub fn is_empty(&self) -> bool {
        self.operations == 0
            && self.deliveries == 0
            && self.sign_ins == 0
            && self.requests == 0
            && self.feed_owed == 0
            && self.contact_locks == 0
    }

    /// Whether a batch of size `batch` found less than it could take of everything it
    /// scrubs: nothing more is left.
    pub(crate) fn is_last(&self, batch: i64) -> bool {
        let batch = batch.max(0) as u64;
        self.picked < batch && self.deliveries < batch && self.contact_locks < batch
    }
}

// Search

pub use leadgate_domain::search::{MatchedField, SearchCursor, SearchQuery};

// Team alerts

/// Runs the transaction `attempt` again (a few times, briefly spaced) while the database
/// aborts it with a retryable error, so that a sender is not answered 503 for what the
/// database itself resolved by aborting one side. SQLite never reports these codes.
pub(crate) async fn retrying<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    const RETRIES: u32 = 4;
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(e) if tries < RETRIES && e.is_retryable() => {
                tries += 1;
                tracing::warn!(error = %e, retry = tries, "transaction aborted by the database; running it again");
                let jitter = rand::random::<u64>() % 10;
                tokio::time::sleep(std::time::Duration::from_millis(
                    5 * u64::from(tries) + jitter,
                ))
                .await;
            }
            result => return result,
        }
    }
}

/// The advisory-lock key (PostgreSQL) of one normalized contact value: intakes that
/// match on the same phone or e-mail take it before looking for each other.
pub(crate) fn contact_lock_key(kind: &str, value: &str) -> i64 {
    use sha2::Digest;
    let d = sha2::Sha256::digest(format!("leadgate contact {kind}:{value}").as_bytes());
    i64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// The intake slot (PostgreSQL: a row of `intake_contact_slots`, migration 0024) of one
/// normalized contact value: intakes that match on the same phone or e-mail lock it
/// before looking for each other. The contact's lock key's low 16 bits.
pub(crate) fn contact_slot(kind: &str, value: &str) -> i64 {
    contact_lock_key(kind, value) & 0xFFFF
}

/// Runs purge batches until nothing is left, yielding between batches, then forgets the
/// web console's sign-ins made before `finished_before`, people's answered requests and
/// what the event feed still owes of events that old.
pub async fn purge(
    store: &dyn Store,
    finished_before: DateTime<Utc>,
    batch: i64,
) -> Result<PurgeReport> {
    let mut total = PurgeReport::default();
    loop {
        let r = store
            .purge_batch(finished_before, batch, store.now())
            .await?;
        total.operations += r.operations;
        total.deliveries += r.deliveries;
        total.contact_locks += r.contact_locks;
        if r.is_last(batch) {
            total.sign_ins = store.forget_sign_ins(finished_before).await?;
            total.requests = store.forget_requests(finished_before, None).await?;
            total.feed_owed = store.forget_feed_owed(finished_before).await?;
            return Ok(total);
        }
        tokio::task::yield_now().await;
    }
}

/// Erases `store`'s tenant's personal data (`leadgate tenant erase`): every finished
/// operation scrubbed to its tombstone in batches, its journal bodies, refused deliveries
/// and contact locks, as retention does at a cutoff of now; open work is left whole and
/// counted.
pub async fn erase(store: &dyn Store, batch: i64) -> Result<PurgeReport> {
    purge_tenant(store, None, batch).await
}

/// Retention's scrub of `store`'s tenant alone, in batches, and its people's answered
/// requests: finished before `finished_before` (a tenant with a window of its own), or
/// (none) everything finished until now, what is left whole counted (`erase`).
pub async fn purge_tenant(
    store: &dyn Store,
    finished_before: Option<DateTime<Utc>>,
    batch: i64,
) -> Result<PurgeReport> {
    let mut total = PurgeReport::default();
    loop {
        let now = store.now();
        let r = store
            .purge_tenant_batch(finished_before, batch, now)
            .await?;
        total.operations += r.operations;
        total.deliveries += r.deliveries;
        total.contact_locks += r.contact_locks;
        if r.is_last(batch) {
            total.left_whole = r.left_whole;
            // People's answered requests may hold a lead's edited data (Fix and resend).
            total.requests = store
                .forget_requests(finished_before.unwrap_or(now), Some(store.tenant()))
                .await?;
            return Ok(total);
        }
        tokio::task::yield_now().await;
    }
}

/// The schema version this build's migrations bring a database to (both backends share
/// version numbers).
pub fn known_schema_version() -> i64 {
    sqlx::migrate!("migrations/sqlite")
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or(0)
}

/// This machine's clock, at the precision both backends keep (microseconds), so a value
/// read back equals the value written.
///
/// Not the clock running code judges leases, due times or takeovers by: that is
/// [`Clock::now`] (the database server's clock on PostgreSQL, so machines whose clocks
/// disagree agree). This one is for what only this machine sees: SQLite's clock (every
/// process on the file shares the machine), tests, and the few places that say why.
pub fn local_now() -> DateTime<Utc> {
    truncate_micros(Utc::now())
}

fn truncate_micros(t: DateTime<Utc>) -> DateTime<Utc> {
    use chrono::DurationRound;
    t.duration_trunc(chrono::TimeDelta::microseconds(1))
        .unwrap_or(t)
}

/// Runs the backend's migrations, refusing a database that a newer Leadgate already
/// migrated past what this build knows (it would misread the data).
///
/// Several processes may start at once on a new database: on PostgreSQL the caller holds
/// the migration lock (`postgres::migration_lock`: a row only the gateway's login may
/// lock, not sqlx's advisory lock, which any login could take and hold); SQLite has no
/// such lock, but each migration is one transaction, so a process that lost the race
/// rolls back and tries again, finding the winner's work applied.
///
/// On PostgreSQL the migration's statements wait at most a second for a table's lock (the
/// caller's `lock_timeout`), so a session that holds a table — a person's open
/// transaction in front of an `ALTER` — never stalls intake behind the migration for
/// longer. The migration that gave up is rolled back and tried again, a little later each
/// time, for about a minute; then it fails naming the sessions in the way.
async fn migrate<C>(conn: &mut C, mut migrator: sqlx::migrate::Migrator) -> Result<()>
where
    C: sqlx::migrate::Migrate + Send,
{
    // not sqlx's advisory lock: see above
    migrator.set_locking(false);
    let known = migrator.iter().map(|m| m.version).max().unwrap_or(0);
    let mut tries = 0u32;
    let mut blocked = 0u32;
    loop {
        let once = async {
            conn.ensure_migrations_table().await?;
            let applied = conn.list_applied_migrations().await?;
            if let Some(found) = applied
                .iter()
                .map(|m| m.version)
                .max()
                .filter(|v| *v > known)
            {
                return Err(StoreError::SchemaTooNew { found, known });
            }
            migrator.run_direct(conn).await?;
            Ok(())
        }
        .await;
        let lock_timed_out =
            matches!(&once, Err(StoreError::Migrate(e)) if e.code() == Some("55P03"));
        match once {
            Err(e) if lock_timed_out => {
                blocked += 1;
                if blocked > MIGRATION_LOCK_TRIES {
                    return Err(StoreError::MigrationBlocked(e.to_string()));
                }
                tracing::warn!(
                    try_ = blocked,
                    "a migration waited for a table another session holds; trying again"
                );
                tokio::time::sleep(std::time::Duration::from_millis(
                    250 * u64::from(blocked.min(20)),
                ))
                .await;
            }
            Err(StoreError::Migrate(e)) if tries < 10 => {
                tries += 1;
                tracing::debug!(error = %e, "migration raced another process; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(50 * u64::from(tries))).await;
            }
            other => return other,
        }
    }
}

/// Migrations that gateways of an earlier version cannot run beside: afterwards the
/// database refuses some of their writes (0036: the keys their `on conflict` names are
/// gone; 0038: the metric counters' keys), or their writes would cross tenants (0037: the
/// tenants' intake, which an earlier gateway's contact matching would not keep apart from
/// the default tenant's; 0039: a person's request about a tenant's connector or rules,
/// which an earlier gateway would apply to the default tenant's). Before one is applied,
/// the gateways' heartbeats must have stopped.
pub(crate) const NOT_BESIDE_EARLIER_GATEWAYS: &[i64] = &[36, 37, 38, 39];

/// A gateway whose heartbeat is this recent is running (it beats every 5 s).
pub(crate) const RUNNING_WITHIN: chrono::TimeDelta = chrono::TimeDelta::seconds(15);

/// How long a migration that earlier gateways cannot run beside waits for their beats to
/// stop (a gateway stopped just before counts as running until its beat is old).
pub(crate) const EARLIER_GATEWAYS_PATIENCE: std::time::Duration =
    std::time::Duration::from_secs(20);

/// The first of `migrator`'s migrations that earlier gateways cannot run beside and that
/// `applied` says is not applied yet.
pub(crate) fn pending_not_beside(
    migrator: &sqlx::migrate::Migrator,
    applied: &[i64],
) -> Option<i64> {
    NOT_BESIDE_EARLIER_GATEWAYS
        .iter()
        .copied()
        .find(|v| migrator.iter().any(|m| m.version == *v) && !applied.contains(v))
}

/// Waits until no gateway beats (`running` reads who beat within [`RUNNING_WITHIN`]), for
/// [`EARLIER_GATEWAYS_PATIENCE`] at most; then refuses `version`.
pub(crate) async fn wait_for_earlier_gateways<F, Fut>(version: i64, running: F) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<String>>>,
{
    let deadline = std::time::Instant::now() + EARLIER_GATEWAYS_PATIENCE;
    loop {
        let owners = running().await?;
        if owners.is_empty() {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(StoreError::EarlierGatewaysRunning {
                version,
                owners: owners.join(", "),
            });
        }
        tracing::warn!(
            version,
            gateways = owners.len(),
            "a migration waits for gateways of an earlier version to stop"
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// How many times a migration that could not take a table's lock is tried again (about a
/// minute in all, with a second's wait for the lock each time).
const MIGRATION_LOCK_TRIES: u32 = 16;
