//! What the Bot API hands a bot: updates, by polling or by webhook
//! (core.telegram.org/bots/api#getting-updates).
//!
//! - [`FakeTelegram::user_sends`] is a user writing to the bot: an update
//!   `{"update_id":N,"message":{…}}` waits until it is confirmed, ids increasing.
//! - `getUpdates` (`offset`, `limit` 1–100, default 100; `timeout` seconds of long
//!   polling, default 0): an `offset` confirms every update with a lower id, which is
//!   then never returned again; the answer is `{"ok":true,"result":[updates…]}` from the
//!   oldest unconfirmed one. While a webhook is set it is 409 `Conflict: can't use
//!   getUpdates method while webhook is active; use deleteWebhook to delete the webhook
//!   first`.
//! - `setWebhook` (`url`, optional `secret_token`) → `{"ok":true,"result":true,
//!   "description":"Webhook was set"}`; from then on each update is POSTed (JSON) to the
//!   URL with `X-Telegram-Bot-Api-Secret-Token`, one at a time, oldest first, and
//!   delivered again after [`REDELIVER_AFTER`] until the bot answers 2xx — an answer
//!   that does not come within [`WEBHOOK_TIMEOUT`] counts as a failure. `deleteWebhook`
//!   stops it; unconfirmed updates stay.

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::{error, lock, FakeTelegram, Shared};
use crate::telegram::AppState;

/// How long the fake waits before delivering an update its webhook did not take.
pub const REDELIVER_AFTER: Duration = Duration::from_millis(200);
/// How long a webhook delivery may take before it counts as failed.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
pub(super) struct Updates {
    last_id: u64,
    pending: VecDeque<Value>,
    webhook: Option<(String, Option<String>)>,
    /// Bumped at every setWebhook/deleteWebhook: an older delivery loop stops.
    generation: u64,
    /// Webhook POSTs made (failed ones too).
    posts: u64,
}

pub(super) const METHODS: &[&str] = &["getUpdates", "setWebhook", "deleteWebhook"];

impl FakeTelegram {
    /// A user sends `message` (`{"message_id":…,"from":…,"chat":…,"date":…,"text":…}`)
    /// to the bot; returns the update's id.
    pub fn user_sends(&self, message: Value) -> u64 {
        let id = {
            let mut u = lock(&self.shared.updates);
            u.last_id += 1;
            let id = 700_000_000 + u.last_id;
            u.pending
                .push_back(json!({"update_id": id, "message": message}));
            id
        };
        self.shared.new_update.notify_waiters();
        id
    }

    /// Updates not confirmed yet (by an `offset` or a webhook's 2xx).
    pub fn pending_updates(&self) -> Vec<Value> {
        lock(&self.shared.updates).pending.iter().cloned().collect()
    }

    /// Webhook deliveries made, failed ones included.
    pub fn webhook_posts(&self) -> u64 {
        lock(&self.shared.updates).posts
    }
}

fn int(p: &Map<String, Value>, key: &str) -> Option<i64> {
    match p.get(key)? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

pub(super) async fn handle(
    state: &AppState,
    method: &str,
    p: Map<String, Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let shared = &state.shared;
    match method {
        "getUpdates" => {
            if lock(&shared.updates).webhook.is_some() {
                return error(
                    409,
                    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first",
                );
            }
            let limit = int(&p, "limit").unwrap_or(100).clamp(1, 100) as usize;
            let timeout = int(&p, "timeout").unwrap_or(0).clamp(0, 50) as u64;
            if let Some(offset) = int(&p, "offset") {
                let mut u = lock(&shared.updates);
                u.pending
                    .retain(|upd| upd["update_id"].as_i64().is_some_and(|id| id >= offset));
            }
            let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
            loop {
                let waiting = shared.new_update.notified();
                let got: Vec<Value> = lock(&shared.updates)
                    .pending
                    .iter()
                    .take(limit)
                    .cloned()
                    .collect();
                if !got.is_empty() || tokio::time::Instant::now() >= deadline {
                    return axum::Json(json!({"ok": true, "result": got})).into_response();
                }
                let _ = tokio::time::timeout_at(deadline, waiting).await;
            }
        }
        "setWebhook" => {
            let url = p.get("url").and_then(Value::as_str).unwrap_or("").trim();
            if url.is_empty() {
                return error(
                    400,
                    "Bad Request: bad webhook: an HTTPS URL must be provided for webhook",
                );
            }
            let secret = p
                .get("secret_token")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let generation = {
                let mut u = lock(&shared.updates);
                u.webhook = Some((url.to_owned(), secret));
                u.generation += 1;
                u.generation
            };
            let (shared, shutdown) = (shared.clone(), state.shutdown.clone());
            tokio::spawn(deliver(shared, generation, shutdown));
            axum::Json(json!({"ok": true, "result": true, "description": "Webhook was set"}))
                .into_response()
        }
        _ => {
            let mut u = lock(&shared.updates);
            u.webhook = None;
            u.generation += 1;
            axum::Json(json!({"ok": true, "result": true, "description": "Webhook was deleted"}))
                .into_response()
        }
    }
}

/// The webhook's delivery loop: the oldest unconfirmed update, until it gets a 2xx.
async fn deliver(
    shared: std::sync::Arc<Shared>,
    generation: u64,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let http = reqwest::Client::builder()
        .timeout(WEBHOOK_TIMEOUT)
        .build()
        .expect("an HTTP client");
    loop {
        if *shutdown.borrow() {
            return;
        }
        let next = {
            let u = lock(&shared.updates);
            if u.generation != generation {
                return;
            }
            u.webhook
                .clone()
                .and_then(|(url, secret)| Some((url, secret, u.pending.front()?.clone())))
        };
        let Some((url, secret, update)) = next else {
            let waiting = shared.new_update.notified();
            tokio::select! {
                _ = tokio::time::timeout(REDELIVER_AFTER, waiting) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            continue;
        };
        let mut req = http.post(&url).json(&update);
        if let Some(s) = &secret {
            req = req.header("X-Telegram-Bot-Api-Secret-Token", s);
        }
        lock(&shared.updates).posts += 1;
        let ok = req.send().await.is_ok_and(|r| r.status().is_success());
        if ok {
            let mut u = lock(&shared.updates);
            if u.pending.front() == Some(&update) {
                u.pending.pop_front();
            }
        } else {
            tokio::select! {
                _ = tokio::time::sleep(REDELIVER_AFTER) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}

pub(super) fn reset(shared: &Shared) {
    let mut u = lock(&shared.updates);
    let generation = u.generation + 1;
    *u = Updates {
        generation,
        ..Updates::default()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn call(tg: &FakeTelegram, method: &str, body: Value) -> (u16, Value) {
        let res = reqwest::Client::new()
            .post(format!("{}/bot{}/{method}", tg.api_base(), tg.token()))
            .json(&body)
            .send()
            .await
            .unwrap();
        (res.status().as_u16(), res.json().await.unwrap())
    }

    #[tokio::test]
    async fn get_updates_confirms_below_the_offset_and_refuses_while_a_webhook_is_set() {
        let tg = FakeTelegram::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let a = tg.user_sends(json!({"message_id": 1, "text": "a"}));
        let b = tg.user_sends(json!({"message_id": 2, "text": "b"}));
        assert!(b > a);
        let (_, got) = call(&tg, "getUpdates", json!({})).await;
        assert_eq!(got["ok"], true);
        assert_eq!(got["result"].as_array().unwrap().len(), 2);
        // Read again without an offset: nothing was confirmed.
        let (_, again) = call(&tg, "getUpdates", json!({"limit": 1})).await;
        assert_eq!(again["result"][0]["update_id"], a);
        // An offset past `a` confirms it and only it.
        let (_, after) = call(&tg, "getUpdates", json!({"offset": a + 1})).await;
        assert_eq!(after["result"][0]["update_id"], b);
        assert_eq!(tg.pending_updates().len(), 1);
        // Long polling returns as soon as an update comes.
        let waiting = tokio::spawn({
            let url = format!("{}/bot{}/getUpdates", tg.api_base(), tg.token());
            async move {
                reqwest::Client::new()
                    .post(url)
                    .json(&json!({"offset": b + 1, "timeout": 5}))
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let c = tg.user_sends(json!({"message_id": 3, "text": "c"}));
        let got = waiting.await.unwrap();
        assert_eq!(got["result"][0]["update_id"], c);
        let (_, set) = call(&tg, "setWebhook", json!({"url": "http://127.0.0.1:9/none"})).await;
        assert_eq!(set["result"], true);
        let (status, refused) = call(&tg, "getUpdates", json!({})).await;
        assert_eq!(status, 409);
        assert!(refused["description"]
            .as_str()
            .unwrap()
            .starts_with("Conflict"));
        call(&tg, "deleteWebhook", json!({})).await;
        let (status, _) = call(&tg, "getUpdates", json!({})).await;
        assert_eq!(status, 200);
    }
}
