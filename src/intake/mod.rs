//! HTTP intake: the only code that knows HTTP status codes. A delivery is journaled and
//! its operation claimed before the sender gets its answer; the CRM is never called
//! here (amoCRM waits 2 s, Tilda 5 s).

mod claims;
pub mod sources;

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::domain::{contact, fingerprint, OperationId};
use crate::store::{
    self, ContactKeys, DeliveryOutcome, Matching, NewDelivery, RejectedDelivery, Store, StoreError,
};
use sources::{BodyKind, Source, TRANSFORM_VERSION};

#[derive(Clone)]
pub struct IntakeState {
    pub store: Arc<dyn Store>,
    /// The bearer tokens of everything but intake.
    pub api_tokens: Arc<ApiTokens>,
    pub sources: Arc<HashMap<String, Source>>,
    pub max_body: usize,
    pub claim_api: Arc<ClaimApi>,
    /// Keys are kept (as tombstones) this long: an unknown key whose event is older may
    /// be a late duplicate of one already forgotten.
    pub tombstone: std::time::Duration,
    pub stale_after: std::time::Duration,
    pub matching: MatchingSettings,
}

#[derive(Debug, Clone, Copy)]
pub struct MatchingSettings {
    pub region: contact::Region,
    pub window: std::time::Duration,
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
        ok.into()
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
    let message = match scope {
        Scope::Integration => "send Authorization: Bearer <api.integration_token>",
        Scope::Read => "send Authorization: Bearer <api.read_token or api.integration_token>",
    };
    let mut res = ApiError::Unauthorized {
        code: "unauthorized",
        message: message.into(),
    }
    .into_response();
    res.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    res
}

pub fn router(state: IntakeState) -> Router {
    use axum::middleware::from_fn_with_state;
    let integration = Router::new()
        .route("/v1/operations", post(claims::claim))
        .route("/v1/operations/{id}/complete", post(claims::complete))
        .route("/v1/operations/{id}/fail", post(claims::fail))
        .route_layer(from_fn_with_state(
            state.clone(),
            |State(s): State<IntakeState>, req, next| async move {
                require(&s, Scope::Integration, req, next).await
            },
        ));
    let read = Router::new()
        .route("/v1/operations/{id}", get(operation))
        .route("/v1/operations/{id}/timeline", get(timeline))
        .route("/metrics", get(metrics))
        .route_layer(from_fn_with_state(
            state.clone(),
            |State(s): State<IntakeState>, req, next| async move {
                require(&s, Scope::Read, req, next).await
            },
        ));
    Router::new()
        .route("/v1/intake/{source}", post(intake).get(zd_echo))
        .route("/healthz", get(healthz))
        .merge(integration)
        .merge(read)
        .with_state(state)
}

/// The source name journaled for a delivery to a name that is not configured: the path
/// is the sender's to choose, so it never becomes a stored source name or a metric label.
/// Not a valid source name, so it cannot clash with a configured one.
pub const UNKNOWN_SOURCE: &str = "(unknown)";

/// Every error answer: `{"error": "<code>", "message": "<human sentence>"}`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("no such source is configured")]
    UnknownSource,
    #[error("{message}")]
    Unauthorized { code: &'static str, message: String },
    #[error("the body is larger than the {0} bytes this gateway accepts")]
    TooLarge(usize),
    #[error("{0}")]
    NotFound(String),
    #[error("the operations database is not available; retry later")]
    Unavailable(#[source] StoreError),
}

impl ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::UnknownSource | ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest { code, .. } => code,
            ApiError::UnknownSource => "unknown_source",
            ApiError::Unauthorized { code, .. } => code,
            ApiError::TooLarge(_) => "payload_too_large",
            ApiError::NotFound(_) => "not_found",
            ApiError::Unavailable(_) => "unavailable",
        }
    }

    pub(crate) fn bad(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code,
            message: message.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError::Unavailable(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Unavailable(e) = &self {
            // The details stay in the log; the sender learns only to retry.
            tracing::error!(error = %e, "operations database error");
        }
        let mut res = (
            self.status_code(),
            Json(json!({"error": self.code(), "message": self.to_string()})),
        )
            .into_response();
        if matches!(self, ApiError::Unavailable(_)) {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        res
    }
}

fn content_type(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Reads the body up to `max` bytes.
async fn read_body(body: Body, headers: &HeaderMap, max: usize) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(ApiError::TooLarge(max));
    }
    axum::body::to_bytes(body, max).await.map_err(|e| {
        if std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
        {
            ApiError::TooLarge(max)
        } else {
            ApiError::bad(
                "unreadable_body",
                format!("the body could not be read: {e}"),
            )
        }
    })
}

async fn intake(
    State(state): State<IntakeState>,
    Path(source_name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let received_at = state.store.now();
    let content_type = content_type(&headers);
    // Only configured names are journaled as sources.
    let journal_source = if state.sources.contains_key(&source_name) {
        source_name.clone()
    } else {
        UNKNOWN_SOURCE.to_owned()
    };
    let body = match read_body(body, &headers, state.max_body).await {
        Ok(b) => b,
        Err(e) => {
            // Nothing to keep of a body over the limit, but the refusal is journaled.
            let reject = RejectedDelivery {
                source: journal_source,
                operation_id: None,
                content_type,
                raw_body: Vec::new(),
                reason: e.to_string(),
                received_at,
                transform_version: TRANSFORM_VERSION,
            };
            return journal_rejection(&state, reject, e).await;
        }
    };
    let query = query.as_deref();
    match accept(&state, &source_name, query, &headers, &body, received_at).await {
        Ok(res) => res,
        Err(e @ ApiError::Unavailable(_)) => e.into_response(),
        Err(e) => {
            let reject = RejectedDelivery {
                source: journal_source,
                operation_id: None,
                content_type,
                raw_body: body.to_vec(),
                reason: e.to_string(),
                received_at,
                transform_version: TRANSFORM_VERSION,
            };
            journal_rejection(&state, reject, e).await
        }
    }
}

async fn journal_rejection(state: &IntakeState, reject: RejectedDelivery, e: ApiError) -> Response {
    tracing::info!(source = %reject.source, error = e.code(), "delivery rejected");
    match state.store.record_rejected(reject).await {
        Ok(_) => e.into_response(),
        Err(db) => ApiError::Unavailable(db).into_response(),
    }
}

/// A parsed, authenticated delivery of `source` as the store records it: the key, the
/// fingerprint, the event time and the contact keys. HTTP deliveries and pulled events
/// (`record_pulled`) go through the same steps.
fn delivery(
    state: &IntakeState,
    source: &Source,
    payload: Value,
    headers: &HeaderMap,
    body: &[u8],
    content_type: Option<String>,
    received_at: chrono::DateTime<chrono::Utc>,
) -> Result<NewDelivery, ApiError> {
    reject_nul(&payload)?;
    let key = source.key(&payload, headers).ok_or_else(|| {
        ApiError::bad(
            "missing_key",
            format!(
                "the delivery has no operation key: {} is missing or empty",
                source.key.describe()
            ),
        )
    })?;
    let operation_id = OperationId::new(&source.name, &key)
        .map_err(|e| ApiError::bad("invalid_key", e.to_string()))?;
    let payload_hash = fingerprint(&payload, &source.ignore)
        .map_err(|e| ApiError::bad("malformed_body", e.to_string()))?;
    let event_time = source.event_time(&payload);
    let horizon = store::before(received_at, state.tombstone);
    // Applies only if the key turns out to be new: a known key is answered as usual.
    let review = event_time
        .filter(|t| *t < horizon)
        .map(|_| crate::domain::ReviewReason::LateDuplicate);
    // Contact keys for cross-channel matching, from the same field mapping the CRM gets.
    let lead =
        crate::crm::Lead::from_payload(&operation_id, &source.name, &payload, &source.fields);
    let contact = ContactKeys {
        phone: lead
            .phone
            .as_deref()
            .and_then(|p| contact::normalize_phone(p, state.matching.region)),
        email: lead.email.as_deref().and_then(contact::normalize_email),
        name: lead
            .name
            .as_deref()
            .and_then(crate::domain::search::display_name),
    };
    let matching = Some(Matching {
        rule: source.on_contact_match,
        since: store::before(received_at, state.matching.window),
    });
    Ok(NewDelivery {
        operation_id: operation_id.clone(),
        source: source.name.clone(),
        content_type,
        raw_body: body.to_vec(),
        payload,
        payload_hash,
        transform_version: TRANSFORM_VERSION,
        contact,
        event_time,
        received_at,
        review,
        matching,
    })
}

async fn accept(
    state: &IntakeState,
    source_name: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &Bytes,
    received_at: chrono::DateTime<chrono::Utc>,
) -> Result<Response, ApiError> {
    let source = state
        .sources
        .get(source_name)
        .ok_or(ApiError::UnknownSource)?;
    source
        .authenticate(headers, query, body, received_at)
        .map_err(|f| ApiError::Unauthorized {
            code: f.code,
            message: f.message.into(),
        })?;
    let content_type = content_type(headers);
    let kind = BodyKind::detect(content_type.as_deref(), body).ok_or_else(|| {
        ApiError::bad(
            "unsupported_media_type",
            "send application/json or application/x-www-form-urlencoded",
        )
    })?;
    let payload =
        sources::parse_body(kind, body).map_err(|m| ApiError::bad("malformed_body", m))?;
    if sources::is_connection_check(kind, &payload) {
        return Ok((StatusCode::OK, Json(json!({"outcome": "connection_check"}))).into_response());
    }
    if !source.application_token_ok(&payload) {
        return Err(ApiError::Unauthorized {
            code: "bad_application_token",
            message: "auth[application_token] is missing or does not match".into(),
        });
    }
    if !source.zadarma_signature_ok(headers, &payload) {
        return Err(ApiError::Unauthorized {
            code: "bad_signature",
            message: "the Signature header is missing or does not match caller_id, called_did and call_start".into(),
        });
    }
    let delivery = delivery(
        state,
        source,
        payload,
        headers,
        body,
        content_type,
        received_at,
    )?;
    let operation_id = delivery.operation_id.clone();
    let record = state.store.record_delivery(delivery).await?;
    if source.reply == crate::config::Reply::Ok {
        tracing::info!(operation_id = %operation_id, outcome = record.outcome.name(), "delivery recorded");
        return Ok((StatusCode::OK, "ok").into_response());
    }
    tracing::info!(operation_id = %operation_id, outcome = record.outcome.name(), "delivery recorded");
    let status = record.outcome.status();
    let res = match record.outcome {
        DeliveryOutcome::New { .. } => (
            StatusCode::ACCEPTED,
            Json(json!({"operation_id": operation_id, "outcome": "new", "status": status})),
        )
            .into_response(),
        DeliveryOutcome::Duplicate { crm_id, .. } => {
            let mut body =
                json!({"operation_id": operation_id, "outcome": "duplicate", "status": status});
            if let Some(crm_id) = crm_id {
                body["crm_id"] = Value::String(crm_id);
            }
            let mut res = (StatusCode::OK, Json(body)).into_response();
            res.headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            res
        }
        DeliveryOutcome::Conflict { .. } => (
            StatusCode::ACCEPTED,
            Json(json!({"operation_id": operation_id, "outcome": "conflict", "status": status})),
        )
            .into_response(),
    };
    Ok(res)
}

/// Zadarma checks a notification URL with `GET ?zd_echo=<random>` and wants the value
/// back. Answered for sources of the zadarma preset only; nothing is journaled (no event).
async fn zd_echo(
    State(state): State<IntakeState>,
    Path(source_name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let echo = query
        .as_deref()
        .and_then(|q| serde_urlencoded::from_str::<Vec<(String, String)>>(q).ok())
        .and_then(|pairs| {
            pairs
                .into_iter()
                .find(|(k, _)| k == "zd_echo")
                .map(|(_, v)| v)
        });
    match (state.sources.get(&source_name), echo) {
        (Some(s), Some(v)) if s.answers_zd_echo() => {
            if v.is_empty() || v.len() > 128 || !v.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return ApiError::bad("bad_echo", "zd_echo must be 1-128 letters and digits")
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
/// exactly as an HTTP delivery of that source would be: `Ok` once it is recorded (or its
/// rejection is journaled), so the puller may acknowledge it; `Err` when the database is
/// not available, and the event must stay unacknowledged.
pub async fn record_pulled(
    state: &IntakeState,
    source_name: &str,
    raw_body: Vec<u8>,
    payload: Value,
) -> Result<Pulled, StoreError> {
    let received_at = state.store.now();
    let content_type = Some("application/json".to_owned());
    let Some(source) = state.sources.get(source_name) else {
        return Ok(Pulled::Rejected(ApiError::UnknownSource.to_string()));
    };
    let built = delivery(
        state,
        source,
        payload,
        &HeaderMap::new(),
        &raw_body,
        content_type.clone(),
        received_at,
    );
    match built {
        Ok(d) => {
            let record = state.store.record_delivery(d).await?;
            Ok(Pulled::Recorded(record.outcome))
        }
        Err(e) => {
            let reason = e.to_string();
            state
                .store
                .record_rejected(RejectedDelivery {
                    source: source.name.clone(),
                    operation_id: None,
                    content_type,
                    raw_body,
                    reason: reason.clone(),
                    received_at,
                    transform_version: TRANSFORM_VERSION,
                })
                .await?;
            Ok(Pulled::Rejected(reason))
        }
    }
}

/// PostgreSQL stores no NUL character in text or JSON: refused here, with a clear
/// answer, rather than failing in the database as "unavailable".
pub(crate) fn reject_nul(payload: &Value) -> Result<(), ApiError> {
    match sources::find_nul(payload) {
        Some(at) => Err(ApiError::bad(
            "nul_character",
            format!(
                "the field {} contains a NUL character (\\u0000), which cannot be stored",
                at.chars().take(120).collect::<String>()
            ),
        )),
        None => Ok(()),
    }
}

pub(crate) fn parse_id(id: &str) -> Result<OperationId, ApiError> {
    id.parse()
        .map_err(|e| ApiError::bad("invalid_key", format!("`{id}` is not an operation id: {e}")))
}

async fn operation(
    State(state): State<IntakeState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    let op = state
        .store
        .operation(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no operation `{id}`")))?;
    let open_cases: Vec<Value> = state
        .store
        .cases_of(&id)
        .await?
        .into_iter()
        .filter(|c| c.resolved_at.is_none())
        .map(|c| json!({"id": c.id, "reason": c.reason}))
        .collect();
    Ok(Json(json!({
        "operation_id": op.operation_id,
        "source": op.source,
        "status": op.status,
        "crm_id": op.crm_id,
        "attempts": op.attempts,
        "last_error": op.last_error,
        "review_reason": op.review_reason,
        "open_cases": open_cases,
        "updated_at": op.updated_at,
    })))
}

async fn timeline(
    State(state): State<IntakeState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    if state.store.operation(&id).await?.is_none() {
        return Err(ApiError::NotFound(format!("no operation `{id}`")));
    }
    let events = state.store.timeline(&id).await?;
    Ok(Json(json!({"operation_id": id, "events": events})))
}

async fn healthz(State(state): State<IntakeState>) -> Result<Json<Value>, ApiError> {
    state.store.ping().await?;
    Ok(Json(
        json!({"status": "ok", "database": state.store.backend()}),
    ))
}

/// The metrics of docs/SPEC.md in the Prometheus text format.
async fn metrics(State(state): State<IntakeState>) -> Result<Response, ApiError> {
    let snapshot = state
        .store
        .metrics(state.store.now(), state.stale_after)
        .await?;
    let connectors = state.store.connectors().await?;
    let body = crate::metrics::exposition(&snapshot, &connectors);
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response())
}
