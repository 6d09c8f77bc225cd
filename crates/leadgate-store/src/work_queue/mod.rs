//! The [`WorkQueue`] role: its trait, and (`sql.rs`) its implementation for both backends.

use crate::*;

pub(crate) mod attempts;
pub(crate) mod contacts;
pub(crate) mod outage;
pub(crate) mod sql;

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
