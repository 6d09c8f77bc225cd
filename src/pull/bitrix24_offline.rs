//! Bitrix24 offline events, drained without loss (apidocs.bitrix24.com,
//! api-reference/events/offline-events.html): the portal keeps the events bound with
//! `event.bind` (`event_type=offline`) in a queue; `event.offline.get` with `clear=0`
//! hands out a batch marked with a process id and hides it from other readers; the batch
//! leaves the queue only with `event.offline.clear` for that process id.
//!
//! The gateway's process id is its *mark*, saved in the database (`pull_cursors`,
//! migration 0018) before the first batch is taken and presented with every
//! `event.offline.get`, so a gateway killed after taking a batch gets the same records
//! back when it starts again. A batch is cleared (by record id) only once every event in
//! it is recorded; a repeat is absorbed by the key (`<EVENT_NAME>:<ID>` of the queue
//! record). The portal's answers never reach a log: the REST base holds the webhook's
//! secret, and errors are logged by code.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use crate::config::{PullConfig, Secret};
use crate::intake::IntakeState;

/// One pulled Bitrix24 portal.
pub struct OfflineQueue {
    source: String,
    /// The REST base, ending in `/`; a secret (an incoming webhook carries one in its path).
    base: Secret,
    access_token: Option<Secret>,
    events: Vec<String>,
    every: Duration,
    batch: u32,
    http: reqwest::Client,
}

/// A failed call: the method and what the portal (or the network) said, without the URL.
#[derive(Debug)]
pub struct CallError {
    pub method: &'static str,
    pub what: String,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.method, self.what)
    }
}

/// What `event.offline.get` handed out.
#[derive(Debug)]
pub struct Batch {
    pub process_id: Option<String>,
    pub events: Vec<Value>,
}

impl OfflineQueue {
    pub fn new(
        source: &str,
        pull: &PullConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<OfflineQueue, String> {
        let field = |f: &str, e: String| format!("source `{source}`: pull.{f}: {e}");
        let base = pull.url.resolve(&env).map_err(|e| field("url", e))?;
        let mut base_text = base.expose().trim().to_owned();
        if !(base_text.starts_with("https://") || base_text.starts_with("http://")) {
            return Err(field("url", "must be an http:// or https:// URL".into()));
        }
        if !base_text.ends_with('/') {
            base_text.push('/');
        }
        let access_token = match &pull.access_token {
            Some(t) => Some(t.resolve(&env).map_err(|e| field("access_token", e))?),
            None => None,
        };
        let http = reqwest::Client::builder()
            .timeout(pull.timeout)
            // The webhook's secret goes to this portal and nowhere else.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|_| field("url", "the HTTP client could not be set up".into()))?;
        Ok(OfflineQueue {
            source: source.to_owned(),
            base: Secret::new(base_text),
            access_token,
            events: pull
                .events
                .iter()
                .map(|e| e.trim().to_ascii_uppercase())
                .collect(),
            every: pull.every,
            batch: pull.batch,
            http,
        })
    }

    /// One REST call: the `result`, or the portal's error code and description.
    async fn call(&self, method: &'static str, mut params: Value) -> Result<Value, CallError> {
        if let (Some(token), Some(obj)) = (&self.access_token, params.as_object_mut()) {
            obj.insert("auth".into(), Value::String(token.expose().to_owned()));
        }
        let err = |what: String| CallError { method, what };
        let res = self
            .http
            .post(format!("{}{method}.json", self.base.expose()))
            .json(&params)
            .send()
            .await
            .map_err(|e| {
                err(if e.is_timeout() {
                    "no answer within the timeout".into()
                } else {
                    "the portal could not be reached".into()
                })
            })?;
        let status = res.status();
        let body: Value = res
            .json()
            .await
            .map_err(|_| err(format!("HTTP {status} without a JSON body")))?;
        if let Some(result) = body.get("result") {
            return Ok(result.clone());
        }
        let text = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        Err(err(format!(
            "HTTP {status} {} {}",
            text("error"),
            text("error_description")
        )))
    }

    /// Binds every configured event offline; one bound before is fine.
    pub async fn bind(&self) -> Result<(), CallError> {
        for event in &self.events {
            match self
                .call(
                    "event.bind",
                    json!({"event": event, "event_type": "offline"}),
                )
                .await
            {
                Ok(_) => {}
                Err(e) if e.what.contains("already binded") => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The next batch for `process_id`: what nobody took, and what this process took
    /// and did not clear.
    pub async fn take(&self, process_id: &str) -> Result<Batch, CallError> {
        let result = self
            .call(
                "event.offline.get",
                json!({"clear": 0, "limit": self.batch, "process_id": process_id}),
            )
            .await?;
        let events = match result.get("events") {
            Some(Value::Array(items)) => items.clone(),
            _ => Vec::new(),
        };
        Ok(Batch {
            process_id: result
                .get("process_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            events,
        })
    }

    /// Removes the records `ids` that `process_id` took.
    pub async fn clear(&self, process_id: &str, ids: &[String]) -> Result<(), CallError> {
        self.call(
            "event.offline.clear",
            json!({"process_id": process_id, "id": ids}),
        )
        .await
        .map(|_| ())
    }

    /// This source's process id: the saved one, else a new one saved before first use.
    async fn mark(&self, state: &IntakeState) -> Result<String, crate::store::StoreError> {
        if let Some(mark) = state.store.pull_mark(&self.source).await? {
            return Ok(mark);
        }
        let mark = uuid::Uuid::new_v4().simple().to_string();
        state
            .store
            .save_pull_mark(&self.source, &mark, state.store.now())
            .await?;
        Ok(mark)
    }

    /// Binds, then drains the queue until shutdown: take a batch, record all of it,
    /// clear it; wait `every` when the queue is empty or something failed.
    pub async fn run(&self, state: IntakeState, mut shutdown: watch::Receiver<bool>) {
        let source = self.source.as_str();
        while let Err(e) = self.bind().await {
            tracing::warn!(source, error = %e, "binding Bitrix24 offline events failed; retrying");
            if super::pause(self.every, &mut shutdown).await {
                return;
            }
        }
        let mut mark = loop {
            match self.mark(&state).await {
                Ok(m) => break m,
                Err(e) => {
                    tracing::warn!(source, error = %e, "reading the pull mark failed; retrying");
                    if super::pause(self.every, &mut shutdown).await {
                        return;
                    }
                }
            }
        };
        loop {
            if *shutdown.borrow() {
                return;
            }
            let full = match self.drain_once(&state, &mut mark).await {
                Ok(n) => n >= self.batch as usize,
                Err(e) => {
                    tracing::warn!(source, error = %e, "pulling Bitrix24 offline events failed; retrying");
                    false
                }
            };
            if !full && super::pause(self.every, &mut shutdown).await {
                return;
            }
        }
    }

    /// One batch: taken, recorded, cleared. Returns how many events it held.
    pub async fn drain_once(
        &self,
        state: &IntakeState,
        mark: &mut String,
    ) -> Result<usize, String> {
        let batch = self.take(mark).await.map_err(|e| e.to_string())?;
        if batch.events.is_empty() {
            return Ok(0);
        }
        // A portal that chose its own process id: saved before anything is recorded, so a
        // restart still gets this batch back.
        if let Some(pid) = batch.process_id.filter(|p| p != mark) {
            state
                .store
                .save_pull_mark(&self.source, &pid, state.store.now())
                .await
                .map_err(|e| e.to_string())?;
            *mark = pid;
        }
        super::record_batch(state, &self.source, &batch.events)
            .await
            .map_err(|e| format!("recording: {e}"))?;
        let ids: Vec<String> = batch
            .events
            .iter()
            .filter_map(|e| match e.get("ID")? {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect();
        if !ids.is_empty() {
            self.clear(mark, &ids).await.map_err(|e| e.to_string())?;
        }
        Ok(batch.events.len())
    }
}
