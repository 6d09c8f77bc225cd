//! A fake Telegram Bot API: a real HTTP server answering `sendMessage` as the Bot API
//! documents, recording every message, with injectable faults and an outage; and handing
//! a bot its users' updates by `getUpdates` or by webhook ([`updates`]).
//!
//! - `POST /bot{token}/sendMessage` with JSON (or a form) `chat_id`, `text`, optional
//!   `parse_mode`; success is `{"ok":true,"result":{"message_id":N,"chat":{"id":…},
//!   "date":…,"text":…}}`. A wrong token answers 401 `{"ok":false,"error_code":401,
//!   "description":"Unauthorized"}`; any other method 404; an empty `chat_id` or `text`,
//!   a text over 4096 characters, or `parse_mode = "HTML"` text that is not Telegram HTML
//!   (a `<` that opens no supported tag, an `&` that starts no entity, unbalanced tags)
//!   400 `{"ok":false,"error_code":400,"description":"Bad Request: …"}`.
//! - Flood control (off by default, [`FakeConfig::enforce_limits`]): as Telegram
//!   documents, about one message a second per chat and 20 a minute per group; a message
//!   beyond is refused with 429 `{"ok":false,"error_code":429,"description":"Too Many
//!   Requests: retry after N","parameters":{"retry_after":N}}` and counted
//!   ([`FakeTelegram::refused`]).
//! - Faults, queued for the next calls (`times`): `too_many_requests` (`retry_after`),
//!   `server_error` (502 Bad Gateway, as Telegram's front answers when the backend is
//!   down), `bad_request` (`description`), `latency_ms` (waits, then handles the call;
//!   a client that gives up first cancels it), `lost_answer` (records the message, then
//!   never answers), `drop` (closes the connection, nothing recorded).
//! - An outage: [`FakeTelegram::go_down`] refuses connections (and cuts kept-alive ones)
//!   until [`FakeTelegram::come_back`].
//!
//! Control plane (not part of Telegram): `POST /_fake/faults` with
//! `[{"method":"sendMessage","fault":"too_many_requests","retry_after":2,"times":1}]`,
//! `DELETE /_fake/faults`, `GET /_fake/state` (`messages`, `calls`, `pending_faults`,
//! `refused`), `POST /_fake/reset`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::control::{
    hang, lock, CallCounter, ConnKill, DownFlag, Downable, FaultQueue, FaultRule,
};

/// Updates for the bot: `getUpdates`, `setWebhook`, `deleteWebhook`.
pub mod updates;

/// Telegram's limit on a message's text.
pub const MAX_TEXT: usize = 4096;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    TooManyRequests { retry_after: u64 },
    ServerError,
    BadRequest { description: String },
    LatencyMs { ms: u64 },
    LostAnswer,
    Drop,
}

#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// The bot token the path must carry.
    pub token: String,
    /// Refuse messages beyond Telegram's flood limits (1 a second per chat, 20 a minute).
    pub enforce_limits: bool,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            token: "123456:fake-bot-token".into(),
            enforce_limits: false,
        }
    }
}

/// A message the fake accepted.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Message {
    pub message_id: u64,
    pub chat_id: Value,
    pub text: String,
    pub parse_mode: Option<String>,
    /// Milliseconds since the fake started.
    pub at_ms: u64,
}

struct Shared {
    token: String,
    enforce_limits: bool,
    started: Instant,
    messages: Mutex<Vec<Message>>,
    /// Accepted send times per chat, for the flood limits.
    sent: Mutex<BTreeMap<String, Vec<Instant>>>,
    faults: FaultQueue<Fault>,
    calls: CallCounter,
    refused: Mutex<u64>,
    updates: Mutex<updates::Updates>,
    new_update: tokio::sync::Notify,
}

#[derive(Clone)]
struct AppState {
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    down: DownFlag,
}

/// A running fake Bot API; dropping it stops the server.
pub struct FakeTelegram {
    server: Downable,
    shared: Arc<Shared>,
}

impl FakeTelegram {
    pub async fn spawn(listen: SocketAddr) -> std::io::Result<FakeTelegram> {
        Self::spawn_with(listen, FakeConfig::default()).await
    }

    pub async fn spawn_with(
        listen: SocketAddr,
        config: FakeConfig,
    ) -> std::io::Result<FakeTelegram> {
        let shared = Arc::new(Shared {
            token: config.token,
            enforce_limits: config.enforce_limits,
            started: Instant::now(),
            messages: Mutex::new(Vec::new()),
            sent: Mutex::new(BTreeMap::new()),
            faults: FaultQueue::new(Vec::new()),
            calls: CallCounter::default(),
            refused: Mutex::new(0),
            updates: Mutex::new(updates::Updates::default()),
            new_update: tokio::sync::Notify::new(),
        });
        let for_router = Arc::clone(&shared);
        let server = Downable::spawn(listen, move |shutdown, down| {
            router(AppState {
                shared: Arc::clone(&for_router),
                shutdown,
                down,
            })
        })
        .await?;
        Ok(FakeTelegram { server, shared })
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// What `api_base` is set to: `http://127.0.0.1:PORT`.
    pub fn api_base(&self) -> String {
        format!("http://{}", self.addr())
    }

    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// Applies `fault` to the next `times` calls of `sendMessage`.
    pub fn push_fault(&self, fault: Fault, times: u32) {
        self.push_fault_on("sendMessage", fault, times);
    }

    /// Applies `fault` to the next `times` calls of `method` (`getUpdates`, …).
    pub fn push_fault_on(&self, method: &str, fault: Fault, times: u32) {
        self.shared.faults.push(FaultRule {
            method: method.into(),
            fault,
            times,
        });
    }

    /// Calls of `method` that reached the server.
    pub fn calls_of(&self, method: &str) -> u64 {
        self.shared.calls.get(method)
    }

    /// Every message accepted, in order.
    pub fn messages(&self) -> Vec<Message> {
        lock(&self.shared.messages).clone()
    }

    /// Calls of `sendMessage` that reached the server (faulted and refused ones too).
    pub fn calls(&self) -> u64 {
        self.shared.calls.get("sendMessage")
    }

    /// Messages the flood limits refused.
    pub fn refused(&self) -> u64 {
        *lock(&self.shared.refused)
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
    lock(&shared.messages).clear();
    lock(&shared.sent).clear();
    shared.faults.clear();
    shared.calls.clear();
    *lock(&shared.refused) = 0;
    updates::reset(shared);
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/{bot}/{method}", post(api).get(api))
        .route("/_fake/faults", post(push_faults).delete(clear_faults))
        .route("/_fake/state", get(state_json))
        .route("/_fake/reset", post(reset_handler))
        .with_state(state)
}

fn error(status: u16, description: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        code,
        Json(json!({"ok": false, "error_code": status, "description": description})),
    )
        .into_response()
}

fn too_many(retry_after: u64) -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        Json(json!({"ok": false, "error_code": 429,
            "description": format!("Too Many Requests: retry after {retry_after}"),
            "parameters": {"retry_after": retry_after}})),
    )
        .into_response()
}

/// The request's parameters: JSON, or a form.
fn params(headers: &HeaderMap, body: &[u8]) -> Option<serde_json::Map<String, Value>> {
    let form = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"));
    if form {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body).ok()?;
        Some(
            pairs
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
        )
    } else if body.is_empty() {
        Some(serde_json::Map::new())
    } else {
        match serde_json::from_slice(body).ok()? {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }
}

/// Whether `text` is what Telegram's HTML parse mode accepts: supported tags, balanced,
/// and `&` only as an entity.
pub fn valid_html(text: &str) -> Result<(), String> {
    const TAGS: &[&str] = &[
        "b",
        "strong",
        "i",
        "em",
        "u",
        "ins",
        "s",
        "strike",
        "del",
        "code",
        "pre",
        "a",
        "tg-spoiler",
        "blockquote",
        "span",
    ];
    let mut open: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(['<', '&']) {
        let tail = &rest[i..];
        if let Some(after_amp) = tail.strip_prefix('&') {
            let ok = ["&lt;", "&gt;", "&amp;", "&quot;"]
                .iter()
                .any(|e| tail.starts_with(e))
                || (tail.starts_with("&#")
                    && tail[2..].find(';').is_some_and(|end| {
                        end > 0
                            && tail[2..2 + end]
                                .chars()
                                .all(|c| c.is_ascii_hexdigit() || c == 'x')
                    }));
            if !ok {
                return Err("Bad Request: can't parse entities: unsupported entity".into());
            }
            rest = after_amp;
            continue;
        }
        let Some(end) = tail.find('>') else {
            return Err("Bad Request: can't parse entities: unclosed start tag".into());
        };
        let inner = &tail[1..end];
        let (closing, name) = match inner.strip_prefix('/') {
            Some(n) => (true, n.trim()),
            None => (false, inner.split_whitespace().next().unwrap_or("")),
        };
        if !TAGS.contains(&name) {
            return Err(format!(
                "Bad Request: can't parse entities: unsupported start tag \"{name}\""
            ));
        }
        if closing {
            if open.pop().as_deref() != Some(name) {
                return Err(format!(
                    "Bad Request: can't parse entities: unexpected end tag \"{name}\""
                ));
            }
        } else {
            open.push(name.to_owned());
        }
        rest = &tail[end + 1..];
    }
    if let Some(name) = open.pop() {
        return Err(format!(
            "Bad Request: can't parse entities: can't find end tag corresponding to start tag \"{name}\""
        ));
    }
    Ok(())
}

/// How long the chat must wait under the flood limits, if it must.
fn flood_wait(sent: &mut Vec<Instant>, now: Instant) -> Option<u64> {
    sent.retain(|t| now.duration_since(*t) < Duration::from_secs(60));
    let last_second = sent
        .iter()
        .filter(|t| now.duration_since(**t) < Duration::from_secs(1))
        .count();
    if last_second >= 1 {
        return Some(1);
    }
    if sent.len() >= 20 {
        let oldest = sent[0];
        let wait = Duration::from_secs(60).saturating_sub(now.duration_since(oldest));
        return Some(wait.as_secs().max(1));
    }
    None
}

async fn api(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    Path((bot, method)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if state.down.is_down() {
        kill.drop_connection();
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let shared = &state.shared;
    shared.calls.hit(&method);
    if bot.strip_prefix("bot") != Some(shared.token.as_str()) {
        return error(401, "Unauthorized");
    }
    if updates::METHODS.contains(&method.as_str()) {
        match shared.faults.take(&method) {
            Some(Fault::ServerError) => return error(502, "Bad Gateway"),
            Some(Fault::TooManyRequests { retry_after }) => return too_many(retry_after),
            Some(Fault::LatencyMs { ms }) => tokio::time::sleep(Duration::from_millis(ms)).await,
            Some(Fault::Drop) => {
                kill.drop_connection();
                return StatusCode::BAD_GATEWAY.into_response();
            }
            Some(Fault::BadRequest { description }) => return error(400, &description),
            Some(Fault::LostAnswer) => {
                hang(state.shutdown.clone()).await;
            }
            None => {}
        }
        let Some(p) = params(&headers, &body) else {
            return error(400, "Bad Request: can't parse request body");
        };
        return updates::handle(&state, &method, p).await;
    }
    if method != "sendMessage" {
        return error(404, "Not Found: method not found");
    }
    let mut record_then_hang = false;
    match shared.faults.take(&method) {
        Some(Fault::TooManyRequests { retry_after }) => return too_many(retry_after),
        Some(Fault::ServerError) => return error(502, "Bad Gateway"),
        Some(Fault::BadRequest { description }) => return error(400, &description),
        Some(Fault::Drop) => {
            kill.drop_connection();
            return StatusCode::BAD_GATEWAY.into_response();
        }
        Some(Fault::LatencyMs { ms }) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Some(Fault::LostAnswer) => record_then_hang = true,
        None => {}
    }
    let Some(p) = params(&headers, &body) else {
        return error(400, "Bad Request: can't parse request body");
    };
    let chat_id = p.get("chat_id").cloned().unwrap_or(Value::Null);
    let chat_key = match &chat_id {
        Value::String(s) => s.trim().to_owned(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    };
    if chat_key.is_empty() {
        return error(400, "Bad Request: chat_id is empty");
    }
    let text = p
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if text.trim().is_empty() {
        return error(400, "Bad Request: message text is empty");
    }
    let parse_mode = p
        .get("parse_mode")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if parse_mode.as_deref() == Some("HTML") {
        if let Err(description) = valid_html(&text) {
            return error(400, &description);
        }
    }
    if text.chars().count() > MAX_TEXT {
        return error(400, "Bad Request: message is too long");
    }
    if shared.enforce_limits {
        let mut sent = lock(&shared.sent);
        let chat = sent.entry(chat_key.clone()).or_default();
        if let Some(wait) = flood_wait(chat, Instant::now()) {
            *lock(&shared.refused) += 1;
            return too_many(wait);
        }
        chat.push(Instant::now());
    }
    let message = {
        let mut messages = lock(&shared.messages);
        let m = Message {
            message_id: messages.len() as u64 + 1,
            chat_id: chat_id.clone(),
            text: text.clone(),
            parse_mode,
            at_ms: shared.started.elapsed().as_millis() as u64,
        };
        messages.push(m.clone());
        m
    };
    if record_then_hang {
        hang(state.shutdown.clone()).await;
    }
    let date = chrono::Utc::now().timestamp();
    Json(json!({"ok": true, "result": {
        "message_id": message.message_id,
        "chat": {"id": chat_id},
        "date": date,
        "text": text,
    }}))
    .into_response()
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
        "messages": *lock(&state.shared.messages),
        "calls": state.shared.calls.snapshot(),
        "pending_faults": state.shared.faults.pending(),
        "refused": *lock(&state.shared.refused),
    }))
}

async fn reset_handler(State(state): State<AppState>) -> Json<Value> {
    reset(&state.shared);
    Json(json!({"reset": true}))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn send(client: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
        let res = client.post(url).json(&body).send().await.unwrap();
        (res.status().as_u16(), res.json().await.unwrap())
    }

    #[tokio::test]
    async fn speaks_send_message_and_checks_the_token_and_the_html() {
        let fake = FakeTelegram::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = reqwest::Client::new();
        let url = format!("{}/bot{}/sendMessage", fake.api_base(), fake.token());
        let (status, answer) = send(
            &client,
            &url,
            json!({"chat_id": -100, "text": "<b>hi</b> &amp; bye", "parse_mode": "HTML"}),
        )
        .await;
        assert_eq!((status, answer["ok"].clone()), (200, json!(true)));
        assert_eq!(answer["result"]["message_id"], 1);
        let wrong = format!("{}/botnope/sendMessage", fake.api_base());
        let (status, answer) = send(&client, &wrong, json!({"chat_id": 1, "text": "x"})).await;
        assert_eq!(
            (status, answer["description"].clone()),
            (401, json!("Unauthorized"))
        );
        for (body, needle) in [
            (json!({"text": "x"}), "chat_id is empty"),
            (json!({"chat_id": 1, "text": ""}), "message text is empty"),
            (
                json!({"chat_id": 1, "text": "a < b", "parse_mode": "HTML"}),
                "can't parse entities",
            ),
            (
                json!({"chat_id": 1, "text": "a & b", "parse_mode": "HTML"}),
                "can't parse entities",
            ),
            (
                json!({"chat_id": 1, "text": "<b>a", "parse_mode": "HTML"}),
                "end tag",
            ),
        ] {
            let (status, answer) = send(&client, &url, body).await;
            assert_eq!(status, 400);
            assert_eq!(answer["ok"], false);
            assert!(
                answer["description"].as_str().unwrap().contains(needle),
                "{answer}"
            );
        }
        assert_eq!(fake.messages().len(), 1);
        assert_eq!(fake.messages()[0].chat_id, json!(-100));
    }

    #[tokio::test]
    async fn faults_flood_limits_and_an_outage() {
        let fake = FakeTelegram::spawn_with(
            "127.0.0.1:0".parse().unwrap(),
            FakeConfig {
                enforce_limits: true,
                ..FakeConfig::default()
            },
        )
        .await
        .unwrap();
        let client = reqwest::Client::new();
        let url = format!("{}/bot{}/sendMessage", fake.api_base(), fake.token());
        let control = format!("{}/_fake/faults", fake.api_base());
        client
            .post(&control)
            .json(
                &json!([{"method": "sendMessage", "fault": "too_many_requests", "retry_after": 3}]),
            )
            .send()
            .await
            .unwrap();
        let (status, answer) = send(&client, &url, json!({"chat_id": 1, "text": "x"})).await;
        assert_eq!(status, 429);
        assert_eq!(answer["parameters"]["retry_after"], 3);
        let (status, _) = send(&client, &url, json!({"chat_id": 1, "text": "x"})).await;
        assert_eq!(status, 200);
        // A second message to the chat within a second: flood control.
        let (status, answer) = send(&client, &url, json!({"chat_id": 1, "text": "y"})).await;
        assert_eq!(
            (status, answer["parameters"]["retry_after"].clone()),
            (429, json!(1))
        );
        assert_eq!(fake.refused(), 1);
        // Another chat is not held back.
        let (status, _) = send(&client, &url, json!({"chat_id": 2, "text": "y"})).await;
        assert_eq!(status, 200);

        fake.go_down();
        let refused = reqwest::Client::new()
            .post(&url)
            .json(&json!({"chat_id": 3, "text": "z"}))
            .send()
            .await;
        assert!(refused.is_err(), "down: {refused:?}");
        // A connection kept alive from before is cut, not answered.
        assert!(client
            .post(&url)
            .json(&json!({"chat_id": 3, "text": "z"}))
            .send()
            .await
            .is_err());
        fake.come_back().await.unwrap();
        let (status, _) = send(
            &reqwest::Client::new(),
            &url,
            json!({"chat_id": 3, "text": "z"}),
        )
        .await;
        assert_eq!(status, 200);
        let texts: Vec<String> = fake.messages().into_iter().map(|m| m.text).collect();
        assert_eq!(texts, vec!["x", "y", "z"]);
    }

    #[test]
    fn flood_wait_keeps_one_a_second_and_twenty_a_minute() {
        let start = Instant::now();
        let mut sent = Vec::new();
        for i in 0..20 {
            let at = start + Duration::from_millis(1500 * i);
            assert_eq!(flood_wait(&mut sent, at), None, "{i}");
            sent.push(at);
        }
        let at = start + Duration::from_millis(1500 * 20);
        assert!(
            flood_wait(&mut sent, at).is_some(),
            "the 21st within a minute"
        );
        assert_eq!(flood_wait(&mut sent, start + Duration::from_secs(61)), None);
    }
}
