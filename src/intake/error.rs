//! Every error answer of the HTTP API: [`ApiError`] and its body, [`ErrorBody`], an RFC 9457
//! problem details object (`application/problem+json`) whose type is one of the catalog's
//! (`problem::Code`). A store error is mapped by its kind (`store::ErrorKind`), on purpose:
//! only what may pass later is "503, retry".

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::problem::{self, Code};
use crate::domain::{OperationId, ReviewReason, Status};
use crate::store::{ErrorKind, StoreError};

/// Every error answer: RFC 9457 problem details (`application/problem+json`). `type`,
/// `title` and `status` are the problem type's (`/problems/<code>`, documented at that path
/// and in docs/problems.md), `detail` is about this request, `code` is Leadgate's error
/// code. `error` and `message` are the error body's members before problem details (the
/// code, and the detail's text): deprecated, kept until the next release. The claim API's
/// refusals of a key also name the operation (and, for `needs_review`, its state).
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The problem type: `/problems/<code>`, a URI reference with its full path, resolved
    /// against the gateway, which serves the type's documentation there.
    #[serde(rename = "type")]
    #[schema(
        format = "uri-reference",
        pattern = "^/problems/[a-z_]+$",
        example = "/problems/not_found"
    )]
    pub problem_type: String,
    /// The problem type's summary, the same on every answer of the type.
    #[schema(example = "Not found")]
    pub title: &'static str,
    /// The answer's HTTP status code.
    #[schema(minimum = 400, maximum = 599, example = 404)]
    pub status: u16,
    /// What happened to this request, for a person; it never repeats a secret or the
    /// lead's data.
    pub detail: String,
    /// Leadgate's error code (the last segment of `type`).
    pub code: Code,
    /// Deprecated: the same code as `code`, kept until the next release.
    #[schema(value_type = String, deprecated, example = "not_found")]
    pub error: Code,
    /// Deprecated: `detail`, kept until the next release.
    #[schema(deprecated)]
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<OperationId>,
    /// The operation's state (`needs_review`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review_reason: Option<ReviewReason>,
}

impl ErrorBody {
    pub(crate) fn new(code: Code, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        ErrorBody {
            problem_type: code.type_uri(),
            title: code.title(),
            status: code.status(),
            message: detail.clone(),
            detail,
            code,
            error: code,
            operation_id: None,
            operation_status: None,
            review_reason: None,
        }
    }

    /// A refusal concerning one operation.
    pub(crate) fn about(mut self, id: &OperationId) -> Self {
        self.operation_id = Some(id.clone());
        self
    }
}

/// The answer: the type's status, `application/problem+json`, `Content-Language: en` and a
/// `Link` to the type's page.
impl IntoResponse for ErrorBody {
    fn into_response(self) -> Response {
        let code = self.code;
        let body = serde_json::to_vec(&self).expect("an error body serializes");
        let mut res = (code.http_status(), body).into_response();
        problem::problem_headers(&mut res, code);
        res
    }
}

/// What went wrong with a request, as a status code and an [`ErrorBody`].
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest { code: Code, message: String },
    #[error("no such source is configured")]
    UnknownSource,
    #[error("{message}")]
    Unauthorized { code: Code, message: String },
    #[error("the body is larger than the {0} bytes this gateway accepts")]
    TooLarge(usize),
    #[error("the body did not arrive within {} s", .0.as_secs_f64())]
    TooSlow(std::time::Duration),
    #[error("{0}")]
    NotFound(String),
    #[error("the operations database is not available; retry later")]
    Unavailable(#[source] StoreError),
    /// The request met a state that changed under it (`store::ErrorKind::Conflict`).
    #[error("{}", said(.0))]
    Conflict(#[source] StoreError),
    /// The rules, a role or the database's own checks refuse the request as it is: it
    /// would be refused again (`store::ErrorKind::Refused`).
    #[error("{}", said(.0))]
    Refused(#[source] StoreError),
    /// Leadgate failed (`store::ErrorKind::Internal`): the details are in the gateway's
    /// log, and the same request is not worth repeating until someone looks.
    #[error("the gateway failed on this request; the details are in its log")]
    Internal(#[source] StoreError),
    /// A refusal before authentication from an address over its budget (`refusals`).
    #[error("too many refused requests from this address: {0}")]
    TooManyRefusals(Box<ApiError>),
}

/// An answer's status is its problem type's (`Code::status`).
impl ApiError {
    pub(crate) fn code(&self) -> Code {
        match self {
            ApiError::BadRequest { code, .. } => *code,
            ApiError::UnknownSource => Code::UnknownSource,
            ApiError::Unauthorized { code, .. } => *code,
            ApiError::TooLarge(_) => Code::PayloadTooLarge,
            ApiError::TooSlow(_) => Code::RequestTimeout,
            ApiError::NotFound(_) => Code::NotFound,
            ApiError::Unavailable(_) => Code::Unavailable,
            ApiError::Conflict(_) => Code::Conflict,
            ApiError::Refused(_) => Code::Refused,
            ApiError::Internal(_) => Code::InternalError,
            ApiError::TooManyRefusals(_) => Code::TooManyRefusals,
        }
    }

    pub(crate) fn bad(code: Code, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code,
            message: message.into(),
        }
    }
}

/// What a sender is told of a store error: Leadgate's own sentence, but of the database's
/// only its code — its message may quote a value of the request (`22P02`: "invalid input
/// syntax … \"<the value>\""), and an answer never repeats the lead's data.
fn said(e: &StoreError) -> String {
    match e {
        StoreError::Database(d) => format!(
            "the operations database refused this request (code {})",
            d.code().unwrap_or("none")
        ),
        other => other.to_string(),
    }
}

/// Each kind of store error answers what it means to the sender: only what may pass
/// later is "503, retry"; a refusal or a fault of Leadgate's own is not.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e.kind() {
            ErrorKind::Unavailable => ApiError::Unavailable(e),
            ErrorKind::Conflict => ApiError::Conflict(e),
            ErrorKind::Refused => ApiError::Refused(e),
            ErrorKind::NotFound => ApiError::NotFound(e.to_string()),
            ErrorKind::Internal => ApiError::Internal(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            // The details stay in the log; the sender learns only to retry.
            ApiError::Unavailable(e) => tracing::error!(error = %e, "operations database error"),
            ApiError::Internal(e) => tracing::error!(error = %e, "internal error"),
            ApiError::Refused(e) | ApiError::Conflict(e) => {
                tracing::info!(error = %e, "the operations store refused a request")
            }
            _ => {}
        }
        let mut res = ErrorBody::new(self.code(), self.to_string()).into_response();
        match self {
            ApiError::Unavailable(_) => {
                res.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            ApiError::TooManyRefusals(_) => {
                res.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
            }
            _ => {}
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn answer(e: StoreError) -> (StatusCode, Option<String>, String) {
        let res = ApiError::from(e).into_response();
        let retry = res
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned());
        let status = res.status();
        let body =
            futures::executor::block_on(axum::body::to_bytes(res.into_body(), 1 << 16)).unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        (status, retry, body["error"].as_str().unwrap().to_owned())
    }

    #[test]
    fn only_what_may_pass_later_tells_the_sender_to_retry() {
        use crate::store::{DbError, DbFault};
        let db = |code| StoreError::Database(DbError::new(DbFault::Server, Some(code), "no"));
        let cases = [
            (db("08006"), 503, Some("5"), "unavailable"),
            (db("55P03"), 503, Some("5"), "unavailable"),
            (db("23505"), 409, None, "conflict"),
            (StoreError::LeaseLost("k".into()), 409, None, "conflict"),
            (db("22001"), 422, None, "refused"),
            (db("42501"), 503, Some("5"), "unavailable"),
            (db("54000"), 422, None, "refused"),
            (StoreError::Forbidden("no".into()), 422, None, "refused"),
            (
                StoreError::UnknownOperation("web:1".into()),
                404,
                None,
                "not_found",
            ),
            (
                StoreError::Corrupt("a row".into()),
                500,
                None,
                "internal_error",
            ),
            (db("42P01"), 500, None, "internal_error"),
        ];
        for (e, status, retry, code) in cases {
            let what = e.to_string();
            assert_eq!(
                answer(e),
                (
                    StatusCode::from_u16(status).unwrap(),
                    retry.map(str::to_owned),
                    code.to_owned()
                ),
                "{what}"
            );
        }
    }

    #[test]
    fn a_refusal_names_the_code_and_never_the_value() {
        use crate::store::{DbError, DbFault};
        let e = StoreError::Database(DbError::new(
            DbFault::Server,
            Some("22P02"),
            "invalid input syntax for type uuid: \"+7 916 123-45-67\"",
        ));
        let message = ApiError::from(e).to_string();
        assert!(message.contains("22P02"), "{message}");
        assert!(!message.contains("916"), "{message}");
    }

    #[test]
    fn an_internal_error_keeps_its_details_in_the_log() {
        let res = ApiError::from(StoreError::Corrupt("secret row 42".into())).into_response();
        let body =
            futures::executor::block_on(axum::body::to_bytes(res.into_body(), 1 << 16)).unwrap();
        assert!(!String::from_utf8_lossy(&body).contains("secret row 42"));
    }
}
