//! The claim API, for integrations that call the CRM themselves (an n8n workflow):
//! claim the key, call the CRM, then report `complete` or `fail` with the lease token.
//! Repeats follow draft-ietf-httpapi-idempotency-key-header: a completed key answers
//! with the saved result, one in flight with 409 and `Retry-After`, the same key with
//! another body with 422.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::sources::{self, BodyKind, TRANSFORM_VERSION};
use super::{parse_id, ApiError, IntakeState};
use crate::domain::{
    fingerprint, ErrorClass, OperationId, OperationIdError, RetryDecision, ReviewReason,
};
use crate::store::{
    self, AttemptOutcome, ExternalClaim, ExternalClaimOutcome, Failure, Lease, NewDelivery,
    StoreError,
};

/// The actor named on the timeline for claim-API calls.
const ACTOR: &str = "claim_api";

fn seconds_until(t: chrono::DateTime<chrono::Utc>) -> u64 {
    let s = (t - store::now()).num_milliseconds().max(0) as u64;
    s.div_ceil(1000).max(1)
}

fn with_header(mut res: Response, name: &'static str, value: String) -> Response {
    if let Ok(v) = HeaderValue::from_str(&value) {
        res.headers_mut().insert(name, v);
    }
    res
}

pub(super) async fn claim(
    State(state): State<IntakeState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let api = &state.claim_api;
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| ApiError::bad("missing_key", "the Idempotency-Key header is required"))?;
    let operation_id = match OperationId::new(&api.source, key) {
        Ok(id) => id,
        // A key Leadgate made when a person accepted a conflicting body as new: the
        // integration may claim that operation, never create one.
        Err(e @ OperationIdError::Reserved) => {
            let id = OperationId::try_from(format!("{}:{key}", api.source))
                .map_err(|e| ApiError::bad("invalid_key", e.to_string()))?;
            if state.store.operation(&id).await?.is_none() {
                return Err(ApiError::bad("invalid_key", e.to_string()));
            }
            id
        }
        Err(e) => return Err(ApiError::bad("invalid_key", e.to_string())),
    };
    let payload = sources::parse_body(BodyKind::Json, &body)
        .map_err(|m| ApiError::bad("malformed_body", m))?;
    super::reject_nul(&payload)?;
    let payload_hash =
        fingerprint(&payload, &[]).map_err(|e| ApiError::bad("malformed_body", e.to_string()))?;
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
    Ok(match outcome {
        ExternalClaimOutcome::Claimed { lease, attempts } => (
            StatusCode::CREATED,
            Json(json!({"operation_id": id, "lease_token": lease.token,
                        "lease_expires_at": lease.expires_at, "attempt": attempts})),
        )
            .into_response(),
        ExternalClaimOutcome::Completed { crm_id } => replayed(json!({
            "operation_id": id, "status": "completed", "crm_id": crm_id})),
        ExternalClaimOutcome::Failed { last_error } => replayed(json!({
            "operation_id": id, "status": "failed_terminal", "last_error": last_error})),
        ExternalClaimOutcome::InFlight { until } => with_header(
            (
                StatusCode::CONFLICT,
                Json(json!({"error": "in_flight", "operation_id": id,
                            "message": "this key is being processed; retry after the indicated time"})),
            )
                .into_response(),
            "retry-after",
            seconds_until(until).to_string(),
        ),
        ExternalClaimOutcome::Conflict => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"error": "key_reused", "operation_id": id,
                        "message": "this Idempotency-Key was used with a different body; a review case was opened"})),
        )
            .into_response(),
        ExternalClaimOutcome::NeedsReview { reason } => (
            StatusCode::CONFLICT,
            Json(json!({"error": "needs_review", "operation_id": id, "status": "needs_review",
                        "review_reason": reason,
                        "message": "the outcome of an earlier attempt is unknown or disputed; a person decides in the console"})),
        )
            .into_response(),
        ExternalClaimOutcome::ConnectorPaused => with_header(
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": "connector_paused", "operation_id": id,
                            "message": "the integration reported an auth failure; resume the connector after fixing the credentials"})),
            )
                .into_response(),
            "retry-after",
            "60".into(),
        ),
    })
}

fn replayed(body: Value) -> Response {
    let mut res = (StatusCode::OK, Json(body)).into_response();
    res.headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    res
}

#[derive(Deserialize)]
pub(super) struct Complete {
    crm_id: String,
    lease_token: String,
}

#[derive(Deserialize)]
pub(super) struct Fail {
    class: ErrorClass,
    error: String,
    lease_token: String,
    /// Seconds the CRM asked to wait (its `Retry-After`).
    #[serde(default)]
    retry_after: Option<u64>,
}

fn json_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::bad("malformed_body", e.to_string()))?;
    super::reject_nul(&value)?;
    serde_json::from_value(value).map_err(|e| ApiError::bad("malformed_body", e.to_string()))
}

fn lease(id: &OperationId, token: String) -> Lease {
    Lease {
        operation_id: id.clone(),
        token,
        owner: ACTOR.into(),
        expires_at: store::now(),
    }
}

async fn finish(
    state: &IntakeState,
    id: &OperationId,
    token: String,
    outcome: AttemptOutcome,
) -> Result<Response, ApiError> {
    match state
        .store
        .finish_attempt(&lease(id, token), outcome, vec![], state.store.now())
        .await
    {
        Ok(op) => Ok((
            StatusCode::OK,
            Json(json!({"operation_id": id, "status": op.status, "crm_id": op.crm_id,
                        "next_attempt_at": op.next_attempt_at, "review_reason": op.review_reason})),
        )
            .into_response()),
        Err(StoreError::LeaseLost(_)) => Ok((
            StatusCode::CONFLICT,
            Json(json!({"error": "lease_lost", "operation_id": id,
                        "message": "this lease token does not hold the operation (expired, or reported already); the report was kept on the timeline"})),
        )
            .into_response()),
        Err(StoreError::UnknownLease(_)) => Ok((
            StatusCode::CONFLICT,
            Json(json!({"error": "unknown_lease", "operation_id": id,
                        "message": "this lease token was never issued for this operation; nothing was recorded"})),
        )
            .into_response()),
        Err(StoreError::UnknownOperation(_)) => {
            Err(ApiError::NotFound(format!("no operation `{id}`")))
        }
        Err(e) => Err(e.into()),
    }
}

pub(super) async fn complete(
    State(state): State<IntakeState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let c: Complete = json_body(&body)?;
    let crm_id = c.crm_id.trim().to_owned();
    if crm_id.is_empty() {
        return Err(ApiError::bad("missing_crm_id", "crm_id must not be empty"));
    }
    finish(
        &state,
        &id,
        c.lease_token,
        AttemptOutcome::Created { crm_id },
    )
    .await
}

pub(super) async fn fail(
    State(state): State<IntakeState>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let f: Fail = json_body(&body)?;
    let now = state.store.now();
    // The same message hygiene as CRM errors: no HTML, bounded length.
    let failure = Failure {
        class: f.class,
        message: crate::crm::clean_message(&f.error, &[]),
    };
    // Only a retry needs the attempt count and whether a person's grant was spent (it
    // comes back to them, as the worker's would); the other classes are decided without
    // reading the operation. (The store checks the token when the report is applied; a
    // report that does not hold the lease changes nothing.)
    let (attempts, granted) = if f.class.decision() == RetryDecision::RetryWithBackoff {
        let op = state
            .store
            .operation(&id)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("no operation `{id}`")))?;
        let granted = state
            .store
            .timeline(&id)
            .await?
            .iter()
            .rev()
            .find(|e| e.kind == "claimed")
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
            f.retry_after.map(Duration::from_secs),
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
