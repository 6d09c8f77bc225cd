//! The catalog of the HTTP API's problem types (RFC 9457): every error code Leadgate
//! answers, with its status, its title and what it means. An error answer is
//! `application/problem+json` whose `type` is `/problems/<code>` — a relative URI with its
//! full path (RFC 9457 §3.1.1), resolved against the gateway that answered, which serves
//! the type's documentation there ([`page`], `GET /problems/{code}`, no credentials). The
//! same catalog is committed as `docs/problems.md` ([`catalog_markdown`];
//! `tests/it/openapi.rs` fails when the two differ).
//!
//! Why relative: the project owns no domain a type could name for ever, gateways run on
//! private networks that may reach no site, and a page served by the gateway that answered
//! always describes that gateway's version. The path is fixed: `type` compares as a string.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// Where the problem types live on a gateway: `type` is this followed by the code.
/// (A code is its variant's name in snake case — serde's and the OpenAPI document's — and
/// `as_str` says the same: a unit test checks the two agree.)
pub const BASE: &str = "/problems/";

macro_rules! problems {
    ($($variant:ident = $code:literal, $status:literal, $title:literal, $about:literal;)+) => {
        /// Leadgate's error code: the last segment of the problem's `type`, and the
        /// `code` (and, until the next release, `error`) member of every error answer.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum Code {
            $($variant,)+
        }

        impl Code {
            /// Every code, in the catalog's order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)+];

            pub const fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $code,)+ }
            }

            /// The HTTP status every answer of this type has.
            pub const fn status(self) -> u16 {
                match self { $(Code::$variant => $status,)+ }
            }

            /// RFC 9457's `title`: the same for every occurrence of the type.
            pub const fn title(self) -> &'static str {
                match self { $(Code::$variant => $title,)+ }
            }

            /// What the type means and what to do about it (the documentation page).
            pub const fn about(self) -> &'static str {
                match self { $(Code::$variant => $about,)+ }
            }
        }
    };
}

problems! {
    // Request syntax.
    MissingKey = "missing_key", 400, "Idempotency-Key is missing",
        "The request carries no idempotency key: the claim API's `Idempotency-Key` header (draft-ietf-httpapi-idempotency-key-header-06 §2.7), or the field a source's `key` names (a delivery's own idempotency key, e.g. Tilda's `tranid`). This operation is idempotent and it requires correct usage of Idempotency Key: send the key and the request again.";
    InvalidKey = "invalid_key", 400, "The key is not valid",
        "The key is not one Leadgate accepts: a quoted `Idempotency-Key` that is not an RFC 8941 string, more than one `Idempotency-Key` field, a key with a control, zero-width or bidirectional character, a key that is not ASCII, or an operation id in a path that is not `<source>:<key>`. Correct the key; the same request is refused again.";
    MalformedBody = "malformed_body", 400, "The body is malformed",
        "The body is not valid JSON (or form data), or not the shape this endpoint takes. Nothing was recorded beyond the journal's rejection.";
    UnreadableBody = "unreadable_body", 400, "The body could not be read",
        "The connection failed while the body was being read.";
    UnsupportedMediaType = "unsupported_media_type", 400, "Unsupported body type",
        "Send `application/json` or `application/x-www-form-urlencoded`.";
    NulCharacter = "nul_character", 400, "A field holds a NUL character",
        "A text field of the body holds U+0000, which no database keeps: the delivery is refused and journaled as rejected.";
    BadQuery = "bad_query", 400, "The query is not valid",
        "A query parameter is not a number or is out of its range (the timeline's `before` and `limit`).";
    BadEcho = "bad_echo", 400, "The echo value is not valid",
        "Zadarma's `zd_echo` check value must be 1 to 128 letters and digits.";
    MissingCrmId = "missing_crm_id", 400, "The CRM id is missing",
        "A `complete` report needs the CRM entity's id in `crm_id`; nothing was recorded and the lease is still yours.";
    InvalidCrmId = "invalid_crm_id", 400, "The CRM id is not valid",
        "A `crm_id` is at most 256 characters, none of them a control or invisible one; nothing was recorded and the lease is still yours.";
    // Credentials.
    Unauthorized = "unauthorized", 401, "Credentials are missing or wrong",
        "Send `Authorization: Bearer <token>`: `[api] integration_token` for the claim API, `read_token` or `integration_token` for reads and `/metrics`. A scope without a configured token is closed.";
    MissingToken = "missing_token", 401, "The source's token is missing",
        "The source is configured with a token: send it in `X-Leadgate-Token` (or the `token` query parameter; Telegram's in its secret-token header).";
    BadToken = "bad_token", 401, "The source's token does not match",
        "The token sent is not one the source is configured with.";
    MissingSignature = "missing_signature", 401, "The signature is missing",
        "The source is configured with a secret: send `X-Leadgate-Signature` (HMAC-SHA256 of `<X-Leadgate-Timestamp>.<body>`) and `X-Leadgate-Timestamp`.";
    BadSignature = "bad_signature", 401, "The signature does not match",
        "`X-Leadgate-Signature` is not the HMAC-SHA256 of `<X-Leadgate-Timestamp>.<body>` under the source's secret (or the sender's own signature scheme, for presets).";
    SignatureExpired = "signature_expired", 401, "The signature is outside the replay window",
        "`X-Leadgate-Timestamp` is further from the gateway's clock than the source's `replay_window`: sign the delivery anew.";
    SignatureReplayed = "signature_replayed", 401, "The signature was already used for another key",
        "Where the key is a header, which the signature does not cover, each signature names one operation for its replay window: sign each delivery anew.";
    BadApplicationToken = "bad_application_token", 401, "The application token does not match",
        "Bitrix24's `auth[application_token]` is not the one the source is configured with.";
    PulledSource = "pulled_source", 401, "This source is pulled, not posted to",
        "The gateway fetches this source's events itself; deliveries posted to it are refused.";
    // Resources.
    NotFound = "not_found", 404, "Not found",
        "No such operation, path or problem type.";
    UnknownSource = "unknown_source", 404, "No such source",
        "No source of this name is configured; the delivery is journaled under the source name `(unknown)`.";
    MethodNotAllowed = "method_not_allowed", 405, "Method not allowed",
        "The path exists, but not with this method; `Allow` lists the ones it takes.";
    RequestTimeout = "request_timeout", 408, "The body did not arrive in time",
        "The body did not arrive within `[server] body_timeout`; the delivery is journaled without it.";
    PayloadTooLarge = "payload_too_large", 413, "The body is too large",
        "The body is larger than `[server] max_body`; nothing was recorded beyond the journal's rejection.";
    TooManyRefusals = "too_many_refusals", 429, "Too many refused requests from this address",
        "Requests refused before authentication (as 401, 404, 408 or 413 would be) from an address over its budget are counted, not journaled. Wait `Retry-After` seconds; a request with the right credentials is taken as usual.";
    // The claim API and the operations' state.
    InFlight = "in_flight", 409, "A request is outstanding for this Idempotency-Key",
        "A request with the same Idempotency-Key for the same operation is being processed or is outstanding (another lease holds the key, or its next attempt is not due yet): send the same request again after `Retry-After` seconds, unchanged (draft-ietf-httpapi-idempotency-key-header-06 §2.6, §2.7).";
    KeyReused = "key_reused", 422, "Idempotency-Key is already used",
        "This operation is idempotent and it requires correct usage of Idempotency Key. Idempotency Key MUST not be reused across different payloads of this operation (draft-ietf-httpapi-idempotency-key-header-06 §2.2, §2.7): the key came with another body than its first request's. A review case was opened for a person; the same request is refused again.";
    NeedsReview = "needs_review", 409, "A person decides this operation",
        "The outcome of an earlier attempt is unknown or disputed, so no new claim is given: a person decides in the console. `operation_status` and `review_reason` say where it stands.";
    LeaseLost = "lease_lost", 409, "The lease no longer holds the operation",
        "The lease expired, or the report was made already: the report was kept on the operation's timeline (a CRM id is never dropped).";
    UnknownLease = "unknown_lease", 409, "The lease token was never issued for this operation",
        "Nothing was recorded: report with the `lease_token` the claim answered.";
    Conflict = "conflict", 409, "The operation changed under the request",
        "The operation's state forbids this request now; read the operation and decide again.";
    Refused = "refused", 422, "The request is refused as it is",
        "The rules or the operations database's own checks refuse a value of the request: it would be refused again, so it is not worth sending again unchanged.";
    // Leadgate's side.
    InternalError = "internal_error", 500, "Leadgate failed on this request",
        "The details are only in the gateway's log; the same request is not worth repeating until someone looks. An unreported claim's lease runs out into a review case, never a second create.";
    ConnectorPaused = "connector_paused", 503, "The connector is paused",
        "The connector is paused — after an integration reported an `auth` failure, or by a person (an admin) for a CRM's maintenance window, with a reason the console and `leadgate connector list` show. Nothing is claimed until a person resumes it (console, or `leadgate connector resume`); send the same request again after `Retry-After` seconds.";
    Unavailable = "unavailable", 503, "The operations database is not available",
        "The database is unavailable, busy or silent for more than 10 s: nothing was accepted. Send the same request again after `Retry-After` seconds; if it was being written, the next attempt is answered as a duplicate.";
}

impl Code {
    /// RFC 9457's `type`: `/problems/<code>`.
    pub fn type_uri(self) -> String {
        format!("{BASE}{}", self.as_str())
    }

    pub fn http_status(self) -> StatusCode {
        StatusCode::from_u16(self.status()).expect("the catalog's statuses are valid")
    }

    pub fn from_name(name: &str) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| c.as_str() == name)
    }
}

/// The headers every problem answer carries beside its body: the media type of RFC 9457,
/// the language of its sentences, and a link to the type's documentation (the draft's
/// alternative to the body, sent as well).
pub fn problem_headers(res: &mut Response, code: Code) {
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    h.insert(header::CONTENT_LANGUAGE, HeaderValue::from_static("en"));
    if let Ok(link) = HeaderValue::from_str(&format!(
        "<{}>; rel=\"describedby\"; type=\"text/html\"",
        code.type_uri()
    )) {
        h.insert(header::LINK, link);
    }
}

/// Escapes text for HTML (the catalog's own sentences: no input of a request is ever
/// written into a page).
fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut code = false;
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '`' => {
                out.push_str(if code { "</code>" } else { "<code>" });
                code = !code;
            }
            c => out.push(c),
        }
    }
    if code {
        out.push_str("</code>");
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;max-width:48em;margin:2em auto;padding:0 1em;line-height:1.5}\
code{background:#f2f2f2;padding:0 .2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}";

/// The documentation page of one problem type, or of all of them (`code = None`).
pub fn page(code: Option<Code>) -> Response {
    let body = match code {
        Some(c) => format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\
<style>{STYLE}</style></head><body><h1>{title}</h1>\
<p><code>type</code>: <code>{uri}</code> · <code>status</code>: {status} · <code>code</code>: <code>{code}</code></p>\
<p>{about}</p><p><a href=\"{BASE}\">Every problem type of Leadgate's HTTP API</a></p></body></html>",
            title = html(c.title()),
            uri = c.type_uri(),
            status = c.status(),
            code = c.as_str(),
            about = html(c.about()),
        ),
        None => {
            let rows: String = Code::ALL
                .iter()
                .map(|c| {
                    format!(
                        "<tr><td><a href=\"{uri}\"><code>{code}</code></a></td><td>{status}</td><td>{title}</td></tr>",
                        uri = c.type_uri(),
                        code = c.as_str(),
                        status = c.status(),
                        title = html(c.title()),
                    )
                })
                .collect();
            format!(
                "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Leadgate's problem types</title>\
<style>{STYLE}</style></head><body><h1>Leadgate's problem types</h1>\
<p>Every error answer of the HTTP API is <code>application/problem+json</code> (RFC 9457): \
<code>type</code>, <code>title</code>, <code>status</code>, <code>detail</code> and Leadgate's <code>code</code>.</p>\
<table><tr><th>code</th><th>status</th><th>title</th></tr>{rows}</table></body></html>"
            )
        }
    };
    let mut res = Html(body).into_response();
    res.headers_mut()
        .insert(header::CONTENT_LANGUAGE, HeaderValue::from_static("en"));
    res
}

/// The documentation of every problem type: an HTML page.
#[utoipa::path(
    get,
    path = "/problems/",
    tag = "meta",
    responses((status = 200, description = "Every problem type of this API: code, status, title", content_type = "text/html", body = String)),
    security(())
)]
pub(super) async fn problem_types() -> Response {
    page(None)
}

/// The documentation of one problem type: where an error answer's `type` points.
#[utoipa::path(
    get,
    path = "/problems/{code}",
    tag = "meta",
    params(("code" = String, Path, description = "Leadgate's error code, the last segment of a problem's `type`", example = "key_reused")),
    responses(
        (status = 200, description = "The problem type's page: title, status, meaning", content_type = "text/html", body = String),
        (status = 404, description = "`not_found`: no such problem type", body = super::ErrorBody),
    ),
    security(())
)]
pub(super) async fn problem_type(
    code: Result<axum::extract::Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    match code
        .ok()
        .and_then(|axum::extract::Path(c)| Code::from_name(&c))
    {
        Some(c) => page(Some(c)),
        None => super::ErrorBody::new(Code::NotFound, "no such problem type (see /problems/)")
            .into_response(),
    }
}

/// `docs/problems.md`: the catalog as committed (generated, like `docs/openapi.json`).
pub fn catalog_markdown() -> String {
    let mut s = String::from(
        "# Problem types\n\n\
<!-- Generated from src/intake/problem.rs: `UPDATE_OPENAPI=1 cargo test -p leadgate --test it openapi` rewrites it. -->\n\n\
Every error answer of Leadgate's HTTP API is `application/problem+json` (RFC 9457) with `Content-Language: en`:\n\n\
```json\n\
{\n  \"type\": \"/problems/key_reused\",\n  \"title\": \"Idempotency-Key is already used\",\n  \"status\": 422,\
\n  \"detail\": \"…\",\n  \"code\": \"key_reused\",\n  \"error\": \"key_reused\",\n  \"message\": \"…\",\n  \"operation_id\": \"n8n:lead-1\"\n}\n\
```\n\n\
- `type` is `/problems/<code>`: a relative URI with its full path (RFC 9457 §3.1.1), resolved against the gateway \
that answered, which serves the type's page there (`GET /problems/{code}`, HTML, no credentials; `GET /problems/` lists them). \
It never changes for a code; compare it, or `code`, as a string. Each answer also links it: \
`Link: </problems/<code>>; rel=\"describedby\"; type=\"text/html\"`.\n\
- `title` is the type's, the same on every answer of the type; `detail` says what happened to this request; \
`status` is the answer's HTTP status.\n\
- `code` is Leadgate's error code (an extension member). `error` (the same code) and `message` (the same text as \
`detail`) are the members of the error body before problem details: deprecated, kept until the next release.\n\
- Some answers add members: `operation_id` (the claim API's refusals of a key, the reports), `operation_status` and \
`review_reason` (`needs_review`).\n\n\
| code | status | title | meaning |\n|---|---|---|---|\n",
    );
    for c in Code::ALL {
        s.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            c.as_str(),
            c.status(),
            c.title(),
            c.about().replace('|', "\\|")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_one_problem_type_with_an_error_status() {
        let mut seen = std::collections::HashSet::new();
        for c in Code::ALL {
            assert!(seen.insert(c.as_str()), "{c:?} twice");
            assert!((400..600).contains(&c.status()), "{c:?}");
            assert_eq!(Code::from_name(c.as_str()), Some(*c));
            assert_eq!(c.type_uri(), format!("/problems/{}", c.as_str()));
            assert!(c
                .as_str()
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'));
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                serde_json::json!(c.as_str())
            );
        }
    }

    #[test]
    fn the_draft_titles_are_the_drafts() {
        assert_eq!(Code::MissingKey.title(), "Idempotency-Key is missing");
        assert_eq!(Code::KeyReused.title(), "Idempotency-Key is already used");
        assert_eq!(
            Code::InFlight.title(),
            "A request is outstanding for this Idempotency-Key"
        );
        assert_eq!(
            (
                Code::MissingKey.status(),
                Code::KeyReused.status(),
                Code::InFlight.status()
            ),
            (400, 422, 409)
        );
    }

    #[test]
    fn pages_escape_markup() {
        assert_eq!(html("a <b> & `c`"), "a &lt;b&gt; &amp; <code>c</code>");
    }
}
