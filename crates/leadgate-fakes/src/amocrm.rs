//! A fake amoCRM / Kommo account: a real HTTP server speaking API v4 as described in
//! `docs/crm.md`, with leads and contacts in memory and injectable faults.
//!
//! - `POST /api/v4/leads/complex` — an array of ≤ 50 leads, each with ≤ 1 embedded
//!   contact (`PHONE`/`EMAIL` by `field_code`), custom fields by `field_id` (unknown ids
//!   are a 400 `NotSupportedChoice`), tags, `request_id` → `200 [{"id", "contact_id",
//!   "request_id": [..], "merged"}]`. With duplicate control switched on, a lead whose
//!   contact phone (by digits) or e-mail (case-insensitively) matches an EXISTING
//!   contact is not created: its answer is the existing lead with `"merged": true`.
//! - An embedded contact given as `{"id": N}` attaches that existing contact instead of
//!   creating one (an unknown id is a 400 `NotFound`).
//! - `POST /api/v4/contacts` — an array of contacts (`first_name`, `custom_fields_values`
//!   by `field_code`) → `{"_embedded":{"contacts":[{"id","request_id"}]}}`.
//! - `GET /api/v4/contacts?query=` — contacts whose name, e-mail or phone contains the
//!   query (phones by digits); `_embedded.contacts`, 204 when empty; lags as the lead
//!   search does (`search_lag_ms`). `filter[id][]`, `limit` (≤ 250, default 50),
//!   `page` and `_links.next` as for leads; `with=leads` embeds each contact's leads
//!   (`_embedded.leads: [{id, _links}]`). Counted and faulted as `contacts.list`.
//! - `GET /api/v4/leads?query=&limit=&page=` — substring search over the lead name,
//!   custom field values and tags; HAL answer with `_page`, `_links`, `_embedded.leads`;
//!   an empty result is **204 with no body**. With `search_lag`, leads created in the
//!   last N ms are not found yet (a lagging search index). Lists filter by
//!   `filter[id][]` and `filter[created_at][from|to]` (unix seconds, both ends
//!   included), order by `order[created_at|id]=asc|desc`, and embed a lead's contacts
//!   only with `with=contacts`; an unknown filter is a 400. Leads and contacts can be
//!   seeded with their own creation time ([`FakeAmoCrm::seed_lead`]); calls that change
//!   the account are counted ([`FakeAmoCrm::writes`]).
//! - `GET /api/v4/leads/{id}` — the lead, or 204 (or 404, configurable) when missing.
//! - Invalid leads (`invalid_request_ids`): a `leads/complex` request carrying one is
//!   refused with a 400 and creates nothing; `name_refusals` says which invalid leads
//!   its `validation-errors` name — `all` (amoCRM's documented answer), `first` (only
//!   the first of the request: refusals in rounds) or `none` (no `validation-errors`).
//! - `POST /oauth2/access_token` `{client_id, client_secret, grant_type: "refresh_token",
//!   refresh_token, redirect_uri}` → `{token_type, expires_in, server_time, access_token,
//!   refresh_token}`. Refresh tokens ROTATE: only the latest one works, an earlier one is
//!   refused with 400 (as is a wrong grant or redirect_uri); wrong client credentials are
//!   401. Access tokens live `access_ttl_secs` (short in tests). Counted as `oauth.token`.
//! - Every API call needs `Authorization: Bearer <token>`, the long-lived token or an
//!   unexpired access token; otherwise 401 problem+json.
//!   Successes are `application/hal+json`, errors `application/problem+json` — except
//!   the faults that imitate a proxy: a plain-text 429 and an nginx HTML 403.
//! - Request limit (off by default; `FakeConfig::settings.request_limit_per_second`,
//!   amoCRM: 7 per second per integration): a sliding window — at most `n = max(1, floor(r))` requests
//!   in any `n / r` seconds, i.e. for a whole `r` at most `r` in any one second, with no
//!   burst beyond it. A request over it is refused before anything else (no token check,
//!   no fault taken, nothing executed) with 429 and the plain-text body
//!   `Too Many Requests`, as the `rate_limit` fault answers, and does not count in the
//!   window. Every API call and `POST /oauth2/access_token` count; the control plane
//!   does not. Refusals are counted ([`FakeAmoCrm::refused`]); the call still counts in
//!   `calls`.
//!
//! Control plane (not part of amoCRM): `POST /_fake/faults` with
//! `[{"method":"leads.complex","fault":"lost_answer_hang","times":1}]` (methods:
//! `leads.complex`, `leads.list`, `leads.get`, `oauth.token`, `*`),
//! `POST /_fake/settings` with
//! `{"duplicate_control":true,"search_lag_ms":500,"missing_lead_status":404,
//! "request_limit_per_second":7,"invalid_request_ids":["site:x"],"name_refusals":"first"}` (any subset; `"request_limit_per_second":null`
//! switches the limit off, a new one starts from an empty window; answers the
//! settings, the limit only when on),
//! `GET /_fake/state` (`leads`, `contacts`, `settings`, `calls`, `pending_faults`,
//! `refused`), `POST /_fake/reset`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use crate::control::{
    hang, lock, present, CallCounter, ConnKill, FakeServer, FaultQueue, FaultRule,
};
use crate::limit::Window;

mod diagnose;

/// The fault-queue names of the three endpoints.
pub const CREATE: &str = "leads.complex";
pub const SEARCH: &str = "leads.list";
pub const GET: &str = "leads.get";
/// `PATCH /api/v4/leads/{id}`, `GET` and `PATCH /api/v4/contacts/{id}`.
pub const UPDATE: &str = "leads.update";
pub const CONTACT_GET: &str = "contacts.get";
/// `GET /api/v4/contacts?query=` and `POST /api/v4/contacts`.
pub const CONTACT_SEARCH: &str = "contacts.list";
pub const CONTACT_ADD: &str = "contacts.add";
pub const CONTACT_UPDATE: &str = "contacts.update";
/// The fault-queue / call-counter name of `POST /oauth2/access_token`.
pub const TOKEN: &str = "oauth.token";
/// The custom text field a fresh fake account has (the operation_id field).
pub const FIELD_ID: u64 = 555_001;
/// Leads without a `pipeline_id` land here.
pub const DEFAULT_PIPELINE: u64 = 7_000_001;
/// At most this many leads per `leads/complex` call and per search page.
pub const MAX_COMPLEX: usize = 50;
pub const MAX_LIMIT: usize = 250;

const HTML_403: &str = "<html>\r\n<head><title>403 Forbidden</title></head>\r\n<body>\r\n<center><h1>403 Forbidden</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n";

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
    /// 429 with a plain-text body (not JSON), not executed; optional `Retry-After`.
    RateLimit {
        #[serde(default)]
        retry_after_secs: Option<u64>,
    },
    /// 403 with an nginx HTML page (account blocked for rate abuse), not executed.
    Blocked,
    /// An nginx HTML page with `status` (404: a base URL pointing at a web server
    /// that is not the account's API), not executed.
    HtmlPage { status: u16 },
    /// 402 problem+json (subscription ended), not executed.
    PaymentRequired,
    /// 401 problem+json, not executed.
    Unauthorized,
    /// 400 problem+json with `validation-errors`, not executed.
    Validation,
    /// 400 problem+json whose `validation-errors` name the lead with `request_id` (as
    /// amoCRM refuses a request for one invalid lead), not executed: none of the
    /// request's leads is created.
    InvalidLead { request_id: String },
    /// 400 with amoCRM's code 244 (no rights / subscription ended), not executed.
    NoRights,
    /// 500 problem+json, not executed.
    ServerError,
    /// Executes the call, then answers 500 problem+json.
    ServerErrorAfterCreate,
    /// Waits `ms`, then behaves normally.
    LatencyMs { ms: u64 },
    /// A slow account that finishes what it started: the create is executed `ms` after
    /// it arrived whoever is still waiting, then answered if the client is still there.
    ExecuteLate { ms: u64 },
    /// Any problem+json answer; `after_execute` executes the call first.
    Error {
        status: u16,
        #[serde(default)]
        detail: String,
        #[serde(default)]
        after_execute: bool,
    },
}

/// Switches that change how the account behaves, settable while it runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Settings {
    /// amoCRM's duplicate control for the integration: merge new leads into existing
    /// ones with the same contact phone/e-mail.
    pub duplicate_control: bool,
    /// Leads created less than this many ms ago are not found by `?query=`.
    pub search_lag_ms: u64,
    /// What `GET /api/v4/leads/{id}` answers for a missing lead: 204 or 404.
    pub missing_lead_status: u16,
    /// The request limit (amoCRM: 7 a second; see the module docs); `None`: no limit.
    /// Left out of the JSON when off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_limit_per_second: Option<f64>,
    /// Leads whose `request_id` is one of these are invalid data: a `leads/complex`
    /// request carrying any of them is refused with a 400 and creates nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid_request_ids: Vec<String>,
    /// Which invalid leads such a 400 names in its `validation-errors` (left out of the
    /// JSON when `all`).
    #[serde(default, skip_serializing_if = "NameRefusals::is_all")]
    pub name_refusals: NameRefusals,
}

/// Which of a refused request's invalid leads its 400 names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NameRefusals {
    /// Every one (what amoCRM documents).
    #[default]
    All,
    /// Only the first invalid lead of the request: the refusals come in rounds.
    First,
    /// None: `Request validation failed` without `validation-errors`.
    None,
}

impl NameRefusals {
    fn is_all(&self) -> bool {
        *self == NameRefusals::All
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            duplicate_control: false,
            search_lag_ms: 0,
            missing_lead_status: 204,
            request_limit_per_second: None,
            invalid_request_ids: Vec::new(),
            name_refusals: NameRefusals::All,
        }
    }
}

/// A partial update of [`Settings`] (`POST /_fake/settings`).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsUpdate {
    duplicate_control: Option<bool>,
    search_lag_ms: Option<u64>,
    missing_lead_status: Option<u16>,
    /// `null` lifts the limit; a missing field leaves it.
    #[serde(default, deserialize_with = "present")]
    request_limit_per_second: Option<Option<f64>>,
    invalid_request_ids: Option<Vec<String>>,
    name_refusals: Option<NameRefusals>,
}

/// How the fake is set up.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// The only token accepted as `Authorization: Bearer`.
    pub token: String,
    /// The lead custom fields the account has; others are refused.
    pub field_ids: Vec<u64>,
    pub settings: Settings,
    /// Faults applied to every call of a method (`*` = any); queued faults go first.
    pub always: Vec<(String, Fault)>,
    /// The OAuth integration: client credentials, redirect URI, and the refresh token
    /// the account issued when it was connected (the first one that works).
    pub client_id: String,
    pub client_secret: String,
    pub redirect_uri: String,
    pub refresh_token: String,
    /// How long an access token from `/oauth2/access_token` works (amoCRM: a day).
    pub access_ttl_secs: u64,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            token: "fake-amo-token".into(),
            field_ids: vec![FIELD_ID],
            settings: Settings::default(),
            always: Vec::new(),
            client_id: "fake-client-id".into(),
            client_secret: "fake-client-secret".into(),
            redirect_uri: "https://leadgate.example/oauth".into(),
            refresh_token: "fake-refresh-0".into(),
            access_ttl_secs: 86_400,
        }
    }
}

#[derive(Debug)]
struct StoredLead {
    lead: Map<String, Value>,
    created: Instant,
}

#[derive(Debug, Default)]
struct Store {
    leads: BTreeMap<u64, StoredLead>,
    contacts: BTreeMap<u64, Map<String, Value>>,
    /// Which lead each contact was created with (duplicate control answers that lead).
    lead_of_contact: BTreeMap<u64, u64>,
    tags: BTreeMap<String, u64>,
    last_lead: u64,
    last_contact: u64,
    /// When each contact was created, for `search_lag_ms`.
    contact_created: BTreeMap<u64, Instant>,
}

/// The OAuth side of the account: which refresh token works now, which access tokens
/// were issued and until when.
#[derive(Debug)]
struct OAuth {
    client_id: String,
    client_secret: String,
    redirect_uri: String,
    initial_refresh: String,
    /// The only refresh token that works (rotated by every refresh).
    refresh_token: String,
    access: BTreeMap<String, Instant>,
    access_ttl: Duration,
    issued: u64,
}

struct Shared {
    token: String,
    oauth: Mutex<OAuth>,
    field_ids: Vec<u64>,
    settings: Mutex<Settings>,
    initial: Settings,
    store: Mutex<Store>,
    faults: FaultQueue<Fault>,
    calls: CallCounter,
    window: Window,
    base_url: Mutex<String>,
    /// When each `leads/complex` request arrived, with the `request_id`s it carried.
    arrivals: Mutex<Vec<(chrono::DateTime<chrono::Utc>, Vec<String>)>>,
}

#[derive(Clone)]
struct AppState {
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
}

/// A running fake account; dropping it stops the server.
pub struct FakeAmoCrm {
    server: FakeServer,
    shared: Arc<Shared>,
}

impl FakeAmoCrm {
    pub async fn spawn(listen: SocketAddr) -> std::io::Result<FakeAmoCrm> {
        Self::spawn_with(listen, FakeConfig::default()).await
    }

    pub async fn spawn_with(listen: SocketAddr, config: FakeConfig) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            token: config.token,
            oauth: Mutex::new(OAuth {
                client_id: config.client_id,
                client_secret: config.client_secret,
                redirect_uri: config.redirect_uri,
                initial_refresh: config.refresh_token.clone(),
                refresh_token: config.refresh_token,
                access: BTreeMap::new(),
                access_ttl: Duration::from_secs(config.access_ttl_secs),
                issued: 0,
            }),
            field_ids: config.field_ids,
            settings: Mutex::new(config.settings.clone()),
            initial: config.settings,
            store: Mutex::new(Store::default()),
            faults: FaultQueue::new(config.always),
            calls: CallCounter::default(),
            window: Window::default(),
            base_url: Mutex::new(String::new()),
            arrivals: Mutex::new(Vec::new()),
        });
        let for_router = shared.clone();
        let server = FakeServer::spawn(listen, move |shutdown| {
            router(AppState {
                shared: for_router,
                shutdown,
            })
        })
        .await?;
        *lock(&shared.base_url) = format!("http://{}", server.addr());
        Ok(FakeAmoCrm { server, shared })
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `http://127.0.0.1:PORT`: the adapter's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr())
    }

    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// `(client_id, client_secret, redirect_uri)` of the OAuth integration.
    pub fn oauth_client(&self) -> (String, String, String) {
        let o = lock(&self.shared.oauth);
        (
            o.client_id.clone(),
            o.client_secret.clone(),
            o.redirect_uri.clone(),
        )
    }

    /// The refresh token the account issued when it was connected (what goes into the
    /// configuration as `refresh_token`). It stops working after the first refresh.
    pub fn initial_refresh_token(&self) -> String {
        lock(&self.shared.oauth).initial_refresh.clone()
    }

    /// The one refresh token that works now.
    pub fn current_refresh_token(&self) -> String {
        lock(&self.shared.oauth).refresh_token.clone()
    }

    /// How long access tokens issued from now on work.
    pub fn set_access_ttl(&self, ttl: Duration) {
        lock(&self.shared.oauth).access_ttl = ttl;
    }

    /// Makes every access token issued so far expire now (the API answers 401).
    pub fn expire_access_tokens(&self) {
        let now = Instant::now();
        for until in lock(&self.shared.oauth).access.values_mut() {
            *until = now;
        }
    }

    /// Revokes the integration's current refresh token and issues `fresh` instead (a
    /// person reconnected the integration).
    pub fn reissue_refresh_token(&self, fresh: &str) {
        lock(&self.shared.oauth).refresh_token = fresh.to_owned();
    }

    /// Applies `fault` to the next `times` calls of `method` (`leads.complex`,
    /// `leads.list`, `leads.get`, `*`).
    pub fn push_fault(&self, method: &str, fault: Fault, times: u32) {
        self.shared.faults.push(FaultRule {
            method: method.to_owned(),
            fault,
            times,
        });
    }

    /// Every lead as `GET /api/v4/leads/{id}` shows it, by id.
    pub fn leads(&self) -> Vec<Value> {
        leads(&self.shared)
    }

    /// Every contact, by id.
    pub fn contacts(&self) -> Vec<Value> {
        lock(&self.shared.store)
            .contacts
            .values()
            .map(|c| Value::Object(c.clone()))
            .collect()
    }

    /// Drops the queued faults (the configured `always` ones stay).
    pub fn clear_faults(&self) {
        self.shared.faults.clear();
    }

    /// How many calls `method` got, faulted, unauthorized and rate-limited ones included.
    /// When each `leads/complex` request arrived (before any fault or limit acted on it),
    /// with the `request_id`s of its leads: what a client's timeline can be compared with.
    pub fn arrivals(&self) -> Vec<(chrono::DateTime<chrono::Utc>, Vec<String>)> {
        lock(&self.shared.arrivals).clone()
    }

    pub fn calls(&self, method: &str) -> u64 {
        self.shared.calls.get(method)
    }

    /// Sets (or with `None` lifts) the request limit, in requests per second, starting
    /// from an empty window.
    pub fn set_request_limit(&self, per_second: Option<f64>) {
        lock(&self.shared.settings).request_limit_per_second = per_second;
        self.shared.window.empty();
    }

    /// How many requests the request limit refused (since the start or a reset).
    pub fn refused(&self) -> u64 {
        self.shared.window.refused()
    }

    pub fn set_duplicate_control(&self, on: bool) {
        lock(&self.shared.settings).duplicate_control = on;
    }

    pub fn set_search_lag(&self, lag: Duration) {
        lock(&self.shared.settings).search_lag_ms = lag.as_millis() as u64;
    }

    /// Makes the leads with these `request_id`s invalid data, refused in a 400 that
    /// names them as `naming` says.
    pub fn set_invalid_leads(&self, request_ids: &[&str], naming: NameRefusals) {
        let mut settings = lock(&self.shared.settings);
        settings.invalid_request_ids = request_ids.iter().map(|r| (*r).to_owned()).collect();
        settings.name_refusals = naming;
    }

    pub fn set_missing_lead_status(&self, status: u16) {
        lock(&self.shared.settings).missing_lead_status = status;
    }

    /// Forgets leads, contacts, counters (refusals too), queued faults and the request
    /// limit's window; settings (the limit too) go back to the configured ones.
    pub fn reset(&self) {
        reset(&self.shared);
    }
}

/// Runs a fake account on `listen` until ctrl-c, for
/// `leadgate-dev fake-crm --kind amocrm --listen ADDR`.
pub async fn serve(listen: SocketAddr) -> anyhow::Result<()> {
    let fake = FakeAmoCrm::spawn(listen).await?;
    tracing::info!(addr = %fake.addr(), "fake amoCRM listening");
    // The fake's well-known token: printing it is the point.
    println!("fake amoCRM base_url: {}", fake.base_url());
    println!("token: {}", fake.token());
    let (client_id, client_secret, redirect_uri) = fake.oauth_client();
    println!("client_id: {client_id}");
    println!("client_secret: {client_secret}");
    println!("redirect_uri: {redirect_uri}");
    println!("refresh_token: {}", fake.initial_refresh_token());
    println!("operation_field_id: {FIELD_ID}");
    tokio::signal::ctrl_c().await?;
    drop(fake);
    Ok(())
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/api/v4/leads/complex", post(complex))
        .route("/api/v4/leads", get(search))
        .route("/api/v4/leads/{id}", get(get_lead).patch(patch_lead))
        .route("/api/v4/contacts", get(search_contacts).post(add_contacts))
        .route(
            "/api/v4/contacts/{id}",
            get(get_contact).patch(patch_contact),
        )
        .route("/oauth2/access_token", post(access_token))
        .route("/_fake/faults", post(push_faults))
        .route("/_fake/settings", post(update_settings))
        .route("/_fake/state", get(state_json))
        .route("/_fake/reset", post(reset_handler))
        .fallback(|| async { problem(404, "Not Found", "Unknown API method") })
        .with_state(state)
}

fn leads(shared: &Shared) -> Vec<Value> {
    lock(&shared.store)
        .leads
        .values()
        .map(|l| Value::Object(l.lead.clone()))
        .collect()
}

fn reset(shared: &Shared) {
    *lock(&shared.store) = Store::default();
    *lock(&shared.settings) = shared.initial.clone();
    shared.calls.clear();
    shared.faults.clear();
    shared.window.reset();
}

async fn push_faults(
    State(state): State<AppState>,
    Json(rules): Json<Vec<FaultRule<Fault>>>,
) -> Json<Value> {
    Json(state.shared.faults.push_all(rules))
}

async fn update_settings(
    State(state): State<AppState>,
    Json(update): Json<SettingsUpdate>,
) -> Json<Value> {
    let mut settings = lock(&state.shared.settings);
    if let Some(v) = update.duplicate_control {
        settings.duplicate_control = v;
    }
    if let Some(v) = update.search_lag_ms {
        settings.search_lag_ms = v;
    }
    if let Some(v) = update.missing_lead_status {
        settings.missing_lead_status = v;
    }
    if let Some(v) = update.request_limit_per_second {
        settings.request_limit_per_second = v;
        state.shared.window.empty();
    }
    if let Some(v) = update.invalid_request_ids {
        settings.invalid_request_ids = v;
    }
    if let Some(v) = update.name_refusals {
        settings.name_refusals = v;
    }
    Json(json!(*settings))
}

async fn state_json(State(state): State<AppState>) -> Json<Value> {
    let shared = &state.shared;
    let contacts: Vec<Value> = lock(&shared.store)
        .contacts
        .values()
        .map(|c| Value::Object(c.clone()))
        .collect();
    Json(json!({
        "leads": leads(shared),
        "contacts": contacts,
        "settings": *lock(&shared.settings),
        "calls": shared.calls.snapshot(),
        "pending_faults": shared.faults.pending(),
        "refused": shared.window.refused(),
    }))
}

async fn reset_handler(State(state): State<AppState>) -> Json<Value> {
    reset(&state.shared);
    Json(json!({"reset": true}))
}

/// An amoCRM success: `application/hal+json`.
fn hal(status: StatusCode, body: Value) -> Response {
    let mut resp = (status, Json(body)).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/hal+json"),
    );
    resp
}

/// An amoCRM error: `application/problem+json`.
fn problem_body(status: u16, body: Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (status, Json(body)).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    resp
}

fn problem(status: u16, title: &str, detail: &str) -> Response {
    problem_body(
        status,
        json!({"title": title, "type": format!("https://httpstatus.es/{status}"),
               "status": status, "detail": detail}),
    )
}

fn title_of(status: u16) -> &'static str {
    StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error")
}

/// A 400 `Request validation failed` with one validation error per entry.
fn validation(errors: Vec<(String, &str, String, String)>) -> Response {
    let mut by_request: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (request_id, code, path, detail) in errors {
        by_request
            .entry(request_id)
            .or_default()
            .push(json!({"code": code, "path": path, "detail": detail}));
    }
    let entries: Vec<Value> = by_request
        .into_iter()
        .map(|(request_id, errors)| json!({"request_id": request_id, "errors": errors}))
        .collect();
    problem_body(
        400,
        json!({"validation-errors": entries, "title": "Bad Request",
               "type": "https://httpstatus.es/400", "status": 400,
               "detail": "Request validation failed"}),
    )
}

/// The answer a fault gives instead of executing, if it is that kind of fault.
fn refusal(fault: &Fault) -> Option<Response> {
    Some(match fault {
        Fault::RateLimit { retry_after_secs } => {
            let mut resp = (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::CONTENT_TYPE, "text/plain")],
                "Too Many Requests",
            )
                .into_response();
            if let Some(secs) = retry_after_secs {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(*secs));
            }
            resp
        }
        Fault::Blocked => (
            StatusCode::FORBIDDEN,
            [(header::CONTENT_TYPE, "text/html")],
            HTML_403,
        )
            .into_response(),
        Fault::HtmlPage { status } => {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::NOT_FOUND);
            let title = format!(
                "{} {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("Error")
            );
            (
                status,
                [(header::CONTENT_TYPE, "text/html")],
                format!(
                    "<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
                ),
            )
                .into_response()
        }
        Fault::PaymentRequired => problem(402, "Payment Required", "Account subscription ended"),
        Fault::Unauthorized => problem(401, "Unauthorized", "Token has expired"),
        Fault::Validation => validation(vec![(
            "0".into(),
            "NotSupportedChoice",
            "custom_fields_values.0.field_id".into(),
            "The value you selected is not a valid choice.".into(),
        )]),
        Fault::InvalidLead { request_id } => validation(vec![(
            request_id.clone(),
            "InvalidValue",
            "name".into(),
            "This value is not valid.".into(),
        )]),
        Fault::NoRights => problem_body(
            400,
            json!({"title": "Bad Request", "type": "https://httpstatus.es/400", "status": 400,
                   "detail": "No rights", "response": {"error": "Access denied", "error_code": 244}}),
        ),
        Fault::ServerError => problem(500, "Internal Server Error", "Internal server error"),
        Fault::Error {
            status,
            detail,
            after_execute: false,
        } => problem(*status, title_of(*status), detail),
        _ => return None,
    })
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let Some(t) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    t == shared.token
        || lock(&shared.oauth)
            .access
            .get(t)
            .is_some_and(|until| Instant::now() < *until)
}

/// An OAuth error as amoCRM sends it: problem+json with a `hint`.
fn oauth_error(status: u16, hint: &str) -> Response {
    problem_body(
        status,
        json!({"hint": hint, "title": title_of(status), "type": format!("https://httpstatus.es/{status}"),
               "status": status, "detail": "The request is invalid"}),
    )
}

/// `POST /oauth2/access_token` with `grant_type: refresh_token` (JSON or a form).
async fn access_token(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let shared = &state.shared;
    shared.calls.hit(TOKEN);
    if let Some(refused) = over_limit(shared) {
        return refused;
    }
    let fault = shared.faults.take(TOKEN);
    if let Some(Fault::LatencyMs { ms }) = &fault {
        tokio::time::sleep(Duration::from_millis(*ms)).await;
    }
    if let Some(refused) = fault.as_ref().and_then(refusal) {
        return refused;
    }
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/x-www-form-urlencoded"));
    let params: BTreeMap<String, String> = if is_form {
        serde_urlencoded::from_bytes(&body).unwrap_or_default()
    } else {
        serde_json::from_slice::<Map<String, Value>>(&body)
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, text_of(&v)))
            .collect()
    };
    let param = |k: &str| params.get(k).map(String::as_str).unwrap_or_default();
    let issued = {
        let mut o = lock(&shared.oauth);
        if param("client_id") != o.client_id || param("client_secret") != o.client_secret {
            Err(oauth_error(401, "Client authentication failed"))
        } else if param("grant_type") != "refresh_token" {
            Err(oauth_error(400, "Unsupported grant type"))
        } else if param("redirect_uri") != o.redirect_uri {
            Err(oauth_error(400, "Redirect URI mismatch"))
        } else if param("refresh_token").is_empty() || param("refresh_token") != o.refresh_token {
            Err(oauth_error(400, "Token has been revoked"))
        } else {
            o.issued += 1;
            let n = o.issued;
            let access = format!("fake-access-{n}");
            let ttl = o.access_ttl;
            o.access.insert(access.clone(), Instant::now() + ttl);
            o.refresh_token = format!("fake-refresh-{n}");
            Ok((access, o.refresh_token.clone(), ttl))
        }
    };
    let (access, refresh, ttl) = match issued {
        Ok(t) => t,
        Err(resp) => return resp,
    };
    let server_time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let mut resp = Json(json!({"token_type": "Bearer", "expires_in": ttl.as_secs(),
        "server_time": server_time, "access_token": access, "refresh_token": refresh}))
    .into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(resp) = after_execute(fault, &state, &kill).await {
        return resp;
    }
    resp
}

/// The 429 of the request limit, if it is on and this request is over it.
fn over_limit(shared: &Shared) -> Option<Response> {
    let per_second = lock(&shared.settings).request_limit_per_second?;
    if shared.window.admit(per_second) {
        None
    } else {
        refusal(&Fault::RateLimit {
            retry_after_secs: None,
        })
    }
}

fn unauthorized() -> Response {
    problem(401, "Unauthorized", "Authorization required")
}

/// Counts the call, applies the request limit, checks the token and plays a refusing
/// fault. `Ok(fault)` means go on (the fault may still act after executing).
async fn preamble(
    shared: &Shared,
    method: &str,
    headers: &HeaderMap,
) -> Result<Option<Fault>, Response> {
    shared.calls.hit(method);
    if let Some(refused) = over_limit(shared) {
        return Err(refused);
    }
    if !authorized(shared, headers) {
        return Err(unauthorized());
    }
    let fault = shared.faults.take(method);
    if let Some(Fault::LatencyMs { ms }) = &fault {
        tokio::time::sleep(Duration::from_millis(*ms)).await;
    }
    if let Some(refused) = fault.as_ref().and_then(refusal) {
        return Err(refused);
    }
    Ok(fault)
}

/// Plays the part of a fault that comes after executing; `None` = answer normally.
async fn after_execute(
    fault: Option<Fault>,
    state: &AppState,
    kill: &ConnKill,
) -> Option<Response> {
    match fault {
        Some(Fault::LostAnswerHang) => {
            hang(state.shutdown.clone()).await;
            None
        }
        Some(Fault::LostAnswerDrop) => {
            kill.drop_connection();
            None
        }
        Some(Fault::ServerErrorAfterCreate) => Some(problem(
            500,
            "Internal Server Error",
            "Internal server error",
        )),
        Some(Fault::Error {
            status,
            detail,
            after_execute: true,
        }) => Some(problem(status, title_of(status), &detail)),
        _ => None,
    }
}

/// Phones compare by digits, e-mails case-insensitively.
fn comm_keys(contact: &Map<String, Value>) -> Vec<String> {
    let mut keys = Vec::new();
    for field in contact
        .get("custom_fields_values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let code = field
            .get("field_code")
            .and_then(Value::as_str)
            .unwrap_or_default();
        for v in field
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let value = v.get("value").map(text_of).unwrap_or_default();
            let key = match code {
                "PHONE" => value.chars().filter(char::is_ascii_digit).collect(),
                "EMAIL" => value.trim().to_lowercase(),
                _ => continue,
            };
            if !key.is_empty() {
                keys.push(format!("{code}:{key}"));
            }
        }
    }
    keys
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

async fn complex(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let shared = &state.shared;
    let request_ids = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|l| {
            l.get("request_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    lock(&shared.arrivals).push((chrono::Utc::now(), request_ids));
    let fault = match preamble(shared, CREATE, &headers).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let leads = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Array(leads)) => leads,
        _ => {
            return problem(400, "Bad Request", "The body must be a JSON array of leads");
        }
    };
    let answer = match fault {
        Some(Fault::ExecuteLate { ms }) => {
            // In a task of its own: a client that hangs up does not stop the work.
            let (done, answer) = tokio::sync::oneshot::channel();
            let shared = state.shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let _ = done.send(create_leads(&shared, &leads));
            });
            match answer.await {
                Ok(answer) => answer,
                Err(_) => return problem(500, "Internal Server Error", "Internal server error"),
            }
        }
        _ => create_leads(shared, &leads),
    };
    let answer = match answer {
        Ok(a) => a,
        Err(resp) => return *resp,
    };
    if let Some(resp) = after_execute(fault, &state, &kill).await {
        return resp;
    }
    hal(StatusCode::OK, answer)
}

/// Validates every lead first (one invalid lead fails the request, nothing is
/// created), then creates them.
fn create_leads(shared: &Shared, leads: &[Value]) -> Result<Value, Box<Response>> {
    if leads.is_empty() || leads.len() > MAX_COMPLEX {
        return Err(Box::new(validation(vec![(
            "0".into(),
            "InvalidCount",
            "".into(),
            format!("From 1 to {MAX_COMPLEX} leads are allowed per request."),
        )])));
    }
    let mut errors = Vec::new();
    let request_id = |i: usize, lead: &Value| {
        lead.get("request_id")
            .map(text_of)
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| i.to_string())
    };
    for (i, lead) in leads.iter().enumerate() {
        let rid = request_id(i, lead);
        let Some(obj) = lead.as_object() else {
            errors.push((
                rid,
                "InvalidType",
                format!("{i}"),
                "A lead must be an object.".into(),
            ));
            continue;
        };
        for (j, f) in obj
            .get("custom_fields_values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let known = f
                .get("field_id")
                .and_then(Value::as_u64)
                .is_some_and(|id| shared.field_ids.contains(&id));
            if !known {
                errors.push((
                    rid.clone(),
                    "NotSupportedChoice",
                    format!("custom_fields_values.{j}.field_id"),
                    "The value you selected is not a valid choice.".into(),
                ));
            }
        }
        let contacts = obj
            .get("_embedded")
            .and_then(|e| e.get("contacts"))
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if contacts > 1 {
            errors.push((
                rid.clone(),
                "InvalidCount",
                "_embedded.contacts".into(),
                "At most one contact per lead.".into(),
            ));
        }
        let attached = obj
            .get("_embedded")
            .and_then(|e| e.get("contacts"))
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .and_then(|c| c.get("id"))
            .map(|id| id.as_u64());
        if let Some(id) = attached {
            if id.is_none_or(|id| !lock(&shared.store).contacts.contains_key(&id)) {
                errors.push((
                    rid.clone(),
                    "NotFound",
                    "_embedded.contacts.0.id".into(),
                    "The contact does not exist.".into(),
                ));
            }
        }
    }
    let (invalid, naming) = {
        let settings = lock(&shared.settings);
        (settings.invalid_request_ids.clone(), settings.name_refusals)
    };
    for (i, lead) in leads.iter().enumerate() {
        let rid = request_id(i, lead);
        if invalid.contains(&rid) {
            errors.push((
                rid,
                "InvalidValue",
                "name".into(),
                "This value is not valid.".into(),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(Box::new(match naming {
            NameRefusals::All => validation(errors),
            NameRefusals::First => {
                let first = errors[0].0.clone();
                validation(errors.into_iter().filter(|e| e.0 == first).collect())
            }
            NameRefusals::None => problem(400, "Bad Request", "Request validation failed"),
        }));
    }
    let duplicate_control = lock(&shared.settings).duplicate_control;
    let base_url = lock(&shared.base_url).clone();
    let mut store = lock(&shared.store);
    // Duplicate control checks against EXISTING contacts only, not within the request.
    // The oldest contact with a phone/e-mail wins.
    let mut existing: BTreeMap<String, u64> = BTreeMap::new();
    for (id, c) in &store.contacts {
        for k in comm_keys(c) {
            existing.entry(k).or_insert(*id);
        }
    }
    let now = chrono::Utc::now().timestamp();
    let mut answer = Vec::new();
    for (i, lead) in leads.iter().enumerate() {
        let rid = request_id(i, lead);
        let obj = lead.as_object().cloned().unwrap_or_default();
        let embedded = obj.get("_embedded").cloned().unwrap_or(json!({}));
        let contact = embedded
            .get("contacts")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .and_then(Value::as_object)
            .cloned();
        if duplicate_control {
            let matched = contact
                .as_ref()
                .and_then(|c| comm_keys(c).iter().find_map(|k| existing.get(k).copied()));
            if let Some(contact_id) = matched {
                if let Some(&lead_id) = store.lead_of_contact.get(&contact_id) {
                    answer.push(json!({"id": lead_id, "contact_id": contact_id,
                                       "request_id": [rid], "merged": true}));
                    continue;
                }
            }
        }
        store.last_lead += 1;
        let id = store.last_lead;
        let existing_contact = contact
            .as_ref()
            .and_then(|c| c.get("id"))
            .and_then(Value::as_u64);
        let contact_id = match existing_contact {
            // An existing contact attached by id (checked above).
            Some(cid) => Some(cid),
            None => contact.map(|mut c| {
                store.last_contact += 1;
                let cid = store.last_contact;
                c.insert("id".into(), json!(cid));
                store.contacts.insert(cid, c);
                store.lead_of_contact.insert(cid, id);
                store.contact_created.insert(cid, Instant::now());
                cid
            }),
        };
        let mut tags = Vec::new();
        for t in embedded
            .get("tags")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = t.get("name").map(text_of).unwrap_or_default();
            if name.is_empty() {
                continue;
            }
            let next = store.tags.len() as u64 + 1;
            let tag_id = *store.tags.entry(name.clone()).or_insert(next);
            tags.push(json!({"id": tag_id, "name": name, "color": null}));
        }
        let cfv = obj
            .get("custom_fields_values")
            .and_then(Value::as_array)
            .map(|fields| {
                Value::Array(
                    fields
                        .iter()
                        .map(|f| {
                            json!({"field_id": f.get("field_id"), "field_name": "operation_id",
                                   "field_code": null, "field_type": "text",
                                   "values": f.get("values").cloned().unwrap_or(json!([]))})
                        })
                        .collect(),
                )
            })
            .unwrap_or(Value::Null);
        let stored = json!({
            "id": id,
            "name": obj.get("name").map(text_of).unwrap_or_else(|| format!("Сделка #{id}")),
            "price": obj.get("price").cloned().unwrap_or(json!(0)),
            "responsible_user_id": 0,
            "group_id": 0,
            "status_id": obj.get("status_id").cloned().unwrap_or(json!(1)),
            "pipeline_id": obj.get("pipeline_id").cloned().unwrap_or(json!(DEFAULT_PIPELINE)),
            "created_by": 0,
            "updated_by": 0,
            "created_at": now,
            "updated_at": now,
            "closed_at": null,
            "is_deleted": false,
            "custom_fields_values": cfv,
            "account_id": 1,
            "_links": {"self": {"href": format!("{base_url}/api/v4/leads/{id}")}},
            "_embedded": {
                "tags": tags,
                "companies": [],
                "contacts": contact_id.map(|c| vec![json!({"id": c, "is_main": true})]).unwrap_or_default(),
            },
        });
        let Value::Object(stored) = stored else {
            unreachable!("a lead is an object")
        };
        store.leads.insert(
            id,
            StoredLead {
                lead: stored,
                created: Instant::now(),
            },
        );
        answer.push(
            json!({"id": id, "contact_id": contact_id, "company_id": null,
                           "request_id": [rid], "merged": false}),
        );
    }
    Ok(Value::Array(answer))
}

/// Whether the lead's searchable text (name, custom field values, tags) contains
/// `query`, case-insensitively.
fn matches_query(lead: &Map<String, Value>, query: &str) -> bool {
    let query = query.to_lowercase();
    let mut texts = vec![lead.get("name").map(text_of).unwrap_or_default()];
    for f in lead
        .get("custom_fields_values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for v in f
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            texts.push(v.get("value").map(text_of).unwrap_or_default());
        }
    }
    if let Some(tags) = lead
        .get("_embedded")
        .and_then(|e| e.get("tags"))
        .and_then(Value::as_array)
    {
        for t in tags {
            texts.push(t.get("name").map(text_of).unwrap_or_default());
        }
    }
    texts.iter().any(|t| t.to_lowercase().contains(&query))
}

async fn search(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    Query(params): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    let shared = &state.shared;
    let fault = match preamble(shared, SEARCH, &headers).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let l = match diagnose::list(&params) {
        Ok(l) => l,
        Err(e) => return validation(vec![("0".into(), "InvalidParameter", "query".into(), e)]),
    };
    let lag = Duration::from_millis(lock(&shared.settings).search_lag_ms);
    let rows: Vec<Value> = lock(&shared.store)
        .leads
        .iter()
        .filter(|(id, l2)| {
            l.admits(**id, l2.lead.get("created_at").and_then(Value::as_i64))
                && match &l.query {
                    // The search index lags behind creates; a plain list does not.
                    Some(q) => l2.created.elapsed() >= lag && matches_query(&l2.lead, q),
                    None => true,
                }
        })
        .map(|(_, stored)| {
            let mut lead = stored.lead.clone();
            // As in amoCRM, a lead's contacts come only when asked for.
            if !l.with("contacts") {
                if let Some(Value::Object(e)) = lead.get_mut("_embedded") {
                    e.remove("contacts");
                }
            }
            Value::Object(lead)
        })
        .collect();
    if let Some(resp) = after_execute(fault, &state, &kill).await {
        return resp;
    }
    let base_url = lock(&shared.base_url).clone();
    match diagnose::page(&base_url, "/api/v4/leads", "leads", &l, rows) {
        Some(body) => hal(StatusCode::OK, body),
        // amoCRM answers an empty result with 204 and no body at all.
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

async fn get_lead(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let shared = &state.shared;
    let fault = match preamble(shared, GET, &headers).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    // As in amoCRM, a lead's contacts come only when asked for (`with=contacts`).
    let with_contacts = query
        .get("with")
        .is_some_and(|w| w.split(',').any(|w| w.trim() == "contacts"));
    let lead = id
        .parse::<u64>()
        .ok()
        .and_then(|id| lock(&shared.store).leads.get(&id).map(|l| l.lead.clone()))
        .map(|mut lead| {
            if !with_contacts {
                if let Some(Value::Object(e)) = lead.get_mut("_embedded") {
                    e.remove("contacts");
                }
            }
            lead
        });
    if let Some(resp) = after_execute(fault, &state, &kill).await {
        return resp;
    }
    match lead {
        Some(lead) => hal(StatusCode::OK, Value::Object(lead)),
        None => match lock(&shared.settings).missing_lead_status {
            404 => problem(404, "Not Found", "Lead not found"),
            _ => Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Body::empty())
                .expect("a 204 response"),
        },
    }
}

/// Runs `work` as the fault says: at once, or `ms` later in a task of its own that a
/// client hanging up does not stop (`ExecuteLate`).
async fn perform_with<T: Send + 'static>(
    fault: &Option<Fault>,
    shared: &Arc<Shared>,
    work: impl FnOnce(&Shared) -> T + Send + 'static,
) -> Option<T> {
    match fault {
        Some(Fault::ExecuteLate { ms }) => {
            let (done, answer) = tokio::sync::oneshot::channel();
            let (shared, ms) = (shared.clone(), *ms);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let _ = done.send(work(&shared));
            });
            answer.await.ok()
        }
        _ => Some(work(shared)),
    }
}

fn object_body(body: &Bytes) -> Option<Map<String, Value>> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

/// The answer to a PATCH whose work was `done` (`None`: the late task was lost; `Some(None)`:
/// no such entity, `missing` says which), after the fault's part that follows executing.
async fn patched(
    done: Option<Option<Value>>,
    fault: Option<Fault>,
    state: &AppState,
    kill: &ConnKill,
    missing: &str,
) -> Response {
    let Some(done) = done else {
        return problem(500, "Internal Server Error", "Internal server error");
    };
    if let Some(resp) = after_execute(fault, state, kill).await {
        return resp;
    }
    match done {
        Some(answer) => hal(StatusCode::OK, answer),
        None => problem(404, "Not Found", missing),
    }
}

/// `PATCH /api/v4/leads/{id}`: `name`, `price`, `status_id` and `pipeline_id` as sent.
async fn patch_lead(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let fault = match preamble(&state.shared, UPDATE, &headers).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let (Some(id), Some(changes)) = (id.parse::<u64>().ok(), object_body(&body)) else {
        return problem(400, "Bad Request", "The body must be a JSON object");
    };
    let done = perform_with(&fault, &state.shared, move |shared| {
        let mut store = lock(&shared.store);
        let lead = store.leads.get_mut(&id)?;
        for key in ["name", "price", "status_id", "pipeline_id"] {
            if let Some(v) = changes.get(key) {
                lead.lead.insert(key.into(), v.clone());
            }
        }
        let now = chrono::Utc::now().timestamp();
        lead.lead.insert("updated_at".into(), json!(now));
        Some(json!({"id": id, "updated_at": now}))
    })
    .await;
    patched(done, fault, &state, &kill, "Lead not found").await
}

/// `POST /api/v4/contacts`: creates each contact of the array as sent.
async fn add_contacts(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let fault = match preamble(&state.shared, CONTACT_ADD, &headers).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let Ok(Value::Array(contacts)) = serde_json::from_slice::<Value>(&body) else {
        return problem(
            400,
            "Bad Request",
            "The body must be a JSON array of contacts",
        );
    };
    let mut created = Vec::new();
    {
        let mut store = lock(&state.shared.store);
        for (i, c) in contacts.into_iter().enumerate() {
            let Value::Object(mut c) = c else {
                return problem(400, "Bad Request", "A contact must be an object");
            };
            store.last_contact += 1;
            let cid = store.last_contact;
            c.insert("id".into(), json!(cid));
            store.contacts.insert(cid, c);
            store.contact_created.insert(cid, Instant::now());
            created.push(json!({"id": cid, "request_id": i.to_string()}));
        }
    }
    if let Some(resp) = after_execute(fault, &state, &kill).await {
        return resp;
    }
    hal(StatusCode::OK, json!({"_embedded": {"contacts": created}}))
}

/// `GET /api/v4/contacts`: with `query`, contacts whose name, e-mail or phone (by
/// digits) contains it, once the search index has them; `filter[id][]`, paging and
/// `with=leads` as for leads.
async fn search_contacts(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    Query(params): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    let shared = &state.shared;
    let fault = match preamble(shared, CONTACT_SEARCH, &headers).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let l = match diagnose::list(&params) {
        Ok(l) => l,
        Err(e) => return validation(vec![("0".into(), "InvalidParameter", "query".into(), e)]),
    };
    let query = l.query.clone().unwrap_or_default().to_lowercase();
    let digits: String = query.chars().filter(char::is_ascii_digit).collect();
    let lag = Duration::from_millis(lock(&shared.settings).search_lag_ms);
    let base_url = lock(&shared.base_url).clone();
    let rows: Vec<Value> = {
        let store = lock(&shared.store);
        store
            .contacts
            .iter()
            .filter(|(id, _)| l.admits(**id, None))
            .filter(|(id, c)| {
                if query.is_empty() {
                    return true;
                }
                let indexed = store
                    .contact_created
                    .get(id)
                    .is_none_or(|at| at.elapsed() >= lag);
                let name = ["name", "first_name", "last_name"]
                    .iter()
                    .map(|k| c.get(*k).map(text_of).unwrap_or_default().to_lowercase())
                    .collect::<Vec<_>>()
                    .join(" ");
                indexed
                    && (name.contains(&query)
                        || comm_keys(c).iter().any(|k| match k.split_once(':') {
                            Some(("PHONE", v)) => digits.len() >= 5 && v.contains(&digits),
                            Some((_, v)) => v.contains(&query),
                            None => false,
                        }))
            })
            .map(|(id, c)| {
                let mut c = c.clone();
                c.insert(
                    "_links".into(),
                    json!({"self": {"href": format!("{base_url}/api/v4/contacts/{id}")}}),
                );
                if l.with("leads") {
                    c.insert(
                        "_embedded".into(),
                        json!({"leads": diagnose::leads_of(&base_url, &store.leads, *id)}),
                    );
                }
                Value::Object(c)
            })
            .collect()
    };
    if let Some(resp) = after_execute(fault, &state, &kill).await {
        return resp;
    }
    match diagnose::page(&base_url, "/api/v4/contacts", "contacts", &l, rows) {
        Some(body) => hal(StatusCode::OK, body),
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

async fn get_contact(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let fault = match preamble(&state.shared, CONTACT_GET, &headers).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let contact = id
        .parse::<u64>()
        .ok()
        .and_then(|id| lock(&state.shared.store).contacts.get(&id).cloned());
    if let Some(resp) = after_execute(fault, &state, &kill).await {
        return resp;
    }
    match contact {
        Some(c) => hal(StatusCode::OK, Value::Object(c)),
        None => Response::builder()
            .status(StatusCode::NO_CONTENT)
            .body(Body::empty())
            .expect("a 204 response"),
    }
}

/// `PATCH /api/v4/contacts/{id}`: `first_name` and `name` as sent; each field of
/// `custom_fields_values` (by `field_code`) gets the values it is sent, replacing the
/// ones it had, as amoCRM does.
async fn patch_contact(
    State(state): State<AppState>,
    ConnectInfo(kill): ConnectInfo<ConnKill>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let fault = match preamble(&state.shared, CONTACT_UPDATE, &headers).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let (Some(id), Some(changes)) = (id.parse::<u64>().ok(), object_body(&body)) else {
        return problem(400, "Bad Request", "The body must be a JSON object");
    };
    let done = perform_with(&fault, &state.shared, move |shared| {
        let mut store = lock(&shared.store);
        let contact = store.contacts.get_mut(&id)?;
        for key in ["first_name", "last_name", "name"] {
            if let Some(v) = changes.get(key) {
                contact.insert(key.into(), v.clone());
            }
        }
        for field in changes
            .get("custom_fields_values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let code = field.get("field_code").cloned().unwrap_or(Value::Null);
            let fields = contact
                .entry("custom_fields_values")
                .or_insert_with(|| json!([]));
            if !fields.is_array() {
                *fields = json!([]);
            }
            let list = fields.as_array_mut().expect("an array");
            list.retain(|f| f.get("field_code") != Some(&code));
            list.push(field.clone());
        }
        Some(json!({"id": id}))
    })
    .await;
    patched(done, fault, &state, &kill, "Contact not found").await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn fake() -> FakeAmoCrm {
        FakeAmoCrm::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }

    /// (status, content type, body text)
    async fn send(req: reqwest::RequestBuilder) -> (u16, String, String) {
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        (status, ct, resp.text().await.unwrap())
    }

    fn add(fake: &FakeAmoCrm, body: Value) -> reqwest::RequestBuilder {
        reqwest::Client::new()
            .post(format!("{}/api/v4/leads/complex", fake.base_url()))
            .bearer_auth(fake.token())
            .json(&body)
    }

    fn lead(key: &str, phone: &str) -> Value {
        json!({"name": "Form", "request_id": key,
               "custom_fields_values": [{"field_id": FIELD_ID, "values": [{"value": key}]}],
               "_embedded": {"tags": [{"name": key}], "contacts": [{"first_name": "A",
                 "custom_fields_values": [{"field_code": "PHONE", "values": [{"value": phone}]}]}]}})
    }

    #[tokio::test]
    async fn complex_answers_hal_json_and_errors_are_problem_json() {
        let fake = fake().await;
        let (status, ct, body) =
            send(add(&fake, json!([lead("k1", "+7 999 1"), lead("k2", "2")]))).await;
        assert_eq!((status, ct.as_str()), (200, "application/hal+json"));
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            body,
            json!([{"id": 1, "contact_id": 1, "company_id": null, "request_id": ["k1"], "merged": false},
                   {"id": 2, "contact_id": 2, "company_id": null, "request_id": ["k2"], "merged": false}])
        );
        // No token, a wrong token: 401 problem+json.
        let no_token = reqwest::Client::new()
            .post(format!("{}/api/v4/leads/complex", fake.base_url()))
            .json(&json!([lead("k3", "3")]));
        let (status, ct, body) = send(no_token).await;
        assert_eq!((status, ct.as_str()), (401, "application/problem+json"));
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["title"], "Unauthorized");
        assert_eq!(body["type"], "https://httpstatus.es/401");
        // An unknown custom field and two contacts: 400 validation-errors, nothing created.
        let mut bad = lead("k4", "4");
        bad["custom_fields_values"][0]["field_id"] = json!(1);
        bad["_embedded"]["contacts"] = json!([{}, {}]);
        let (status, ct, body) = send(add(&fake, json!([bad]))).await;
        assert_eq!((status, ct.as_str()), (400, "application/problem+json"));
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["detail"], "Request validation failed");
        let errors = &body["validation-errors"][0];
        assert_eq!(errors["request_id"], "k4");
        assert_eq!(errors["errors"][0]["code"], "NotSupportedChoice");
        assert_eq!(
            errors["errors"][0]["path"],
            "custom_fields_values.0.field_id"
        );
        assert_eq!(errors["errors"][1]["path"], "_embedded.contacts");
        let (status, _, _) = send(add(&fake, json!({"not": "an array"}))).await;
        assert_eq!(status, 400);
        let (status, _, _) = send(add(&fake, json!(vec![lead("x", "5"); 51]))).await;
        assert_eq!(status, 400);
        assert_eq!(fake.leads().len(), 2);
        assert_eq!(fake.calls(CREATE), 5);
    }

    #[tokio::test]
    async fn search_is_by_substring_with_pages_and_204_when_empty() {
        let fake = fake().await;
        let items: Vec<Value> = (1..=5)
            .map(|i| lead(&format!("op-{i}"), &i.to_string()))
            .collect();
        send(add(&fake, json!(items))).await;
        let client = reqwest::Client::new();
        let get = |q: &str| {
            client
                .get(format!("{}/api/v4/leads?{q}", fake.base_url()))
                .bearer_auth(fake.token())
        };
        let (status, ct, body) = send(get("query=op-&limit=2&page=2")).await;
        assert_eq!((status, ct.as_str()), (200, "application/hal+json"));
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["_page"], 2);
        let ids: Vec<u64> = body["_embedded"]["leads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, [3, 4]);
        assert!(body["_links"]["next"]["href"]
            .as_str()
            .unwrap()
            .contains("page=3"));
        assert!(body["_links"]["prev"].is_object());
        let (status, _, body) = send(get("query=OP-5")).await;
        assert_eq!(status, 200, "case-insensitive");
        assert!(body.contains("\"op-5\""));
        let (status, ct, body) = send(get("query=nothing")).await;
        assert_eq!((status, ct.as_str(), body.as_str()), (204, "", ""));
        let (status, _, _) = send(get("limit=251")).await;
        assert_eq!(status, 400);
        // Search lag hides fresh leads from `query`, not from a plain list.
        fake.set_search_lag(Duration::from_secs(60));
        let (status, _, _) = send(get("query=op-1")).await;
        assert_eq!(status, 204);
        let (status, _, _) = send(get("limit=250")).await;
        assert_eq!(status, 200);
    }

    #[tokio::test]
    async fn get_by_id_and_a_missing_lead_as_204_or_404() {
        let fake = fake().await;
        send(add(&fake, json!([lead("k", "1")]))).await;
        let client = reqwest::Client::new();
        let get = |id: &str| {
            client
                .get(format!("{}/api/v4/leads/{id}", fake.base_url()))
                .bearer_auth(fake.token())
        };
        let (status, _, body) = send(get("1")).await;
        assert_eq!(status, 200);
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["id"], 1);
        assert!(
            body["_embedded"].get("contacts").is_none(),
            "contacts only with=contacts"
        );
        let (_, _, body) = send(get("1?with=contacts")).await;
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["_embedded"]["contacts"][0]["id"], 1);
        assert!(body["_links"]["self"]["href"]
            .as_str()
            .unwrap()
            .ends_with("/api/v4/leads/1"));
        assert_eq!(send(get("99")).await.0, 204);
        fake.set_missing_lead_status(404);
        let (status, ct, _) = send(get("99")).await;
        assert_eq!((status, ct.as_str()), (404, "application/problem+json"));
        let (status, _, _) = send(client.get(format!("{}/api/v4/nothing", fake.base_url()))).await;
        assert_eq!(status, 404);
    }

    #[tokio::test]
    async fn duplicate_control_merges_into_existing_leads_only() {
        let fake = fake().await;
        fake.set_duplicate_control(true);
        // Within one request: no merging, as in amoCRM.
        let (_, _, body) = send(add(
            &fake,
            json!([lead("a", "+7 (999) 000"), lead("b", "7999000")]),
        ))
        .await;
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body[1]["merged"], false);
        let (_, _, body) = send(add(&fake, json!([lead("c", "7-999-000")]))).await;
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body[0]["merged"], true);
        assert_eq!(body[0]["id"], 1);
        assert_eq!(body[0]["request_id"], json!(["c"]));
        assert_eq!(fake.leads().len(), 2);
    }

    #[tokio::test]
    async fn invalid_leads_are_refused_and_named_as_set() {
        let fake = fake().await;
        let body = json!([lead("a", "1"), lead("b", "2"), lead("c", "3")]);
        let named = |body: &str| -> Vec<String> {
            let v: Value = serde_json::from_str(body).unwrap();
            v["validation-errors"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| e["request_id"].as_str().unwrap().to_owned())
                .collect()
        };
        for (naming, want) in [
            (NameRefusals::All, vec!["b", "c"]),
            (NameRefusals::First, vec!["b"]),
            (NameRefusals::None, vec![]),
        ] {
            fake.set_invalid_leads(&["c", "b"], naming);
            let (status, ct, text) = send(add(&fake, body.clone())).await;
            assert_eq!((status, ct.as_str()), (400, "application/problem+json"));
            assert_eq!(named(&text), want, "{naming:?}: {text}");
            assert!(fake.leads().is_empty(), "nothing is created");
        }
        fake.set_invalid_leads(&["c", "b"], NameRefusals::First);
        let (status, _, _) = send(add(&fake, json!([lead("a", "1")]))).await;
        assert_eq!(status, 200);
        assert_eq!(fake.leads().len(), 1);
    }

    #[tokio::test]
    async fn faults_and_the_control_plane() {
        let fake = fake().await;
        let client = reqwest::Client::new();
        let control = format!("{}/_fake", fake.base_url());
        let resp: Value = client
            .post(format!("{control}/faults"))
            .json(
                &json!([{"method": CREATE, "fault": "rate_limit", "retry_after_secs": 2},
                          {"method": CREATE, "fault": "blocked"},
                          {"method": SEARCH, "fault": "latency_ms", "ms": 1}]),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(resp["queued"], 3);
        let resp = add(&fake, json!([lead("k", "1")])).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 429);
        assert_eq!(resp.headers()["retry-after"], "2");
        assert_eq!(resp.headers()["content-type"], "text/plain");
        assert_eq!(resp.text().await.unwrap(), "Too Many Requests");
        let (status, ct, body) = send(add(&fake, json!([lead("k", "1")]))).await;
        assert_eq!((status, ct.as_str()), (403, "text/html"));
        assert!(body.contains("<center>nginx</center>"));
        let settings: Value = client
            .post(format!("{control}/settings"))
            .json(&json!({"search_lag_ms": 250, "duplicate_control": true}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            settings,
            json!({"duplicate_control": true, "search_lag_ms": 250, "missing_lead_status": 204})
        );
        let state: Value = client
            .get(format!("{control}/state"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(state["calls"][CREATE], 2);
        assert_eq!(state["pending_faults"][0]["fault"], "latency_ms");
        assert!(state["leads"].as_array().unwrap().is_empty());
        client
            .post(format!("{control}/reset"))
            .send()
            .await
            .unwrap();
        assert_eq!(fake.calls(CREATE), 0);
        let (status, _, _) = send(add(&fake, json!([lead("k", "1")]))).await;
        assert_eq!(status, 200);
        let state: Value = client
            .get(format!("{control}/state"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            state["settings"]["search_lag_ms"], 0,
            "reset restores the settings"
        );
    }

    #[tokio::test]
    async fn lost_answers_create_first() {
        let fake = fake().await;
        fake.push_fault(CREATE, Fault::LostAnswerDrop, 1);
        let err = add(&fake, json!([lead("k", "1")]))
            .send()
            .await
            .unwrap_err();
        assert!(!err.is_connect() && !err.is_timeout(), "{err}");
        fake.push_fault(CREATE, Fault::LostAnswerHang, 1);
        let err = add(&fake, json!([lead("k2", "2")]))
            .timeout(Duration::from_millis(200))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_timeout(), "{err}");
        fake.push_fault(CREATE, Fault::ServerErrorAfterCreate, 1);
        let (status, ct, _) = send(add(&fake, json!([lead("k3", "3")]))).await;
        assert_eq!((status, ct.as_str()), (500, "application/problem+json"));
        assert_eq!(fake.leads().len(), 3);
    }

    #[tokio::test]
    async fn refresh_tokens_rotate_and_access_tokens_expire() {
        let fake = fake().await;
        fake.set_access_ttl(Duration::from_secs(1));
        let (client_id, client_secret, redirect_uri) = fake.oauth_client();
        let client = reqwest::Client::new();
        let refresh = |token: String| {
            client
                .post(format!("{}/oauth2/access_token", fake.base_url()))
                .json(&json!({"client_id": client_id, "client_secret": client_secret,
                    "grant_type": "refresh_token", "refresh_token": token, "redirect_uri": redirect_uri}))
        };
        let (status, _, body) = send(refresh(fake.initial_refresh_token())).await;
        assert_eq!(status, 200, "{body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["token_type"], "Bearer");
        assert_eq!(body["expires_in"], 1);
        let access = body["access_token"].as_str().unwrap().to_owned();
        assert_eq!(body["refresh_token"], fake.current_refresh_token());
        // The first refresh token is dead now.
        let (status, ct, body) = send(refresh(fake.initial_refresh_token())).await;
        assert_eq!((status, ct.as_str()), (400, "application/problem+json"));
        assert!(body.contains("revoked"), "{body}");
        let list = || {
            client
                .get(format!("{}/api/v4/leads", fake.base_url()))
                .bearer_auth(&access)
        };
        assert_eq!(send(list()).await.0, 204);
        fake.expire_access_tokens();
        assert_eq!(send(list()).await.0, 401);
        // Wrong client credentials: 401.
        let wrong = client
            .post(format!("{}/oauth2/access_token", fake.base_url()))
            .json(
                &json!({"client_id": "x", "client_secret": "y", "grant_type": "refresh_token",
                "refresh_token": fake.current_refresh_token(), "redirect_uri": "z"}),
            );
        assert_eq!(send(wrong).await.0, 401);
        assert_eq!(fake.calls(TOKEN), 3);
    }

    #[test]
    fn faults_parse_from_the_control_format() {
        let rules: Vec<FaultRule<Fault>> = serde_json::from_value(json!([
            {"method": "leads.complex", "fault": "lost_answer_hang"},
            {"method": "*", "fault": "error", "status": 503, "detail": "down", "times": 3},
            {"method": "leads.list", "fault": "payment_required"},
            {"method": "leads.complex", "fault": "no_rights"}
        ]))
        .unwrap();
        assert_eq!(rules[0].fault, Fault::LostAnswerHang);
        assert_eq!(
            rules[1].fault,
            Fault::Error {
                status: 503,
                detail: "down".into(),
                after_execute: false
            }
        );
        assert_eq!(rules[1].times, 3);
        assert_eq!(rules[2].fault, Fault::PaymentRequired);
        assert_eq!(rules[3].fault, Fault::NoRights);
    }

    #[tokio::test]
    async fn request_limit_allows_per_second_with_no_burst() {
        let config = FakeConfig {
            settings: Settings {
                request_limit_per_second: Some(7.0),
                ..Settings::default()
            },
            ..FakeConfig::default()
        };
        let fake = FakeAmoCrm::spawn_with("127.0.0.1:0".parse().unwrap(), config)
            .await
            .unwrap();
        let client = reqwest::Client::new();
        let control = format!("{}/_fake", fake.base_url());
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
        let (client_id, client_secret, redirect_uri) = fake.oauth_client();
        // The token endpoint counts as one of the seven.
        let (status, _, body) = send(
            client
                .post(format!("{}/oauth2/access_token", fake.base_url()))
                .json(
                    &json!({"client_id": client_id, "client_secret": client_secret,
                    "grant_type": "refresh_token", "refresh_token": fake.initial_refresh_token(),
                    "redirect_uri": redirect_uri}),
                ),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        for i in 0..6 {
            // The control plane does not count.
            state().await;
            let (status, _, body) = send(add(&fake, json!([lead(&format!("k{i}"), "1")]))).await;
            assert_eq!(status, 200, "request {i}: {body}");
        }
        let (status, ct, body) = send(add(&fake, json!([lead("over", "1")]))).await;
        assert_eq!(
            (status, ct.as_str(), body.as_str()),
            (429, "text/plain", "Too Many Requests")
        );
        assert_eq!(fake.leads().len(), 6, "the refused create did not execute");
        assert_eq!(fake.refused(), 1);
        assert_eq!(fake.calls(CREATE), 7);
        // An unauthorized request over the limit is refused by the limit first.
        let (status, _, _) = send(client.get(format!("{}/api/v4/leads", fake.base_url()))).await;
        assert_eq!(status, 429);
        let s = state().await;
        assert_eq!(s["refused"], 2);
        assert_eq!(s["settings"]["request_limit_per_second"], 7.0);

        // The window is one second from the first request.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (status, _, _) = send(add(&fake, json!([lead("later", "1")]))).await;
        assert_eq!(status, 200);
        assert_eq!(fake.leads().len(), 7);

        let settings: Value = client
            .post(format!("{control}/settings"))
            .json(&json!({"request_limit_per_second": null}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(
            settings.get("request_limit_per_second").is_none(),
            "{settings}"
        );
        for _ in 0..10 {
            let (status, _, _) = send(add(&fake, json!([lead("free", "1")]))).await;
            assert_eq!(status, 200);
        }
        fake.set_request_limit(Some(1.0));
        assert_eq!(send(add(&fake, json!([lead("one", "1")]))).await.0, 200);
        assert_eq!(send(add(&fake, json!([lead("two", "1")]))).await.0, 429);
        assert_eq!(fake.refused(), 3);
        // A reset restores the configured limit (7) with an empty window.
        fake.reset();
        assert_eq!(fake.refused(), 0);
        for i in 0..7 {
            let (status, _, _) = send(add(&fake, json!([lead(&format!("r{i}"), "1")]))).await;
            assert_eq!(status, 200, "request {i}");
        }
        assert_eq!(send(add(&fake, json!([lead("r7", "1")]))).await.0, 429);
    }
}
