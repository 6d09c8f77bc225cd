//! The reads of `Scope::Read`: an operation (`GET /v1/operations/{id}`) and its timeline,
//! a page at a time; and the operation id in a path, checked before anything is read.

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::problem::Code;
use super::{ApiError, ErrorBody, IntakeState};
use crate::domain::{OperationId, ReviewReason, Status};
use crate::store;
use serde_json::Value;

pub(crate) fn parse_id(id: &str) -> Result<OperationId, ApiError> {
    id.parse().map_err(|e| {
        ApiError::bad(
            Code::InvalidKey,
            format!("`{id}` is not an operation id: {e}"),
        )
    })
}

/// The `{id}` of a path as an operation id. A segment that does not percent-decode to
/// UTF-8 is a `400 invalid_key` error body like any other bad id (axum's own rejection
/// would be plain text, which the API never answers).
pub(crate) struct IdPath(pub OperationId);

/// An operation of another tenant is, to a tenant's routes, no operation at all.
impl axum::extract::FromRequestParts<IntakeState> for IdPath {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &IntakeState,
    ) -> Result<Self, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| {
                ApiError::bad(
                    Code::InvalidKey,
                    format!(
                        "the operation id in the path is not valid: {}",
                        e.body_text()
                    ),
                )
            })?;
        let id = parse_id(&id)?;
        if !state.owns(&id) {
            return Err(ApiError::NotFound(format!("no operation `{id}`")));
        }
        Ok(IdPath(id))
    }
}

/// An operation as the read API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct OperationView {
    pub operation_id: OperationId,
    pub source: String,
    pub status: Status,
    /// The CRM entity's id once it is known.
    pub crm_id: Option<String>,
    /// CRM attempts so far.
    pub attempts: i32,
    /// The last failure's message (scrubbed of secrets and contact data).
    pub last_error: Option<String>,
    pub review_reason: Option<ReviewReason>,
    /// The review cases not yet decided.
    pub open_cases: Vec<OpenCase>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OpenCase {
    pub id: i64,
    pub reason: ReviewReason,
}

/// Reads an operation.
#[utoipa::path(
    get,
    path = "/v1/operations/{id}",
    tag = "read",
    params(("id" = String, Path, description = "The operation id, `<source>:<key>`", example = "web:lead-1")),
    responses(
        (status = 200, description = "The operation", body = OperationView),
        (status = 400, description = "Not an operation id", body = ErrorBody),
        (status = 401, description = "No read or integration token", body = ErrorBody),
        (status = 404, description = "No such operation", body = ErrorBody),
        (status = 503, description = "The operations database is not available", body = ErrorBody),
    ),
    security(("read_token" = []), ("integration_token" = []))
)]
pub(super) async fn operation(
    State(state): State<IntakeState>,
    IdPath(id): IdPath,
) -> Result<Json<OperationView>, ApiError> {
    let op = state
        .store
        .operation(&id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no operation `{id}`")))?;
    let open_cases = state
        .store
        .cases_of(&id)
        .await?
        .into_iter()
        .filter(|c| c.resolved_at.is_none())
        .map(|c| OpenCase {
            id: c.id,
            reason: c.reason,
        })
        .collect();
    Ok(Json(OperationView {
        operation_id: op.operation_id,
        source: op.source,
        status: op.status,
        crm_id: op.crm_id,
        attempts: op.attempts,
        last_error: op.last_error,
        review_reason: op.review_reason,
        open_cases,
        updated_at: op.updated_at,
    }))
}

/// A page of an operation's timeline: its newest events (before `before`), oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct Timeline {
    pub operation_id: OperationId,
    pub events: Vec<TimelineEvent>,
    /// How many events are older than the first of `events`: read them with
    /// `?before=<its id>`.
    pub older: i64,
}

/// Which page of a timeline.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TimelineQuery {
    /// Only events older than this event id (the first `id` of the page before).
    before: Option<i64>,
    /// At most this many events (1–500; 500 when not given).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
}

/// One event of the append-only timeline.
#[derive(Debug, Serialize, ToSchema)]
pub struct TimelineEvent {
    pub id: i64,
    pub at: chrono::DateTime<chrono::Utc>,
    /// What happened, e.g. `received`, `claimed`, `crm_created`, `status_changed`.
    pub kind: String,
    /// Who did it: `intake`, a worker, `claim_api`, a person.
    pub actor: String,
    pub error_class: Option<String>,
    /// The event's details; their fields depend on `kind`.
    pub detail: Value,
}

impl From<store::TimelineEvent> for TimelineEvent {
    fn from(e: store::TimelineEvent) -> Self {
        let store::TimelineEvent {
            id,
            at,
            kind,
            actor,
            error_class,
            detail,
        } = e;
        TimelineEvent {
            id,
            at,
            kind,
            actor,
            error_class,
            detail,
        }
    }
}

/// Reads an operation's timeline.
#[utoipa::path(
    get,
    path = "/v1/operations/{id}/timeline",
    tag = "read",
    params(("id" = String, Path, description = "The operation id, `<source>:<key>`", example = "web:lead-1"), TimelineQuery),
    responses(
        (status = 200, description = "The newest events (at most `limit`, 500 by default) and how many are older", body = Timeline),
        (status = 400, description = "Not an operation id, a `before` or `limit` that is not a number or out of range", body = ErrorBody),
        (status = 401, description = "No read or integration token", body = ErrorBody),
        (status = 404, description = "No such operation", body = ErrorBody),
        (status = 503, description = "The operations database is not available", body = ErrorBody),
    ),
    security(("read_token" = []), ("integration_token" = []))
)]
pub(super) async fn timeline(
    State(state): State<IntakeState>,
    IdPath(id): IdPath,
    query: Result<axum::extract::Query<TimelineQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Timeline>, ApiError> {
    let axum::extract::Query(query) =
        query.map_err(|e| ApiError::bad(Code::BadQuery, e.body_text()))?;
    let limit = query.limit.unwrap_or(store::TIMELINE_PAGE_MAX);
    if !(1..=store::TIMELINE_PAGE_MAX).contains(&limit) {
        return Err(ApiError::bad(
            Code::BadQuery,
            format!("limit is from 1 to {}", store::TIMELINE_PAGE_MAX),
        ));
    }
    if state.store.operation(&id).await?.is_none() {
        return Err(ApiError::NotFound(format!("no operation `{id}`")));
    }
    let page = state.store.timeline_page(&id, query.before, limit).await?;
    Ok(Json(Timeline {
        operation_id: id,
        events: page.events.into_iter().map(Into::into).collect(),
        older: page.older,
    }))
}
