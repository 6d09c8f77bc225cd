//! The [`ClaimApi`] role: its trait, and (`sql.rs`) its implementation for both backends.

use crate::*;

pub(crate) mod ops;
pub(crate) mod sql;

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

/// A claim through the claim API: an external integration (an n8n workflow) will make
/// the CRM call itself and report back with the lease token.
#[derive(Debug, Clone)]
pub struct ExternalClaim {
    pub delivery: NewDelivery,
    pub owner: String,
    pub lease_for: std::time::Duration,
    /// Paused while the integration reported an auth failure.
    pub connector: String,
}

/// A claim-API operation taken for a redelivery to the integration's webhook (the
/// timeline says `redelivered` already).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueRedelivery {
    pub operation_id: OperationId,
    /// The payload the integration claimed it with (JSON text), to be sent back as is.
    pub payload: String,
    /// How many times it has been sent back, this one included.
    pub sent: i64,
}

/// What a claim through the claim API found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExternalClaimOutcome {
    /// The caller holds the lease and may call the CRM now.
    Claimed { lease: Lease, attempts: i32 },
    /// Done before: the saved result.
    Completed { crm_id: Option<String> },
    /// Refused for good before.
    Failed { last_error: Option<String> },
    /// Someone holds the lease, or the next attempt is not due yet.
    InFlight { until: DateTime<Utc> },
    /// The key was used with another payload (a review case was opened).
    Conflict,
    /// A person must decide first (this includes a lease that ran out with the outcome
    /// unknown: it goes to review, never back to a fresh claim).
    NeedsReview { reason: Option<ReviewReason> },
    /// The integration's connector is paused after an auth failure.
    ConnectorPaused,
}
