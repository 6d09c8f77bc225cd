//! The [`Alerts`] role: its trait, and (`sql.rs`) its implementation for both backends.

use crate::*;

pub(crate) mod sql;

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
    /// before `review_before`; the store's tenant's connectors. The default tenant's store
    /// (the deployment's `[alerts]`) reads every tenant's cases, stale work and lost
    /// leads, and the event feed's subscribers; another tenant's store its own. Channels are each tenant's
    /// (`alert_channels` by tenant and name).
    async fn alert_facts(
        &self,
        after_case: i64,
        cases_until: DateTime<Utc>,
        stale_before: DateTime<Utc>,
        review_before: DateTime<Utc>,
    ) -> Result<AlertFacts>;
}

/// A channel's sending turn and the state it was taken with (see [`Alerts::alert_turn`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AlertTurn {
    pub token: String,
    pub lease_until: DateTime<Utc>,
    /// The newest review case already announced to the channel.
    pub case_cursor: i64,
    /// When the last message announcing new cases was accepted.
    pub last_group_at: Option<DateTime<Utc>>,
    /// When the channel accepted messages in the last minute, oldest first.
    pub recent_sends: Vec<DateTime<Utc>>,
    pub pending: Option<PendingAlert>,
    /// Failed tries of the pending message.
    pub failures: i32,
    /// The pending message is not tried again before this.
    pub next_try_at: Option<DateTime<Utc>>,
    /// The conditions as last announced to the channel.
    pub conditions: Vec<AlertCondition>,
}

/// A message waiting for a channel to accept it, with what accepting it announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingAlert {
    /// The message (JSON text of `alerts::Digest`; no personal data).
    pub body: String,
    /// The case cursor it advances to, when it announces new cases.
    pub cursor: Option<i64>,
    /// The conditions it announces: key and whether it is firing.
    pub conditions: Vec<(String, bool)>,
}

/// A threshold or a connector pause as last announced to a channel.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AlertCondition {
    pub key: String,
    pub firing: bool,
    /// Since when it has been in this state (as announced).
    pub since: DateTime<Utc>,
    pub notified_at: DateTime<Utc>,
}

/// What became of a pending alert (see [`Alerts::alert_done`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertOutcome {
    /// The channel accepted it.
    Accepted,
    /// The channel refused it for good (it would refuse it again): it is not retried.
    Dropped,
    /// Not accepted; try again at this time.
    Retry { at: DateTime<Utc> },
}

/// New review cases of one reason from one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCaseCount {
    pub reason: String,
    pub source: String,
    pub count: i64,
}

/// See [`Alerts::alert_facts`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlertFacts {
    pub new_cases: Vec<NewCaseCount>,
    /// The first new case ids (at most [`ALERT_CASE_IDS`]), oldest first.
    pub new_case_ids: Vec<i64>,
    pub new_cases_max_id: Option<i64>,
    /// When the oldest new case was opened.
    pub new_cases_first_at: Option<DateTime<Utc>>,
    pub lost: i64,
    pub stale_in_progress: i64,
    pub old_open_cases: i64,
    pub oldest_open_case_at: Option<DateTime<Utc>>,
    pub connectors: Vec<Connector>,
    /// The event feed's subscribers (a disabled one is alerted on).
    pub feeds: Vec<FeedSubscriber>,
    /// What the gateways' intake spools hold (the deployment's alerts only).
    pub spooled: Spooled,
}

/// How many new case ids [`Alerts::alert_facts`] lists.
pub const ALERT_CASE_IDS: i64 = 10;
