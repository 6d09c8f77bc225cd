//! The OpenAPI 3.1 document of the gateway's HTTP surface, generated from the handlers'
//! `#[utoipa::path]` annotations and the answer types (utoipa, through utoipa-axum's
//! router, so a route and its description are registered by the same line). Served at
//! `/openapi.json` without credentials and committed as `docs/openapi.json`
//! (`tests/it/openapi.rs` fails when the two differ; `UPDATE_OPENAPI=1` rewrites it).
//!
//! The contract is generated, not written: answers are typed structs (`Serialize` +
//! `ToSchema`), never `json!`; every error is `ErrorBody`; the domain's enums appear as
//! the names in their `ALL`. `tests/it/openapi.rs` also checks that every documented route
//! is served behind the documented authentication, and Schemathesis (`make test-api`,
//! `scripts/contract-test.sh`) checks a live gateway's answers against the document.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The bearer schemes the annotations name (`security(("integration_token" = []))`).
const INTEGRATION: &str = "integration_token";
const READ: &str = "read_token";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Leadgate",
        description = "One lead in, exactly one CRM result out. Lead sources deliver to the intake; \
integrations that call the CRM themselves use the claim API (claim, then complete or fail with the \
lease token); monitoring reads operations, timelines and metrics. Every error answer is RFC 9457 \
problem details (`application/problem+json`, the `ErrorBody` schema): `type` is `/problems/<code>`, \
resolved against the gateway, which documents the type at that path; `code` is Leadgate's error code; \
`error` and `message` are deprecated copies of `code` and `detail`, kept until the next release. \
`Idempotency-Key` follows draft-ietf-httpapi-idempotency-key-header-06: an RFC 8941 string (a bare \
value is accepted as an extension), unique per source and payload, and it does not expire (the claim \
API's parameter says how). The rules behind each answer are in docs/SPEC.md."
    ),
    modifiers(&SecuritySchemes),
    components(schemas(super::ErrorBody, super::problem::Code)),
    tags(
        (name = "intake", description = "Deliveries from lead sources"),
        (name = "claim", description = "The claim API, for integrations that call the CRM themselves"),
        (name = "read", description = "Operations, timelines and metrics"),
        (name = "meta", description = "Health and this document"),
    )
)]
pub(super) struct ApiDoc;

struct SecuritySchemes;

/// Every 4xx and 5xx answer of every operation is `application/problem+json` (the
/// annotations name the `ErrorBody` schema; the media type is set here, once, on the
/// document of every route: `intake::api_routes_document`).
pub(super) struct ProblemDetails;

impl Modify for ProblemDetails {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        for item in doc.paths.paths.values_mut() {
            for op in operations_mut(item) {
                for (status, response) in op.responses.responses.iter_mut() {
                    let error = status.starts_with('4') || status.starts_with('5');
                    if let (true, RefOr::T(response)) = (error, response) {
                        if let Some(json) = response.content.shift_remove("application/json") {
                            response.content.insert(PROBLEM_JSON.to_owned(), json);
                        }
                    }
                }
            }
        }
    }
}

/// Every operation of a path, whatever its method.
fn operations_mut(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .flatten()
}

/// The media type of every error answer (RFC 9457).
pub const PROBLEM_JSON: &str = "application/problem+json";

impl Modify for SecuritySchemes {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let c = doc.components.get_or_insert_with(Default::default);
        let bearer = |what: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(what))
                    .build(),
            )
        };
        c.add_security_scheme(
            INTEGRATION,
            bearer(
                "`Authorization: Bearer <[api] integration_token>`: the claim API, and every read",
            ),
        );
        c.add_security_scheme(
            READ,
            bearer("`Authorization: Bearer <[api] read_token>`: operation and timeline reads, /metrics"),
        );
        c.add_security_scheme(
            "source_token",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-Leadgate-Token",
                "A source configured with `token`: the token in this header (or the `token` query parameter)",
            ))),
        );
        c.add_security_scheme(
            "source_token_query",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "token",
                "A source configured with `token`, for senders that cannot set headers (Tilda)",
            ))),
        );
        c.add_security_scheme(
            "source_signature",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-Leadgate-Signature",
                "A source configured with `secret`: hex HMAC-SHA256 over `<X-Leadgate-Timestamp>.<raw body>` \
with the source's secret, the timestamp (Unix seconds) in X-Leadgate-Timestamp within the source's \
replay window. Bitrix24 sources instead carry `auth[application_token]` in the body; a source with \
`auth = \"none\"` needs nothing",
            ))),
        );
    }
}

/// The document, built once.
pub fn document() -> &'static utoipa::openapi::OpenApi {
    static DOC: LazyLock<utoipa::openapi::OpenApi> = LazyLock::new(super::api_routes_document);
    &DOC
}

/// The document as the gateway serves it and as `docs/openapi.json` holds it (pretty,
/// with a final newline).
pub fn document_json() -> &'static str {
    static JSON: LazyLock<String> = LazyLock::new(|| {
        let mut s = document()
            .to_pretty_json()
            .expect("the OpenAPI document serializes");
        s.push('\n');
        s
    });
    &JSON
}

/// The OpenAPI document of this gateway's HTTP API. It holds no secret and no
/// configuration (source names included), so it needs no credentials.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    responses((status = 200, description = "This document (OpenAPI 3.1)", content_type = "application/json", body = Object)),
    security(())
)]
pub(super) async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        document_json(),
    )
        .into_response()
}

// The domain's types describe themselves (leadgate-domain's `openapi` feature).

/// Adds `tenants`' paths to `doc` under `/v1/tenants/{tenant}/…` (`/v1/operations` becomes
/// `/v1/tenants/{tenant}/operations`): the same routes, served for each tenant of the
/// fleet, opened by its own tokens or the fleet's.
/// The routes outside `/v1/` a tenant has too, under `/v1/tenants/{tenant}/` as the rest
/// (`/metrics`: `/v1/tenants/{tenant}/metrics`).
pub(super) const UNVERSIONED_TENANT_PATHS: &[&str] = &["metrics"];

pub(super) fn add_tenant_paths(
    doc: &mut utoipa::openapi::OpenApi,
    tenants: utoipa::openapi::OpenApi,
) {
    for (path, item) in tenants.paths.paths {
        let rest = path.strip_prefix("/v1/").or_else(|| {
            path.strip_prefix('/')
                .filter(|p| UNVERSIONED_TENANT_PATHS.contains(p))
        });
        if let Some(rest) = rest {
            let item = for_a_tenant(
                item,
                "A tenant's slug (`leadgate tenant apply`); its own `[tenant.api]` tokens or the \
                 fleet's `[api]` tokens open it",
                Some("No such tenant is served here (to the fleet's token; anyone else hears 401)"),
            );
            doc.paths
                .paths
                .insert(format!("/v1/tenants/{{tenant}}/{rest}"), item);
        }
    }
}

/// Adds `/v1/intake/{tenant}/{source}`: a tenant's sources, as `/v1/intake/{source}` takes
/// the default tenant's (a tenant that is not served answers as a source that is not).
pub(super) fn add_tenant_intake(doc: &mut utoipa::openapi::OpenApi) {
    if let Some(item) = doc.paths.paths.get("/v1/intake/{source}").cloned() {
        let item = for_a_tenant(item, "A tenant's slug (`leadgate tenant apply`)", None);
        doc.paths
            .paths
            .insert("/v1/intake/{tenant}/{source}".to_owned(), item);
    }
}

/// `item` as a tenant's route: each operation with the `tenant` path parameter (`what`),
/// an id of its own and, when the route has none, a 404 saying `not_served`.
fn for_a_tenant(
    mut item: utoipa::openapi::PathItem,
    what: &str,
    not_served: Option<&str>,
) -> utoipa::openapi::PathItem {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::{ContentBuilder, Object, Ref, RefOr, Required, ResponseBuilder, Type};
    for op in operations_mut(&mut item) {
        let tenant = ParameterBuilder::new()
            .name("tenant")
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .description(Some(what))
            .schema(Some(Object::with_type(Type::String)))
            .example(Some(serde_json::json!("acme")))
            .build();
        op.parameters.get_or_insert_with(Vec::new).insert(0, tenant);
        op.operation_id = op.operation_id.take().map(|id| format!("tenant_{id}"));
        if let Some(text) = not_served {
            let answer = ResponseBuilder::new()
                .description(text)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build();
            op.responses
                .responses
                .entry("404".to_owned())
                .or_insert(RefOr::T(answer));
        }
    }
    item
}
