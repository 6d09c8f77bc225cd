//! The OpenAPI document (`leadgate::intake::openapi`): the committed `docs/openapi.json`
//! is the one the code generates, the gateway serves it without credentials, and every
//! path and method it lists is routed, behind the authentication it names. Schemathesis
//! (`make test-api`) checks the answers against it on a live gateway.

use reqwest::StatusCode;
use serde_json::Value;

use leadgate::intake::openapi;
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::Gateway;

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.json");
const PROBLEMS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/problems.md");

#[test]
fn the_committed_document_is_the_generated_one() {
    let generated = openapi::document_json();
    if std::env::var("UPDATE_OPENAPI").as_deref() == Ok("1") {
        std::fs::write(COMMITTED, generated).unwrap();
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json is stale: run `UPDATE_OPENAPI=1 cargo test -p leadgate --test it openapi`"
    );
}

#[test]
fn the_committed_problem_catalog_is_the_generated_one() {
    let generated = leadgate::intake::problem::catalog_markdown();
    if std::env::var("UPDATE_OPENAPI").as_deref() == Ok("1") {
        std::fs::write(PROBLEMS, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(PROBLEMS).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/problems.md is stale: run `UPDATE_OPENAPI=1 cargo test -p leadgate --test it openapi`"
    );
}

#[test]
fn every_error_answer_is_documented_as_problem_details() {
    let doc: Value = serde_json::from_str(openapi::document_json()).unwrap();
    let mut errors = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for (status, response) in op["responses"].as_object().unwrap() {
                if !(status.starts_with('4') || status.starts_with('5')) {
                    continue;
                }
                errors += 1;
                let content = response["content"].as_object().unwrap();
                let types: Vec<&String> = content.keys().collect();
                assert_eq!(
                    types,
                    ["application/problem+json"],
                    "{method} {path} {status}"
                );
                assert_eq!(
                    content["application/problem+json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{method} {path} {status}"
                );
            }
        }
    }
    assert!(errors > 40, "{errors}");
    // The members of RFC 9457 and Leadgate's code, with the two of the old error body.
    let error = &doc["components"]["schemas"]["ErrorBody"];
    let required: Vec<&str> = error["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for member in [
        "type", "title", "status", "detail", "code", "error", "message",
    ] {
        assert!(required.contains(&member), "{member}: {required:?}");
    }
    assert_eq!(error["properties"]["error"]["deprecated"], true);
    assert_eq!(error["properties"]["message"]["deprecated"], true);
    // Every code of the catalog, and only those.
    let codes: Vec<&str> = leadgate::intake::problem::Code::ALL
        .iter()
        .map(|c| c.as_str())
        .collect();
    assert_eq!(
        doc["components"]["schemas"]["Code"]["enum"],
        serde_json::json!(codes)
    );
}

#[test]
fn the_document_is_openapi_3_1_with_the_auth_schemes_and_the_error_body() {
    let doc: Value = serde_json::from_str(openapi::document_json()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    let mut names: Vec<&str> = schemes.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "integration_token",
            "read_token",
            "source_signature",
            "source_token",
            "source_token_query"
        ]
    );
    assert_eq!(schemes["integration_token"]["scheme"], "bearer");
    // The domain's names, as the code writes them.
    let status = &doc["components"]["schemas"]["Status"]["enum"];
    let names: Vec<&str> = leadgate::domain::Status::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    assert_eq!(status, &serde_json::json!(names));
}

/// Every (method, path, security) the document lists.
fn operations(doc: &Value) -> Vec<(String, String, Vec<String>)> {
    let mut out = vec![];
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let security = op["security"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|req| req.as_object().unwrap().keys().cloned())
                .collect();
            out.push((method.clone(), path.clone(), security));
        }
    }
    out
}

each_backend!(
    every_documented_route_is_served_behind_the_documented_auth,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let http = reqwest::Client::new();
        // Served as committed, without credentials.
        let res = http
            .get(format!("{}/openapi.json", gw.base))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["content-type"], "application/json");
        let served = res.text().await.unwrap();
        assert_eq!(served, openapi::document_json());
        let doc: Value = serde_json::from_str(&served).unwrap();

        let ops = operations(&doc);
        // The surface of README's tables is all there (more routes may come).
        for listed in [
            "post /v1/intake/{source}",
            "post /v1/operations",
            "post /v1/operations/{id}/complete",
            "post /v1/operations/{id}/fail",
            "get /v1/operations/{id}",
            "get /v1/operations/{id}/timeline",
            "get /metrics",
            "get /healthz",
            "get /openapi.json",
            "get /problems/",
            "get /problems/{code}",
        ] {
            assert!(
                ops.iter().any(|(m, p, _)| format!("{m} {p}") == listed),
                "{listed} is not in the document: {ops:?}"
            );
        }
        for (method, path, security) in ops {
            let url = format!(
                "{}{}",
                gw.base,
                path.replace("{id}", "n8n:nobody")
                    .replace("{source}", "site")
                    .replace("{code}", "key_reused")
            );
            let method: reqwest::Method = method.to_uppercase().parse().unwrap();
            let res = http.request(method.clone(), &url).send().await.unwrap();
            let status = res.status();
            let bearer = security
                .iter()
                .any(|s| s.ends_with("_token") && !s.starts_with("source"));
            if bearer {
                // Behind a bearer token: 401 with the error body, and a challenge.
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
                assert_eq!(res.headers()["www-authenticate"], "Bearer");
                assert_eq!(res.headers()["content-type"], "application/problem+json");
                let body: Value = res.json().await.unwrap();
                assert_eq!(body["code"], "unauthorized", "{method} {path}");
                assert_eq!(body["error"], "unauthorized", "{method} {path}");
            } else {
                // Public (the intake checks the source's own credentials): routed, never
                // a bare 404 or 405 of the router.
                assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
                if status == StatusCode::NOT_FOUND || status == StatusCode::UNAUTHORIZED {
                    let body: Value = res.json().await.unwrap();
                    assert!(body["error"].is_string(), "{method} {path}: {body}");
                }
                assert!(!status.is_server_error(), "{method} {path}: {status}");
            }
        }
        gw.stop().await;
    }
);
