//! The gateway harness: a gateway started in-process on a test database, with the fake
//! CRM it talks to over real HTTP, and the requests the tests make of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leadgate::app::{self, Mode, Running};
use leadgate::config::Config;
use leadgate_fakes::bitrix24::FakeBitrix24;
/// The faults a test pushes on the gateway's fake (`gw.fake.push_fault`).
pub use leadgate_fakes::bitrix24::Fault;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::TestDb;

pub const CREATE: &str = "crm.lead.add";
/// The test configuration's `[api]` tokens.
pub const INTEGRATION_TOKEN: &str = "test-integration-token";
pub const READ_TOKEN: &str = "test-read-token";

pub fn config_toml(db_url: &str, webhook_url: &str) -> String {
    format!(
        r#"
[database]
url = "{db_url}"

[server]
listen = "127.0.0.1:0"
max_body = "4KiB"

[worker]
poll_interval = "20ms"
lease = "2s"
concurrency = 4

[retry]
max_attempts = 3
base_delay = "20ms"
max_delay = "100ms"

[[source]]
name = "site"
key = "json:/submission_id"
ignore = ["/sent_at"]
event_time = "json:/created_at"
token = "site-token"

[claim_api]
source = "n8n"
lease = "1s"

[api]
integration_token = "{INTEGRATION_TOKEN}"
read_token = "{READ_TOKEN}"

[[source]]
name = "tilda"
key = "form:tranid"
token = "tilda-token"

[[source]]
name = "calls"
key = "json:/call_id"
on_contact_match = "link"
token = "calls-token"

[[source]]
name = "chat"
key = "json:/message_id"
on_contact_match = "review"
token = "chat-token"

[[source]]
name = "tilda-preset"
preset = "tilda"
token = "tilda-preset-token"

[[source]]
name = "amo"
preset = "amocrm-webhook"
token = "amo-token"

[[source]]
name = "b24"
preset = "bitrix24-event"
application_token = "app-token-1"

[[source]]
name = "json"
preset = "generic-json"
secret = "json-secret"

[[source]]
name = "signed"
key = "header:Idempotency-Key"
secret = "hmac-key"

[crm]
kind = "bitrix24"
webhook_url = "{webhook_url}"
timeout = "500ms"
settle = "300ms"
"#
    )
}

/// A gateway started in-process on a test database, with the fake CRM it talks to.
pub struct Gateway<F = FakeBitrix24> {
    pub fake: F,
    pub running: Option<Running>,
    pub base: String,
    pub http: reqwest::Client,
    pub config: Config,
}

impl Gateway {
    pub async fn start(db: &TestDb) -> Gateway {
        Gateway::start_extended(db, "").await
    }

    /// [`Gateway::start`] with `extra` TOML appended to the test configuration (tables of
    /// its own, e.g. `[outage]`).
    pub async fn start_extended(db: &TestDb, extra: &str) -> Gateway {
        Gateway::start_on(&db.url, extra).await
    }

    /// [`Gateway::start_extended`] on the database at `url` (one a console also opens).
    pub async fn start_on(url: &str, extra: &str) -> Gateway {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let toml = format!("{}\n{extra}", config_toml(url, &fake.webhook_url()));
        Gateway::start_with(fake, Config::parse(&toml).unwrap()).await
    }
}

impl<F> Gateway<F> {
    pub async fn start_with(fake: F, config: Config) -> Gateway<F> {
        let running = app::start(&config, Mode::Serve).await.unwrap();
        let base = format!("http://{}", running.addr.unwrap());
        Gateway {
            fake,
            running: Some(running),
            base,
            http: reqwest::Client::new(),
            config,
        }
    }

    pub fn store(&self) -> Arc<dyn leadgate::store::Store> {
        Arc::clone(&self.running.as_ref().unwrap().store)
    }

    /// Stops this gateway process's parts and starts them again on the same database.
    pub async fn restart(&mut self) {
        self.running.take().unwrap().stop().await;
        let running = app::start(&self.config, Mode::Serve).await.unwrap();
        self.base = format!("http://{}", running.addr.unwrap());
        self.running = Some(running);
    }

    /// A claim-API request, with the integration token.
    pub async fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(INTEGRATION_TOKEN)
    }

    /// A read of the admin surface, with the read token.
    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(READ_TOKEN)
    }

    /// The intake URL of `source`, carrying its token when it has one (`?token=`).
    pub fn intake_url(&self, source: &str) -> String {
        let url = format!("{}/v1/intake/{source}", self.base);
        match self.config.source(source).and_then(|s| s.token.as_ref()) {
            Some(t) => format!("{url}?token={}", urlencode(t.expose())),
            None => url,
        }
    }

    pub async fn post_json(&self, source: &str, body: &Value) -> (StatusCode, Value, bool) {
        let res = self
            .http
            .post(self.intake_url(source))
            .json(body)
            .send()
            .await
            .unwrap();
        answer(res).await
    }

    pub async fn operation(&self, id: &str) -> Value {
        self.get(&format!("/v1/operations/{}", urlencode(id)))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Polls the operation until `pred` holds (10 s at most).
    pub async fn wait_for(&self, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let op = self.operation(id).await;
            if pred(&op) {
                return op;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {op}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn wait_status(&self, id: &str, status: &str) -> Value {
        self.wait_for(id, status, |op| op["status"] == status).await
    }

    /// Waits until `connector` is paused, then until no attempt is in flight any more
    /// (attempts claimed before the pause landed may still be talking to the CRM).
    pub async fn wait_paused_and_idle(&self, connector: &str) {
        let store = self.store();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !store
            .connector(connector)
            .await
            .unwrap()
            .is_some_and(|c| c.paused)
        {
            assert!(
                Instant::now() < deadline,
                "connector {connector} never paused"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Idle twice, 200 ms apart: a claim whose pick ran just before the pause
        // committed may still commit after it (and make its one call).
        let mut idle_since: Option<Instant> = None;
        loop {
            let m = store
                .metrics(leadgate::store::local_now(), Duration::from_secs(60))
                .await
                .unwrap();
            if m.operations_by_status.contains_key("in_progress") {
                idle_since = None;
            } else if idle_since.is_some_and(|t| t.elapsed() >= Duration::from_millis(200)) {
                return;
            } else {
                idle_since.get_or_insert_with(Instant::now);
            }
            assert!(Instant::now() < deadline, "attempts never ended");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn timeline_kinds(&self, id: &str) -> Vec<String> {
        let timeline = self.store().timeline(&id.parse().unwrap()).await.unwrap();
        timeline.into_iter().map(|e| e.kind).collect()
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
    }
}

pub async fn answer(res: reqwest::Response) -> (StatusCode, Value, bool) {
    let status = res.status();
    let replayed = res
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    (status, res.json().await.unwrap(), replayed)
}

pub fn urlencode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

pub fn lead(id: &str) -> Value {
    json!({"submission_id": id, "name": "Ivan", "phone": "+7 999 123-45-67", "email": "ivan@example.com",
           "sent_at": "2026-11-30T10:00:00Z"})
}

pub fn origin_ids(fake: &FakeBitrix24) -> Vec<String> {
    fake.entities()
        .iter()
        .map(|e| {
            e.fields["ORIGIN_ID"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}
