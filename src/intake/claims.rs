//! The claim API, for integrations that call the CRM themselves (an n8n workflow):
//! claim the key, call the CRM, then report `complete` or `fail` with the lease token.
//! Repeats follow draft-ietf-httpapi-idempotency-key-header: a completed key answers
//! with the saved result, one in flight with 409 and `Retry-After`, the same key with
//! another body with 422.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::idempotency;
use super::problem::Code;
use super::sources::{self, BodyKind, TRANSFORM_VERSION};
use super::{ApiError, ErrorBody, IdPath, IntakeState};
use crate::domain::{
    fingerprint, ErrorClass, OperationId, OperationIdError, RetryDecision, ReviewReason, Status,
};
use crate::store::{
    AttemptOutcome, ExternalClaim, ExternalClaimOutcome, Failure, Lease, NewDelivery, StoreError,
};

/// The actor named on the timeline for claim-API calls.
const ACTOR: &str = "claim_api";

/// Whole seconds from `now` (the store's clock, which judged `t`) to `t`, at least 1.
fn seconds_until(now: chrono::DateTime<chrono::Utc>, t: chrono::DateTime<chrono::Utc>) -> u64 {
    let s = (t - now).num_milliseconds().max(0) as u64;
    s.div_ceil(1000).max(1)
}

fn with_header(mut res: Response, name: &'static str, value: String) -> Response {
    if let Ok(v) = HeaderValue::from_str(&value) {
        res.headers_mut().insert(name, v);
    }
    res
}

/// `201`: this caller, and only this one, may call the CRM for the key now.
#[derive(Debug, Serialize, ToSchema)]
pub struct Claimed {
    pub operation_id: OperationId,
    /// Report `complete` or `fail` with it.
    pub lease_token: String,
    /// Until then the lease holds; a report after it is kept as a late answer.
    pub lease_expires_at: chrono::DateTime<chrono::Utc>,
    /// This attempt's number (1 for the first).
    pub attempt: i32,
}

/// `200`: the key was done before; the saved result (`Idempotent-Replayed: true`).
#[derive(Debug, Serialize, ToSchema)]
pub struct Replayed {
    pub operation_id: OperationId,
    /// `completed` or `failed_terminal`.
    pub status: Status,
    /// A completed operation's CRM id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crm_id: Option<String>,
    /// A failed operation's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// Claims an operation key before calling the CRM. Repeats follow
/// draft-ietf-httpapi-idempotency-key-header: a finished key answers with the saved result,
/// one in flight or not due yet with `409` and `Retry-After`, the same key with another
/// body with `422`.
#[utoipa::path(
    post,
    path = "/v1/operations",
    tag = "claim",
    params(("Idempotency-Key" = String, Header, description = idempotency::SPECIFICATION, example = "\"lead-1\"")),
    request_body(description = "The lead, as JSON: fingerprinted, so a repeat must send the same body", content = Value, content_type = "application/json",
        example = json!({"submission_id": "lead-1", "name": "Ivan", "phone": "+79991234567"})),
    responses(
        (status = 201, description = "Claimed: call the CRM, then report", body = Claimed),
        (status = 200, description = "Done before: the saved result",
            headers(("Idempotent-Replayed" = String, description = "`true`")), body = Replayed),
        (status = 400, description = "`missing_key` (no Idempotency-Key: the draft's \"Idempotency-Key is missing\", §2.7), `invalid_key` (not an RFC 8941 string, two fields, or not a key Leadgate takes), `malformed_body` (not JSON), `nul_character`", body = ErrorBody),
        (status = 401, description = "No integration token", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than `[server] max_body`", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `[server] body_timeout`", body = ErrorBody),
        (status = 409, description = "`in_flight`: the draft's \"A request is outstanding for this Idempotency-Key\" (§2.6, §2.7; another lease holds it, or it is not due yet; `Retry-After`), or `needs_review` (a person decides)",
            headers(("Retry-After" = Option<u64>, description = "Seconds, with `in_flight`")), body = ErrorBody),
        (status = 422, description = "`key_reused`: the draft's \"Idempotency-Key is already used\" (§2.2, §2.7): the key came with a different body; a review case was opened", body = ErrorBody),
        (status = 503, description = "`connector_paused` (an auth failure was reported, or a person paused it for maintenance; a person resumes it) or `unavailable` (the database)",
            headers(("Retry-After" = u64, description = "Seconds")), body = ErrorBody),
    ),
    security(("integration_token" = []))
)]
pub(super) async fn claim(
    State(state): State<IntakeState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let body = read_body(&state, &headers, body).await?;
    let api = &state.claim_api;
    let operation_id = operation_of(&state, &headers).await?;
    let payload = sources::parse_body(BodyKind::Json, &body)
        .map_err(|m| ApiError::bad(Code::MalformedBody, m))?;
    super::reject_nul(&payload)?;
    let payload_hash = fingerprint(&payload, &[])
        .map_err(|e| ApiError::bad(Code::MalformedBody, e.to_string()))?;
    let delivery = NewDelivery {
        operation_id: operation_id.clone(),
        source: api.source.clone(),
        content_type: headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        raw_body: body.to_vec(),
        payload,
        payload_hash,
        transform_version: TRANSFORM_VERSION,
        contact: Default::default(),
        event_time: None,
        received_at: state.store.now(),
        review: None,
        matching: None,
    };
    let outcome = state
        .store
        .claim_external(ExternalClaim {
            delivery,
            owner: ACTOR.into(),
            lease_for: api.lease,
            connector: api.source.clone(),
        })
        .await?;
    tracing::info!(operation_id = %operation_id, outcome = ?std::mem::discriminant(&outcome), "claim");
    let id = &operation_id;
    let refusal = |code, detail: &str| ErrorBody::new(code, detail).about(id).into_response();
    Ok(match outcome {
        ExternalClaimOutcome::Claimed { lease, attempts } => (
            StatusCode::CREATED,
            Json(Claimed {
                operation_id: id.clone(),
                lease_token: lease.token,
                lease_expires_at: lease.expires_at,
                attempt: attempts,
            }),
        )
            .into_response(),
        ExternalClaimOutcome::Completed { crm_id } => replayed(Replayed {
            operation_id: id.clone(),
            status: Status::Completed,
            crm_id,
            last_error: None,
        }),
        ExternalClaimOutcome::Failed { last_error } => replayed(Replayed {
            operation_id: id.clone(),
            status: Status::FailedTerminal,
            crm_id: None,
            last_error,
        }),
        ExternalClaimOutcome::InFlight { until } => with_header(
            refusal(
                Code::InFlight,
                "A request with the same Idempotency-Key for the same operation is being processed \
                 or is outstanding: send it again, unchanged, after Retry-After seconds",
            ),
            "retry-after",
            seconds_until(state.store.now(), until).to_string(),
        ),
        ExternalClaimOutcome::Conflict => refusal(
            Code::KeyReused,
            "This operation is idempotent and it requires correct usage of Idempotency Key. \
             Idempotency Key MUST not be reused across different payloads of this operation: \
             this key came with another body before; a review case was opened",
        ),
        ExternalClaimOutcome::NeedsReview { reason } => {
            let mut body = ErrorBody::new(
                Code::NeedsReview,
                "the outcome of an earlier attempt is unknown or disputed; a person decides in the console",
            )
            .about(id);
            body.operation_status = Some(Status::NeedsReview);
            body.review_reason = reason;
            body.into_response()
        }
        ExternalClaimOutcome::ConnectorPaused => with_header(
            refusal(
                Code::ConnectorPaused,
                "the connector is paused (after an auth failure, or by a person for a CRM's maintenance): \
                 nothing is claimed until a person resumes it; send the same request again after Retry-After seconds",
            ),
            "retry-after",
            "60".into(),
        ),
    })
}

/// The operation a claim's `Idempotency-Key` names (`idempotency`): one stored before
/// the draft's parsing under the value as sent, else `<[claim_api] source>:<key>`.
async fn operation_of(state: &IntakeState, headers: &HeaderMap) -> Result<OperationId, ApiError> {
    let source = &state.claim_api.source;
    let earlier = match state.tenant.is_default() {
        true => idempotency::earlier_operation(state.store.as_ref(), source, headers).await?,
        false => None,
    };
    if let Some(id) = earlier {
        return Ok(id);
    }
    // draft-ietf-httpapi-idempotency-key-header-06 §2.1 (`idempotency`), §2.7: no key is a 400.
    let key = idempotency::key(headers)
        .map_err(|e| ApiError::bad(Code::InvalidKey, e.to_string()))?
        .ok_or_else(|| {
            ApiError::bad(
                Code::MissingKey,
                "This operation is idempotent and it requires correct usage of Idempotency Key: \
                 send the lead's key in the Idempotency-Key header, e.g. `Idempotency-Key: \"lead-1\"`",
            )
        })?;
    match OperationId::new_in(&state.tenant, source, &key) {
        Ok(id) => Ok(id),
        // A key Leadgate made when a person accepted a conflicting body as new: the
        // integration may claim that operation, never create one.
        Err(e @ OperationIdError::Reserved) => {
            // The tenant's own: `<tenant>/<source>:<key>` (the default tenant's without).
            let tenant = match state.tenant.is_default() {
                true => String::new(),
                false => format!("{}/", state.tenant),
            };
            let id = OperationId::try_from(format!("{tenant}{source}:{key}"))
                .map_err(|e| ApiError::bad(Code::InvalidKey, e.to_string()))?;
            if !state.owns(&id) || state.store.operation(&id).await?.is_none() {
                return Err(ApiError::bad(Code::InvalidKey, e.to_string()));
            }
            Ok(id)
        }
        Err(e) => Err(ApiError::bad(Code::InvalidKey, e.to_string())),
    }
}

fn replayed(body: Replayed) -> Response {
    let mut res = (StatusCode::OK, Json(body)).into_response();
    res.headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    res
}

/// The CRM created the entity.
#[derive(Deserialize, ToSchema)]
pub struct Complete {
    /// The CRM entity's id: at most 256 characters, none a control or invisible one.
    #[schema(min_length = 1, max_length = 256)]
    crm_id: String,
    /// The claim's `lease_token`.
    lease_token: String,
}

/// The CRM call failed, or got no answer.
#[derive(Deserialize, ToSchema)]
pub struct Fail {
    /// `validation` ends the operation, `auth` pauses the connector, `rate_limited` and
    /// `not_sent` make it due again, `uncertain` and `conflict` open a review case.
    class: ErrorClass,
    /// What the CRM said (markup is stripped, the length bounded, the lead's contact
    /// values and anything like a phone number or an e-mail address masked).
    error: String,
    /// The claim's `lease_token`.
    lease_token: String,
    /// Seconds the CRM asked to wait (its `Retry-After`); at most an hour counts, as
    /// for a CRM's own answer.
    #[serde(default)]
    retry_after: Option<u64>,
}

/// A report applied: the operation as it is now.
#[derive(Debug, Serialize, ToSchema)]
pub struct Reported {
    pub operation_id: OperationId,
    pub status: Status,
    pub crm_id: Option<String>,
    /// When it is due again (`received` after a retryable failure).
    pub next_attempt_at: Option<chrono::DateTime<chrono::Utc>>,
    pub review_reason: Option<ReviewReason>,
}

/// The texts of a claimed body (its leaves, the first 200), longest first: what an
/// integration's failure text must not repeat.
fn lead_values(v: &Value, out: &mut Vec<String>) {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if out.len() < 200 => out.push(s.trim().to_owned()),
            Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            Value::Object(fields) => fields.values().for_each(|f| walk(f, out)),
            _ => {}
        }
    }
    walk(v, out);
    // A longer value first, so a shorter one inside it does not leave a piece behind.
    out.sort_by_key(|s| std::cmp::Reverse(s.chars().count()));
}

/// The body, within `[server] max_body` and `body_timeout` as intake's (413 beyond).
async fn read_body(
    state: &IntakeState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, ApiError> {
    super::read_body(body, headers, state.max_body, state.body_timeout).await
}

fn json_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad(Code::MalformedBody, e.to_string()))?;
    super::reject_nul(&value)?;
    serde_json::from_value(value).map_err(|e| ApiError::bad(Code::MalformedBody, e.to_string()))
}

/// The lease a report names: the store finds it by its token; `owner` is the actor the
/// timeline names, and `expires_at` is not read (the stored expiry is judged).
fn lease(id: &OperationId, token: String, now: chrono::DateTime<chrono::Utc>) -> Lease {
    Lease {
        operation_id: id.clone(),
        token,
        owner: ACTOR.into(),
        expires_at: now,
    }
}

async fn finish(
    state: &IntakeState,
    id: &OperationId,
    token: String,
    outcome: AttemptOutcome,
) -> Result<Response, ApiError> {
    let now = state.store.now();
    match state
        .store
        .finish_attempt(&lease(id, token, now), outcome, vec![], now)
        .await
    {
        Ok(op) => Ok((
            StatusCode::OK,
            Json(Reported {
                operation_id: id.clone(),
                status: op.status,
                crm_id: op.crm_id,
                next_attempt_at: op.next_attempt_at,
                review_reason: op.review_reason,
            }),
        )
            .into_response()),
        Err(StoreError::LeaseLost(_)) => Ok(ErrorBody::new(
            Code::LeaseLost,
            "this lease token does not hold the operation (expired, or reported already); the report was kept on the timeline",
        )
        .about(id)
        .into_response()),
        Err(StoreError::UnknownLease(_)) => Ok(ErrorBody::new(
            Code::UnknownLease,
            "this lease token was never issued for this operation; nothing was recorded",
        )
        .about(id)
        .into_response()),
        Err(StoreError::UnknownOperation(_)) => {
            Err(ApiError::NotFound(format!("no operation `{id}`")))
        }
        Err(e) => Err(e.into()),
    }
}

/// An outcome is reported at its tenant's routes, where its claim API's source, retry
/// rules and connector are: the default tenant's routes read every tenant's operation,
/// but a tenant's outcome reported there would be judged as the default tenant's.
fn reported_here(state: &IntakeState, id: &OperationId) -> Result<(), ApiError> {
    match id.tenant_slug() {
        Some(tenant) if tenant != state.tenant.as_str() => Err(ApiError::NotFound(format!(
            "operation `{id}` is tenant `{tenant}`'s: report its outcome at \
             /v1/tenants/{tenant}/operations/…"
        ))),
        _ => Ok(()),
    }
}

/// Reports that the CRM created the entity.
#[utoipa::path(
    post,
    path = "/v1/operations/{id}/complete",
    tag = "claim",
    params(("id" = String, Path, description = "The claim's `operation_id`", example = "n8n:lead-1")),
    request_body(content = Complete, content_type = "application/json"),
    responses(
        (status = 200, description = "Recorded: the operation as it is now", body = Reported),
        (status = 400, description = "Not an operation id, a malformed body, a NUL character, `invalid_crm_id` (longer than 256 characters, or a control or invisible character; nothing recorded)", body = ErrorBody),
        (status = 401, description = "No integration token", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than `[server] max_body`", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `[server] body_timeout`", body = ErrorBody),
        (status = 404, description = "No such operation; or, at the default tenant's routes, a tenant's (reported at `/v1/tenants/{tenant}/…`; nothing recorded)", body = ErrorBody),
        (status = 409, description = "`lease_lost` (expired or reported already; kept on the timeline), `unknown_lease` (never issued; nothing recorded) or `conflict` (the operation's state forbids this report now)", body = ErrorBody),
        (status = 422, description = "`refused`: the rules or the database's checks refuse this report as it is", body = ErrorBody),
        (status = 500, description = "`internal_error`: Leadgate failed (the details are in the gateway's log); an unreported lease runs out into a review case, never a second create", body = ErrorBody),
        (status = 503, description = "The operations database is not available",
            headers(("Retry-After" = u64, description = "Seconds")), body = ErrorBody),
    ),
    security(("integration_token" = []))
)]
pub(super) async fn complete(
    State(state): State<IntakeState>,
    IdPath(id): IdPath,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    reported_here(&state, &id)?;
    let body = read_body(&state, &headers, body).await?;
    let c: Complete = json_body(&body)?;
    let crm_id = c.crm_id.trim().to_owned();
    if crm_id.is_empty() {
        return Err(ApiError::bad(
            Code::MissingCrmId,
            "crm_id must not be empty",
        ));
    }
    // Checked before anything is read or written: a huge or unprintable id is the
    // caller's mistake (400), never the database's (503).
    crate::domain::text::check_crm_id(&crm_id)
        .map_err(|e| ApiError::bad(Code::InvalidCrmId, format!("{e}: nothing was recorded")))?;
    finish(
        &state,
        &id,
        c.lease_token,
        AttemptOutcome::Created { crm_id },
    )
    .await
}

/// Reports a failed CRM call with its error class; Leadgate decides what follows.
#[utoipa::path(
    post,
    path = "/v1/operations/{id}/fail",
    tag = "claim",
    params(("id" = String, Path, description = "The claim's `operation_id`", example = "n8n:lead-1")),
    request_body(content = Fail, content_type = "application/json"),
    responses(
        (status = 200, description = "Recorded: the operation as it is now", body = Reported),
        (status = 400, description = "Not an operation id, a malformed body, a NUL character", body = ErrorBody),
        (status = 401, description = "No integration token", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than `[server] max_body`", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `[server] body_timeout`", body = ErrorBody),
        (status = 404, description = "No such operation; or, at the default tenant's routes, a tenant's (reported at `/v1/tenants/{tenant}/…`; nothing recorded)", body = ErrorBody),
        (status = 409, description = "`lease_lost` (expired or reported already; kept on the timeline), `unknown_lease` (never issued; nothing recorded) or `conflict` (the operation's state forbids this report now)", body = ErrorBody),
        (status = 422, description = "`refused`: the rules or the database's checks refuse this report as it is", body = ErrorBody),
        (status = 500, description = "`internal_error`: Leadgate failed (the details are in the gateway's log); an unreported lease runs out into a review case, never a second create", body = ErrorBody),
        (status = 503, description = "The operations database is not available",
            headers(("Retry-After" = u64, description = "Seconds")), body = ErrorBody),
    ),
    security(("integration_token" = []))
)]
pub(super) async fn fail(
    State(state): State<IntakeState>,
    IdPath(id): IdPath,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    reported_here(&state, &id)?;
    let body = read_body(&state, &headers, body).await?;
    let f: Fail = json_body(&body)?;
    let now = state.store.now();
    let op = state
        .store
        .operation(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no operation `{id}`")))?;
    // The same message hygiene as CRM errors (no HTML, bounded length, the lead's own
    // values replaced: every text of the claimed body, a name too), and anything else that looks like a phone number or an
    // e-mail address masked: the text may become the connector's reason, which support
    // reads. The error class is kept as it was reported.
    let mut values = vec![];
    if let Some(payload) = &op.payload {
        lead_values(payload, &mut values);
    }
    let contact = [&op.contact.phone, &op.contact.email, &op.contact.name];
    let redact: Vec<&str> = contact
        .iter()
        .filter_map(|v| v.as_deref())
        .chain(values.iter().map(String::as_str))
        .collect();
    let failure = Failure {
        class: f.class,
        message: crate::domain::text::mask_contacts(&crate::crm::clean_message(&f.error, &redact)),
    };
    // Only a retry needs the attempt count and whether a person's grant was spent (it
    // comes back to them, as the worker's would); the other classes are decided without
    // reading the operation. (The store checks the token when the report is applied; a
    // report that does not hold the lease changes nothing.)
    let (attempts, granted) = if f.class.decision() == RetryDecision::RetryWithBackoff {
        let granted = state
            .store
            .timeline_of_kind(&id, "claimed", 1)
            .await?
            .last()
            .and_then(|e| e.detail["granted"].as_bool())
            .unwrap_or(false);
        (op.attempts, granted)
    } else {
        (0, false)
    };
    let outcome = state
        .claim_api
        .retry
        .after_failed_call(
            failure,
            attempts,
            granted,
            // Capped as a CRM's own Retry-After is: a huge value would make the lead
            // due only in a year no timestamp can print (never, in practice).
            f.retry_after
                .map(|s| Duration::from_secs(s).min(crate::crm::rate::MAX_RETRY_AFTER)),
            &state.claim_api.source,
            json!({"reported_by": "claim_api"}),
            now,
        )
        // No lookup is possible from here: the integration's CRM call may have executed.
        .unwrap_or_else(|failure| AttemptOutcome::Review {
            reason: ReviewReason::UncertainOutcome,
            failure: Some(failure),
            detail: json!({"reported_by": "claim_api"}),
        });
    finish(&state, &id, f.lease_token, outcome).await
}
