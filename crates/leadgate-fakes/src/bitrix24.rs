//! A fake Bitrix24 portal: a real HTTP server speaking Bitrix24's webhook wire format,
//! with entities in memory and injectable faults.
//!
//! It exists so the adapter, the worker and the pilot scenarios can be tested against
//! the failures that matter — above all "the CRM created the entity and the answer was
//! lost" — over real sockets, without a portal. It follows `docs/crm.md`:
//!
//! - `POST|GET /rest/{user}/{secret}/{method}[.json]` with a JSON body (or query /
//!   form parameters with flat keys);
//! - `crm.lead.add`, `crm.deal.add` → `{"result": <id>}`;
//! - `crm.lead.list`, `crm.deal.list` with `filter` (`=`/no prefix, `!=`/`!`),
//!   `select`, `start` (50 rows a page, `total`, `next`; `start=-1` omits `total`);
//! - `crm.duplicate.findbycomm` (`[]` when nothing matches, `{"LEAD":[ids]}` else);
//! - every success carries the `time` object; errors are
//!   `{"error":"CODE","error_description":"text"}`; an unknown method is 404
//!   `ERROR_METHOD_NOT_FOUND`, a wrong secret 401 `NO_AUTH_FOUND`.
//!
//! Control plane (not part of Bitrix24): `POST /_fake/faults` with
//! `[{"method":"crm.lead.add","fault":"lost_answer_hang","times":1}]`,
//! `GET /_fake/state`, `POST /_fake/reset`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use crate::control::{
    hang, lock, CallCounter, ConnKill, FakeServer, FaultQueue, FaultRule, RandomFault,
};

/// Rows per page of a list call, as in Bitrix24.
pub const PAGE_SIZE: usize = 50;
/// At most this many values per `crm.duplicate.findbycomm` call, as in Bitrix24.
pub const MAX_COMM_VALUES: usize = 20;

const METHODS: &[&str] = &[
    "crm.lead.add",
    "crm.deal.add",
    "crm.lead.list",
    "crm.deal.list",
    "crm.duplicate.findbycomm",
];

/// A failure the fake plays instead of (or after) executing a call.
///
/// On the wire the variant is the `fault` field and its data sits next to it:
/// `{"fault":"rate_limit","retry_after_secs":2}`, `{"fault":"latency_ms","ms":500}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// Executes the call, then never answers: the client times out.
    LostAnswerHang,
    /// Executes the call, then closes the connection without sending a byte.
    LostAnswerDrop,
    /// 503 `QUERY_LIMIT_EXCEEDED`, not executed; optional `Retry-After`.
    RateLimit {
        #[serde(default)]
        retry_after_secs: Option<u64>,
    },
    /// 429 `OPERATION_TIME_LIMIT`, not executed; optional `Retry-After`.
    OperationTimeLimit {
        #[serde(default)]
        retry_after_secs: Option<u64>,
    },
    /// 500 `INTERNAL_SERVER_ERROR`, not executed.
    ServerError,
    /// Executes the call, then answers 500 `INTERNAL_SERVER_ERROR`.
    ServerErrorAfterCreate,
    /// 401 `expired_token`, not executed.
    ExpiredToken,
    /// 400 with an empty `error` and a `<br />`-terminated description, not executed.
    Validation,
    /// Waits `ms`, then behaves normally (a client that gives up first cancels it).
    LatencyMs { ms: u64 },
    /// A slow portal that finishes what it started: the call is executed `ms` after it
    /// arrived *whoever is still waiting* (Bitrix24 cuts requests off only after 60 s),
    /// then answered if the client is still there.
    ExecuteLate { ms: u64 },
    /// 502 with an nginx HTML page, not executed.
    HtmlError,
    /// Any Bitrix24 error (e.g. 503 `OVERLOAD_LIMIT`, 403 `insufficient_scope`, 500
    /// `PORTAL_DELETED`); `after_execute` executes the call first.
    Error {
        status: u16,
        error: String,
        #[serde(default)]
        error_description: String,
        #[serde(default)]
        after_execute: bool,
    },
}

/// How the fake is set up.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// The user id in the webhook path.
    pub user: String,
    /// The webhook secret; any other secret gets 401 `NO_AUTH_FOUND`.
    pub secret: String,
    /// Faults applied to every call of a method (`*` = any), e.g. a portal that is
    /// always slow; queued faults take precedence.
    pub always: Vec<(String, Fault)>,
    /// Faults that strike calls at random (after queued and `always` ones).
    pub random: Vec<RandomFault<Fault>>,
    /// A list or duplicate search sees an entity only this long after it landed (a
    /// search that lags behind writes).
    pub search_lag: Duration,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            user: "1".into(),
            secret: "fake-secret".into(),
            always: Vec::new(),
            random: Vec::new(),
            search_lag: Duration::ZERO,
        }
    }
}

/// One entity held by the fake.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FakeEntity {
    /// `lead` or `deal`.
    pub kind: String,
    pub id: u64,
    /// The fields as sent, plus `ID` (a string, as Bitrix24 lists it).
    pub fields: Value,
}

#[derive(Debug, Default)]
struct Store {
    /// Keyed by (kind, id); ids count per kind from 1, as on a fresh portal.
    entities: BTreeMap<(String, u64), Map<String, Value>>,
    /// When each entity landed, for `search_lag`.
    landed: BTreeMap<(String, u64), std::time::Instant>,
    last_id: BTreeMap<String, u64>,
}

struct Shared {
    user: String,
    secret: String,
    store: Mutex<Store>,
    faults: FaultQueue<Fault>,
    calls: CallCounter,
    search_lag: Mutex<Duration>,
}

#[derive(Clone)]
struct AppState {
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
}

/// A running fake portal; dropping it stops the server.
pub struct FakeBitrix24 {
    server: FakeServer,
    shared: Arc<Shared>,
}

impl FakeBitrix24 {
    /// Starts a fake with the default webhook (`/rest/1/fake-secret/`) on `listen`
    /// (port 0 picks a free port).
    pub async fn spawn(listen: SocketAddr) -> std::io::Result<FakeBitrix24> {
        Self::spawn_with(listen, FakeConfig::default()).await
    }

    pub async fn spawn_with(
        listen: SocketAddr,
        config: FakeConfig,
    ) -> std::io::Result<FakeBitrix24> {
        let shared = Arc::new(Shared {
            user: config.user,
            secret: config.secret,
            store: Mutex::new(Store::default()),
            faults: FaultQueue::with_random(config.always, config.random),
            calls: CallCounter::default(),
            search_lag: Mutex::new(config.search_lag),
        });
        let for_router = shared.clone();
        let server = FakeServer::spawn(listen, move |shutdown| {
            router(AppState {
                shared: for_router,
                shutdown,
            })
        })
        .await?;
        Ok(FakeBitrix24 { server, shared })
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The incoming-webhook URL, e.g. `http://127.0.0.1:PORT/rest/1/fake-secret/`.
    pub fn webhook_url(&self) -> String {
        format!(
            "http://{}/rest/{}/{}/",
            self.addr(),
            self.shared.user,
            self.shared.secret
        )
    }

    /// Applies `fault` to the next `times` calls of `method` (`*` = any method).
    pub fn push_fault(&self, method: &str, fault: Fault, times: u32) {
        self.shared.faults.push(FaultRule {
            method: method.to_owned(),
            fault,
            times,
        });
    }

    /// Drops the queued faults (an outage ends), keeping entities and counters.
    pub fn clear_faults(&self) {
        self.shared.faults.clear();
    }

    /// Every entity, leads first, by id.
    pub fn entities(&self) -> Vec<FakeEntity> {
        entities(&self.shared)
    }

    /// How many calls `method` (without `.json`) got, faulted ones included.
    pub fn calls(&self, method: &str) -> u64 {
        self.shared.calls.get(method)
    }

    /// From now on lists see an entity only `lag` after it landed.
    pub fn set_search_lag(&self, lag: Duration) {
        *lock(&self.shared.search_lag) = lag;
    }

    /// Forgets entities, counters and queued faults.
    pub fn reset(&self) {
        reset(&self.shared);
    }
}

/// Runs a fake portal on `listen` until ctrl-c, for
/// `leadgate-dev fake-crm --kind bitrix24 --listen ADDR`.
pub async fn serve(listen: SocketAddr) -> anyhow::Result<()> {
    let fake = FakeBitrix24::spawn(listen).await?;
    tracing::info!(addr = %fake.addr(), "fake Bitrix24 listening");
    // The URL holds only the fake's well-known secret: printing it is the point.
    println!("fake Bitrix24 webhook: {}", fake.webhook_url());
    tokio::signal::ctrl_c().await?;
    drop(fake);
    Ok(())
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/rest/{user}/{secret}/{method}", any(rest))
        .route("/_fake/faults", post(push_faults).delete(clear_faults))
        .route("/_fake/state", get(state_json))
        .route("/_fake/reset", post(reset_handler))
        .with_state(state)
}

fn entities(shared: &Shared) -> Vec<FakeEntity> {
    lock(&shared.store)
        .entities
        .iter()
        .map(|((kind, id), fields)| FakeEntity {
            kind: kind.clone(),
            id: *id,
            fields: Value::Object(fields.clone()),
        })
        .collect()
}

fn reset(shared: &Shared) {
    *lock(&shared.store) = Store::default();
    shared.calls.clear();
    shared.faults.clear();
}

/// Drops the queued faults, keeping the entities and call counts.
async fn clear_faults(State(state): State<AppState>) -> Json<Value> {
    state.shared.faults.clear();
    Json(json!({"cleared": true}))
}

async fn push_faults(
    State(state): State<AppState>,
    Json(rules): Json<Vec<FaultRule<Fault>>>,
) -> Json<Value> {
    let queued = rules.len();
    for rule in rules {
        state.shared.faults.push(rule);
    }
    Json(json!({"queued": queued, "pending": state.shared.faults.pending()}))
}

async fn state_json(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "entities": entities(&state.shared),
        "calls": state.shared.calls.snapshot(),
        "pending_faults": state.shared.faults.pending(),
    }))
}

async fn reset_handler(State(state): State<AppState>) -> Json<Value> {
    reset(&state.shared);
    Json(json!({"reset": true}))
}

/// A Bitrix24 error answer.
fn error(status: u16, code: &str, description: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        Json(json!({"error": code, "error_description": description})),
    )
        .into_response()
}

fn with_retry_after(mut resp: Response, secs: Option<u64>) -> Response {
    if let Some(secs) = secs {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

/// The answer a fault gives instead of executing, if it is that kind of fault.
fn refusal(fault: &Fault) -> Option<Response> {
    Some(match fault {
        Fault::RateLimit { retry_after_secs } => with_retry_after(
            error(503, "QUERY_LIMIT_EXCEEDED", "Too many requests"),
            *retry_after_secs,
        ),
        Fault::OperationTimeLimit { retry_after_secs } => with_retry_after(
            error(429, "OPERATION_TIME_LIMIT", "Method is blocked due to operation time limit."),
            *retry_after_secs,
        ),
        Fault::ServerError => error(500, "INTERNAL_SERVER_ERROR", "Internal server error"),
        Fault::ExpiredToken => error(401, "expired_token", "The access token provided has expired."),
        Fault::Validation => error(400, "", "The required field 'Lead Name' is missing.<br />"),
        Fault::HtmlError => (
            StatusCode::BAD_GATEWAY,
            [(header::CONTENT_TYPE, "text/html")],
            "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
        )
            .into_response(),
        Fault::Error {
            status,
            error: code,
            error_description,
            after_execute: false,
        } => error(*status, code, error_description),
        _ => return None,
    })
}

async fn rest(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    Path((user, secret, method)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let started = chrono::Utc::now();
    let method = method.strip_suffix(".json").unwrap_or(&method).to_owned();
    let shared = &state.shared;
    shared.calls.hit(&method);
    if user != shared.user || secret != shared.secret {
        return error(401, "NO_AUTH_FOUND", "Wrong authorization data");
    }
    if !METHODS.contains(&method.as_str()) {
        return error(404, "ERROR_METHOD_NOT_FOUND", "Method not found!");
    }
    let Some(params) = params(&headers, query.as_deref(), &body) else {
        return error(
            400,
            "INVALID_REQUEST",
            "The request body could not be parsed.",
        );
    };

    let fault = shared.faults.take(&method);
    if let Some(Fault::LatencyMs { ms }) = &fault {
        tokio::time::sleep(Duration::from_millis(*ms)).await;
    }
    if let Some(refused) = fault.as_ref().and_then(refusal) {
        return refused;
    }

    let answer = match fault {
        Some(Fault::ExecuteLate { ms }) => {
            // The work goes on in a task of its own: a client that hangs up (dropping
            // this handler) does not stop it.
            let (done, answer) = tokio::sync::oneshot::channel();
            let (shared, method, params) = (state.shared.clone(), method.clone(), params.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let _ = done.send(execute(&shared, &method, &params));
            });
            match answer.await {
                Ok(answer) => answer,
                Err(_) => return error(500, "INTERNAL_SERVER_ERROR", "Internal server error"),
            }
        }
        _ => execute(shared, &method, &params),
    };
    if answer.is_ok() {
        match fault {
            Some(Fault::LostAnswerHang) => {
                hang(state.shutdown.clone()).await;
            }
            Some(Fault::LostAnswerDrop) => {
                kill.drop_connection();
            }
            Some(Fault::ServerErrorAfterCreate) => {
                return error(500, "INTERNAL_SERVER_ERROR", "Internal server error");
            }
            Some(Fault::Error {
                status,
                error: code,
                error_description,
                after_execute: true,
            }) => return error(status, &code, &error_description),
            _ => {}
        }
    }
    match answer {
        Ok(Success {
            result,
            total,
            next,
        }) => {
            let mut envelope = Map::new();
            envelope.insert("result".into(), result);
            if let Some(total) = total {
                envelope.insert("total".into(), json!(total));
            }
            if let Some(next) = next {
                envelope.insert("next".into(), json!(next));
            }
            envelope.insert("time".into(), time_block(started));
            Json(Value::Object(envelope)).into_response()
        }
        Err(Refusal {
            status,
            code,
            description,
        }) => error(status, code, &description),
    }
}

/// The `time` object of a success envelope.
fn time_block(started: chrono::DateTime<chrono::Utc>) -> Value {
    let finished = chrono::Utc::now();
    let secs = |t: chrono::DateTime<chrono::Utc>| t.timestamp_micros() as f64 / 1e6;
    let duration = secs(finished) - secs(started);
    json!({
        "start": secs(started),
        "finish": secs(finished),
        "duration": duration,
        "processing": duration,
        "date_start": started.to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
        "date_finish": finished.to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
        "operating_reset_at": started.timestamp() + 600,
        "operating": 0,
    })
}

/// The call's parameters: the JSON body, else form/query parameters with flat keys.
fn params(headers: &HeaderMap, query: Option<&str>, body: &[u8]) -> Option<Value> {
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let mut params = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else if is_form {
        form_to_map(body)?
    } else {
        match serde_json::from_slice(body).ok()? {
            Value::Object(m) => m,
            _ => return None,
        }
    };
    if let Some(q) = query {
        for (k, v) in form_to_map(q.as_bytes())? {
            params.entry(k).or_insert(v);
        }
    }
    Some(Value::Object(params))
}

fn form_to_map(bytes: &[u8]) -> Option<Map<String, Value>> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(bytes).ok()?;
    Some(
        pairs
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect(),
    )
}

/// A Bitrix24 error answer, kept small until it becomes a response.
struct Refusal {
    status: u16,
    code: &'static str,
    description: String,
}

fn refuse(status: u16, code: &'static str, description: &str) -> Refusal {
    Refusal {
        status,
        code,
        description: description.to_owned(),
    }
}

struct Success {
    result: Value,
    total: Option<usize>,
    next: Option<usize>,
}

impl Success {
    fn plain(result: Value) -> Self {
        Success {
            result,
            total: None,
            next: None,
        }
    }
}

fn execute(shared: &Shared, method: &str, params: &Value) -> Result<Success, Refusal> {
    match method {
        "crm.lead.add" => add(shared, "lead", params),
        "crm.deal.add" => add(shared, "deal", params),
        "crm.lead.list" => list(shared, "lead", params),
        "crm.deal.list" => list(shared, "deal", params),
        "crm.duplicate.findbycomm" => find_by_comm(shared, params),
        _ => Err(refuse(404, "ERROR_METHOD_NOT_FOUND", "Method not found!")),
    }
}

fn add(shared: &Shared, kind: &str, params: &Value) -> Result<Success, Refusal> {
    let Some(fields) = params.get("fields").and_then(Value::as_object) else {
        return Err(refuse(400, "", "Parameter 'fields' must be array."));
    };
    let mut store = lock(&shared.store);
    let id = {
        let last = store.last_id.entry(kind.to_owned()).or_default();
        *last += 1;
        *last
    };
    let mut fields = fields.clone();
    fields.insert("ID".into(), json!(id.to_string()));
    store.entities.insert((kind.to_owned(), id), fields);
    store
        .landed
        .insert((kind.to_owned(), id), std::time::Instant::now());
    Ok(Success::plain(json!(id)))
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Whether `fields` satisfies one filter entry. Supported: `=KEY`/`KEY` (equal; an
/// array means "any of") and `!=KEY`/`!KEY` (not equal).
fn matches(fields: &Map<String, Value>, key: &str, wanted: &Value) -> Result<bool, String> {
    let (negate, name) = if let Some(k) = key.strip_prefix("!=") {
        (true, k)
    } else if let Some(k) = key.strip_prefix('!') {
        (true, k)
    } else if let Some(k) = key.strip_prefix('=') {
        (false, k)
    } else if key.starts_with(|c: char| c.is_ascii_alphabetic()) {
        (false, key)
    } else {
        return Err(format!(
            "fake: the filter prefix of '{key}' is not supported"
        ));
    };
    let actual = fields.get(name).map(text_of).unwrap_or_default();
    let equal = match wanted {
        Value::Array(any) => any.iter().any(|w| text_of(w) == actual),
        w => text_of(w) == actual,
    };
    Ok(equal != negate)
}

fn list(shared: &Shared, kind: &str, params: &Value) -> Result<Success, Refusal> {
    let empty = Map::new();
    let filter = match params.get("filter") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(f)) => f,
        Some(_) => return Err(refuse(400, "", "Parameter 'filter' must be array.")),
    };
    let select: Vec<String> = params
        .get("select")
        .and_then(Value::as_array)
        .map(|s| s.iter().map(text_of).collect())
        .unwrap_or_default();
    let start: i64 = match params.get("start") {
        None | Some(Value::Null) => 0,
        Some(v) => text_of(v).trim().parse().unwrap_or(0),
    };
    let store = lock(&shared.store);
    let mut rows = Vec::new();
    for ((k, id), fields) in store.entities.iter() {
        if k != kind || !visible(&store, *lock(&shared.search_lag), k, *id) {
            continue;
        }
        let mut keep = true;
        for (key, wanted) in filter {
            keep &= matches(fields, key, wanted).map_err(|e| refuse(400, "", &e))?;
        }
        if keep {
            rows.push(fields);
        }
    }
    let total = rows.len();
    let offset = usize::try_from(start.max(0)).unwrap_or(0);
    let page: Vec<Value> = rows
        .iter()
        .skip(offset)
        .take(PAGE_SIZE)
        .map(|fields| {
            if select.is_empty() || select.iter().any(|s| s == "*") {
                Value::Object((*fields).clone())
            } else {
                Value::Object(
                    select
                        .iter()
                        .filter_map(|s| fields.get(s).map(|v| (s.clone(), v.clone())))
                        .collect(),
                )
            }
        })
        .collect();
    // `start=-1` skips counting: no `total`, no `next`.
    let counted = start >= 0;
    let next = (counted && offset + PAGE_SIZE < total).then_some(offset + PAGE_SIZE);
    Ok(Success {
        result: Value::Array(page),
        total: counted.then_some(total),
        next,
    })
}

/// Whether searches see the entity yet (see `FakeConfig::search_lag`).
fn visible(store: &Store, lag: Duration, kind: &str, id: u64) -> bool {
    lag.is_zero()
        || store
            .landed
            .get(&(kind.to_owned(), id))
            .is_none_or(|at| at.elapsed() >= lag)
}

/// Phones compare by digits (Bitrix24 normalises them), e-mails case-insensitively.
fn comm_key(kind: &str, value: &str) -> String {
    if kind == "PHONE" {
        value.chars().filter(char::is_ascii_digit).collect()
    } else {
        value.trim().to_lowercase()
    }
}

fn find_by_comm(shared: &Shared, params: &Value) -> Result<Success, Refusal> {
    let kind = params
        .get("type")
        .map(text_of)
        .unwrap_or_default()
        .to_uppercase();
    if kind != "PHONE" && kind != "EMAIL" {
        return Err(refuse(
            400,
            "",
            "Parameter 'type' is not defined or invalid.",
        ));
    }
    let values: Vec<String> = match params.get("values") {
        Some(Value::Array(v)) if !v.is_empty() => v.iter().map(text_of).collect(),
        _ => {
            return Err(refuse(
                400,
                "",
                "Parameter 'values' is not defined or empty.",
            ))
        }
    };
    if values.len() > MAX_COMM_VALUES {
        return Err(refuse(400, "", "Too many values: at most 20 are allowed."));
    }
    let entity_type = params
        .get("entity_type")
        .map(text_of)
        .unwrap_or_default()
        .to_uppercase();
    // Only leads hold PHONE/EMAIL in this fake (deals have none in Bitrix24 either).
    if !entity_type.is_empty() && entity_type != "LEAD" {
        return Ok(Success::plain(json!([])));
    }
    let wanted: Vec<String> = values
        .iter()
        .map(|v| comm_key(&kind, v))
        .filter(|v| !v.is_empty())
        .collect();
    let store = lock(&shared.store);
    let ids: Vec<u64> = store
        .entities
        .iter()
        .filter(|((k, _), _)| k == "lead")
        .filter(|(_, fields)| {
            fields
                .get(&kind)
                .and_then(Value::as_array)
                .is_some_and(|multi| {
                    multi.iter().any(|m| {
                        let v = m.get("VALUE").map(text_of).unwrap_or_default();
                        wanted.contains(&comm_key(&kind, &v))
                    })
                })
        })
        .map(|((_, id), _)| *id)
        .collect();
    if ids.is_empty() {
        // Bitrix24 answers an empty *array* here, not an empty object.
        Ok(Success::plain(json!([])))
    } else {
        Ok(Success::plain(json!({"LEAD": ids})))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn fake() -> FakeBitrix24 {
        FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }

    async fn call(url: &str, body: Value) -> (u16, Value) {
        let resp = reqwest::Client::new()
            .post(url)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn add_lead(fake: &FakeBitrix24, origin: &str, phone: &str) -> u64 {
        let url = format!("{}crm.lead.add.json", fake.webhook_url());
        let fields = json!({"fields": {"TITLE": "t", "ORIGINATOR_ID": "leadgate", "ORIGIN_ID": origin,
                                       "PHONE": [{"VALUE": phone, "VALUE_TYPE": "WORK"}]}});
        let (status, body) = call(&url, fields).await;
        assert_eq!(status, 200, "{body}");
        body["result"].as_u64().unwrap()
    }

    #[tokio::test]
    async fn success_envelope_has_result_and_time_and_json_suffix_is_optional() {
        let fake = fake().await;
        assert_eq!(
            fake.webhook_url(),
            format!("http://{}/rest/1/fake-secret/", fake.addr())
        );
        let (status, body) = call(
            &format!("{}crm.lead.add", fake.webhook_url()),
            json!({"fields": {"TITLE": "a"}}),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(body["result"], 1);
        for key in [
            "start",
            "finish",
            "duration",
            "processing",
            "date_start",
            "date_finish",
            "operating_reset_at",
            "operating",
        ] {
            assert!(
                body["time"].get(key).is_some(),
                "time.{key} missing: {body}"
            );
        }
        let (_, body) = call(
            &format!("{}crm.lead.add.json", fake.webhook_url()),
            json!({"fields": {"TITLE": "b"}}),
        )
        .await;
        assert_eq!(body["result"], 2);
        assert_eq!(fake.calls("crm.lead.add"), 2);
        assert_eq!(fake.entities()[1].fields["ID"], "2");
    }

    #[tokio::test]
    async fn errors_follow_the_wire_format() {
        let fake = fake().await;
        let base = fake.webhook_url();
        let (status, body) = call(&format!("{base}crm.nothing.get"), json!({})).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (404, Some("ERROR_METHOD_NOT_FOUND"))
        );
        let wrong = base.replace("fake-secret", "nope");
        let (status, body) = call(&format!("{wrong}crm.lead.add"), json!({})).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (401, Some("NO_AUTH_FOUND"))
        );
        let (status, body) = call(&format!("{base}crm.lead.add"), json!({"fields": 1})).await;
        assert_eq!((status, body["error"].as_str()), (400, Some("")));
        assert!(fake.entities().is_empty());
    }

    #[tokio::test]
    async fn list_filters_pages_and_counts() {
        let fake = fake().await;
        for i in 0..60 {
            let origin = if i % 2 == 0 { "even" } else { "odd" };
            add_lead(&fake, origin, "+7 999 000-00-00").await;
        }
        add_lead(&fake, "x-1", "1").await;
        let url = format!("{}crm.lead.list", fake.webhook_url());

        let (_, body) = call(&url, json!({"select": ["ID"]})).await;
        assert_eq!(body["total"], 61);
        assert_eq!(body["next"], 50);
        assert_eq!(body["result"].as_array().unwrap().len(), 50);
        assert_eq!(body["result"][0], json!({"ID": "1"}));

        let (_, body) = call(&url, json!({"select": ["ID"], "start": 50})).await;
        assert_eq!(body["result"].as_array().unwrap().len(), 11);
        assert_eq!(body["total"], 61);
        assert!(body.get("next").is_none());

        let (_, body) = call(
            &url,
            json!({"filter": {"=ORIGIN_ID": "odd", "=ORIGINATOR_ID": "leadgate"},
                                          "select": ["ID", "ORIGIN_ID"], "start": -1}),
        )
        .await;
        assert!(body.get("total").is_none());
        assert!(body.get("next").is_none());
        let rows = body["result"].as_array().unwrap();
        assert_eq!(rows.len(), 30);
        assert!(rows.iter().all(|r| r["ORIGIN_ID"] == "odd"));

        let (_, body) = call(&url, json!({"filter": {"=ORIGINATOR_ID": "someone-else"}})).await;
        assert_eq!(body["result"], json!([]));
        assert_eq!(body["total"], 0);
        let (_, body) = call(
            &url,
            json!({"filter": {"!ORIGIN_ID": "even", "ORIGIN_ID": ["odd", "x-1"]}}),
        )
        .await;
        assert_eq!(body["total"], 31);
        // Deals are a separate list.
        let (_, body) = call(&format!("{}crm.deal.list", fake.webhook_url()), json!({})).await;
        assert_eq!(body["total"], 0);
    }

    #[tokio::test]
    async fn findbycomm_answers_an_array_when_nothing_matches() {
        let fake = fake().await;
        let id = add_lead(&fake, "a", "+7 (999) 000-11-22").await;
        let url = format!("{}crm.duplicate.findbycomm", fake.webhook_url());
        let (_, body) = call(&url, json!({"type": "PHONE", "values": ["79990001122"]})).await;
        assert_eq!(body["result"], json!({"LEAD": [id]}));
        let (_, body) = call(&url, json!({"type": "PHONE", "values": ["111"]})).await;
        assert_eq!(body["result"], json!([]));
        let (_, body) = call(
            &url,
            json!({"type": "EMAIL", "values": ["a@b.ru"], "entity_type": "LEAD"}),
        )
        .await;
        assert_eq!(body["result"], json!([]));
        let (status, _) = call(&url, json!({"type": "FAX", "values": ["1"]})).await;
        assert_eq!(status, 400);
        let (status, _) = call(&url, json!({"type": "PHONE", "values": vec!["1"; 21]})).await;
        assert_eq!(status, 400);
    }

    #[tokio::test]
    async fn control_plane_queues_faults_shows_state_and_resets() {
        let fake = fake().await;
        let control = format!("http://{}/_fake", fake.addr());
        let client = reqwest::Client::new();
        let resp: Value = client
            .post(format!("{control}/faults"))
            .json(&json!([{"method": "crm.lead.add", "fault": "rate_limit", "retry_after_secs": 3, "times": 2},
                          {"method": "crm.lead.list", "fault": "latency_ms", "ms": 1}]))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(resp["queued"], 2);
        let add = format!("{}crm.lead.add", fake.webhook_url());
        for _ in 0..2 {
            let resp = client
                .post(&add)
                .json(&json!({"fields": {}}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 503);
            assert_eq!(resp.headers()["retry-after"], "3");
            let body: Value = resp.json().await.unwrap();
            assert_eq!(body["error"], "QUERY_LIMIT_EXCEEDED");
        }
        let (status, _) = call(&add, json!({"fields": {"TITLE": "ok"}})).await;
        assert_eq!(status, 200);

        let state: Value = client
            .get(format!("{control}/state"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(state["calls"]["crm.lead.add"], 3);
        assert_eq!(state["entities"].as_array().unwrap().len(), 1);
        assert_eq!(state["pending_faults"][0]["fault"], "latency_ms");

        client
            .post(format!("{control}/reset"))
            .send()
            .await
            .unwrap();
        assert!(fake.entities().is_empty());
        assert_eq!(fake.calls("crm.lead.add"), 0);
        let (_, body) = call(&add, json!({"fields": {}})).await;
        assert_eq!(body["result"], 1, "ids restart after a reset");
    }

    #[tokio::test]
    async fn always_faults_apply_to_every_call() {
        let config = FakeConfig {
            always: vec![("crm.lead.add".into(), Fault::ServerError)],
            ..FakeConfig::default()
        };
        let fake = FakeBitrix24::spawn_with("127.0.0.1:0".parse().unwrap(), config)
            .await
            .unwrap();
        let add = format!("{}crm.lead.add", fake.webhook_url());
        for _ in 0..3 {
            let (status, body) = call(&add, json!({"fields": {}})).await;
            assert_eq!(
                (status, body["error"].as_str()),
                (500, Some("INTERNAL_SERVER_ERROR"))
            );
        }
        assert!(fake.entities().is_empty());
        let (status, _) = call(&format!("{}crm.lead.list", fake.webhook_url()), json!({})).await;
        assert_eq!(status, 200);
    }

    #[tokio::test]
    async fn lost_answer_drop_closes_without_an_answer_after_creating() {
        let fake = fake().await;
        fake.push_fault("crm.lead.add", Fault::LostAnswerDrop, 1);
        let err = reqwest::Client::new()
            .post(format!("{}crm.lead.add", fake.webhook_url()))
            .json(&json!({"fields": {"TITLE": "t"}}))
            .send()
            .await
            .unwrap_err();
        assert!(!err.is_connect() && !err.is_timeout(), "{err}");
        assert_eq!(fake.entities().len(), 1);
    }

    #[test]
    fn faults_parse_from_the_control_format() {
        let rules: Vec<FaultRule<Fault>> = serde_json::from_value(json!([
            {"method": "crm.lead.add", "fault": "lost_answer_hang"},
            {"method": "*", "fault": "error", "status": 503, "error": "OVERLOAD_LIMIT", "times": 3},
            {"method": "crm.lead.add", "fault": "html_error", "times": 1}
        ]))
        .unwrap();
        assert_eq!(rules[0].fault, Fault::LostAnswerHang);
        assert_eq!(rules[0].times, 1);
        assert_eq!(
            rules[1].fault,
            Fault::Error {
                status: 503,
                error: "OVERLOAD_LIMIT".into(),
                error_description: String::new(),
                after_execute: false
            }
        );
        assert_eq!(rules[1].times, 3);
        assert_eq!(rules[2].fault, Fault::HtmlError);
    }
}
