//! HTTP intake: the only code that knows HTTP status codes. A delivery is journaled and
//! its operation claimed before the sender gets its answer; the CRM is never called
//! here (amoCRM waits 2 s, Tilda 5 s).
//!
//! Journal first: every delivery is stored before its sender is answered, rejected ones
//! too, with the reason — a request that did not authenticate without its body (only its
//! size and a hash), and never a source's `redact` values. While the database is down the
//! sender hears 503 and nothing is accepted. What happens to a delivery between its
//! arrival and its answer is `admission`'s, for the pulled sources' events too; this
//! module reads the request and writes the answer.
//!
//! Who gets in, on the one listener that serves intake and the admin surface (put it
//! behind a proxy that terminates TLS):
//!
//! - `POST /v1/intake/{source}`: the source's sender, by the source's authentication
//!   (`sources`). A source name that is not configured is journaled as `(unknown)`, so
//!   it never becomes a stored source name or a metric label.
//! - the claim API (`POST /v1/operations…`): integrations, by
//!   `Authorization: Bearer <[api] integration_token>`.
//! - `GET /v1/operations/…`, a timeline, `/metrics`: the read token or the integration
//!   token. A scope without a configured token is closed (401 for everyone).
//! - `GET /healthz`: anyone; it says only whether the database answers.
//!   `GET /openapi.json`: anyone; static, no configuration (no source names, no tokens).
//!
//! Bodies are read within `[server] max_body` (413) on intake and the claim API alike. A
//! `crm_id` that comes in (the claim API's `complete`, a person's *Confirm* or *Link*, a
//! raw request) is at most 256 characters with no control or invisible character
//! (`domain::text::check_crm_id`: 400 `invalid_crm_id`). A `fail` text is stored without
//! the claimed body's values and with phone numbers and e-mail addresses masked
//! (`domain::text::mask_contacts`).

mod admission;
mod claims;
mod error;
pub mod idempotency;
pub mod listen;
pub mod openapi;
pub mod problem;
mod reads;
pub mod refusals;
mod rules;
pub mod sources;
mod spooled;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::domain::{contact, OperationId, Status, TenantSlug};
use crate::store::{DeliveryOutcome, Store, StoreError};
pub use error::{ApiError, ErrorBody};
use problem::Code;
pub(crate) use reads::IdPath;
pub use reads::{OpenCase, OperationView, Timeline, TimelineEvent, TimelineQuery};
pub use rules::{seed_rules, LiveRules, RuleBook, SourceMatching, REFRESH_EVERY as RULES_EVERY};
use sources::Source;
pub use spooled::{drain as drain_spool, Spooling};

#[derive(Clone)]
pub struct IntakeState {
    pub store: Arc<dyn Store>,
    /// The bearer tokens of everything but intake.
    pub api_tokens: Arc<ApiTokens>,
    pub sources: Arc<HashMap<String, Source>>,
    pub max_body: usize,
    /// A body must arrive within this (`[server] body_timeout`).
    pub body_timeout: std::time::Duration,
    pub claim_api: Arc<ClaimApi>,
    /// Keys are kept (as tombstones) this long: an unknown key whose event is older may
    /// be a late duplicate of one already forgotten.
    pub tombstone: std::time::Duration,
    pub stale_after: std::time::Duration,
    pub matching: MatchingSettings,
    /// The business rules (migration 0021), kept current by the gateway's refresher.
    pub rules: Arc<LiveRules>,
    /// The budget of journaled refusals before authentication (`refusals`).
    pub refusals: Arc<refusals::Refusals>,
    /// The tenant this state serves (fleet mode): its slug qualifies each key it makes
    /// (`OperationId::new_in`), and `store` is that tenant's.
    pub tenant: TenantSlug,
    /// Fleet mode: the other tenants' intake, by slug, each a state of its own
    /// (`POST /v1/intake/{tenant}/{source}`). Empty in a tenant's own state.
    pub tenants: Arc<TenantStates>,
    /// The gateway's durable spool (`[spool]`), shared by its tenants' states; `None`:
    /// a delivery the database cannot take is answered 503.
    pub spool: Option<Arc<Spooling>>,
}

/// The tenants' intake states by slug, as intake routes to them (`IntakeState::tenants`),
/// each with the router of its claim API and reads; swapped whole when the fleet changes
/// (`fleet::Fleet`).
#[derive(Default)]
pub struct TenantStates(RwLock<Arc<HashMap<String, (IntakeState, Router)>>>);

impl TenantStates {
    fn current(&self) -> Arc<HashMap<String, (IntakeState, Router)>> {
        Arc::clone(&self.0.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The state of the tenant `slug`, if it is served.
    pub fn get(&self, slug: &str) -> Option<IntakeState> {
        self.current().get(slug).map(|(s, _)| s.clone())
    }

    /// The state of the tenant `slug` and the router of its claim API and reads, if it is
    /// served.
    fn served(&self, slug: &str) -> Option<(IntakeState, Router)> {
        self.current().get(slug).cloned()
    }

    /// Serves `states` (by slug) from now on.
    pub fn set(&self, states: HashMap<String, IntakeState>) {
        let map = states
            .into_iter()
            .map(|(slug, state)| {
                let api = api_router(&state);
                (slug, (state, api))
            })
            .collect();
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(map);
    }
}

impl std::fmt::Debug for TenantStates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.current().keys()).finish()
    }
}

impl IntakeState {
    /// Whether `id` is this state's tenant's operation: the default tenant's routes (the
    /// fleet's own tokens) reach every operation, a tenant's its own only.
    pub fn owns(&self, id: &OperationId) -> bool {
        self.tenant.is_default() || id.tenant_slug() == Some(self.tenant.as_str())
    }
}

#[derive(Debug, Clone, Copy)]
pub struct MatchingSettings {
    pub region: contact::Region,
    /// `[matching] window`: only for a source the database has no rules for yet (a
    /// running gateway seeded them all at its start).
    pub window: std::time::Duration,
    /// `[matching] shared_after`.
    pub shared_after: u32,
}

/// Settings of the claim API.
#[derive(Debug, Clone)]
pub struct ClaimApi {
    pub source: String,
    pub lease: std::time::Duration,
    pub retry: crate::config::RetryConfig,
}

/// The bearer tokens of the admin surface (`[api]`). A scope without a token is closed:
/// every request to it answers 401.
#[derive(Debug, Clone, Default)]
pub struct ApiTokens {
    /// The claim API, and all that `read` opens.
    pub integration: Option<crate::config::Secret>,
    /// Operation and timeline reads, `/metrics`.
    pub read: Option<crate::config::Secret>,
    /// A tenant's routes also open to the fleet's own tokens (`[api]`).
    pub fleet: Option<Arc<ApiTokens>>,
}

/// What a request to the admin surface needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Integration,
    Read,
}

impl ApiTokens {
    /// Whether `Authorization: Bearer <token>` opens `scope`, compared in constant time.
    pub fn allows(&self, headers: &HeaderMap, scope: Scope) -> bool {
        let Some(presented) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (kind, token) = v.trim().split_once(' ')?;
                kind.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
        else {
            return false;
        };
        let accepted: &[&Option<crate::config::Secret>] = match scope {
            Scope::Integration => &[&self.integration],
            Scope::Read => &[&self.integration, &self.read],
        };
        use subtle::ConstantTimeEq;
        let mut ok = subtle::Choice::from(0);
        for token in accepted.iter().copied().flatten() {
            ok |= presented.as_bytes().ct_eq(token.expose().as_bytes());
        }
        bool::from(ok)
            || self
                .fleet
                .as_ref()
                .is_some_and(|f| f.allows(headers, scope))
    }
}

async fn require(
    state: &IntakeState,
    scope: Scope,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if state.api_tokens.allows(req.headers(), scope) {
        return next.run(req).await;
    }
    unauthorized(scope)
}

/// The answer to a request without a token that opens `scope`.
fn unauthorized(scope: Scope) -> Response {
    let message = match scope {
        Scope::Integration => "send Authorization: Bearer <api.integration_token>",
        Scope::Read => "send Authorization: Bearer <api.read_token or api.integration_token>",
    };
    let mut res = ApiError::Unauthorized {
        code: Code::Unauthorized,
        message: message.into(),
    }
    .into_response();
    res.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    res
}

/// The routes anyone may call (intake checks each source's own credentials).
fn public_routes() -> OpenApiRouter<IntakeState> {
    OpenApiRouter::with_openapi(<openapi::ApiDoc as utoipa::OpenApi>::openapi())
        .routes(routes!(intake, zd_echo))
        .routes(routes!(healthz))
        .routes(routes!(openapi::openapi_json))
        .routes(routes!(problem::problem_types))
        .routes(routes!(problem::problem_type))
}

/// The claim API: `Scope::Integration`.
fn integration_routes() -> OpenApiRouter<IntakeState> {
    OpenApiRouter::new()
        .routes(routes!(claims::claim))
        .routes(routes!(claims::complete))
        .routes(routes!(claims::fail))
}

/// Reads: `Scope::Read`. A tenant's routes serve them too, its `/metrics` its own figures.
fn read_routes() -> OpenApiRouter<IntakeState> {
    OpenApiRouter::new()
        .routes(routes!(reads::operation))
        .routes(routes!(reads::timeline))
        .routes(routes!(metrics))
}

/// The OpenAPI document of exactly the routes [`router`] serves.
fn api_routes_document() -> utoipa::openapi::OpenApi {
    let mut doc = public_routes()
        .merge(integration_routes())
        .merge(read_routes())
        .into_openapi();
    openapi::add_tenant_intake(&mut doc);
    let tenants = integration_routes().merge(read_routes()).into_openapi();
    openapi::add_tenant_paths(&mut doc, tenants);
    utoipa::Modify::modify(&openapi::ProblemDetails, &mut doc);
    doc
}

/// `routes` behind `scope`'s tokens of `state`.
fn guarded(
    routes: OpenApiRouter<IntakeState>,
    scope: Scope,
    state: &IntakeState,
) -> Router<IntakeState> {
    let (routes, _) = routes.split_for_parts();
    routes.route_layer(axum::middleware::from_fn_with_state(
        state.clone(),
        move |State(s): State<IntakeState>, req, next| async move {
            require(&s, scope, req, next).await
        },
    ))
}

/// The router's own refusals (no such path, no such method) as problem details.
fn with_refusals(router: Router<IntakeState>) -> Router<IntakeState> {
    router
        .fallback(|| async {
            ErrorBody::new(
                Code::NotFound,
                "no such path in this gateway's API (see /openapi.json)",
            )
        })
        .method_not_allowed_fallback(|| async {
            ErrorBody::new(
                Code::MethodNotAllowed,
                "this path does not take this method (see /openapi.json)",
            )
        })
}

/// The claim API and the operation reads, each behind its scope's tokens: `state`'s
/// (a tenant's routes, `/v1/tenants/{tenant}/…`).
fn api_router(state: &IntakeState) -> Router {
    let routes = guarded(integration_routes(), Scope::Integration, state).merge(guarded(
        read_routes(),
        Scope::Read,
        state,
    ));
    with_refusals(routes).with_state(state.clone())
}

/// `/v1/tenants/{tenant}/…`: the tenant's claim API and reads, as `/v1/…` serves the
/// default tenant's, opened by the tenant's own tokens (`[tenant.api]`) or the fleet's
/// (`[api]`). Whatever the path, a caller without one of those tokens hears 401, whether
/// the tenant is served or not: the answer does not say which tenants exist.
async fn tenant_api(State(state): State<IntakeState>, req: axum::extract::Request) -> Response {
    let (tenant, rest) = req
        .uri()
        .path()
        .strip_prefix("/v1/tenants/")
        .and_then(|r| r.split_once('/'))
        .unwrap_or_default();
    let Some((tenant_state, api)) = state.tenants.served(tenant) else {
        if state.api_tokens.allows(req.headers(), Scope::Read) {
            return ErrorBody::new(Code::NotFound, "no such tenant is served here").into_response();
        }
        return unauthorized(Scope::Read);
    };
    // Every token that opens anything of the tenant's opens its reads.
    if !tenant_state.api_tokens.allows(req.headers(), Scope::Read) {
        return unauthorized(Scope::Read);
    }
    let own = if openapi::UNVERSIONED_TENANT_PATHS.contains(&rest) {
        format!("/{rest}")
    } else {
        format!("/v1/{rest}")
    };
    let path = match req.uri().query() {
        Some(q) => format!("{own}?{q}"),
        None => own,
    };
    let (mut parts, body) = req.into_parts();
    // The outer route's path parameters live in the extensions: the tenant's router must
    // see only its own (the claim API and reads read nothing else from them).
    parts.extensions = Default::default();
    match path.parse() {
        Ok(uri) => parts.uri = uri,
        Err(_) => {
            return ErrorBody::new(Code::NotFound, "no such path in this gateway's API")
                .into_response()
        }
    }
    // A router is always ready (axum): called at once.
    let mut api = api;
    let req = axum::extract::Request::from_parts(parts, body);
    match tower_service::Service::call(&mut api, req).await {
        Ok(res) => res,
        Err(never) => match never {},
    }
}

pub fn router(state: IntakeState) -> Router {
    let (public, _) = public_routes().split_for_parts();
    let routes = public
        .merge(guarded(integration_routes(), Scope::Integration, &state))
        .merge(guarded(read_routes(), Scope::Read, &state))
        // A tenant's intake, claim API and reads: documented as copies of the default
        // tenant's (`openapi::add_tenant_paths`).
        .route(
            "/v1/intake/{tenant}/{source}",
            axum::routing::post(tenant_intake).get(tenant_zd_echo),
        )
        .route(
            "/v1/tenants/{tenant}/{*rest}",
            axum::routing::any(tenant_api),
        );
    with_refusals(routes).with_state(state)
}

/// The source name journaled for a delivery to a name that is not configured: the path
/// is the sender's to choose, so it never becomes a stored source name or a metric label.
/// Not a valid source name, so it cannot clash with a configured one.
pub const UNKNOWN_SOURCE: &str = "(unknown)";

/// Reads the body up to `max` bytes.
async fn read_body(
    body: Body,
    headers: &HeaderMap,
    max: usize,
    within: std::time::Duration,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(ApiError::TooLarge(max));
    }
    // A client that sends its body slowly holds a connection slot: it gets `within`.
    let read = tokio::time::timeout(within, axum::body::to_bytes(body, max)).await;
    read.map_err(|_| ApiError::TooSlow(within))?.map_err(|e| {
        if std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
        {
            ApiError::TooLarge(max)
        } else {
            ApiError::bad(
                Code::UnreadableBody,
                format!("the body could not be read: {e}"),
            )
        }
    })
}

/// A delivery recorded: the operation's key and what the delivery was to it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Recorded {
    pub operation_id: OperationId,
    pub outcome: IntakeOutcome,
    pub status: Status,
    /// A duplicate of a completed operation: its CRM id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crm_id: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum IntakeOutcome {
    /// A new key: journaled and claimed.
    New,
    /// The same key with the same payload: nothing new is done.
    Duplicate,
    /// The same key with another payload: a review case was opened.
    Conflict,
}

/// A delivery the database did not take in time, kept in the gateway's durable spool: it
/// is journaled and claimed as soon as the database answers; its result is not known yet.
#[derive(Debug, Serialize, ToSchema)]
pub struct Spooled {
    /// Its operation, when its key alone names it (not a content key or an
    /// `Idempotency-Key`).
    #[schema(value_type = Option<String>)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<OperationId>,
    pub outcome: SpooledOutcome,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SpooledOutcome {
    Spooled,
}

/// A `202` JSON answer of the intake.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum IntakeAccepted {
    Recorded(Recorded),
    Spooled(Spooled),
}

/// A CRM's connection check (an empty or test delivery): nothing was recorded.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConnectionCheck {
    pub outcome: ConnectionCheckOutcome,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionCheckOutcome {
    ConnectionCheck,
}

/// A `200` JSON answer of the intake.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum IntakeOk {
    Recorded(Recorded),
    ConnectionCheck(ConnectionCheck),
}

/// Takes a delivery from a lead source: journaled (rejected ones too, with the
/// reason) and its operation claimed before the answer. A source configured with
/// `reply = "ok"` gets `200 ok` as text instead of the JSON answers.
#[utoipa::path(
    post,
    path = "/v1/intake/{source}",
    tag = "intake",
    params(
        ("source" = String, Path, description = "A configured source's name", example = "web"),
    ),
    request_body(
        description = "The lead as the source sends it: JSON, or a form (Tilda, Bitrix24)",
        content(
            (Value = "application/json",
                example = json!({"submission_id": "lead-1", "name": "Ivan", "phone": "+79991234567"})),
            (HashMap<String, String> = "application/x-www-form-urlencoded"),
        )
    ),
    responses(
        (status = 200, description = "A duplicate of a known key (the saved result; `Idempotent-Replayed: true`), a connection check, or `ok` for a `reply = \"ok\"` source",
            headers(("Idempotent-Replayed" = String, description = "`true` on a duplicate")),
            content((IntakeOk = "application/json"), (String = "text/plain"))),
        (status = 202, description = "A new key (claimed; the worker calls the CRM), a conflict (a review case was opened), or `spooled`: the database did not take it within `[spool] patience`, so it was kept in the gateway's durable spool and is recorded when the database answers (its result is not known yet)",
            body = IntakeAccepted),
        (status = 400, description = "Unreadable, malformed or unsupported body, no key, an invalid key, a NUL character", body = ErrorBody),
        (status = 401, description = "The source's credentials are missing or wrong", body = ErrorBody),
        (status = 404, description = "No such source is configured", body = ErrorBody),
        (status = 408, description = "The body did not arrive within `[server] body_timeout`", body = ErrorBody),
        (status = 413, description = "The body is larger than `[server] max_body`", body = ErrorBody),
        (status = 429, description = "Refused before authenticating (as 401, 404, 408 or 413 would be), from an address over its budget of journaled refusals: counted, not journaled",
            headers(("Retry-After" = u64, description = "Seconds")), body = ErrorBody),
        (status = 422, description = "`refused`: the operations database's own checks refuse a value of this delivery; it would be refused again, so it is not worth sending again as it is", body = ErrorBody),
        (status = 500, description = "`internal_error`: Leadgate failed on this delivery (the details are in the gateway's log); not worth sending again until someone looks", body = ErrorBody),
        (status = 503, description = "The operations database is not available, busy or silent for more than 10 s (with a spool: and the spool is full, too old or cannot be written): nothing was accepted, or the next attempt is answered as a duplicate",
            headers(("Retry-After" = u64, description = "Seconds")), body = ErrorBody),
    ),
    security(("source_token" = []), ("source_token_query" = []), ("source_signature" = []), ())
)]
async fn intake(
    State(state): State<IntakeState>,
    source_name: Result<Path<String>, axum::extract::rejection::PathRejection>,
    RawQuery(query): RawQuery,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // A name that does not percent-decode to UTF-8 names no configured source: it is
    // answered and journaled as an unknown one (axum's rejection would skip the journal).
    let source_name = source_name.map(|Path(name)| name).unwrap_or_default();
    let peer = peer.map(|axum::Extension(c)| c.0.ip());
    receive(state, source_name, query, peer, headers, body).await
}

/// Takes a delivery for a tenant of the fleet, exactly as `POST /v1/intake/{source}` takes
/// the default tenant's: journaled and claimed under the tenant's own key
/// (`<tenant>/<source>:<key>`), and created in the tenant's own CRM (which is given
/// `<source>:<key>`). A tenant that is not served is answered as a source that is not
/// configured (404, journaled as the default tenant's refusal), the same answer whether
/// the tenant or the source is missing.
async fn tenant_intake(
    State(state): State<IntakeState>,
    path: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
    RawQuery(query): RawQuery,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let peer = peer.map(|axum::Extension(c)| c.0.ip());
    let (state, source_name) = tenant_of(state, path);
    receive(state, source_name, query, peer, headers, body).await
}

/// The state of the tenant a `/v1/intake/{tenant}/{source}` path names, and the source's
/// name. A tenant that is not served gets the default tenant's state and no source name,
/// so its delivery is refused and journaled as an unknown source's.
fn tenant_of(
    state: IntakeState,
    path: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
) -> (IntakeState, String) {
    let (tenant, source) = path.map(|Path(p)| p).unwrap_or_default();
    match state.tenants.get(&tenant) {
        Some(t) => (t, source),
        None => (state, String::new()),
    }
}

/// Reads a pushed delivery's body and admits it (`admission`), answering in its source's
/// `reply` form.
async fn receive(
    state: IntakeState,
    source_name: String,
    query: Option<String>,
    peer: Option<std::net::IpAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let received_at = state.store.now();
    let body = match read_body(body, &headers, state.max_body, state.body_timeout).await {
        Ok(b) => b,
        Err(e) => {
            // Nothing to keep of a body over the limit or too slow to arrive, but the
            // refusal is journaled.
            let reject = admission::refusal(
                state.sources.get(&source_name),
                sources::content_type(&headers),
                Vec::new(),
                e.to_string(),
                received_at,
            );
            // The body comes before the credentials: a stranger's refusal.
            return admission::journal_refusal(&state, reject, e, peer)
                .await
                .into_response();
        }
    };
    let arrival = admission::Arrival::Pushed {
        headers: &headers,
        query: query.as_deref(),
        body: &body,
        peer,
    };
    match admission::receive(&state, &source_name, arrival, received_at).await {
        Ok(admitted) => {
            let reply = state.sources.get(&source_name).map(|s| s.reply);
            answer(reply.unwrap_or_default(), admitted)
        }
        Err(admission::NotAdmitted::Answer(e)) => e.into_response(),
        Err(admission::NotAdmitted::Store(e)) => ApiError::from(e).into_response(),
    }
}

/// The answer to an admitted delivery, in its source's `reply` form.
fn answer(reply: crate::config::Reply, admitted: admission::Admitted) -> Response {
    let (operation_id, record) = match admitted {
        admission::Admitted::ConnectionCheck => {
            let check = ConnectionCheck {
                outcome: ConnectionCheckOutcome::ConnectionCheck,
            };
            return (StatusCode::OK, Json(IntakeOk::ConnectionCheck(check))).into_response();
        }
        admission::Admitted::Recorded {
            operation_id,
            record,
        } => (operation_id, record),
        admission::Admitted::Spooled { operation_id } => {
            if reply == crate::config::Reply::Ok {
                return (StatusCode::OK, "ok").into_response();
            }
            let spooled = Spooled {
                operation_id,
                outcome: SpooledOutcome::Spooled,
            };
            return (StatusCode::ACCEPTED, Json(spooled)).into_response();
        }
    };
    tracing::info!(operation_id = %operation_id, outcome = record.outcome.name(), "delivery recorded");
    if reply == crate::config::Reply::Ok {
        return (StatusCode::OK, "ok").into_response();
    }
    let status = record.outcome.status();
    let recorded = |outcome, crm_id| Recorded {
        operation_id: operation_id.clone(),
        outcome,
        status,
        crm_id,
    };
    match record.outcome {
        DeliveryOutcome::New { .. } => (
            StatusCode::ACCEPTED,
            Json(recorded(IntakeOutcome::New, None)),
        )
            .into_response(),
        DeliveryOutcome::Duplicate { crm_id, .. } => {
            let body = IntakeOk::Recorded(recorded(IntakeOutcome::Duplicate, crm_id));
            let mut res = (StatusCode::OK, Json(body)).into_response();
            res.headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            res
        }
        DeliveryOutcome::Conflict { .. } => (
            StatusCode::ACCEPTED,
            Json(recorded(IntakeOutcome::Conflict, None)),
        )
            .into_response(),
    }
}

/// Zadarma checks a notification URL with `GET ?zd_echo=<random>` and wants the value
/// back. Answered for sources of the zadarma preset only; nothing is journaled (no event).
#[utoipa::path(
    get,
    path = "/v1/intake/{source}",
    tag = "intake",
    params(
        ("source" = String, Path, description = "A configured source of the `zadarma` preset", example = "calls"),
        ("zd_echo" = Option<String>, Query, description = "Zadarma's check value: answered back as it is"),
    ),
    responses(
        (status = 200, description = "The `zd_echo` value, as Zadarma's URL check wants it", body = String, content_type = "text/plain"),
        (status = 400, description = "`zd_echo` is not 1–128 letters and digits", body = ErrorBody),
        (status = 404, description = "Not a `zadarma` source, or no `zd_echo`: deliveries are POSTed", body = ErrorBody),
    ),
    security(())
)]
async fn zd_echo(
    State(state): State<IntakeState>,
    source_name: Result<Path<String>, axum::extract::rejection::PathRejection>,
    RawQuery(query): RawQuery,
) -> Response {
    // A name that does not percent-decode to UTF-8 names no source (a problem, never
    // axum's plain-text rejection).
    let source_name = source_name.map(|Path(name)| name).unwrap_or_default();
    echo_back(&state, &source_name, query)
}

/// Zadarma's URL check for a tenant's `zadarma` source, as `GET /v1/intake/{source}`.
async fn tenant_zd_echo(
    State(state): State<IntakeState>,
    path: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
    RawQuery(query): RawQuery,
) -> Response {
    let (state, source_name) = tenant_of(state, path);
    echo_back(&state, &source_name, query)
}

/// `zd_echo`'s value back, for a `zadarma` source.
fn echo_back(state: &IntakeState, source_name: &str, query: Option<String>) -> Response {
    let echo = query
        .as_deref()
        .and_then(|q| serde_urlencoded::from_str::<Vec<(String, String)>>(q).ok())
        .and_then(|pairs| {
            pairs
                .into_iter()
                .find(|(k, _)| k == "zd_echo")
                .map(|(_, v)| v)
        });
    match (state.sources.get(source_name), echo) {
        (Some(s), Some(v)) if s.answers_zd_echo() => {
            if v.is_empty() || v.len() > 128 || !v.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return ApiError::bad(Code::BadEcho, "zd_echo must be 1-128 letters and digits")
                    .into_response();
            }
            (StatusCode::OK, v).into_response()
        }
        _ => ApiError::NotFound("deliveries are POSTed to this URL".into()).into_response(),
    }
}

/// What became of an event a pull source fetched.
#[derive(Debug)]
pub enum Pulled {
    Recorded(DeliveryOutcome),
    /// Journaled as rejected (no key, a NUL character, …): nothing to retry, so the
    /// event may be acknowledged.
    Rejected(String),
}

/// Journals and claims an event that the gateway pulled from `source`'s sender (src/pull)
/// exactly as an HTTP delivery of that source would be (`admission`): `Ok` once it is
/// recorded (or its rejection is journaled), so the puller may acknowledge it; `Err`
/// when the database is not available, and the event must stay unacknowledged.
pub async fn record_pulled(
    state: &IntakeState,
    source_name: &str,
    raw_body: Vec<u8>,
    content_type: &str,
    payload: Value,
) -> Result<Pulled, StoreError> {
    let arrival = admission::Arrival::Pulled {
        body: &raw_body,
        content_type,
        payload,
    };
    match admission::receive(state, source_name, arrival, state.store.now()).await {
        Ok(admission::Admitted::Recorded { record, .. }) => Ok(Pulled::Recorded(record.outcome)),
        // Only a pushed delivery is a connection check; nothing was recorded.
        Ok(admission::Admitted::ConnectionCheck) => {
            Ok(Pulled::Rejected("a connection check".into()))
        }
        // Only a pushed delivery is spooled; were a pulled one, it stays unacknowledged.
        Ok(admission::Admitted::Spooled { .. }) => Err(spooled::silent()),
        Err(admission::NotAdmitted::Store(e)) => Err(e),
        // The journal could not take its rejection.
        Err(admission::NotAdmitted::Answer(ApiError::Unavailable(e))) => Err(e),
        Err(admission::NotAdmitted::Answer(e)) => Ok(Pulled::Rejected(e.to_string())),
    }
}

pub(crate) use admission::reject_nul;
pub use admission::reject_pulled;

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: &'static str,
    /// `sqlite` or `postgres`.
    #[schema(example = "sqlite")]
    pub database: &'static str,
}

/// Whether the operations database answers; nothing else.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "meta",
    responses(
        (status = 200, description = "The database answers", body = Health),
        (status = 503, description = "The operations database is not available", body = ErrorBody),
    ),
    security(())
)]
async fn healthz(State(state): State<IntakeState>) -> Result<Json<Health>, ApiError> {
    state.store.ping().await?;
    Ok(Json(Health {
        status: "ok",
        database: state.store.backend().name(),
    }))
}

/// The metrics of docs/SPEC.md in the Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "read",
    responses(
        (status = 200, description = "OpenMetrics text; while the operations database is away, only this gateway's own figures (its spool, its refusals) with `leadgate_database_up 0`", content_type = "application/openmetrics-text", body = String),
        (status = 401, description = "No read or integration token", body = ErrorBody),
        (status = 503, description = "The operations database is not available (a tenant's figures), or failed otherwise", body = ErrorBody),
    ),
    security(("read_token" = []), ("integration_token" = []))
)]
async fn metrics(State(state): State<IntakeState>) -> Result<Response, ApiError> {
    let now = state.store.now();
    if !state.tenant.is_default() {
        // A tenant's own figures, under its slug: what its read token may see.
        let snapshot = state.store.metrics(now, state.stale_after).await?;
        let connectors = state.store.connectors().await?;
        let body = crate::metrics::exposition(&[crate::metrics::Figures {
            tenant: Some(state.tenant.as_str()),
            metrics: &snapshot,
            connectors: &connectors,
        }]);
        return Ok(openmetrics(body));
    }
    // The database is away (or silent longer than a scrape waits): this gateway's own
    // figures still answer (its spool is what a person wants to see then), with
    // `leadgate_database_up 0`.
    let figures = tokio::time::timeout(
        METRICS_PATIENCE,
        state.store.fleet_metrics(now, state.stale_after),
    )
    .await
    .unwrap_or_else(|_| Err(spooled::silent()));
    let (body, database_up) = match figures {
        Ok(fleet) => (crate::metrics::fleet_exposition(&fleet), true),
        Err(e) if e.kind() == crate::store::ErrorKind::Unavailable => {
            tracing::warn!(error = %e, "/metrics without the database's figures");
            ("# EOF\n".to_owned(), false)
        }
        Err(e) => return Err(e.into()),
    };
    let own = own_figures(&state, now, database_up);
    // This process's own counters, before the closing `# EOF`.
    let body = match body.rfind("# EOF") {
        Some(at) => format!("{}{own}{}", &body[..at], &body[at..]),
        None => body + &own,
    };
    Ok(openmetrics(body))
}

/// How long `/metrics` waits for the database's figures (Prometheus's own scrape timeout
/// is 10 s by default).
const METRICS_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// This process's own figures: whether its database answered, its refusal budget and its
/// spool.
fn own_figures(
    state: &IntakeState,
    now: chrono::DateTime<chrono::Utc>,
    database_up: bool,
) -> String {
    let spool = state.spool.as_ref().map(|s| spooled::exposition(s, now));
    format!(
        "# TYPE leadgate_database_up gauge\n\
         # HELP leadgate_database_up Whether the operations database answered this scrape (0: only this gateway's own figures follow).\n\
         leadgate_database_up {}\n{}{}",
        u8::from(database_up),
        state.refusals.exposition(),
        spool.as_deref().unwrap_or_default()
    )
}

fn openmetrics(body: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}
