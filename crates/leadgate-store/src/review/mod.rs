//! The [`Review`] role: its trait, and (`sql.rs`) its implementation for both backends.

use crate::*;

pub(crate) mod ops;
pub(crate) mod requests;
pub(crate) mod sql;

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

#[derive(Debug, Clone)]
pub struct Resolve {
    pub case_id: i64,
    /// The operation version the person saw; the resolution is refused if it moved.
    pub expected_version: i64,
    pub actor: String,
    pub comment: Option<String>,
    pub action: HumanAction,
    pub now: DateTime<Utc>,
    /// Part of one action taken on many cases at once (the console's bulk actions):
    /// recorded on each case's timeline, and it must carry a comment.
    pub bulk: Option<Bulk>,
}

/// Which bulk action a resolution belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bulk {
    /// The bulk run's id, the same on every case it touched.
    pub id: String,
    /// How many cases it was started on.
    pub of: usize,
}

#[derive(Debug, Clone)]
pub struct Resolved {
    pub operation: Operation,
    /// With `AcceptAsNew`: the operation made from the conflicting delivery.
    pub new_operation: Option<OperationId>,
}
