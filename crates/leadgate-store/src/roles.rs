//! The store's roles: one trait per kind of caller, [`Store`] their sum. A caller takes
//! the narrowest role it needs (the CRM adapters take [`CrmAccess`], nothing more);
//! `Arc<dyn Store>` becomes `Arc<dyn Role>` by upcasting.

use super::*;

/// The engine and the clock every role shares: leases, due times and takeovers are judged by `now`.
pub trait Clock: Send + Sync + 'static {
    /// The database's engine.
    fn backend(&self) -> Backend;

    /// The clock leases, due times and takeovers are judged by. PostgreSQL: the
    /// database server's clock (read periodically, carried forward by this process's
    /// monotonic clock), so machines whose clocks disagree agree on when a lease ends.
    /// SQLite: this machine's clock, which every process on the file shares.
    fn now(&self) -> DateTime<Utc>;
}

/// Intake's: journal a delivery and claim its operation, journal a refusal, remember a signature's one use.
#[async_trait::async_trait]
pub trait Journal: Clock {
    /// Journals a delivery and claims its operation if the key is new (insert-if-absent
    /// on the unique key), all in one transaction. A repeat with the same fingerprint is
    /// a duplicate; with another fingerprint a conflict (a review case is opened and the
    /// operation, unless already completed, is blocked in `needs_review`).
    async fn record_delivery(&self, delivery: NewDelivery) -> Result<DeliveryRecord>;

    /// Journals a delivery that was refused (bad body, missing key, bad signature).
    async fn record_rejected(&self, delivery: RejectedDelivery) -> Result<i64>;

    /// Remembers that `source`'s signature `signature_sha256` was used for `operation_id`
    /// until `expires_at` (its replay window's end), unless it was already: the operation
    /// it was first used for. Signatures whose window ended are forgotten on the way.
    async fn use_signature(
        &self,
        source: &str,
        signature_sha256: &str,
        operation_id: &str,
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<String>;
}

/// The worker's: claim due work under a lease, record an attempt's steps and outcome, contact locks, the connector's health.
#[async_trait::async_trait]
pub trait WorkQueue: Clock {
    /// Takes the next due operation (status `received`, due, its connector not paused)
    /// and persists `in_progress`, `attempts + 1` and the lease before returning it, so
    /// the caller may contact the CRM. Concurrent callers never get the same operation.
    async fn claim_due(
        &self,
        connector: &str,
        owner: &str,
        lease_for: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<Claim>>;

    /// Whether anything is due for `connector` at `now` (a read: nothing is claimed).
    async fn has_due(&self, connector: &str, now: DateTime<Utc>) -> Result<bool>;

    /// [`claim_due`](WorkQueue::claim_due) for up to `limit` operations in one transaction:
    /// the operations of one batch request.
    async fn claim_due_many(
        &self,
        connector: &str,
        owner: &str,
        lease_for: std::time::Duration,
        limit: usize,
        now: DateTime<Utc>,
    ) -> Result<Vec<Claim>>;

    /// Takes over one `in_progress` operation whose lease ran out (its worker died or
    /// hung), with a fresh lease, for the reconciler. Attempts are not counted. Nothing
    /// is taken while `connector` is paused: a lookup with broken credentials would only
    /// send the lead to review. An operation whose holder never started its call (its
    /// latest lease mark is the `claimed` event: it died while waiting for the CRM's
    /// pace or during a lookup) is not taken over but put back due, its attempt and
    /// grant given back, with a `released_unsent` event: nothing reached the CRM.
    async fn claim_stale(
        &self,
        connector: &str,
        owner: &str,
        lease_for: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<Claim>>;

    /// Called right before a create goes out: appends `events` (`attempt_started`),
    /// checks that the lease is still held *and has not run out*, and extends it to
    /// `now + lease_for`, so it covers the whole call. Returns the lease with its new
    /// expiry; `LeaseLost` means the call must not be made.
    /// It also remembers until when that call's create may still land (the new expiry
    /// plus `settle`): a retry a person grants is not due before then.
    async fn start_attempt(
        &self,
        lease: &Lease,
        lease_for: std::time::Duration,
        settle: std::time::Duration,
        events: Vec<NewEvent>,
        now: DateTime<Utc>,
    ) -> Result<Lease>;

    /// [`start_attempt`](WorkQueue::start_attempt) for the leases of one batch request, in
    /// one transaction, each with its own events; each answer is its lease's
    /// (`LeaseLost`: that one must not be sent).
    async fn start_attempts(
        &self,
        leases: Vec<(Lease, Vec<NewEvent>)>,
        lease_for: std::time::Duration,
        settle: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<Vec<Result<Lease>>>;

    /// Commits one step of a multi-step create (`events`: its exchange and its
    /// `crm_step` result) under the lease armed for the call, before the next step is
    /// called. `LeaseLost` (nothing written) when the lease is no longer held or ran out.
    /// A contact's step also leaves the contact locks the lease holds, remembering the
    /// contact ([`take_contact_locks`](WorkQueue::take_contact_locks)).
    async fn record_step(
        &self,
        lease: &Lease,
        events: Vec<NewEvent>,
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// Before a contact step (`Crm::links_contacts`): takes the locks of the claimed
    /// operation's normalized phone and e-mail (intake's contact lock keys), all or none,
    /// until its lease ends (`start_attempt` carries them along when it extends the
    /// lease). When another lead holds one, the claim is handed back in its place (a
    /// `contact_wait` event; due at the holder's expiry or after `wait`, whichever is
    /// first; the attempt and a grant given back): the caller sends nothing. `remember`:
    /// how old a remembered contact may be to be `known`. An operation without phone and
    /// e-mail takes nothing. `LeaseLost` when the lease is no longer held.
    async fn take_contact_locks(
        &self,
        claim: &Claim,
        remember: std::time::Duration,
        wait: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<ContactTurn>;

    /// After the attempt that took them: leaves the contact locks held under `lease`
    /// (a contact step's `crm_step` already left them, with its contact, in
    /// [`record_step`](WorkQueue::record_step)'s transaction). Locks taken since by another
    /// attempt are not touched.
    async fn leave_contact_locks(
        &self,
        lease: &Lease,
        how: ContactLeave,
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// Applies the outcome of an attempt, guarded by the lease: only the lease holder may
    /// report. `events` (the CRM request and answer) are appended first, in the same
    /// transaction. Idempotent by lease token: repeating a report whose commit went
    /// through changes nothing. A report after the lease was lost changes state only
    /// when it brings a CRM id (a late answer is never thrown away): the operation is
    /// completed with it if it has none, or a review case lists both ids; it returns
    /// `LeaseLost` all the same.
    async fn finish_attempt(
        &self,
        lease: &Lease,
        outcome: AttemptOutcome,
        events: Vec<NewEvent>,
        now: DateTime<Utc>,
    ) -> Result<Operation>;

    /// A failed call the connector is to blame for (`domain::outage`): counted, and after
    /// enough in a row the connector is unreachable. Its outage, if it is in one.
    async fn connector_failed(
        &self,
        name: &str,
        config: &leadgate_domain::outage::OutageConfig,
        now: DateTime<Utc>,
    ) -> Result<Option<leadgate_domain::outage::Unreachable>>;

    /// The connector's CRM answered: the count starts again and an outage ends. True
    /// when it had been unreachable.
    async fn connector_answered(&self, name: &str, now: DateTime<Utc>) -> Result<bool>;

    /// Before a claim: whether a lead may go to the connector now (`Open`), as its
    /// outage's one probe (`Probe`, taken for this caller alone), or not (`Wait`).
    async fn probe_gate(
        &self,
        name: &str,
        config: &leadgate_domain::outage::OutageConfig,
        now: DateTime<Utc>,
    ) -> Result<leadgate_domain::outage::Gate>;
}

/// What the CRM adapters may do in the store, and nothing more: the shared request pace and amoCRM's rotating tokens.
#[async_trait::async_trait]
pub trait CrmAccess: Clock {
    /// A turn of `account`'s request pace (`domain::pacing`), shared by every process on
    /// this database: how long the request must wait before it leaves.
    async fn take_turn(
        &self,
        account: &str,
        pace: leadgate_domain::pacing::Pace,
        now: DateTime<Utc>,
    ) -> Result<std::time::Duration>;

    /// No request to `account` leaves before `until` (the CRM asked for quiet).
    async fn hold_turns(
        &self,
        account: &str,
        pace: leadgate_domain::pacing::Pace,
        until: DateTime<Utc>,
    ) -> Result<()>;

    /// The current OAuth tokens of `connector`, shared by every process of the
    /// installation (amoCRM rotates refresh tokens: a copy per process would be dead
    /// after the first refresh anywhere else).
    async fn crm_token(&self, connector: &str) -> Result<Option<CrmToken>>;

    /// Saves `token` (with its `version`, which the caller sets) for `connector`.
    /// `expected_version: None` inserts only if the connector has no row yet (seeding);
    /// `Some(v)` replaces the row only if its version is still `v` (compare-and-set).
    /// `false` means someone else saved first: re-read and use their tokens.
    async fn save_crm_token(
        &self,
        connector: &str,
        token: &CrmToken,
        expected_version: Option<i64>,
    ) -> Result<bool>;
}

/// People's decisions: open and resolve review cases, notes, who a connection is, and a person's requests (`Ask`).
#[async_trait::async_trait]
pub trait Review: Clock {
    /// Opens a review case on an operation that is not leased (e.g. a stale operation
    /// found by a person's query); blocks it in `needs_review` unless it is completed.
    async fn open_review(
        &self,
        operation_id: &OperationId,
        reason: ReviewReason,
        actor: &str,
        detail: Value,
        now: DateTime<Utc>,
    ) -> Result<i64>;

    /// A person's decision, guarded by the version they saw.
    async fn resolve(&self, request: Resolve) -> Result<Resolved>;

    /// Records an event that changes no state (a notification someone was shown).
    async fn note(
        &self,
        id: &OperationId,
        actor: &str,
        event: NewEvent,
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// Who this connection acts as: SQLite is local; on PostgreSQL the login decides
    /// (migration 0017).
    async fn identity(&self) -> Result<Identity>;

    /// A personal login's request to a gateway (PostgreSQL): its id. The database
    /// refuses what the login's role may not ask (`domain::roles::may_ask`), and records
    /// the login as the one who asked.
    async fn ask(&self, ask: &Ask) -> Result<i64>;

    /// A gateway's answer to request `id`: `None` while none has applied it; the answer,
    /// or the store's error for why it was not applied.
    async fn answer(&self, id: i64) -> Result<Option<Result<Answer>>>;

    /// Withdraws request `id` unless a gateway applied it (one applying it now finishes
    /// first). True: withdrawn, nothing of it happened.
    async fn withdraw(&self, id: i64) -> Result<bool>;

    /// Does what `ask` asks, directly, as `actor`: what a gateway does with a person's
    /// request, for those who may write (the CLI, SQLite, the schema owner's login).
    async fn perform(&self, actor: &str, ask: Ask, now: DateTime<Utc>) -> Result<Answer>;

    /// Applies the oldest waiting request (the gateway, on PostgreSQL), with its login as
    /// the actor; its id, or `None` when none waits.
    async fn apply_next_request(&self, now: DateTime<Utc>) -> Result<Option<i64>>;
}

/// The claim API's: claims of integrations that call the CRM themselves, their leases and redeliveries.
#[async_trait::async_trait]
pub trait ClaimApi: Clock {
    /// The claim API: journals the request and claims the operation for an external
    /// integration, or says why it cannot (see [`ExternalClaimOutcome`]).
    async fn claim_external(&self, claim: ExternalClaim) -> Result<ExternalClaimOutcome>;

    /// Sends externally claimed operations whose lease ran out to review: their outcome
    /// is unknown and no CRM lookup is possible from here. Returns how many.
    async fn expire_external_leases(&self, now: DateTime<Utc>) -> Result<u64>;

    /// Takes up to `limit` operations of the claim-API `source` that are due for a
    /// redelivery at `now` (migration 0007): `received`, executed externally, due, their
    /// connector (the source's name) not paused, and not sent back since they became due
    /// unless the last sending's `resend_at` ran out (the integration never claimed it:
    /// its webhook was down, or its run died before the claim). Each taken one is not due
    /// for a redelivery again before `resend_at` unless it is claimed and due again, and
    /// gets a `redelivered` event. Taking is a compare-and-set on `redeliveries`: however
    /// many processes share the database, one sends it per due time.
    async fn take_due_redeliveries(
        &self,
        source: &str,
        actor: &str,
        now: DateTime<Utc>,
        resend_at: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<DueRedelivery>>;
}

/// Updates of CRM entities a person asked for (*keep original, update CRM*).
#[async_trait::async_trait]
pub trait Updates: Clock {
    // Updates of CRM entities (Keep original and update the CRM)

    /// The next due update of an entity on `connector` (none while it is paused), with a
    /// lease for `owner`: the oldest pending update of its operation whose earlier calls
    /// can no longer land (past `quiet_after`), never one another process holds.
    async fn claim_update(
        &self,
        connector: &str,
        owner: &str,
        lease_for: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<UpdateClaim>>;

    /// Right before the update's call goes out: extends a live lease to `lease_for` and
    /// marks that the call may land until `lease_for + settle` from now; a lease that ran
    /// out is refused (`LeaseLost`: the call must not be made).
    async fn start_update(
        &self,
        claim: &UpdateClaim,
        lease_for: std::time::Duration,
        settle: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// Records how the update ended, with `events` (the exchange) on the operation's
    /// timeline; a token that no longer holds it writes nothing (`LeaseLost`).
    async fn finish_update(
        &self,
        claim: &UpdateClaim,
        outcome: UpdateOutcome,
        events: Vec<NewEvent>,
        now: DateTime<Utc>,
    ) -> Result<()>;
}

/// Team alerts: each channel's turn, arm, done and release, and the facts the rules read.
#[async_trait::async_trait]
pub trait Alerts: Clock {
    // Team alerts (src/alerts.rs, migration 0011). A channel's state is one row; the
    // alert loops of every process on the database take turns on it with a lease.

    /// Takes `channel`'s sending turn for `owner` until `now + lease_for`, unless another
    /// caller holds a live one (`None`). A channel seen for the first time starts with
    /// the newest review case as its cursor: what was open before alerts were configured
    /// is not announced as new (the review-age threshold still sees it). Taking is a
    /// compare-and-set under the row's lock: one caller gets a turn at a time.
    async fn alert_turn(
        &self,
        channel: &str,
        owner: &str,
        lease_for: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<AlertTurn>>;

    /// Right before a message goes out: stores `pending` (when given) as the channel's
    /// message waiting to be accepted, and extends the turn to `now + lease_for` so it
    /// covers the call. `LeaseLost` when the turn is no longer this token's or has run
    /// out: the message must not be sent.
    async fn alert_arm(
        &self,
        channel: &str,
        token: &str,
        pending: Option<&PendingAlert>,
        lease_for: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// What became of the pending message, and the end of the turn. `Accepted` and
    /// `Dropped` advance the cursor and the condition states to what it announced (only
    /// now: a message that never went out announces nothing); `Retry` keeps it for
    /// another try at the time given. `LeaseLost` when the turn is not this token's.
    async fn alert_done(
        &self,
        channel: &str,
        token: &str,
        outcome: AlertOutcome,
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// Gives the turn back without sending anything.
    async fn alert_release(&self, channel: &str, token: &str) -> Result<()>;

    /// The figures alerts are made of (reads only): review cases after `after_case`
    /// opened at or before `cases_until`, grouped by reason and source; the lost figure;
    /// `in_progress` operations not changed since `stale_before`; open cases opened
    /// before `review_before`; the connectors.
    async fn alert_facts(
        &self,
        after_case: i64,
        cases_until: DateTime<Utc>,
        stale_before: DateTime<Utc>,
        review_before: DateTime<Utc>,
    ) -> Result<AlertFacts>;
}

/// The business rules (the database's, read live by intake) and the CRM links people publish.
#[async_trait::async_trait]
pub trait Rules: Clock {
    /// Publishes where a person opens this connector's CRM (the gateway, at start).
    async fn publish_crm_links(&self, links: &CrmLinks, now: DateTime<Utc>) -> Result<()>;

    /// Every connector's published web pages, the most recently published first.
    async fn crm_links(&self) -> Result<Vec<CrmLinks>>;

    /// A pull source's mark in its sender's queue (migration 0018), `None` before the first.
    /// Every source's business rules (migration 0021), by source.
    async fn business_rules(&self) -> Result<Vec<StoredRules>>;

    /// How many versions the rules' history holds: grows with every committed change
    /// of any source's rules (a gateway polls it, and reads the rules again when it
    /// moved). Not the newest id: PostgreSQL hands ids out at insert, so a smaller id can
    /// commit after a larger one was read; the history is append-only, so its count
    /// cannot miss a commit.
    async fn rules_version(&self) -> Result<i64>;

    /// The rules' history, newest first, of one source or all.
    async fn rules_history(&self, source: Option<&str>, limit: i64) -> Result<Vec<RuleChange>>;

    /// Gives each source that has no rules yet these (a gateway's TOML values), recorded in
    /// the history as seeded by [`SEEDED_BY`]; the sources seeded. Rules a source has
    /// are never changed here.
    async fn seed_rules(&self, seeds: &[SourceRules], now: DateTime<Utc>) -> Result<Vec<String>>;
}

/// Reads for the console, the CLI, the HTTP reads and the metrics: nothing here writes.
#[async_trait::async_trait]
pub trait Reads: Clock {
    async fn operation(&self, id: &OperationId) -> Result<Option<Operation>>;

    /// The saved reports, the newest first, at most `limit`.
    async fn diagnoses(&self, limit: i64) -> Result<Vec<DiagnosisSummary>>;

    /// One saved report and its body.
    async fn diagnosis(&self, id: i64) -> Result<Option<(DiagnosisSummary, Value)>>;

    /// The operations of `ids` that exist, in no particular order (one query per 500).
    async fn operations(&self, ids: &[OperationId]) -> Result<Vec<Operation>>;

    /// The whole timeline, oldest first: for the gateway's own reads. What a person or an
    /// API client reads is [`Reads::timeline_page`].
    async fn timeline(&self, id: &OperationId) -> Result<Vec<TimelineEvent>>;

    /// At most `limit` events of one timeline, the newest before event id `before` (all
    /// of them when `None`), oldest first, and how many older ones there are: however
    /// long a timeline grew, one read is a page.
    async fn timeline_page(
        &self,
        id: &OperationId,
        before: Option<i64>,
        limit: i64,
    ) -> Result<TimelinePage>;

    /// The newest `limit` events of one kind of one timeline, oldest first (the
    /// console's CRM entities: `crm_step`).
    async fn timeline_of_kind(
        &self,
        id: &OperationId,
        kind: &str,
        limit: i64,
    ) -> Result<Vec<TimelineEvent>>;

    async fn cases_of(&self, id: &OperationId) -> Result<Vec<ReviewCase>>;

    async fn case(&self, case_id: i64) -> Result<Option<ReviewCase>>;

    async fn review_cases(&self, filter: &CaseFilter, page: Page) -> Result<Vec<ReviewCase>>;

    /// Open cases per reason.
    async fn case_counts(&self) -> Result<BTreeMap<ReviewReason, i64>>;

    /// Operations in one status by `updated_at`, keyset-paged (the console's
    /// `failed_terminal` tab).
    async fn operations_with_status(
        &self,
        status: Status,
        page: OperationPage,
    ) -> Result<Vec<Operation>>;

    /// Counts of the console's operation tabs; stale = lease ran out before the time given.
    async fn queue_counts(&self, lease_expired_before: DateTime<Utc>) -> Result<QueueCounts>;

    /// Other operations sharing the normalized phone or e-mail of `id`, newest first.
    async fn link_candidates(&self, id: &OperationId, limit: i64) -> Result<Vec<Operation>>;

    /// One journaled delivery (e.g. the conflicting side of a payload conflict).
    async fn delivery(&self, delivery_id: i64) -> Result<Option<DeliveryView>>;

    /// Dashboard figures per bucket over `[from, to)`, at 5-minute resolution (see
    /// `slot_buckets`: the range is widened to whole slots).
    async fn series(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        buckets: u32,
    ) -> Result<Vec<SeriesPoint>>;

    /// The newest migration applied to this database (`None`: no schema yet). Reads only.
    async fn schema_version(&self) -> Result<Option<i64>>;

    /// `in_progress` operations whose lease ran out before `lease_expired_before`, keyset-
    /// paged on `(lease_expires_at, operation_id)`.
    async fn stale_in_progress(
        &self,
        lease_expired_before: DateTime<Utc>,
        page: OperationPage,
    ) -> Result<Vec<Operation>>;

    async fn connector(&self, name: &str) -> Result<Option<Connector>>;

    async fn connectors(&self) -> Result<Vec<Connector>>;

    async fn metrics(
        &self,
        now: DateTime<Utc>,
        stale_after: std::time::Duration,
    ) -> Result<MetricsSnapshot>;

    // Search

    /// Operations of any status matching `query` (`domain::search`), newest first (by
    /// `created_at`, then `operation_id`), `limit` (1–200) at a time after `after`.
    /// `plan` chooses how the rows are found; every plan finds the same rows.
    async fn search(
        &self,
        query: &SearchQuery,
        after: Option<&SearchCursor>,
        limit: i64,
        plan: SearchPlan,
    ) -> Result<SearchPage>;
}

/// Keeping the database: health, retention, metric compaction, connector pause and resume, pull cursors, saved diagnoses.
#[async_trait::async_trait]
pub trait Upkeep: Clock {
    /// Answers when the database does.
    async fn ping(&self) -> Result<()>;

    async fn pull_mark(&self, source: &str) -> Result<Option<String>>;

    /// Saves a pull source's mark, replacing the one before.
    async fn save_pull_mark(&self, source: &str, mark: &str, now: DateTime<Utc>) -> Result<()>;

    /// Saves a `leadgate diagnose` report (migration 0020); returns its id.
    async fn save_diagnosis(&self, d: &NewDiagnosis) -> Result<i64>;

    /// Folds the per-connection shards of the dashboard's past time slots (before
    /// `before`) into one row each, so a month of figures stays a few thousand rows, and
    /// the counter shards of connections that ended into one. Returns the rows written.
    /// A no-op on SQLite.
    async fn compact_metrics(&self, before: DateTime<Utc>) -> Result<u64>;

    async fn pause_connector(
        &self,
        name: &str,
        reason: &str,
        actor: &str,
        now: DateTime<Utc>,
    ) -> Result<()>;

    /// Resumes a paused connector; returns false if it was not paused.
    async fn resume_connector(&self, name: &str, actor: &str, now: DateTime<Utc>) -> Result<bool>;

    /// One batch of retention: scrubs payloads and contact data of up to `batch`
    /// finished operations last changed before `finished_before` (a tombstone stays:
    /// key, payload hash, status, crm_id, dates), and the bodies of rejected deliveries
    /// received before it. Open operations and operations with an open review case are
    /// never touched. Small batches keep intake unblocked; call until empty.
    async fn purge_batch(
        &self,
        finished_before: DateTime<Utc>,
        batch: i64,
        now: DateTime<Utc>,
    ) -> Result<PurgeReport>;
}

/// The operations store: every role. Both backends pass the same conformance suite
/// (tests/it/store.rs).
pub trait Store:
    Journal + WorkQueue + CrmAccess + Review + ClaimApi + Updates + Alerts + Rules + Reads + Upkeep
{
}

impl<
        T: Journal
            + WorkQueue
            + CrmAccess
            + Review
            + ClaimApi
            + Updates
            + Alerts
            + Rules
            + Reads
            + Upkeep
            + ?Sized,
    > Store for T
{
}
