//! A fake Bitrix24 portal: a real HTTP server speaking Bitrix24's webhook wire format,
//! with entities in memory and injectable faults.
//!
//! It exists so the adapter, the worker and the pilot scenarios can be tested against
//! the failures that matter — above all "the CRM created the entity and the answer was
//! lost" — over real sockets, without a portal. It follows `docs/crm.md`:
//!
//! - `POST|GET /rest/{user}/{secret}/{method}[.json]` with a JSON body, or form / query
//!   parameters parsed as PHP parses them (`fields[TITLE]=x&select[]=ID`, see `batch`);
//! - `crm.lead.add`, `crm.deal.add`, `crm.contact.add` → `{"result": <id>}` (ids count
//!   per kind from 1; a deal keeps its `CONTACT_IDS`, `CATEGORY_ID`, `STAGE_ID` as sent);
//! - `crm.lead.list`, `crm.deal.list`, `crm.contact.list` with `filter` (`=`/no prefix: equal, an array
//!   meaning any of; `!=`/`!`: not equal; `@`: in the array of values; `!@`: not in it;
//!   `>=`, `>`, `<=`, `<`: ranges, dates compared as times),
//!   `select`, `start` (50 rows a page, `total`, `next`; `start=-1` omits `total`);
//! - `crm.duplicate.findbycomm` with `entity_type` `LEAD` or `CONTACT` (none: both) (`[]`
//!   when nothing matches, `{"LEAD":[ids],"CONTACT":[ids]}` with the kinds that matched
//!   else; it lags behind creates as lists do, `search_lag`);
//! - the offline-event queue: `event.bind` (`event_type=offline`), `event.offline.get`,
//!   `event.offline.clear` (see [`offline`]);
//! - every success carries the `time` object; errors are
//!   `{"error":"CODE","error_description":"text"}`; an unknown method is 404
//!   `ERROR_METHOD_NOT_FOUND`, a wrong secret 401 `NO_AUTH_FOUND`.
//!
//! `batch`: `POST /rest/{user}/{secret}/batch[.json]` with
//! `{"halt":0|1,"cmd":{"<key>":"<method>?<query>",...}}` (or the form
//! `halt=0&cmd[<key>]=<urlencoded "method?query">`). Each query is PHP-style, as
//! `http_build_query` writes it — `fields[PHONE][0][VALUE]=%2B7...&select[0]=ID` — and
//! parsed as PHP does: keys and values percent-decoded (brackets too), bracketed keys
//! nest, an object whose keys are exactly `0..n` becomes an array, `[]` appends. The
//! commands run one by one in the order given, each exactly as the direct call would
//! (same validation, same answers). At most [`MAX_BATCH`] commands, else 400
//! `ERROR_BATCH_LENGTH_EXCEEDED` and nothing runs; a `batch` command gets
//! `ERROR_BATCH_METHOD_NOT_ALLOWED`, an unknown method `ERROR_METHOD_NOT_FOUND`. The
//! answer is 200
//! `{"result":{"result":{key:result},"result_error":{key:{"error","error_description"}},
//! "result_total":{key:N},"result_next":{key:N},"result_time":{key:{time}}},"time":{..}}`
//! with keys in command order; as PHP writes them, an empty one of these five maps is
//! `[]`. Only successful commands are in `result` and `result_time`, only those with a
//! total / next page in `result_total` / `result_next`. With `halt` (PHP-truthy), the
//! batch stops after the first command that errs; nothing is rolled back.
//!
//! Faults in a batch: a fault queued for a command's method strikes the one command that
//! takes it — a refusal (`validation`, `rate_limit`, `server_error`, `error`...) becomes
//! that command's `result_error` entry, not executed; `server_error_after_create` and
//! `error` with `after_execute` execute it, then report the error. The connection faults
//! (`lost_answer_hang`, `lost_answer_drop`, `latency_ms`, `execute_late`, `html_error`,
//! `html_page`)
//! are not taken by one command: queued on `batch` itself, or on a method one of the
//! batch's commands calls, they act on the whole request as on any call
//! (`lost_answer_hang`: every command runs, then no answer) — so a test that makes
//! `crm.lead.add` lose its answer loses it whether the add came alone or in a batch. A
//! refusal queued on `batch` refuses the request before any command runs.
//!
//! Calls are counted per method: a batch request once as `batch`, and each command the
//! portal gets to (faulted ones included) under its own method, so `crm.lead.add` counts
//! add commands that reached the portal, directly or in a batch. Commands of a refused
//! batch, commands after a `halt`, and nested `batch` commands are not counted.
//!
//! Request limit (off by default; [`FakeConfig::request_limit`]): a leaky bucket as the
//! portal's. Every `/rest/` request — a batch is ONE — adds 1 to a counter that drains
//! continuously at `per_second`; a request that would take it above `burst` is refused
//! before anything else (no webhook check, no fault taken, nothing executed) with 503
//! `{"error":"QUERY_LIMIT_EXCEEDED","error_description":"Too many requests"}` and adds
//! nothing. Refusals are counted ([`FakeBitrix24::refused`]); the request still counts
//! in `calls`. The control plane never counts.
//!
//! Control plane (not part of Bitrix24): `POST /_fake/faults` with
//! `[{"method":"crm.lead.add","fault":"lost_answer_hang","times":1}]`,
//! `DELETE /_fake/faults`, `POST /_fake/settings` with
//! `{"request_limit":{"per_second":2,"burst":50}}` (`null` switches it off; a new limit
//! starts from an empty bucket; answers the settings), `GET /_fake/state` (`entities`,
//! `calls`, `pending_faults`, `request_limit`, `refused`), `POST /_fake/reset`.

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
    hang, lock, present, CallCounter, ConnKill, FakeServer, FaultQueue, FaultRule, RandomFault,
};
use crate::limit::LeakyBucket;

/// Range filters, seeded leads and the write count for `leadgate diagnose`.
mod diagnose;
/// The offline-event queue: `event.bind`, `event.offline.get`, `event.offline.clear`.
pub mod offline;

/// Rows per page of a list call, as in Bitrix24.
pub const PAGE_SIZE: usize = 50;
/// At most this many values per `crm.duplicate.findbycomm` call, as in Bitrix24.
pub const MAX_COMM_VALUES: usize = 20;
/// At most this many commands per `batch`, as in Bitrix24.
pub const MAX_BATCH: usize = 50;

const METHODS: &[&str] = &[
    "crm.lead.add",
    "crm.deal.add",
    "crm.lead.update",
    "crm.deal.update",
    "crm.lead.get",
    "crm.deal.get",
    "crm.lead.list",
    "crm.deal.list",
    "crm.contact.add",
    "crm.contact.get",
    "crm.contact.list",
    "crm.duplicate.findbycomm",
    "batch",
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
    /// An nginx HTML page with `status` (404: a webhook URL pointing at a web server
    /// that has no such REST endpoint), not executed. Acts on the whole request.
    HtmlPage { status: u16 },
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

/// The portal's request limit: a leaky bucket that drains at `per_second` and refuses
/// a request that would fill it above `burst` (Bitrix24 cloud: 2 a second with a threshold of 50; Enterprise: 5 and 250).
///
/// On the wire (`POST /_fake/settings`): `{"request_limit":{"per_second":2,"burst":50}}`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RequestLimit {
    pub per_second: f64,
    pub burst: u32,
}

impl RequestLimit {
    /// Bitrix24 cloud's documented limit: 2 requests a second, 50 at once.
    pub const CLOUD: RequestLimit = RequestLimit {
        per_second: 2.0,
        burst: 50,
    };
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
    /// The request limit; `None` (the default): no limit.
    pub request_limit: Option<RequestLimit>,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            user: "1".into(),
            secret: "fake-secret".into(),
            always: Vec::new(),
            random: Vec::new(),
            search_lag: Duration::ZERO,
            request_limit: None,
        }
    }
}

/// One entity held by the fake.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FakeEntity {
    /// `lead`, `deal` or `contact`.
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
    request_limit: Mutex<Option<RequestLimit>>,
    bucket: LeakyBucket,
    offline: Mutex<offline::Queue>,
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
            request_limit: Mutex::new(config.request_limit),
            bucket: LeakyBucket::default(),
            offline: Mutex::new(offline::Queue::default()),
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

    /// How many calls `method` (without `.json`) got, faulted ones and ones refused by
    /// the request limit included. A batch counts once as `batch`, and each command the
    /// portal got to counts under its own method (see the module docs).
    pub fn calls(&self, method: &str) -> u64 {
        self.shared.calls.get(method)
    }

    /// Sets (or with `None` lifts) the request limit, starting from an empty bucket.
    pub fn set_request_limit(&self, limit: Option<RequestLimit>) {
        set_request_limit(&self.shared, limit);
    }

    /// How many requests the request limit refused (since the start or a reset).
    pub fn refused(&self) -> u64 {
        self.shared.bucket.refused()
    }

    /// From now on lists see an entity only `lag` after it landed.
    pub fn set_search_lag(&self, lag: Duration) {
        *lock(&self.shared.search_lag) = lag;
    }

    /// Forgets entities, counters (refusals too) and queued faults, and empties the
    /// request limit's bucket; the limit itself and the search lag stay as set.
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
        .route("/_fake/settings", post(update_settings))
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
    offline::reset(shared);
    shared.calls.clear();
    shared.faults.clear();
    shared.bucket.reset();
}

/// A partial update of the settings (`POST /_fake/settings`).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsUpdate {
    /// `null` lifts the limit; a missing field leaves it.
    #[serde(default, deserialize_with = "present")]
    request_limit: Option<Option<RequestLimit>>,
}

fn set_request_limit(shared: &Shared, limit: Option<RequestLimit>) {
    *lock(&shared.request_limit) = limit;
    shared.bucket.empty();
}

async fn update_settings(
    State(state): State<AppState>,
    Json(update): Json<SettingsUpdate>,
) -> Json<Value> {
    if let Some(limit) = update.request_limit {
        set_request_limit(&state.shared, limit);
    }
    Json(json!({"request_limit": *lock(&state.shared.request_limit)}))
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
    Json(state.shared.faults.push_all(rules))
}

async fn state_json(State(state): State<AppState>) -> Json<Value> {
    Json(json!({
        "entities": entities(&state.shared),
        "calls": state.shared.calls.snapshot(),
        "pending_faults": state.shared.faults.pending(),
        "request_limit": *lock(&state.shared.request_limit),
        "refused": state.shared.bucket.refused(),
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

/// The Bitrix24 error a fault answers with instead of executing, if it is that kind of
/// fault (`HtmlError` refuses too, but not with a Bitrix24 error: see [`refusal`]).
fn refusal_error(fault: &Fault) -> Option<Refusal> {
    Some(match fault {
        Fault::RateLimit { .. } => refuse(503, "QUERY_LIMIT_EXCEEDED", "Too many requests"),
        Fault::OperationTimeLimit { .. } => refuse(
            429,
            "OPERATION_TIME_LIMIT",
            "Method is blocked due to operation time limit.",
        ),
        Fault::ServerError => refuse(500, "INTERNAL_SERVER_ERROR", "Internal server error"),
        Fault::ExpiredToken => refuse(
            401,
            "expired_token",
            "The access token provided has expired.",
        ),
        Fault::Validation => refuse(400, "", "The required field 'Lead Name' is missing.<br />"),
        Fault::Error {
            status,
            error: code,
            error_description,
            after_execute: false,
        } => refuse(*status, code, error_description),
        _ => return None,
    })
}

/// The error a fault reports after the call was executed, if it is that kind of fault.
fn after_execute_error(fault: &Fault) -> Option<Refusal> {
    match fault {
        Fault::ServerErrorAfterCreate => Some(refuse(
            500,
            "INTERNAL_SERVER_ERROR",
            "Internal server error",
        )),
        Fault::Error {
            status,
            error: code,
            error_description,
            after_execute: true,
        } => Some(refuse(*status, code, error_description)),
        _ => None,
    }
}

/// Whether a fault concerns one call rather than the connection, so that a batch
/// command can take it (the others act only on a whole request).
fn concerns_the_call(fault: &Fault) -> bool {
    refusal_error(fault).is_some() || after_execute_error(fault).is_some()
}

/// The answer a fault gives instead of executing, if it is that kind of fault.
fn refusal(fault: &Fault) -> Option<Response> {
    match fault {
        Fault::HtmlError => Some((
            StatusCode::BAD_GATEWAY,
            [(header::CONTENT_TYPE, "text/html")],
            "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
        )
            .into_response()),
        Fault::HtmlPage { status } => {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::NOT_FOUND);
            let title = format!(
                "{} {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("Error")
            );
            Some(
                (
                    status,
                    [(header::CONTENT_TYPE, "text/html")],
                    format!(
                        "<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
                    ),
                )
                    .into_response(),
            )
        }
        Fault::RateLimit { retry_after_secs } | Fault::OperationTimeLimit { retry_after_secs } => {
            refusal_error(fault).map(|r| with_retry_after(r.into_response(), *retry_after_secs))
        }
        _ => refusal_error(fault).map(Refusal::into_response),
    }
}

/// Whether the request limit (if any) lets one more request in.
fn admitted(shared: &Shared) -> bool {
    match *lock(&shared.request_limit) {
        None => true,
        Some(RequestLimit { per_second, burst }) => {
            shared.bucket.admit(per_second, f64::from(burst))
        }
    }
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
    if !admitted(shared) {
        return error(503, "QUERY_LIMIT_EXCEEDED", "Too many requests");
    }
    if user != shared.user || secret != shared.secret {
        return error(401, "NO_AUTH_FOUND", "Wrong authorization data");
    }
    if !METHODS.contains(&method.as_str()) && !offline::METHODS.contains(&method.as_str()) {
        return error(404, "ERROR_METHOD_NOT_FOUND", "Method not found!");
    }
    let call = if method == "batch" {
        batch_params(&headers, query.as_deref(), &body).map(Call::Batch)
    } else {
        params(&headers, query.as_deref(), &body).map(|p| Call::Method(method.clone(), p))
    };
    let Some(call) = call else {
        return error(
            400,
            "INVALID_REQUEST",
            "The request body could not be parsed.",
        );
    };

    let fault = shared.faults.take(&method).or_else(|| match &call {
        // A connection fault queued for a method a batch carries acts on the whole
        // batch: in one request, a lost answer or a slow portal is every command's.
        Call::Batch(batch) => batch.cmd.iter().find_map(|(_, command)| {
            let method = command.split('?').next().unwrap_or_default();
            shared.faults.take_where(method, |f| !concerns_the_call(f))
        }),
        Call::Method(..) => None,
    });
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
            let shared = state.shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let _ = done.send(perform(&shared, &call));
            });
            match answer.await {
                Ok(answer) => answer,
                Err(_) => return error(500, "INTERNAL_SERVER_ERROR", "Internal server error"),
            }
        }
        _ => perform(shared, &call),
    };
    if answer.is_ok() {
        match &fault {
            Some(Fault::LostAnswerHang) => {
                hang(state.shutdown.clone()).await;
            }
            Some(Fault::LostAnswerDrop) => {
                kill.drop_connection();
            }
            Some(f) => {
                if let Some(refused) = after_execute_error(f) {
                    return refused.into_response();
                }
            }
            None => {}
        }
    }
    match answer {
        Ok(Success {
            result,
            total,
            next,
        }) => Json(Envelope {
            result,
            total,
            next,
            time: time_block(started),
        })
        .into_response(),
        Err(refused) => refused.into_response(),
    }
}

/// A success as it goes on the wire.
#[derive(serde::Serialize)]
struct Envelope {
    result: Out,
    #[serde(skip_serializing_if = "Option::is_none")]
    total: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<usize>,
    time: Value,
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

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

fn is_blank(body: &[u8]) -> bool {
    body.iter().all(u8::is_ascii_whitespace)
}

/// The call's parameters: the JSON body, else form parameters; query parameters fill
/// in the keys the body lacks. Form and query parameters are parsed as PHP parses them
/// (see [`php_query`]).
fn params(headers: &HeaderMap, query: Option<&str>, body: &[u8]) -> Option<Value> {
    let mut params = if is_blank(body) {
        Map::new()
    } else if is_form(headers) {
        php_query(body)?
    } else {
        match serde_json::from_slice(body).ok()? {
            Value::Object(m) => m,
            _ => return None,
        }
    };
    if let Some(q) = query {
        for (k, v) in php_query(q.as_bytes())? {
            params.entry(k).or_insert(v);
        }
    }
    Some(Value::Object(params))
}

/// A parsed PHP query string before it becomes JSON: branches keep their key order
/// (for `[]`, which appends after the largest integer key).
enum Node {
    Leaf(String),
    Branch(Vec<(String, Node)>),
}

/// The key as PHP takes it for an array index: a canonical non-negative integer.
fn int_key(key: &str) -> Option<u64> {
    let canonical = key == "0" || (!key.starts_with('0') && !key.is_empty());
    if canonical && key.bytes().all(|b| b.is_ascii_digit()) {
        key.parse().ok()
    } else {
        None
    }
}

/// Where PHP puts `a[]=...`: after the largest integer key, or at 0.
fn next_index<T>(entries: &[(String, T)]) -> String {
    entries
        .iter()
        .filter_map(|(k, _)| int_key(k))
        .map(|i| i + 1)
        .max()
        .unwrap_or(0)
        .to_string()
}

/// Sets `key` to `value`: in place if it is there (as PHP overwrites), else at the end.
fn upsert<T>(entries: &mut Vec<(String, T)>, key: String, value: T) {
    match entries.iter_mut().find(|(k, _)| *k == key) {
        Some(entry) => entry.1 = value,
        None => entries.push((key, value)),
    }
}

impl Node {
    /// Stores `value` under `path` (`None` = `[]`), turning leaves in the way into
    /// branches as PHP does.
    fn insert(&mut self, path: &[Option<String>], value: String) {
        if let Node::Leaf(_) = self {
            *self = Node::Branch(Vec::new());
        }
        let Node::Branch(entries) = self else {
            unreachable!("made a branch above")
        };
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let key = first.clone().unwrap_or_else(|| next_index(entries));
        if rest.is_empty() {
            upsert(entries, key, Node::Leaf(value));
            return;
        }
        let i = match entries.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                entries.push((key, Node::Branch(Vec::new())));
                entries.len() - 1
            }
        };
        entries[i].1.insert(rest, value);
    }

    /// A branch whose keys are exactly `0..n` becomes an array, any other an object.
    fn into_value(self) -> Value {
        match self {
            Node::Leaf(s) => Value::String(s),
            Node::Branch(entries) => {
                let n = entries.len() as u64;
                if entries
                    .iter()
                    .all(|(k, _)| int_key(k).is_some_and(|i| i < n))
                {
                    // Keys are unique, so `n` of them below `n` are each of 0..n once.
                    let mut items: Vec<(u64, Value)> = entries
                        .into_iter()
                        .map(|(k, v)| (int_key(&k).unwrap_or_default(), v.into_value()))
                        .collect();
                    items.sort_by_key(|(i, _)| *i);
                    Value::Array(items.into_iter().map(|(_, v)| v).collect())
                } else {
                    Value::Object(
                        entries
                            .into_iter()
                            .map(|(k, v)| (k, v.into_value()))
                            .collect(),
                    )
                }
            }
        }
    }
}

/// A PHP parameter name as a path: `fields[PHONE][0][VALUE]` → `fields`, `PHONE`, `0`,
/// `VALUE`; `select[]` → `select`, `None`. Empty when PHP would drop the pair (no name
/// before the first bracket). As in PHP, text after a closing bracket that does not
/// open another is ignored, and a first `[` never closed is a `_` in the name.
fn php_path(key: &str) -> Vec<Option<String>> {
    let Some(open) = key.find('[') else {
        return if key.is_empty() {
            Vec::new()
        } else {
            vec![Some(key.to_owned())]
        };
    };
    if !key[open..].contains(']') {
        return vec![Some(key.replacen('[', "_", 1))];
    }
    if open == 0 {
        return Vec::new();
    }
    let mut path = vec![Some(key[..open].to_owned())];
    let mut rest = &key[open..];
    while let Some(inner) = rest.strip_prefix('[') {
        let Some(close) = inner.find(']') else { break };
        let segment = &inner[..close];
        path.push((!segment.is_empty()).then(|| segment.to_owned()));
        rest = &inner[close + 1..];
    }
    path
}

/// A query string or form body as PHP parses it (`parse_str`, what `http_build_query`
/// writes): pairs split on `&`, keys and values percent-decoded (`+` is a space,
/// `%5B`/`%5D` are brackets), then bracketed keys nested — `a[b][0]=1&a[b][1]=2&c[]=3`
/// is `{"a":{"b":["1","2"]},"c":["3"]}`. Values stay strings, as in PHP.
fn php_query(bytes: &[u8]) -> Option<Map<String, Value>> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(bytes).ok()?;
    let mut root = Node::Branch(Vec::new());
    for (key, value) in pairs {
        root.insert(&php_path(&key), value);
    }
    match root {
        Node::Branch(entries) => Some(
            entries
                .into_iter()
                .map(|(k, v)| (k, v.into_value()))
                .collect(),
        ),
        Node::Leaf(_) => unreachable!("the root is a branch"),
    }
}

/// PHP's truthiness, which Bitrix24 applies to `halt`: `0`, `"0"`, `""`, `false`,
/// `null` and empty arrays are false.
fn php_truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        Value::String(s) => !s.is_empty() && s != "0",
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A call the portal runs: a method with its parameters, or a batch of them.
enum Call {
    Method(String, Value),
    Batch(Batch),
}

/// A parsed `batch` request: the commands as `(key, "method?query")` in the order sent.
struct Batch {
    halt: bool,
    cmd: Vec<(String, String)>,
}

/// The `cmd` object of a JSON batch, read in document order (this crate's `serde_json`
/// keeps objects sorted); a JSON array of commands is keyed `0..n`.
#[derive(Default)]
struct Commands(Vec<(String, String)>);

impl<'de> serde::Deserialize<'de> for Commands {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Commands;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of batch commands")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Commands, A::Error> {
                let mut cmd = Vec::new();
                while let Some((key, command)) = map.next_entry::<String, Value>()? {
                    upsert(&mut cmd, key, text_of(&command));
                }
                Ok(Commands(cmd))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Commands, A::Error> {
                let mut cmd = Vec::new();
                while let Some(command) = seq.next_element::<Value>()? {
                    cmd.push((cmd.len().to_string(), text_of(&command)));
                }
                Ok(Commands(cmd))
            }

            fn visit_unit<E>(self) -> Result<Commands, E> {
                Ok(Commands::default())
            }
        }
        d.deserialize_any(Visit)
    }
}

#[derive(serde::Deserialize)]
struct BatchBody {
    #[serde(default)]
    halt: Option<Value>,
    #[serde(default)]
    cmd: Commands,
}

/// `halt` and `cmd[<key>]` from form / query pairs (`cmd[]` appends).
fn form_batch(pairs: Vec<(String, String)>) -> Batch {
    let mut batch = Batch {
        halt: false,
        cmd: Vec::new(),
    };
    for (key, value) in pairs {
        if key == "halt" {
            batch.halt = php_truthy(&Value::String(value));
        } else if let Some(inner) = key.strip_prefix("cmd[").and_then(|k| k.strip_suffix(']')) {
            let key = if inner.is_empty() {
                next_index(&batch.cmd)
            } else {
                inner.to_owned()
            };
            upsert(&mut batch.cmd, key, value);
        }
    }
    batch
}

/// A batch request: a JSON body `{"halt":..,"cmd":{..}}`, or form (or query)
/// parameters `halt=..&cmd[key]=..`; a JSON body without `halt` takes it from the query.
fn batch_params(headers: &HeaderMap, query: Option<&str>, body: &[u8]) -> Option<Batch> {
    let query: Vec<(String, String)> = match query {
        Some(q) => serde_urlencoded::from_str(q).ok()?,
        None => Vec::new(),
    };
    if is_blank(body) || is_form(headers) {
        let mut pairs = query;
        if !is_blank(body) {
            pairs.extend(serde_urlencoded::from_bytes::<Vec<(String, String)>>(body).ok()?);
        }
        return Some(form_batch(pairs));
    }
    let parsed: BatchBody = serde_json::from_slice(body).ok()?;
    Some(Batch {
        halt: match parsed.halt {
            Some(halt) => php_truthy(&halt),
            None => form_batch(query).halt,
        },
        cmd: parsed.cmd.0,
    })
}

/// A map as PHP's `json_encode` writes an array with string keys: in order, and `[]`
/// when empty.
#[derive(Default)]
struct PhpMap(Vec<(String, Value)>);

impl serde::Serialize for PhpMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        if self.0.is_empty() {
            return s.serialize_seq(Some(0))?.end();
        }
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// The `result` of a batch answer.
#[derive(Default, serde::Serialize)]
struct BatchResult {
    result: PhpMap,
    result_error: PhpMap,
    result_total: PhpMap,
    result_next: PhpMap,
    result_time: PhpMap,
}

/// The `result` of a success: a value, or a batch's maps (kept in command order).
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Out {
    Value(Value),
    Batch(BatchResult),
}

impl Out {
    fn into_value(self) -> Value {
        match self {
            Out::Value(v) => v,
            Out::Batch(b) => serde_json::to_value(b).unwrap_or_default(),
        }
    }
}

/// Runs the commands in order, each as [`command`] does; `halt` stops after the first
/// that errs. Nothing is undone.
fn batch(shared: &Shared, batch: &Batch) -> Result<Success, Refusal> {
    if batch.cmd.len() > MAX_BATCH {
        return Err(refuse(
            400,
            "ERROR_BATCH_LENGTH_EXCEEDED",
            "Max batch length exceeded",
        ));
    }
    let mut out = BatchResult::default();
    for (key, cmd) in &batch.cmd {
        let started = chrono::Utc::now();
        let (method, query) = cmd.split_once('?').unwrap_or((cmd, ""));
        let method = method.trim();
        let method = method.strip_suffix(".json").unwrap_or(method);
        match command(shared, method, query) {
            Ok(Success {
                result,
                total,
                next,
            }) => {
                out.result.0.push((key.clone(), result.into_value()));
                if let Some(total) = total {
                    out.result_total.0.push((key.clone(), json!(total)));
                }
                if let Some(next) = next {
                    out.result_next.0.push((key.clone(), json!(next)));
                }
                out.result_time.0.push((key.clone(), time_block(started)));
            }
            Err(refused) => {
                out.result_error.0.push((
                    key.clone(),
                    json!({"error": refused.code, "error_description": refused.description}),
                ));
                if batch.halt {
                    break;
                }
            }
        }
    }
    Ok(Success {
        result: Out::Batch(out),
        total: None,
        next: None,
    })
}

/// One batch command, run as the direct call would be: counted under its method, then
/// its own fault (only one that concerns the call: connection faults stay queued), then
/// [`execute`].
fn command(shared: &Shared, method: &str, query: &str) -> Result<Success, Refusal> {
    if method == "batch" {
        return Err(refuse(
            400,
            "ERROR_BATCH_METHOD_NOT_ALLOWED",
            "Method is not allowed for batch usage",
        ));
    }
    shared.calls.hit(method);
    if !METHODS.contains(&method) {
        return Err(refuse(404, "ERROR_METHOD_NOT_FOUND", "Method not found!"));
    }
    let Some(params) = php_query(query.as_bytes()) else {
        return Err(refuse(
            400,
            "INVALID_REQUEST",
            "The request could not be parsed.",
        ));
    };
    let fault = shared.faults.take_where(method, concerns_the_call);
    if let Some(refused) = fault.as_ref().and_then(refusal_error) {
        return Err(refused);
    }
    let answer = execute(shared, method, &Value::Object(params))?;
    match fault.as_ref().and_then(after_execute_error) {
        Some(refused) => Err(refused),
        None => Ok(answer),
    }
}

/// A Bitrix24 error answer, kept small until it becomes a response.
struct Refusal {
    status: u16,
    code: String,
    description: String,
}

impl Refusal {
    fn into_response(self) -> Response {
        error(self.status, &self.code, &self.description)
    }
}

fn refuse(status: u16, code: &str, description: &str) -> Refusal {
    Refusal {
        status,
        code: code.to_owned(),
        description: description.to_owned(),
    }
}

struct Success {
    result: Out,
    total: Option<usize>,
    next: Option<usize>,
}

impl Success {
    fn plain(result: Value) -> Self {
        Success {
            result: Out::Value(result),
            total: None,
            next: None,
        }
    }
}

fn perform(shared: &Shared, call: &Call) -> Result<Success, Refusal> {
    match call {
        Call::Method(method, params) => execute(shared, method, params),
        Call::Batch(b) => batch(shared, b),
    }
}

fn execute(shared: &Shared, method: &str, params: &Value) -> Result<Success, Refusal> {
    match method {
        "crm.lead.add" => add(shared, "lead", params),
        "crm.deal.add" => add(shared, "deal", params),
        "crm.lead.update" => update(shared, "lead", params),
        "crm.lead.get" => get_entity(shared, "lead", params),
        "crm.deal.get" => get_entity(shared, "deal", params),
        "crm.deal.update" => update(shared, "deal", params),
        "crm.lead.list" => list(shared, "lead", params),
        "crm.deal.list" => list(shared, "deal", params),
        "crm.contact.add" => add(shared, "contact", params),
        "crm.contact.get" => get_entity(shared, "contact", params),
        "crm.contact.list" => list(shared, "contact", params),
        "crm.duplicate.findbycomm" => find_by_comm(shared, params),
        m if offline::METHODS.contains(&m) => offline::execute(shared, m, params),
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

/// `crm.*.get`: the entity's fields, or 400 `Not found`.
fn get_entity(shared: &Shared, kind: &str, params: &Value) -> Result<Success, Refusal> {
    let Some(id) = params
        .get("id")
        .map(text_of)
        .and_then(|id| id.trim().parse::<u64>().ok())
    else {
        return Err(refuse(400, "", "ID is not defined or invalid."));
    };
    match lock(&shared.store).entities.get(&(kind.to_owned(), id)) {
        Some(fields) => Ok(Success::plain(Value::Object(fields.clone()))),
        None => Err(refuse(400, "", "Not found")),
    }
}

/// `crm.*.update`: the fields given replace the entity's; a PHONE or EMAIL item without
/// an `ID` is added beside the entity's others, one with the `ID` of an item replaces it
/// (an empty `VALUE` deletes it), as Bitrix24 does. An unknown id is 400 `Not found`.
fn update(shared: &Shared, kind: &str, params: &Value) -> Result<Success, Refusal> {
    let Some(id) = params
        .get("id")
        .map(text_of)
        .and_then(|id| id.trim().parse::<u64>().ok())
    else {
        return Err(refuse(400, "", "ID is not defined or invalid."));
    };
    let Some(fields) = params.get("fields").and_then(Value::as_object) else {
        return Err(refuse(400, "", "Parameter 'fields' must be array."));
    };
    let mut store = lock(&shared.store);
    let Some(entity) = store.entities.get_mut(&(kind.to_owned(), id)) else {
        return Err(refuse(400, "", "Not found"));
    };
    for (name, value) in fields {
        if name == "ID" {
            continue;
        }
        if matches!(name.as_str(), "PHONE" | "EMAIL") {
            let mut items: Vec<Value> = entity
                .get(name)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for item in value.as_array().into_iter().flatten() {
                let item_id = item.get("ID").map(text_of).filter(|i| !i.is_empty());
                let blank = item
                    .get("VALUE")
                    .map(text_of)
                    .unwrap_or_default()
                    .is_empty();
                match item_id {
                    Some(item_id) => {
                        let at = items
                            .iter()
                            .position(|i| i.get("ID").map(text_of).as_deref() == Some(&item_id));
                        match (at, blank) {
                            (Some(at), true) => {
                                items.remove(at);
                            }
                            (Some(at), false) => items[at] = item.clone(),
                            (None, _) => {}
                        }
                    }
                    None if !blank => items.push(item.clone()),
                    None => {}
                }
            }
            entity.insert(name.clone(), Value::Array(items));
        } else {
            entity.insert(name.clone(), value.clone());
        }
    }
    Ok(Success::plain(json!(true)))
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Whether `fields` satisfies one filter entry. Supported: `=KEY`/`KEY` (equal; an
/// array means "any of"), `!=KEY`/`!KEY` (not equal; an array: none of), `@KEY` (in the
/// array of values; a single value is a list of one) and `!@KEY` (not in it).
fn matches(fields: &Map<String, Value>, key: &str, wanted: &Value) -> Result<bool, String> {
    if let Some(in_range) = diagnose::range(fields, key, wanted) {
        return in_range;
    }
    // Longest prefixes first: `!@` before `!`.
    let (negate, name) = if let Some(k) = key.strip_prefix("!@") {
        (true, k)
    } else if let Some(k) = key.strip_prefix("!=") {
        (true, k)
    } else if let Some(k) = key.strip_prefix('!') {
        (true, k)
    } else if let Some(k) = key.strip_prefix('@') {
        (false, k)
    } else if let Some(k) = key.strip_prefix('=') {
        (false, k)
    } else if key.starts_with(|c: char| c.is_ascii_alphabetic()) {
        (false, key)
    } else {
        return Err(format!(
            "fake: the filter prefix of '{key}' is not supported"
        ));
    };
    if !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(format!(
            "fake: the filter prefix of '{key}' is not supported"
        ));
    }
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
        result: Out::Value(Value::Array(page)),
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
    let kinds: &[(&str, &str)] = match entity_type.as_str() {
        "" => &[("LEAD", "lead"), ("CONTACT", "contact")],
        "LEAD" => &[("LEAD", "lead")],
        "CONTACT" => &[("CONTACT", "contact")],
        // Deals and companies hold no PHONE/EMAIL of their own in this fake.
        _ => &[],
    };
    let wanted: Vec<String> = values
        .iter()
        .map(|v| comm_key(&kind, v))
        .filter(|v| !v.is_empty())
        .collect();
    let store = lock(&shared.store);
    let lag = *lock(&shared.search_lag);
    let mut found = Map::new();
    for (label, entity) in kinds {
        let ids: Vec<u64> = store
            .entities
            .iter()
            .filter(|((k, id), _)| k == entity && visible(&store, lag, k, *id))
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
        if !ids.is_empty() {
            found.insert((*label).to_owned(), json!(ids));
        }
    }
    if found.is_empty() {
        // Bitrix24 answers an empty *array* here, not an empty object.
        Ok(Success::plain(json!([])))
    } else {
        Ok(Success::plain(Value::Object(found)))
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

    async fn batch(fake: &FakeBitrix24, body: Value) -> (u16, Value) {
        call(&format!("{}batch.json", fake.webhook_url()), body).await
    }

    /// A JSON batch body with the commands in this order (`json!` would sort them).
    fn in_order(halt: u8, cmd: &[(String, String)]) -> String {
        let cmd: Vec<String> = cmd
            .iter()
            .map(|(k, c)| format!("{}:{}", json!(k), json!(c)))
            .collect();
        format!("{{\"halt\":{halt},\"cmd\":{{{}}}}}", cmd.join(","))
    }

    /// Sends a raw JSON batch body: (status, body, body text).
    async fn batch_text(fake: &FakeBitrix24, body: String) -> (u16, Value, String) {
        let resp = reqwest::Client::new()
            .post(format!("{}batch", fake.webhook_url()))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or_default(),
            text,
        )
    }

    fn adds(n: usize, query: impl Fn(usize) -> String) -> Vec<(String, String)> {
        (0..n)
            .map(|i| (format!("c{i}"), format!("crm.lead.add?{}", query(i))))
            .collect()
    }

    #[test]
    fn php_queries_nest_like_parse_str() {
        let parsed = php_query(
            b"fields[TITLE]=a+b&fields%5BPHONE%5D%5B0%5D%5BVALUE%5D=%2B7&fields[PHONE][0][VALUE_TYPE]=WORK\
              &select[]=ID&select[]=TITLE&o[1]=x&o[0]=y&gap[0]=a&gap[2]=b&n[5]=a&n[]=b&plain=1&plain=2\
              &s=1&s[k]=2&[x]=dropped&un[closed=3&t[a]junk=4",
        )
        .unwrap();
        assert_eq!(
            Value::Object(parsed),
            json!({
                "fields": {"TITLE": "a b", "PHONE": [{"VALUE": "+7", "VALUE_TYPE": "WORK"}]},
                "select": ["ID", "TITLE"],
                "o": ["y", "x"],
                "gap": {"0": "a", "2": "b"},
                "n": {"5": "a", "6": "b"},
                "plain": "2",
                "s": {"k": "2"},
                "un_closed": "3",
                "t": {"a": "4"},
            })
        );
    }

    #[tokio::test]
    async fn batch_adds_with_php_style_fields_in_command_order() {
        let fake = fake().await;
        let cmd = [
            ("z", "crm.lead.add?fields[TITLE]=One&fields[ORIGINATOR_ID]=leadgate&fields[ORIGIN_ID]=op-1\
                  &fields[PHONE][0][VALUE]=%2B7%20999%20000-11-22&fields[PHONE][0][VALUE_TYPE]=WORK\
                  &params[REGISTER_SONET_EVENT]=N"),
            // As http_build_query writes it: brackets percent-encoded.
            ("a", "crm.lead.add?fields%5BTITLE%5D=Two&fields%5BPHONE%5D%5B0%5D%5BVALUE%5D=1\
                  &fields%5BPHONE%5D%5B0%5D%5BVALUE_TYPE%5D=WORK&fields%5BPHONE%5D%5B1%5D%5BVALUE%5D=2\
                  &fields%5BPHONE%5D%5B1%5D%5BVALUE_TYPE%5D=HOME"),
            ("m", "crm.lead.add.json?fields[TITLE]=Three"),
        ]
        .map(|(k, c)| (k.to_owned(), c.to_owned()));
        let (status, body, text) = batch_text(&fake, in_order(0, &cmd)).await;
        assert_eq!(status, 200, "{text}");
        let result = &body["result"];
        assert_eq!(result["result"], json!({"z": 1, "a": 2, "m": 3}));
        // Keys in command order on the wire, not sorted.
        let at = |k: &str| text.find(&format!("\"{k}\":")).unwrap();
        assert!(at("z") < at("a") && at("a") < at("m"), "{text}");
        // Empty maps as PHP writes them.
        assert_eq!(result["result_error"], json!([]));
        assert_eq!(result["result_total"], json!([]));
        assert_eq!(result["result_next"], json!([]));
        for k in ["z", "a", "m"] {
            assert!(result["result_time"][k]["start"].is_f64(), "{text}");
        }
        assert!(body["time"]["duration"].is_f64());
        let fields: Vec<Value> = fake.entities().into_iter().map(|e| e.fields).collect();
        assert_eq!(
            fields,
            [
                json!({"TITLE": "One", "ORIGINATOR_ID": "leadgate", "ORIGIN_ID": "op-1", "ID": "1",
                       "PHONE": [{"VALUE": "+7 999 000-11-22", "VALUE_TYPE": "WORK"}]}),
                json!({"TITLE": "Two", "ID": "2", "PHONE": [{"VALUE": "1", "VALUE_TYPE": "WORK"},
                                                           {"VALUE": "2", "VALUE_TYPE": "HOME"}]}),
                json!({"TITLE": "Three", "ID": "3"}),
            ]
        );
        assert_eq!(fake.calls("batch"), 1);
        assert_eq!(fake.calls("crm.lead.add"), 3);
        // The phone is found as a directly added one would be.
        let (_, found) = call(
            &format!("{}crm.duplicate.findbycomm", fake.webhook_url()),
            json!({"type": "PHONE", "values": ["79990001122"]}),
        )
        .await;
        assert_eq!(found["result"], json!({"LEAD": [1]}));
    }

    #[tokio::test]
    async fn batch_commands_fail_one_by_one() {
        let fake = fake().await;
        // The validation fault strikes the first lead add only.
        fake.push_fault("crm.lead.add", Fault::Validation, 1);
        fake.push_fault("crm.deal.add", Fault::ServerErrorAfterCreate, 1);
        let (status, body) = batch(
            &fake,
            json!({"cmd": {
                "deal": "crm.deal.add?fields[TITLE]=d",
                "bad": "crm.lead.add?fields[TITLE]=x",
                "good": "crm.lead.add?fields[TITLE]=y",
                "invalid": "crm.lead.add?fields=notanarray",
                "nested": "batch?cmd[x]=crm.lead.add%3Ffields%5BTITLE%5D%3Dz",
                "unknown": "crm.nothing.get?id=1",
                "list": "crm.lead.list?select[]=TITLE",
            }}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let result = &body["result"];
        assert_eq!(
            result["result"],
            json!({"good": 1, "list": [{"TITLE": "y"}]})
        );
        assert_eq!(
            result["result_error"],
            json!({
                "deal": {"error": "INTERNAL_SERVER_ERROR", "error_description": "Internal server error"},
                "bad": {"error": "", "error_description": "The required field 'Lead Name' is missing.<br />"},
                "invalid": {"error": "", "error_description": "Parameter 'fields' must be array."},
                "nested": {"error": "ERROR_BATCH_METHOD_NOT_ALLOWED",
                           "error_description": "Method is not allowed for batch usage"},
                "unknown": {"error": "ERROR_METHOD_NOT_FOUND", "error_description": "Method not found!"},
            })
        );
        assert_eq!(result["result_total"], json!({"list": 1}));
        assert_eq!(result["result_next"], json!([]));
        let times: Vec<&String> = result["result_time"].as_object().unwrap().keys().collect();
        assert_eq!(times, ["good", "list"]);
        // The deal was created before its error; the refused lead was not.
        let kinds: Vec<String> = fake.entities().into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds, ["deal", "lead"]);
        assert_eq!(fake.calls("crm.lead.add"), 3);
        assert_eq!(fake.calls("crm.deal.add"), 1);
        assert_eq!(fake.calls("crm.nothing.get"), 1);
        assert_eq!(
            fake.calls("batch"),
            1,
            "nested batch commands are not counted"
        );
        assert!(fake.shared.faults.pending().is_empty());
    }

    #[tokio::test]
    async fn a_connection_fault_of_a_command_method_acts_on_the_whole_batch() {
        let fake = fake().await;
        // Queued on crm.lead.add as a test of a single create would queue it.
        fake.push_fault("crm.lead.add", Fault::LostAnswerHang, 1);
        let body = json!({"cmd": {"a": "crm.lead.add?fields[TITLE]=a", "b": "crm.lead.add?fields[TITLE]=b"}});
        let err = reqwest::Client::new()
            .post(format!("{}batch", fake.webhook_url()))
            .json(&body)
            .timeout(Duration::from_millis(500))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_timeout(), "{err}");
        assert_eq!(
            fake.entities().len(),
            2,
            "both adds ran, the answer was lost"
        );
        assert!(fake.shared.faults.pending().is_empty());
    }

    #[tokio::test]
    async fn batch_halt_stops_after_the_first_error() {
        let fake = fake().await;
        fake.push_fault("crm.lead.add", Fault::Validation, 1);
        let (status, body) = batch(
            &fake,
            json!({"halt": 1, "cmd": {
                "first": "crm.deal.add?fields[TITLE]=d",
                "second": "crm.lead.add?fields[TITLE]=x",
                "third": "crm.lead.add?fields[TITLE]=y",
            }}),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(body["result"]["result"], json!({"first": 1}));
        let errors = body["result"]["result_error"].as_object().unwrap();
        assert_eq!(errors.keys().collect::<Vec<_>>(), ["second"]);
        assert_eq!(fake.entities().len(), 1, "the deal stays: no transaction");
        assert_eq!(fake.calls("crm.lead.add"), 1);
        // `halt` is PHP-truthy: "0" is false.
        fake.push_fault("crm.lead.add", Fault::Validation, 1);
        let (_, body) = batch(
            &fake,
            json!({"halt": "0", "cmd": {"a": "crm.lead.add?fields[TITLE]=x", "b": "crm.lead.add?fields[TITLE]=y"}}),
        )
        .await;
        assert_eq!(body["result"]["result"], json!({"b": 1}));
    }

    #[tokio::test]
    async fn batch_length_is_at_most_fifty() {
        let fake = fake().await;
        let cmd = |n: usize| in_order(0, &adds(n, |i| format!("fields[TITLE]={i}")));
        let (status, body, _) = batch_text(&fake, cmd(51)).await;
        assert_eq!(
            (
                status,
                body["error"].as_str(),
                body["error_description"].as_str()
            ),
            (
                400,
                Some("ERROR_BATCH_LENGTH_EXCEEDED"),
                Some("Max batch length exceeded")
            )
        );
        assert!(fake.entities().is_empty());
        assert_eq!(fake.calls("crm.lead.add"), 0);
        let (status, body, _) = batch_text(&fake, cmd(50)).await;
        assert_eq!(status, 200);
        assert_eq!(body["result"]["result"].as_object().unwrap().len(), 50);
        assert_eq!(body["result"]["result"]["c49"], 50);
        assert_eq!(fake.entities().len(), 50);
    }

    #[tokio::test]
    async fn batch_faults_on_batch_act_on_the_whole_request() {
        let fake = fake().await;
        let body = json!({"cmd": {"a": "crm.lead.add?fields[TITLE]=a", "b": "crm.deal.add?fields[TITLE]=b"}});
        let send = || {
            reqwest::Client::new()
                .post(format!("{}batch", fake.webhook_url()))
                .json(&body)
        };
        // A refusal on `batch`: nothing runs.
        fake.push_fault(
            "batch",
            Fault::RateLimit {
                retry_after_secs: Some(1),
            },
            1,
        );
        let resp = send().send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 503);
        let refused: Value = resp.json().await.unwrap();
        assert_eq!(refused["error"], "QUERY_LIMIT_EXCEEDED");
        assert!(fake.entities().is_empty());
        assert_eq!(fake.calls("crm.lead.add"), 0);

        fake.push_fault("batch", Fault::LostAnswerHang, 1);
        let err = send()
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_timeout(), "{err}");
        assert_eq!(fake.entities().len(), 2, "every command ran");

        fake.push_fault("batch", Fault::LostAnswerDrop, 1);
        let err = send().send().await.unwrap_err();
        assert!(!err.is_connect() && !err.is_timeout(), "{err}");
        assert_eq!(fake.entities().len(), 4);

        fake.push_fault("batch", Fault::ExecuteLate { ms: 300 }, 1);
        let err = send()
            .timeout(Duration::from_millis(50))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_timeout(), "{err}");
        assert_eq!(fake.entities().len(), 4, "not yet");
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(fake.entities().len(), 6, "executed late all the same");
        assert_eq!(fake.calls("batch"), 4);
        assert_eq!(fake.calls("crm.lead.add"), 3);
    }

    #[tokio::test]
    async fn list_filters_in_a_list_with_at_directly_and_in_a_batch() {
        let fake = fake().await;
        let cmd = adds(50, |i| {
            format!("fields[ORIGINATOR_ID]=leadgate&fields[ORIGIN_ID]=o{i}")
        });
        let (status, _, _) = batch_text(&fake, in_order(0, &cmd)).await;
        assert_eq!(status, 200);
        for i in 50..55 {
            add_lead(&fake, &format!("o{i}"), "1").await;
        }
        let (_, body) = batch(
            &fake,
            json!({"cmd": {
                "in": "crm.lead.list?filter[=ORIGINATOR_ID]=leadgate&filter[@ORIGIN_ID][]=o2\
                       &filter[@ORIGIN_ID][]=o51&filter[@ORIGIN_ID][]=nope&select[0]=ID&select[1]=ORIGIN_ID&start=-1",
                "out": "crm.lead.list?filter%5B%21%40ORIGIN_ID%5D%5B0%5D=o0&filter%5B%21%40ORIGIN_ID%5D%5B1%5D=o1\
                        &select%5B0%5D=ID",
                "all": "crm.lead.list?select[]=ID",
            }}),
        )
        .await;
        let result = &body["result"];
        assert_eq!(
            result["result"]["in"],
            json!([{"ID": "3", "ORIGIN_ID": "o2"}, {"ID": "52", "ORIGIN_ID": "o51"}])
        );
        assert_eq!(result["result"]["out"][0], json!({"ID": "3"}));
        assert_eq!(result["result_total"], json!({"out": 53, "all": 55}));
        assert_eq!(result["result_next"], json!({"out": 50, "all": 50}));
        assert_eq!(result["result_error"], json!([]));

        let url = format!("{}crm.lead.list", fake.webhook_url());
        let (_, body) = call(
            &url,
            json!({"filter": {"@ORIGIN_ID": ["o7", "o54"]}, "select": ["ORIGIN_ID"]}),
        )
        .await;
        assert_eq!(
            body["result"],
            json!([{"ORIGIN_ID": "o7"}, {"ORIGIN_ID": "o54"}])
        );
        let (_, body) = call(&url, json!({"filter": {"!@ORIGIN_ID": ["o7", "o54"]}})).await;
        assert_eq!(body["total"], 53);
        let (_, body) = call(&url, json!({"filter": {"@ORIGIN_ID": []}})).await;
        assert_eq!(body["total"], 0);
        let (status, _) = call(&url, json!({"filter": {"!>ORIGIN_ID": "o1"}})).await;
        assert_eq!(status, 400, "an unsupported prefix is refused, not ignored");
    }

    #[tokio::test]
    async fn form_encoded_batch_and_calls() {
        let fake = fake().await;
        let client = reqwest::Client::new();
        let resp: Value = client
            .post(format!("{}batch.json", fake.webhook_url()))
            .form(&[
                ("halt", "0"),
                (
                    "cmd[b]",
                    "crm.lead.add?fields[TITLE]=B&fields[PHONE][0][VALUE]=%2B7%20999",
                ),
                ("cmd[a]", "crm.lead.list?select[]=TITLE&select[]=PHONE"),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            resp["result"]["result"],
            json!({"b": 1, "a": [{"TITLE": "B", "PHONE": [{"VALUE": "+7 999"}]}]})
        );
        // A direct call with form parameters nests them the same way.
        let resp: Value = client
            .post(format!("{}crm.lead.add", fake.webhook_url()))
            .form(&[("fields[TITLE]", "C"), ("fields[PHONE][0][VALUE]", "1")])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(resp["result"], 2);
        assert_eq!(
            fake.entities()[1].fields,
            json!({"TITLE": "C", "PHONE": [{"VALUE": "1"}], "ID": "2"})
        );
        // `halt` from a form, and a batch in the query string of a GET.
        fake.push_fault("crm.lead.add", Fault::Validation, 1);
        let resp: Value = client
            .get(format!(
                "{}batch?halt=1&cmd[x]=crm.lead.add%3Ffields%5BTITLE%5D%3Dx&cmd[y]=crm.lead.add",
                fake.webhook_url()
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(resp["result"]["result"], json!([]));
        assert_eq!(resp["result"]["result_error"]["x"]["error"], "");
        assert!(resp["result"]["result_error"].get("y").is_none());
    }

    #[tokio::test]
    async fn request_limit_is_a_leaky_bucket_and_a_batch_is_one_request() {
        let config = FakeConfig {
            request_limit: Some(RequestLimit {
                per_second: 2.0,
                burst: 5,
            }),
            ..FakeConfig::default()
        };
        let fake = FakeBitrix24::spawn_with("127.0.0.1:0".parse().unwrap(), config)
            .await
            .unwrap();
        let client = reqwest::Client::new();
        let control = format!("http://{}/_fake", fake.addr());
        let state = || async {
            client
                .get(format!("{control}/state"))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        };
        let add = format!("{}crm.lead.add", fake.webhook_url());
        let adds: Map<String, Value> = (0..10)
            .map(|i| (format!("k{i}"), json!("crm.lead.add?fields[TITLE]=b")))
            .collect();
        let (status, _) = batch(&fake, json!({"cmd": adds})).await;
        assert_eq!(status, 200);
        for _ in 0..4 {
            // The control plane does not count.
            state().await;
            let (status, body) = call(&add, json!({"fields": {"TITLE": "d"}})).await;
            assert_eq!(status, 200, "{body}");
        }
        let (status, body) = call(&add, json!({"fields": {"TITLE": "refused"}})).await;
        assert_eq!(
            (
                status,
                body["error"].as_str(),
                body["error_description"].as_str()
            ),
            (503, Some("QUERY_LIMIT_EXCEEDED"), Some("Too many requests"))
        );
        assert_eq!(fake.entities().len(), 14, "the refused add did not execute");
        assert_eq!(fake.refused(), 1);
        assert_eq!(fake.calls("crm.lead.add"), 15);
        tokio::time::sleep(Duration::from_millis(600)).await;
        let (status, _) = call(&add, json!({"fields": {"TITLE": "later"}})).await;
        assert_eq!(status, 200);
        let (status, _) = call(&add, json!({"fields": {}})).await;
        assert_eq!(status, 503, "one request's worth drained, not two");
        let s = state().await;
        assert_eq!(s["refused"], 2);
        assert_eq!(s["request_limit"], json!({"per_second": 2.0, "burst": 5}));

        let settings = |limit: Value| {
            client
                .post(format!("{control}/settings"))
                .json(&json!({ "request_limit": limit }))
                .send()
        };
        let answer: Value = settings(Value::Null).await.unwrap().json().await.unwrap();
        assert_eq!(answer, json!({"request_limit": null}));
        for _ in 0..10 {
            assert_eq!(call(&add, json!({"fields": {}})).await.0, 200);
        }
        settings(json!({"per_second": 1, "burst": 1}))
            .await
            .unwrap();
        assert_eq!(call(&add, json!({"fields": {}})).await.0, 200);
        assert_eq!(call(&add, json!({"fields": {}})).await.0, 503);
        assert_eq!(fake.refused(), 3);
        fake.set_request_limit(None);
        assert_eq!(call(&add, json!({"fields": {}})).await.0, 200);
        fake.reset();
        assert_eq!(fake.refused(), 0);
    }
}
