//! Who retries a lead an integration claimed and could not deliver: Leadgate's worker.
//!
//! An n8n workflow claims a key through the claim API, calls the CRM and reports. When it
//! reports `not_sent` or `rate_limited`, the operation is `received` again and due after
//! a backoff (the CRM's `Retry-After` honoured) — but n8n's webhook has long answered its
//! sender, the execution ended, and the worker never calls the CRM for an operation
//! someone else executes. The same holds for a lead first claimed while the connector was
//! paused (the claim answered 503): after `leadgate connector resume` nobody would send
//! it again.
//!
//! So the worker, the single owner of retries, calls the integration back: when such an
//! operation is due, its stored payload (the body the integration claimed it with) is
//! POSTed to `[claim_api] redeliver_url` — the workflow's own webhook — with
//! `Authorization: Bearer <integration token>`, `X-Leadgate-Operation-Id`,
//! `X-Leadgate-Idempotency-Key` (the key to claim it with) and `X-Leadgate-Redelivery:
//! <n>`. The workflow runs as for any delivery and claims the key again; the claim API decides as always (one lease at a time, the saved result for
//! a completed key), so a redelivery can never create a second lead. The due times live
//! in the operations database, so a restart of n8n or of Leadgate loses nothing: a
//! webhook that is down, answers an error, or whose run dies before claiming is sent the
//! lead again `[claim_api] redeliver_every` later, until it claims.
//!
//! The claim stays the only way to a lease: a redelivery only asks the workflow to claim.
//! Taking a due operation is a compare-and-set on its `redeliveries` row per due time
//! (`ClaimApi::take_due_redeliveries`), so processes sharing a database send it once.
//! Nothing in `needs_review`, `in_progress`, `completed` or `failed_terminal` is ever
//! sent back.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;

use crate::config::Secret;
use crate::domain::EventKind;
use crate::store::{self, DueRedelivery, NewEvent, Store};

/// Operations sent back per pass.
const BATCH: i64 = 50;
/// One call to the webhook (n8n's production webhook answers at once: "workflow started").
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the redelivery loop is configured with.
pub struct RedeliverSettings {
    /// The claim API's source name (also its connector).
    pub source: String,
    pub url: Secret,
    pub token: Secret,
    pub every: Duration,
    pub poll_interval: Duration,
    /// Named on the timeline (`worker:<host>:<pid>`).
    pub owner: String,
}

pub struct Redeliverer {
    store: Arc<dyn Store>,
    settings: RedeliverSettings,
    http: reqwest::Client,
}

impl Redeliverer {
    pub fn new(store: Arc<dyn Store>, settings: RedeliverSettings) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            // The integration token goes to this URL and nowhere else.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Redeliverer {
            store,
            settings,
            http,
        })
    }

    /// Runs passes every poll interval until shutdown. A pass in flight is given up at
    /// shutdown (a webhook that hangs holds no stop for long): what it took and did not
    /// send is sent `redeliver_every` later, and a redelivery only asks the integration
    /// to claim.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        loop {
            let passed = tokio::select! {
                r = self.pass() => r,
                _ = shutdown.wait_for(|stop| *stop) => return,
            };
            match passed {
                Ok(n) if n as i64 == BATCH => continue,
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "redelivery pass failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.poll_interval) => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
        }
    }

    /// Takes what is due and sends it back; returns how many were taken.
    pub async fn pass(&self) -> store::Result<usize> {
        let now = self.store.now();
        let due = self
            .store
            .take_due_redeliveries(
                &self.settings.source,
                &self.settings.owner,
                now,
                store::after(now, self.settings.every),
                BATCH,
            )
            .await?;
        for r in &due {
            if let Err(error) = self.send(r).await {
                tracing::warn!(operation_id = %r.operation_id, redelivery = r.sent, %error,
                    "redelivery to the integration failed; sent again later");
                let event = NewEvent::new(
                    EventKind::RedeliveryFailed,
                    json!({"redelivery": r.sent, "error": error}),
                );
                let now = self.store.now();
                if let Err(e) = self
                    .store
                    .note(&r.operation_id, &self.settings.owner, event, now)
                    .await
                {
                    tracing::error!(operation_id = %r.operation_id, error = %e,
                        "recording a failed redelivery failed");
                }
            } else {
                tracing::info!(operation_id = %r.operation_id, redelivery = r.sent,
                    "redelivered to the integration");
            }
        }
        Ok(due.len())
    }

    /// The `Idempotency-Key` that claims `r` through the claim API: its operation id
    /// without the source. The payload's own key field is not enough — an operation a
    /// person accepted as new (`<key>#accepted-<delivery id>`) carries the conflicting
    /// body, whose key field names the original: claimed by it, it is a conflict again,
    /// every `redeliver_every`, and the accepted lead never reaches the CRM. Nor is the
    /// operation id: claimed as a key it would be a new operation (`<source>:<source>:…`).
    /// A tenant's key goes without the tenant: its claim API adds it back.
    fn claim_key<'a>(&self, r: &'a DueRedelivery) -> &'a str {
        let id = r.operation_id.local_part();
        id.strip_prefix(self.settings.source.as_str())
            .and_then(|rest| rest.strip_prefix(':'))
            .unwrap_or(id)
    }

    /// [`Self::claim_key`] as the `Idempotency-Key` field value that claims `r` again
    /// (`intake::idempotency::field_value`): as it is, as always, unless it is a key made
    /// since the draft's parsing that a gateway would read otherwise (one that begins with
    /// a quote or a space): then an RFC 8941 string.
    async fn claim_field(&self, r: &DueRedelivery) -> store::Result<String> {
        use crate::intake::idempotency::{field_value, reads_back_bare};
        let key = self.claim_key(r);
        // Only a key that bare would not carry asks how it was stored.
        let before =
            !reads_back_bare(key) && self.store.quoted_before_the_draft(&r.operation_id).await?;
        Ok(field_value(key, before).unwrap_or_else(|| key.to_owned()))
    }

    /// One POST to the webhook. The error is a short sentence without the URL (it may
    /// carry a secret path) or the payload.
    async fn send(&self, r: &DueRedelivery) -> Result<(), String> {
        let res = self
            .http
            .post(self.settings.url.expose())
            .bearer_auth(self.settings.token.expose())
            .header("content-type", "application/json")
            .header("x-leadgate-operation-id", r.operation_id.as_str())
            .header(
                "x-leadgate-idempotency-key",
                self.claim_field(r).await.map_err(|e| {
                    tracing::error!(error = %e, "reading how the key was stored failed");
                    "the operations database did not answer".to_owned()
                })?,
            )
            .header("x-leadgate-redelivery", r.sent.to_string())
            .body(r.payload.clone())
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    "the webhook did not answer in time".to_owned()
                } else if e.is_connect() {
                    "the webhook could not be reached".to_owned()
                } else {
                    "the call to the webhook failed".to_owned()
                }
            })?;
        let status = res.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("the webhook answered HTTP {}", status.as_u16()))
        }
    }
}
