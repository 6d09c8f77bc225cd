//! The [`Updates`] role: its trait, and (`sql.rs`) its implementation for both backends.

use crate::*;

pub(crate) mod ops;
pub(crate) mod sql;

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

/// A person's request that a CRM entity get a conflicting delivery's changed fields
/// (migration 0014), claimed by a worker: its lease is `token` until `expires_at`.
#[derive(Debug, Clone)]
pub struct UpdateClaim {
    pub id: i64,
    pub operation_id: OperationId,
    pub source: String,
    pub crm_id: String,
    pub case_id: i64,
    pub delivery_id: i64,
    /// The operation's payload (the lead as it was created) and the conflicting
    /// delivery's (`None`: purged, so nothing can be sent).
    pub original: Option<Value>,
    pub later: Option<Value>,
    /// Tries so far, this one included.
    pub attempts: i32,
    pub owner: String,
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// How an update of a CRM entity ended.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateOutcome {
    /// The CRM took these fields.
    Done { fields: Vec<String> },
    /// Nothing the CRM was sent at creation differs: no call was made.
    Skipped,
    /// Send it again, not before `at`; with `refund` the try is not counted (the
    /// connector's outage or pause, not the update's).
    Retry {
        at: DateTime<Utc>,
        failure: Failure,
        refund: bool,
    },
    /// Given up: the payload-conflict question goes back to a person (a new case on the
    /// same delivery, saying why).
    Failed { failure: Failure },
}
