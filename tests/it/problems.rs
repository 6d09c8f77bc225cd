//! Every error answer of the HTTP API is RFC 9457 problem details (`intake::problem`):
//! `application/problem+json` with the type's `type`, `title` and `status`, a `detail`,
//! Leadgate's `code`, and the old body's `error` and `message` kept beside them. Asked of
//! a live gateway over real HTTP, one answer per kind of refusal, on both backends.

use reqwest::{RequestBuilder, StatusCode};
use serde_json::Value;

use leadgate::intake::problem::Code;
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{Gateway, INTEGRATION_TOKEN};

/// Sends `req` and checks that its answer is the problem `code` in every member; returns
/// the body and the headers.
async fn problem(
    what: &str,
    req: RequestBuilder,
    code: Code,
) -> (Value, reqwest::header::HeaderMap) {
    let res = req.send().await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let text = res.text().await.unwrap();
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"));
    assert_eq!(status.as_u16(), code.status(), "{what}: {body}");
    assert_eq!(
        headers["content-type"], "application/problem+json",
        "{what}"
    );
    assert_eq!(headers["content-language"], "en", "{what}");
    assert_eq!(
        headers["link"],
        format!(
            "</problems/{}>; rel=\"describedby\"; type=\"text/html\"",
            code.as_str()
        )
        .as_str(),
        "{what}"
    );
    assert_eq!(
        body["type"],
        format!("/problems/{}", code.as_str()),
        "{what}: {body}"
    );
    assert_eq!(body["title"], code.title(), "{what}: {body}");
    assert_eq!(body["status"], code.status(), "{what}: {body}");
    assert_eq!(body["code"], code.as_str(), "{what}: {body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.len() > 10, "{what}: {body}");
    // The members of the error body before problem details, for one more release.
    assert_eq!(body["error"], code.as_str(), "{what}: {body}");
    assert_eq!(body["message"], detail, "{what}: {body}");
    (body, headers)
}

each_backend!(every_error_answer_is_problem_details, |db| async move {
    let gw = Gateway::start(&db).await;
    let http = &gw.http;
    let base = &gw.base;
    let json = "application/json";

    // Intake: the source's credentials, the source, the body, the key.
    problem(
        "no token",
        http.post(format!("{base}/v1/intake/site"))
            .header("content-type", json)
            .body("{}"),
        Code::MissingToken,
    )
    .await;
    problem(
        "a wrong token",
        http.post(format!("{base}/v1/intake/site?token=nope"))
            .header("content-type", json)
            .body("{}"),
        Code::BadToken,
    )
    .await;
    problem(
        "an unknown source",
        http.post(format!("{base}/v1/intake/nowhere"))
            .header("content-type", json)
            .body("{}"),
        Code::UnknownSource,
    )
    .await;
    problem(
        "bad JSON",
        http.post(gw.intake_url("site"))
            .header("content-type", json)
            .body("{no"),
        Code::MalformedBody,
    )
    .await;
    problem(
        "no key",
        http.post(gw.intake_url("site"))
            .header("content-type", json)
            .body(r#"{"name": "Ivan"}"#),
        Code::MissingKey,
    )
    .await;
    problem(
        "a body over max_body",
        http.post(gw.intake_url("site"))
            .header("content-type", json)
            .body(vec![b' '; 5000]),
        Code::PayloadTooLarge,
    )
    .await;
    problem(
        "an unsupported body",
        http.post(gw.intake_url("site"))
            .header("content-type", "text/csv")
            .body("a,b"),
        Code::UnsupportedMediaType,
    )
    .await;

    // Reads: the bearer token (with its challenge), the id, the operation, the query.
    let (_, headers) = problem(
        "no read token",
        http.get(format!("{base}/v1/operations/site:x")),
        Code::Unauthorized,
    )
    .await;
    assert_eq!(headers["www-authenticate"], "Bearer");
    problem(
        "an unknown operation",
        gw.get("/v1/operations/site:nobody"),
        Code::NotFound,
    )
    .await;
    problem(
        "not an operation id",
        gw.get("/v1/operations/no-source"),
        Code::InvalidKey,
    )
    .await;
    problem(
        "a limit out of range",
        gw.get("/v1/operations/site:x/timeline?limit=0"),
        Code::BadQuery,
    )
    .await;

    // The claim API's reports.
    problem(
        "a report of an unknown operation",
        gw.post("/v1/operations/n8n:nobody/complete")
            .await
            .json(&serde_json::json!({"crm_id": "1", "lease_token": "t"})),
        Code::NotFound,
    )
    .await;
    problem(
        "an empty crm_id",
        gw.post("/v1/operations/n8n:nobody/complete")
            .await
            .json(&serde_json::json!({"crm_id": " ", "lease_token": "t"})),
        Code::MissingCrmId,
    )
    .await;

    // The router's own refusals.
    problem(
        "no such path",
        http.get(format!("{base}/v2/nothing")),
        Code::NotFound,
    )
    .await;
    let (_, headers) = problem(
        "a method the path does not take",
        http.delete(format!("{base}/v1/operations"))
            .bearer_auth(INTEGRATION_TOKEN),
        Code::MethodNotAllowed,
    )
    .await;
    assert!(
        headers.contains_key("allow"),
        "405 names the methods: {headers:?}"
    );
    problem(
        "an unknown problem type",
        http.get(format!("{base}/problems/no_such_code")),
        Code::NotFound,
    )
    .await;
    gw.stop().await;
});

each_backend!(
    every_problem_type_is_documented_where_its_type_points,
    |db| async move {
        let gw = Gateway::start(&db).await;
        // The list, then each type's page, resolved against the gateway, without credentials.
        let res = gw
            .http
            .get(format!("{}/problems/", gw.base))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let list = res.text().await.unwrap();
        for code in Code::ALL {
            assert!(
                list.contains(&format!("href=\"/problems/{}\"", code.as_str())),
                "{code:?}"
            );
            let res = gw
                .http
                .get(format!("{}{}", gw.base, code.type_uri()))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{code:?}");
            assert!(res.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html"));
            let page = res.text().await.unwrap();
            assert!(
                page.contains(&format!("<h1>{}</h1>", code.title())),
                "{page}"
            );
            assert!(page.contains(&format!("{}", code.status())), "{page}");
        }
        // docs/problems.md names every type too (its freshness: openapi.rs).
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/problems.md"))
            .unwrap();
        for code in Code::ALL {
            assert!(
                doc.contains(&format!("| `{}` |", code.as_str())),
                "{code:?}"
            );
        }
        gw.stop().await;
    }
);
