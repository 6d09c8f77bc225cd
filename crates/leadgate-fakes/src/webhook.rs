//! A fake Slack-compatible incoming webhook: a real HTTP server recording the JSON
//! bodies posted to its secret URL, with injectable faults and an outage.
//!
//! - `POST /hooks/{secret}` with a JSON object holding `text` (a string) or `blocks`
//!   (an array) answers `200 ok` as Slack does; a wrong secret 404 `no_service`; a body
//!   that is not such an object 400 `invalid_payload`.
//! - Faults, queued for the next calls (`times`): `fail` (`status`, optional
//!   `retry_after_secs` sent as `Retry-After`), `latency_ms` (waits, then handles the
//!   call; a client that gives up first cancels it), `drop` (closes the connection).
//! - An outage: [`FakeWebhook::go_down`] refuses connections (and cuts kept-alive ones)
//!   until [`FakeWebhook::come_back`].
//!
//! Control plane: `POST /_fake/faults` with
//! `[{"method":"post","fault":"fail","status":503,"times":3}]`, `DELETE /_fake/faults`,
//! `GET /_fake/state` (`bodies`, `calls`, `pending_faults`), `POST /_fake/reset`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::control::{lock, CallCounter, ConnKill, DownFlag, Downable, FaultQueue, FaultRule};

/// The method name faults are queued under.
pub const POST: &str = "post";

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    Fail {
        status: u16,
        #[serde(default)]
        retry_after_secs: Option<u64>,
    },
    LatencyMs {
        ms: u64,
    },
    Drop,
}

struct Shared {
    secret: String,
    bodies: Mutex<Vec<Value>>,
    faults: FaultQueue<Fault>,
    calls: CallCounter,
}

#[derive(Clone)]
struct AppState {
    shared: Arc<Shared>,
    down: DownFlag,
}

/// A running fake webhook; dropping it stops the server.
pub struct FakeWebhook {
    server: Downable,
    shared: Arc<Shared>,
}

impl FakeWebhook {
    pub async fn spawn(listen: SocketAddr) -> std::io::Result<FakeWebhook> {
        Self::spawn_with(listen, "fake-hook-secret").await
    }

    pub async fn spawn_with(listen: SocketAddr, secret: &str) -> std::io::Result<FakeWebhook> {
        let shared = Arc::new(Shared {
            secret: secret.to_owned(),
            bodies: Mutex::new(Vec::new()),
            faults: FaultQueue::new(Vec::new()),
            calls: CallCounter::default(),
        });
        let for_router = Arc::clone(&shared);
        let server = Downable::spawn(listen, move |_, down| {
            router(AppState {
                shared: Arc::clone(&for_router),
                down,
            })
        })
        .await?;
        Ok(FakeWebhook { server, shared })
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The webhook URL, secret path included.
    pub fn url(&self) -> String {
        format!("http://{}/hooks/{}", self.addr(), self.shared.secret)
    }

    pub fn push_fault(&self, fault: Fault, times: u32) {
        self.shared.faults.push(FaultRule {
            method: POST.into(),
            fault,
            times,
        });
    }

    /// Every body accepted, in order.
    pub fn bodies(&self) -> Vec<Value> {
        lock(&self.shared.bodies).clone()
    }

    /// Posts that reached the server (faulted ones too).
    pub fn calls(&self) -> u64 {
        self.shared.calls.get(POST)
    }

    pub fn go_down(&self) {
        self.server.go_down();
    }

    pub async fn come_back(&self) -> std::io::Result<()> {
        self.server.come_back().await
    }

    pub fn reset(&self) {
        reset(&self.shared);
    }
}

fn reset(shared: &Shared) {
    lock(&shared.bodies).clear();
    shared.faults.clear();
    shared.calls.clear();
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/hooks/{secret}", post(hook))
        .route("/_fake/faults", post(push_faults).delete(clear_faults))
        .route("/_fake/state", get(state_json))
        .route("/_fake/reset", post(reset_handler))
        .with_state(state)
}

async fn hook(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    Path(secret): Path<String>,
    body: Bytes,
) -> Response {
    if state.down.is_down() {
        kill.drop_connection();
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let shared = &state.shared;
    shared.calls.hit(POST);
    if secret != shared.secret {
        return (StatusCode::NOT_FOUND, "no_service").into_response();
    }
    match shared.faults.take(POST) {
        Some(Fault::Fail {
            status,
            retry_after_secs,
        }) => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut res = (code, "fake failure").into_response();
            if let Some(secs) = retry_after_secs {
                res.headers_mut()
                    .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
            }
            return res;
        }
        Some(Fault::Drop) => {
            kill.drop_connection();
            return StatusCode::BAD_GATEWAY.into_response();
        }
        Some(Fault::LatencyMs { ms }) => tokio::time::sleep(Duration::from_millis(ms)).await,
        None => {}
    }
    let value: Option<Value> = serde_json::from_slice(&body).ok();
    let valid = value.as_ref().is_some_and(|v| {
        v["text"].as_str().is_some_and(|t| !t.is_empty()) || v["blocks"].is_array()
    });
    if !valid {
        return (StatusCode::BAD_REQUEST, "invalid_payload").into_response();
    }
    lock(&shared.bodies).push(value.unwrap_or(Value::Null));
    (StatusCode::OK, "ok").into_response()
}

async fn push_faults(
    State(state): State<AppState>,
    Json(rules): Json<Vec<FaultRule<Fault>>>,
) -> Json<Value> {
    Json(state.shared.faults.push_all(rules))
}

async fn clear_faults(State(state): State<AppState>) -> Json<Value> {
    state.shared.faults.clear();
    Json(json!({"cleared": true}))
}

async fn state_json(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "bodies": *lock(&state.shared.bodies),
        "calls": state.shared.calls.snapshot(),
        "pending_faults": state.shared.faults.pending(),
    }))
}

async fn reset_handler(State(state): State<AppState>) -> Json<Value> {
    reset(&state.shared);
    Json(json!({"reset": true}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_bodies_at_its_secret_url_and_plays_faults() {
        let fake = FakeWebhook::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = reqwest::Client::new();
        let ok = client
            .post(fake.url())
            .json(&json!({"text": "hi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.text().await.unwrap(), "ok");
        let wrong = format!("http://{}/hooks/guess", fake.addr());
        let res = client
            .post(wrong)
            .json(&json!({"text": "hi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 404);
        let res = client
            .post(fake.url())
            .json(&json!({"x": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 400);
        client
            .post(format!("http://{}/_fake/faults", fake.addr()))
            .json(&json!([{"method": "post", "fault": "fail", "status": 429, "retry_after_secs": 2, "times": 2}]))
            .send()
            .await
            .unwrap();
        for _ in 0..2 {
            let res = client
                .post(fake.url())
                .json(&json!({"text": "x"}))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 429);
            assert_eq!(res.headers()["retry-after"], "2");
        }
        let res = client
            .post(fake.url())
            .json(&json!({"text": "again"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        fake.go_down();
        assert!(reqwest::Client::new()
            .post(fake.url())
            .json(&json!({"text": "z"}))
            .send()
            .await
            .is_err());
        fake.come_back().await.unwrap();
        let res = reqwest::Client::new()
            .post(fake.url())
            .json(&json!({"text": "back"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let texts: Vec<Value> = fake
            .bodies()
            .into_iter()
            .map(|b| b["text"].clone())
            .collect();
        assert_eq!(texts, vec![json!("hi"), json!("again"), json!("back")]);
        assert_eq!(fake.calls(), 7);
    }
}
