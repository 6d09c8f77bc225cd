//! The signed event feed `leadgate serve` sends to the systems downstream: each
//! subscriber (a URL and a secret, per event type; `leadgate feed`) gets `operation.completed`, `operation.failed`, `review.opened`,
//! `review.resolved`, `connector.paused`, `connector.unreachable` and `connector.resumed`
//! as Standard Webhooks messages ([`sign`]).
//!
//! **Outbox.** The database writes each event (migration 0031's triggers), with one
//! delivery row per subscriber of its type, in the transaction of the change it reports:
//! whatever commits has its event, whatever a `kill -9` cut short has neither. The event's
//! `webhook-id` (`evt_<128 random bits>`) and its body are made then, once: every retry
//! sends the same id and body, so a receiver deduplicates by the id.
//!
//! **Delivery.** At least once, oldest first per subscriber. The loop ([`Feeder`], every
//! `[feed] poll_interval`, on the loop alerts use: `alerts::poll_loop`) takes each due
//! subscriber's turn (a lease under its row's lock: of several gateways one sends),
//! sends its oldest owed event, records the attempt and gives the turn back. Any 2xx
//! delivers it; anything else, or no answer within `timeout`, is a failure: the
//! subscriber waits the alert channels' retry schedule (`alerts::backoff`, stored as
//! its `next_try_at`; a `Retry-After` wins) and gets the same event again.
//!
//! **Disabling.** A subscriber that failed `disable_after_failures` times in a row, the
//! first of them at least `disable_after` ago, is disabled ([`Rules::verdict`]): nothing
//! more is sent to it, its events keep accumulating, and the alert channels announce it
//! (`feed:<id>`, `alerts::Item::FeedSubscriber`). `leadgate feed enable` makes it
//! active again and what it missed goes out.
//!
//! A message carries ids, states, reasons, sources and connector names — never a lead's
//! data; the URL and the secret are never logged.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use tokio::sync::watch;

use crate::alerts::{self, Sent};
use crate::config::FeedConfig;
use crate::store::{self, FeedOutcome, FeedTurn, StoreError};

pub mod sign;

/// Events sent to one subscriber per pass at most (then the next pass continues).
const PER_PASS: usize = 100;

/// When a subscriber is disabled, and its retry schedule.
#[derive(Debug, Clone)]
pub struct Rules {
    pub retry_delay: Duration,
    pub max_retry_delay: Duration,
    pub disable_after_failures: i32,
    pub disable_after: Duration,
}

impl Rules {
    pub fn new(config: &FeedConfig) -> Rules {
        Rules {
            retry_delay: config.retry_delay,
            max_retry_delay: config.max_retry_delay,
            disable_after_failures: config.disable_after_failures,
            disable_after: config.disable_after,
        }
    }

    /// After a failed attempt (the `failures`-th before it, the first at `first_failed_at`):
    /// why the subscriber is disabled now, or `None` to keep trying.
    pub fn verdict(
        &self,
        failures_before: i32,
        first_failed_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
        error: &str,
    ) -> Option<String> {
        let failures = failures_before + 1;
        let since = first_failed_at.unwrap_or(now);
        (failures >= self.disable_after_failures && store::after(since, self.disable_after) <= now)
            .then(|| {
                format!(
                    "{failures} deliveries in a row failed since {}; the last: {error}",
                    since.to_rfc3339_opts(SecondsFormat::Secs, true)
                )
            })
    }
}

/// The body of an event's message: `{"type", "timestamp", "data"}` (the Standard
/// Webhooks shape), the same bytes on every attempt.
pub fn body(event: &store::FeedEvent) -> Vec<u8> {
    let data: serde_json::Value =
        serde_json::from_str(&event.data).unwrap_or(serde_json::Value::Null);
    serde_json::to_vec(&serde_json::json!({
        "type": event.kind,
        "timestamp": event.occurred_at.to_rfc3339_opts(SecondsFormat::Micros, true),
        "data": data,
    }))
    .expect("an event serializes")
}

/// Event types from a comma-separated list, and a subscriber's URL, checked: the
/// store's checks, the same for the CLI and a person's request from the console.
pub use store::{check_feed_url as check_url, feed_event_types as event_types};

/// The feed's loop (one per `serve`).
pub struct Feeder {
    pub store: Arc<dyn store::Feed>,
    pub rules: Rules,
    pub poll_interval: Duration,
    /// One call's limit (the HTTP client cuts it there too).
    pub timeout: Duration,
    /// Holds the turns (`serve:<host>:<pid>`).
    pub owner: String,
    http: reqwest::Client,
}

impl Feeder {
    pub fn new(
        store: Arc<dyn store::Feed>,
        config: &FeedConfig,
        owner: &str,
    ) -> Result<Feeder, String> {
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            // The event goes to the subscriber's URL and nowhere else.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|_| "the event feed's HTTP client could not be set up".to_owned())?;
        Ok(Feeder {
            store,
            rules: Rules::new(config),
            poll_interval: config.poll_interval,
            timeout: config.timeout,
            owner: owner.to_owned(),
            http,
        })
    }

    pub async fn run(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        alerts::poll_loop("feed", "", self.poll_interval, shutdown, || self.pass()).await
    }

    /// Every due subscriber, side by side: the events sent.
    pub async fn pass(&self) -> store::Result<usize> {
        let due = self.store.feed_due(self.store.now()).await?;
        let sent = futures::future::join_all(due.into_iter().map(|id| self.drain(id))).await;
        let mut total = 0;
        for s in sent {
            total += s?;
        }
        Ok(total)
    }

    /// Sends a subscriber's owed events, oldest first, until one fails or it owes none.
    async fn drain(&self, id: i64) -> store::Result<usize> {
        let mut sent = 0;
        while sent < PER_PASS {
            let now = self.store.now();
            let Some(turn) = self
                .store
                .feed_turn(id, &self.owner, self.timeout + alerts::LEASE_MARGIN, now)
                .await?
            else {
                break;
            };
            let outcome = self.send(&turn).await;
            let delivered = matches!(outcome, FeedOutcome::Delivered { .. });
            match alerts::through_transient(|| {
                self.store
                    .feed_done(id, &turn.token, turn.event.seq, &outcome, self.store.now())
            })
            .await
            {
                Err(StoreError::LeaseLost(_)) => break,
                other => other?,
            }
            sent += 1;
            if !delivered {
                break;
            }
        }
        Ok(sent)
    }

    /// One attempt of the turn's event.
    async fn send(&self, turn: &FeedTurn) -> FeedOutcome {
        let event = &turn.event;
        let failed = |status: Option<u16>, error: String, after: Option<Duration>| {
            let now = self.store.now();
            let wait = after.unwrap_or_else(|| {
                alerts::backoff(
                    self.rules.retry_delay,
                    self.rules.max_retry_delay,
                    turn.failures,
                )
            });
            let disable = self
                .rules
                .verdict(turn.failures, turn.first_failed_at, now, &error);
            match &disable {
                Some(why) => {
                    tracing::error!(subscriber = turn.subscriber_id, event_id = %event.event_id,
                    reason = %why, "event-feed subscriber disabled")
                }
                None => tracing::warn!(subscriber = turn.subscriber_id, event_id = %event.event_id,
                    %error, retry_in = ?wait, failures = turn.failures + 1,
                    "event not delivered; sent again later"),
            }
            FeedOutcome::Failed {
                status,
                error,
                retry_at: store::after(now, wait),
                disable,
            }
        };
        let key = match sign::key(&turn.secret) {
            Ok(k) => k,
            Err(e) => return failed(None, e, None),
        };
        let body = body(event);
        let timestamp = self.store.now().timestamp();
        let signature = sign::signature(&key, &event.event_id, timestamp, &body);
        let request = self
            .http
            .post(&turn.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", &event.event_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body);
        let call = alerts::post_webhook(request, "the subscriber");
        let (status, sent) = match tokio::time::timeout(self.timeout, call).await {
            Ok(answer) => answer,
            Err(_) => (
                None,
                Sent::Retry {
                    after: None,
                    error: "the subscriber did not answer in time".into(),
                },
            ),
        };
        match sent {
            Sent::Accepted => FeedOutcome::Delivered {
                status: status.unwrap_or(200),
            },
            // Every other answer is a failure of this subscriber: the event is owed until
            // it takes it (or someone removes the subscriber).
            Sent::Retry { after, error } => failed(status, error, after),
            Sent::Refused { error } => failed(status, error, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        "2026-03-01T10:00:00Z".parse::<DateTime<Utc>>().unwrap() + chrono::TimeDelta::seconds(secs)
    }

    #[test]
    fn a_subscriber_is_disabled_after_enough_failures_over_enough_time() {
        let r = Rules {
            retry_delay: Duration::from_secs(1),
            max_retry_delay: Duration::from_secs(300),
            disable_after_failures: 5,
            disable_after: Duration::from_secs(600),
        };
        // Many failures in a short time: not yet.
        assert_eq!(r.verdict(10, Some(t(0)), t(599), "x"), None);
        // A long time but few failures: not yet.
        assert_eq!(r.verdict(3, Some(t(0)), t(10_000), "x"), None);
        let why = r
            .verdict(4, Some(t(0)), t(600), "the subscriber answered HTTP 503")
            .unwrap();
        assert_eq!(
            why,
            "5 deliveries in a row failed since 2026-03-01T10:00:00Z; the last: the subscriber answered HTTP 503"
        );
    }

    #[test]
    fn event_types_are_checked_and_all_means_every_one() {
        assert_eq!(event_types("all").unwrap().len(), 7);
        assert_eq!(event_types("").unwrap().len(), 7);
        assert_eq!(
            event_types("review.opened, operation.failed,review.opened").unwrap(),
            vec!["review.opened", "operation.failed"]
        );
        assert!(event_types("review.open")
            .unwrap_err()
            .contains("review.open`"));
        assert!(check_url("https://example.com/hook?x=1").is_ok());
        assert!(check_url("ftp://example.com").is_err());
        assert!(check_url("https://exa mple.com").is_err());
    }
}
