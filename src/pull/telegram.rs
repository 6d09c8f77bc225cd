//! Telegram bot updates by polling (core.telegram.org/bots/api#getupdates), for bots
//! without a public address: `getUpdates` hands out the updates not confirmed yet, oldest
//! first; an `offset` confirms every update below it. The offset moves past an update only
//! once it is recorded, and lives in memory only: Telegram keeps the unconfirmed updates,
//! so a gateway killed after recording and before its next call gets them again, and the
//! key (`update_id`, as for the webhook preset) absorbs them. The bot token is part of
//! every URL: errors are logged by Telegram's code and description, never with the URL.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use crate::config::{PullConfig, Secret};
use crate::intake::IntakeState;

pub struct UpdatesPoll {
    source: String,
    /// `<api base>/bot<token>/`: a secret.
    base: Secret,
    every: Duration,
    batch: u32,
    http: reqwest::Client,
}

impl UpdatesPoll {
    pub fn new(
        source: &str,
        pull: &PullConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<UpdatesPoll, String> {
        let field = |f: &str, e: String| format!("source `{source}`: pull.{f}: {e}");
        let api = pull.url.resolve(&env).map_err(|e| field("url", e))?;
        let api = api.expose().trim().trim_end_matches('/').to_owned();
        if !(api.starts_with("https://") || api.starts_with("http://")) {
            return Err(field("url", "must be an http:// or https:// URL".into()));
        }
        let token = pull
            .bot_token
            .as_ref()
            .ok_or_else(|| field("bot_token", "is not set".into()))?
            .resolve(&env)
            .map_err(|e| field("bot_token", e))?;
        let http = reqwest::Client::builder()
            .timeout(pull.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|_| field("url", "the HTTP client could not be set up".into()))?;
        Ok(UpdatesPoll {
            source: source.to_owned(),
            base: Secret::new(format!("{api}/bot{}/", token.expose())),
            every: pull.every,
            batch: pull.batch,
            http,
        })
    }

    /// One `getUpdates`: the updates from `offset` on.
    pub async fn get(&self, offset: Option<i64>) -> Result<Vec<Value>, String> {
        let mut params = json!({"limit": self.batch, "timeout": 0});
        if let Some(o) = offset {
            params["offset"] = json!(o);
        }
        let res = self
            .http
            .post(format!("{}getUpdates", self.base.expose()))
            .json(&params)
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    "getUpdates: no answer within the timeout".to_owned()
                } else {
                    "getUpdates: the Bot API could not be reached".to_owned()
                }
            })?;
        let status = res.status();
        let body: Value = res
            .json()
            .await
            .map_err(|_| format!("getUpdates: HTTP {status} without a JSON body"))?;
        if body["ok"] == true {
            return Ok(body["result"].as_array().cloned().unwrap_or_default());
        }
        Err(format!(
            "getUpdates: {} {}",
            body["error_code"],
            body["description"].as_str().unwrap_or("")
        ))
    }

    pub async fn run(&self, state: IntakeState, mut shutdown: watch::Receiver<bool>) {
        let source = self.source.as_str();
        let mut offset: Option<i64> = None;
        loop {
            if *shutdown.borrow() {
                return;
            }
            let full = match self.poll_once(&state, &mut offset).await {
                Ok(n) => n >= self.batch as usize,
                Err(e) => {
                    tracing::warn!(source, error = %e, "pulling Telegram updates failed; retrying");
                    false
                }
            };
            if !full && super::pause(self.every, &mut shutdown).await {
                return;
            }
        }
    }

    /// One call: the updates recorded, then the offset moved past them (confirmed with the
    /// next call). Returns how many came.
    pub async fn poll_once(
        &self,
        state: &IntakeState,
        offset: &mut Option<i64>,
    ) -> Result<usize, String> {
        let updates = self.get(*offset).await?;
        if updates.is_empty() {
            return Ok(0);
        }
        super::record_batch(state, &self.source, &updates)
            .await
            .map_err(|e| format!("recording: {e}"))?;
        if let Some(last) = updates.iter().filter_map(|u| u["update_id"].as_i64()).max() {
            *offset = Some(last + 1);
        }
        Ok(updates.len())
    }
}
