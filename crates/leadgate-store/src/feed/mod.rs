//! The [`Feed`] role: its trait, and (`sql.rs`) its implementation for both backends.
//!
//! The events themselves are written by the database (migration 0031's triggers on
//! operations, review cases and connectors), in the transaction of the change they report;
//! this role manages the subscribers and hands the feed's loop (`src/feed/`) one delivery
//! at a time.

use crate::*;
use leadgate_domain::Secret;

mod check;
pub(crate) mod sql;

pub use check::*;

/// The event types the feed carries, as subscribers name them.
pub const FEED_EVENT_TYPES: [&str; 7] = [
    "operation.completed",
    "operation.failed",
    "review.opened",
    "review.resolved",
    "connector.paused",
    "connector.unreachable",
    "connector.resumed",
];

/// How many attempts per subscriber are kept (the newest).
pub const FEED_ATTEMPTS_KEPT: i64 = 500;

/// The signed event feed's subscribers and their deliveries (migration 0031).
#[async_trait::async_trait]
pub trait Feed: Clock {
    /// Adds a subscriber; its id. It is owed the events of `events` that happen from now on.
    async fn feed_subscribe(
        &self,
        url: &str,
        secret: &Secret,
        events: &[String],
        now: DateTime<Utc>,
    ) -> Result<i64>;

    /// Every subscriber, oldest first (never its secret).
    async fn feed_subscribers(&self) -> Result<Vec<FeedSubscriber>>;

    /// Removes a subscriber with what it was owed and its attempts; false when there was none.
    async fn feed_remove(&self, id: i64) -> Result<bool>;

    /// Makes a subscriber active again with a clean failure count: what it missed meanwhile
    /// is sent now. False when there is no such subscriber.
    async fn feed_enable(&self, id: i64) -> Result<bool>;

    /// A subscriber's newest `limit` delivery attempts, newest first.
    async fn feed_attempts(&self, id: i64, limit: i64) -> Result<Vec<FeedAttempt>>;

    /// Active subscribers owed something now: their retry time passed and nobody holds
    /// their turn.
    async fn feed_due(&self, now: DateTime<Utc>) -> Result<Vec<i64>>;

    /// Takes subscriber `id`'s sending turn for `owner` until `now + lease_for`, with the
    /// oldest event it is owed. `None` when it is not active, not due, owed nothing, or
    /// another caller holds the turn (a compare-and-set under the row's lock).
    async fn feed_turn(
        &self,
        id: i64,
        owner: &str,
        lease_for: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<Option<FeedTurn>>;

    /// Records one attempt of the turn's event and ends the turn. `LeaseLost` when the
    /// turn is no longer this token's (nothing is recorded: the event stays owed).
    async fn feed_done(
        &self,
        id: i64,
        token: &str,
        event_seq: i64,
        outcome: &FeedOutcome,
        now: DateTime<Utc>,
    ) -> Result<()>;
}

/// A subscriber as listed (its secret is never read back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct FeedSubscriber {
    pub id: i64,
    pub url: String,
    /// Comma-separated event types.
    pub events: String,
    /// `active` or `disabled`.
    pub state: String,
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// Consecutive failed deliveries.
    pub failures: i32,
    pub first_failed_at: Option<DateTime<Utc>>,
    pub next_try_at: Option<DateTime<Utc>>,
    /// Events it is owed and has not yet accepted.
    pub pending: i64,
}

/// One delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct FeedAttempt {
    pub id: i64,
    pub event_id: String,
    #[sqlx(rename = "type")]
    #[serde(rename = "type")]
    pub kind: String,
    pub at: DateTime<Utc>,
    /// The receiver's HTTP status, when it answered.
    pub status: Option<i32>,
    pub ok: bool,
    pub error: Option<String>,
}

/// An event as stored, the same on every attempt.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FeedEvent {
    pub seq: i64,
    /// The `webhook-id`.
    pub event_id: String,
    #[sqlx(rename = "type")]
    pub kind: String,
    pub occurred_at: DateTime<Utc>,
    /// The `data` object (JSON text).
    pub data: String,
}

/// A subscriber's sending turn (see [`Feed::feed_turn`]).
#[derive(Debug, Clone)]
pub struct FeedTurn {
    pub token: String,
    pub subscriber_id: i64,
    pub url: String,
    pub secret: Secret,
    pub failures: i32,
    pub first_failed_at: Option<DateTime<Utc>>,
    pub event: FeedEvent,
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedOutcome {
    /// The receiver answered 2xx: the event is delivered.
    Delivered { status: u16 },
    /// Not delivered: tried again at `retry_at`; `disable` (why) when the subscriber has
    /// failed long enough to be disabled.
    Failed {
        status: Option<u16>,
        error: String,
        retry_at: DateTime<Utc>,
        disable: Option<String>,
    },
}
