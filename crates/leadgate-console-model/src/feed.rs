//! The event feed's subscribers on the dashboard (admins; the operator on SQLite): who
//! gets which events, whether they are delivered, and the changes — add, remove,
//! re-enable — as people's requests (`store::Ask::Feed*`), like every other action.
//!
//! *Add subscriber* makes the secret here (the generator `leadgate feed subscribe` uses,
//! `store::new_feed_secret`) and answers it once: the store never reads a secret back,
//! and a gateway removes it from the request's row when it answers.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use leadgate_store::{Answer, Ask};

use crate::{ts, unexpected_answer, ApiResult, Console};

/// How many attempts a subscriber's *Deliveries* shows (the newest).
pub const FEED_ATTEMPTS_SHOWN: i64 = 20;

/// A subscriber as the console lists it (never its secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct FeedSubscriberView {
    #[ts(type = "number")]
    pub id: i64,
    /// The URL without its query, fragment and user info (where tokens ride).
    pub url: String,
    pub events: Vec<String>,
    /// `active` or `disabled`.
    pub state: String,
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<String>,
    /// Deliveries that failed in a row.
    pub failures: i32,
    /// Events it is owed and has not accepted yet.
    #[ts(type = "number")]
    pub pending: i64,
}

/// One delivery attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct FeedAttemptView {
    pub event_id: String,
    /// The event's type (`review.opened`, …).
    pub kind: String,
    pub at: String,
    /// The receiver's HTTP status, when it answered.
    pub status: Option<i32>,
    pub ok: bool,
    pub error: Option<String>,
}

/// A new subscriber: its id and its secret, shown this once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct FeedSubscribed {
    #[ts(type = "number")]
    pub id: i64,
    pub secret: String,
}

impl Console {
    /// Every subscriber, oldest first.
    pub async fn feed_subscribers(&self) -> ApiResult<Vec<FeedSubscriberView>> {
        Ok(self
            .store
            .feed_subscribers()
            .await?
            .into_iter()
            .map(|s| FeedSubscriberView {
                id: s.id,
                url: leadgate_store::feed_display_url(&s.url),
                events: s.events.split(',').map(str::to_owned).collect(),
                state: s.state,
                disabled_reason: s.disabled_reason,
                disabled_at: s.disabled_at.map(ts),
                failures: s.failures,
                pending: s.pending,
            })
            .collect())
    }

    /// Subscriber `id`'s newest attempts, newest first.
    pub async fn feed_attempts(&self, id: i64) -> ApiResult<Vec<FeedAttemptView>> {
        Ok(self
            .store
            .feed_attempts(id, FEED_ATTEMPTS_SHOWN)
            .await?
            .into_iter()
            .map(|a| FeedAttemptView {
                event_id: a.event_id,
                kind: a.kind,
                at: ts(a.at),
                status: a.status,
                ok: a.ok,
                error: a.error,
            })
            .collect())
    }

    /// Adds a subscriber of `events` (the feed's types, or `all`) at `url`, with a new
    /// secret: answered here once, never again.
    pub async fn feed_subscribe(
        &self,
        operator: &str,
        url: &str,
        events: Vec<String>,
    ) -> ApiResult<FeedSubscribed> {
        let secret = leadgate_store::new_feed_secret();
        let ask = Ask::FeedSubscribe {
            url: url.trim().to_owned(),
            events,
            secret: secret.clone(),
        };
        match self.performer.perform(operator, ask).await? {
            Answer::FeedSubscribed { id } => Ok(FeedSubscribed {
                id,
                secret: secret.expose().to_owned(),
            }),
            _ => Err(unexpected_answer()),
        }
    }

    /// Removes subscriber `id`; false when there was none.
    pub async fn feed_remove(&self, operator: &str, id: i64) -> ApiResult<bool> {
        self.feed_change(operator, Ask::FeedRemove { id }).await
    }

    /// Makes subscriber `id` active again (what it missed goes out); false when there is
    /// none.
    pub async fn feed_enable(&self, operator: &str, id: i64) -> ApiResult<bool> {
        self.feed_change(operator, Ask::FeedEnable { id }).await
    }

    async fn feed_change(&self, operator: &str, ask: Ask) -> ApiResult<bool> {
        match self.performer.perform(operator, ask).await? {
            Answer::FeedChanged { done } => Ok(done),
            _ => Err(unexpected_answer()),
        }
    }
}
