//! The `Idempotency-Key` header as draft-ietf-httpapi-idempotency-key-header-06 asks of a
//! resource server: one test per requirement, named after the draft's section, over real
//! HTTP against a live gateway on both backends (the claim API, and a `generic-json`
//! source whose key is the header). The claim API's lease is 60 s here, so a key stays
//! "in flight" however slow the machine.

use reqwest::header::HeaderValue;
use reqwest::{RequestBuilder, StatusCode};
use serde_json::{json, Value};

use leadgate::config::Config;
use leadgate::domain::ReviewReason;
use leadgate::intake::{idempotency, openapi};
use leadgate_fakes::bitrix24::FakeBitrix24;
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{config_toml, urlencode, Gateway};
use leadgate_testkit::TestDb;

/// The test gateway, with a claim-API lease long enough that no repeat outlives it.
async fn gateway(db: &TestDb) -> Gateway {
    let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let toml = config_toml(&db.url, &fake.webhook_url());
    let long = toml.replace(
        "[claim_api]\nsource = \"n8n\"\nlease = \"1s\"",
        "[claim_api]\nsource = \"n8n\"\nlease = \"60s\"",
    );
    assert_ne!(long, toml, "the test configuration's [claim_api] moved");
    Gateway::start_with(fake, Config::parse(&long).unwrap()).await
}

/// An answer: status, body, headers.
struct Answer {
    status: StatusCode,
    body: Value,
    headers: reqwest::header::HeaderMap,
}

async fn send(req: RequestBuilder) -> Answer {
    let res = req.send().await.unwrap();
    let (status, headers) = (res.status(), res.headers().clone());
    let text = res.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Answer {
        status,
        body,
        headers,
    }
}

/// `POST /v1/operations` with each of `keys` as an `Idempotency-Key` field (raw bytes).
async fn claim(gw: &Gateway, keys: &[&[u8]], body: &str) -> Answer {
    let mut req = gw
        .post("/v1/operations")
        .await
        .header("content-type", "application/json")
        .body(body.to_owned());
    for k in keys {
        req = req.header("Idempotency-Key", HeaderValue::from_bytes(k).unwrap());
    }
    send(req).await
}

async fn complete(gw: &Gateway, id: &str, token: &str, crm_id: &str) -> Answer {
    send(
        gw.post(&format!("/v1/operations/{}/complete", urlencode(id)))
            .await
            .json(&json!({"crm_id": crm_id, "lease_token": token})),
    )
    .await
}

/// A delivery to the `json` source (`generic-json`: the key is `Idempotency-Key`, the
/// body signed with the source's secret).
async fn deliver(gw: &Gateway, key: &[u8], body: &Value) -> Answer {
    let body = serde_json::to_vec(body).unwrap();
    let now = chrono::Utc::now().timestamp();
    let sig = leadgate::intake::sources::sign(b"json-secret", now, &body);
    send(
        gw.http
            .post(format!("{}/v1/intake/json", gw.base))
            .header("Idempotency-Key", HeaderValue::from_bytes(key).unwrap())
            .header("x-leadgate-timestamp", now.to_string())
            .header("x-leadgate-signature", sig)
            .header("content-type", "application/json")
            .body(body),
    )
    .await
}

/// A problem answer of `code` (RFC 9457, as `problems.rs` checks in full).
#[track_caller]
fn assert_problem(a: &Answer, status: u16, code: &str) {
    assert_eq!(a.status.as_u16(), status, "{}", a.body);
    assert_eq!(
        a.headers["content-type"], "application/problem+json",
        "{}",
        a.body
    );
    assert_eq!(a.body["status"], status, "{}", a.body);
    assert_eq!(a.body["code"], code, "{}", a.body);
    assert_eq!(a.body["error"], code, "{}", a.body);
    assert_eq!(a.body["type"], format!("/problems/{code}"), "{}", a.body);
}

const LEAD: &str = r#"{"name": "Ivan", "phone": "+79991234567"}"#;

each_backend!(
    // §2.1: the field is an RFC 8941 Item whose value is a String; the key is the string
    // without its quotes. A bare value is the documented extension, the same key.
    section_2_1_the_key_is_a_structured_field_string,
    |db| async move {
        let gw = gateway(&db).await;
        let a = claim(&gw, &[b"\"sf-1\""], LEAD).await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
        assert_eq!(a.body["operation_id"], "n8n:sf-1");
        // The bare form names the same key: the same operation, still outstanding.
        let a = claim(&gw, &[b"sf-1"], LEAD).await;
        assert_problem(&a, 409, "in_flight");
        assert_eq!(a.body["operation_id"], "n8n:sf-1");
        // Escapes are undone; parameters are ignored.
        let a = claim(&gw, &[br#""say \"hi\" \\ there";v=1"#], LEAD).await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
        assert_eq!(a.body["operation_id"], r#"n8n:say "hi" \ there"#);
        // Never reinterpreted: a bare `a;b` is the key `a;b`, a bare UUID is a key.
        let a = claim(&gw, &[b"a;b"], LEAD).await;
        assert_eq!(a.body["operation_id"], "n8n:a;b", "{}", a.body);
        let a = claim(&gw, &[b"8e03978e-40d5-43e8-bc93-6894a57f9324"], LEAD).await;
        assert_eq!(
            a.body["operation_id"], "n8n:8e03978e-40d5-43e8-bc93-6894a57f9324",
            "{}",
            a.body
        );
        // Not a string: refused, nothing recorded.
        for bad in [
            &b"\"unterminated"[..],
            b"\"a\" \"b\"",
            br#""bad \x escape""#,
            b"\"tab\tinside\"",
            "ключ".as_bytes(),
        ] {
            let a = claim(&gw, &[bad], LEAD).await;
            assert_problem(&a, 400, "invalid_key");
        }
        // Two fields are one too many, even when they agree.
        let a = claim(&gw, &[b"\"two\"", b"\"two\""], LEAD).await;
        assert_problem(&a, 400, "invalid_key");
        assert!(gw
            .store()
            .operation(&"n8n:two".parse().unwrap())
            .await
            .unwrap()
            .is_none());

        // The same rules where a source's key is the header (the generic-json preset).
        let a = deliver(&gw, b"\"web-1\"", &json!({"name": "Olga"})).await;
        assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
        assert_eq!(a.body["operation_id"], "json:web-1");
        let a = deliver(&gw, b"web-1", &json!({"name": "Olga"})).await;
        assert_eq!(
            (a.status, a.body["outcome"].as_str()),
            (StatusCode::OK, Some("duplicate")),
            "{}",
            a.body
        );
        assert_eq!(a.headers["idempotent-replayed"], "true");
        let a = deliver(&gw, b"\"unterminated", &json!({"name": "Olga"})).await;
        assert_problem(&a, 400, "invalid_key");
        gw.stop().await;
    }
);

each_backend!(
    // §2.2: a key MUST NOT be reused with another payload; the resource defines its
    // uniqueness: the operation is `<source>:<key>`, so one key is unique per source.
    section_2_2_a_key_is_unique_per_source_and_names_one_payload,
    |db| async move {
        let gw = gateway(&db).await;
        let a = claim(&gw, &[b"\"u-1\""], LEAD).await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
        let a = claim(&gw, &[b"\"u-1\""], r#"{"name": "Petr"}"#).await;
        assert_problem(&a, 422, "key_reused");
        assert_eq!(a.body["operation_id"], "n8n:u-1");
        // The reuse is held for a person, never sent on.
        let cases = gw
            .store()
            .cases_of(&"n8n:u-1".parse().unwrap())
            .await
            .unwrap();
        assert!(
            cases
                .iter()
                .any(|c| c.reason == ReviewReason::PayloadConflict && c.resolved_at.is_none()),
            "{cases:?}"
        );
        // The same key from another source is another operation.
        let a = deliver(&gw, b"\"u-1\"", &json!({"name": "Petr"})).await;
        assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
        assert_eq!(
            (a.body["operation_id"].as_str(), a.body["outcome"].as_str()),
            (Some("json:u-1"), Some("new"))
        );
        gw.stop().await;
    }
);

each_backend!(
    // §2.3: the resource SHOULD define its keys' expiration policy and publish it. Leadgate's
    // keys do not expire: retention keeps a tombstone with the fingerprint and the result.
    section_2_3_a_key_does_not_expire_and_the_policy_is_published,
    |db| async move {
        let gw = gateway(&db).await;
        let a = claim(&gw, &[b"\"old\""], LEAD).await;
        let token = a.body["lease_token"].as_str().unwrap().to_owned();
        let done = complete(&gw, "n8n:old", &token, "701").await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        // Retention runs as if a long time had passed: the payload goes, the key stays.
        let store = gw.store();
        let purged = leadgate::store::purge(
            store.as_ref(),
            leadgate::store::local_now() + chrono::TimeDelta::seconds(1),
            10,
        )
        .await
        .unwrap();
        assert_eq!(purged.operations, 1);
        let op = store
            .operation(&"n8n:old".parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert!(op.purged_at.is_some() && op.payload.is_none());
        let a = claim(&gw, &[b"\"old\""], LEAD).await;
        assert_eq!(
            (a.status, a.body["crm_id"].as_str()),
            (StatusCode::OK, Some("701")),
            "{}",
            a.body
        );
        assert_eq!(a.headers["idempotent-replayed"], "true");
        let a = claim(&gw, &[b"\"old\""], r#"{"name": "Petr"}"#).await;
        assert_problem(&a, 422, "key_reused");

        // Published: in the served OpenAPI document, on the header itself …
        let doc: Value = send(gw.http.get(format!("{}/openapi.json", gw.base)))
            .await
            .body;
        let param = doc["paths"]["/v1/operations"]["post"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "Idempotency-Key")
            .unwrap()
            .clone();
        let said = param["description"].as_str().unwrap();
        assert_eq!(said, idempotency::SPECIFICATION);
        assert!(
            said.contains("Expiry (§2.3): a key does not expire"),
            "{said}"
        );
        // … and in README's HTTP API section.
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        assert!(
            readme.contains("**Expiry (§2.3).**"),
            "README lost the policy"
        );
        gw.stop().await;
    }
);

each_backend!(
    // §2.4: the fingerprint is the resource's, of the payload: the same JSON in another key
    // order or spacing is the same request; any other value is another payload.
    section_2_4_the_fingerprint_is_the_canonical_payload,
    |db| async move {
        let gw = gateway(&db).await;
        let a = claim(&gw, &[b"\"fp\""], r#"{"name":"Ivan","n":1.0,"tags":["a"]}"#).await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
        let same = "{ \"tags\" : [\"a\"],\n  \"n\": 1, \"name\": \"Ivan\" }";
        let a = claim(&gw, &[b"\"fp\""], same).await;
        assert_problem(&a, 409, "in_flight");
        let a = claim(&gw, &[b"\"fp\""], r#"{"name":"Ivan","n":1,"tags":["b"]}"#).await;
        assert_problem(&a, 422, "key_reused");
        gw.stop().await;
    }
);

each_backend!(
    // §2.5: the resource MUST publish its idempotency specification (format, uniqueness,
    // fingerprint, expiry) and identify the key from the header on each request.
    section_2_5_the_resource_publishes_its_idempotency_specification,
    |db| async move {
        let gw = gateway(&db).await;
        let served = send(gw.http.get(format!("{}/openapi.json", gw.base))).await;
        assert_eq!(served.status, StatusCode::OK);
        let generated: Value = serde_json::from_str(openapi::document_json()).unwrap();
        assert!(
            served.body == generated,
            "the served document is the generated one"
        );
        let post = &served.body["paths"]["/v1/operations"]["post"];
        let param = post["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "Idempotency-Key")
            .unwrap();
        assert_eq!(param["in"], "header");
        let spec = param["description"].as_str().unwrap();
        for section in [
            "RFC 8941 string",
            "Uniqueness (§2.2)",
            "(§2.4",
            "Expiry (§2.3)",
        ] {
            assert!(spec.contains(section), "{section} is not published: {spec}");
        }
        // Each error of §2.7 is documented as a problem.
        for status in ["400", "409", "422"] {
            let content = &post["responses"][status]["content"];
            assert!(
                content["application/problem+json"]["schema"]["$ref"]
                    .as_str()
                    .is_some_and(|r| r.ends_with("/ErrorBody")),
                "{status}: {content}"
            );
        }
        gw.stop().await;
    }
);

each_backend!(
    // §2.6: a first request is processed; a retry after it completed gets the saved result,
    // success or error; a concurrent request gets a conflict.
    section_2_6_first_request_retry_and_concurrent_request,
    |db| async move {
        let gw = gateway(&db).await;
        // Eight at once with a new key: exactly one is processed.
        let answers =
            futures::future::join_all((0..8).map(|_| claim(&gw, &[b"\"race\""], LEAD))).await;
        let created: Vec<&Answer> = answers
            .iter()
            .filter(|a| a.status == StatusCode::CREATED)
            .collect();
        assert_eq!(
            created.len(),
            1,
            "{:?}",
            answers.iter().map(|a| &a.body).collect::<Vec<_>>()
        );
        for a in answers.iter().filter(|a| a.status != StatusCode::CREATED) {
            assert_problem(a, 409, "in_flight");
            let wait: u64 = a.headers["retry-after"].to_str().unwrap().parse().unwrap();
            assert!((1..=60).contains(&wait), "{wait}");
        }
        let token = created[0].body["lease_token"].as_str().unwrap().to_owned();
        assert_eq!(
            complete(&gw, "n8n:race", &token, "801").await.status,
            StatusCode::OK
        );
        // A retry: the result of the completed operation, flagged as a replay.
        let a = claim(&gw, &[b"\"race\""], LEAD).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        assert_eq!(a.headers["idempotent-replayed"], "true");
        assert_eq!(
            (a.body["status"].as_str(), a.body["crm_id"].as_str()),
            (Some("completed"), Some("801"))
        );
        // An error result is replayed as well.
        let a = claim(&gw, &[b"\"refused\""], LEAD).await;
        let token = a.body["lease_token"].as_str().unwrap().to_owned();
        let failed = send(
            gw.post("/v1/operations/n8n%3Arefused/fail")
                .await
                .json(&json!({"class": "validation", "error": "no title", "lease_token": token})),
        )
        .await;
        assert_eq!(failed.status, StatusCode::OK, "{}", failed.body);
        let a = claim(&gw, &[b"\"refused\""], LEAD).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        assert_eq!(a.headers["idempotent-replayed"], "true");
        assert_eq!(
            (a.body["status"].as_str(), a.body["last_error"].as_str()),
            (Some("failed_terminal"), Some("no title"))
        );
        gw.stop().await;
    }
);

each_backend!(
    // §2.7: a missing key is 400, a key reused with another payload 422, a request still
    // outstanding 409, each with a problem body (the draft's titles) linking the
    // documentation; a request not corrected is refused again with the same error.
    section_2_7_error_handling_answers_the_drafts_problems,
    |db| async move {
        let gw = gateway(&db).await;
        let missing = claim(&gw, &[], LEAD).await;
        let blank = claim(&gw, &[b"\"\""], LEAD).await;
        let first = claim(&gw, &[b"\"e-1\""], LEAD).await;
        assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
        let outstanding = claim(&gw, &[b"\"e-1\""], LEAD).await;
        let reused = claim(&gw, &[b"\"e-1\""], r#"{"name": "Petr"}"#).await;
        for (a, status, code, title) in [
            (&missing, 400, "missing_key", "Idempotency-Key is missing"),
            (&blank, 400, "missing_key", "Idempotency-Key is missing"),
            (
                &outstanding,
                409,
                "in_flight",
                "A request is outstanding for this Idempotency-Key",
            ),
            (
                &reused,
                422,
                "key_reused",
                "Idempotency-Key is already used",
            ),
        ] {
            assert_problem(a, status, code);
            assert_eq!(a.body["title"], title);
            assert_eq!(a.headers["content-language"], "en");
            assert!(
                a.body["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("Idempotency")),
                "{}",
                a.body
            );
            // The documentation the draft wants linked: the body's `type`, and `Link`.
            assert_eq!(
                a.headers["link"],
                format!("</problems/{code}>; rel=\"describedby\"; type=\"text/html\"").as_str()
            );
            let page = send(gw.http.get(format!(
                "{}{}",
                gw.base,
                a.body["type"].as_str().unwrap()
            )))
            .await;
            assert_eq!(page.status, StatusCode::OK);
            assert!(page.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html"));
            assert!(page.body.as_str().unwrap().contains(title), "{}", page.body);
        }
        assert!(outstanding.headers.contains_key("retry-after"));
        // Not corrected, refused again: the same problem, and still nothing created.
        let again = claim(&gw, &[], LEAD).await;
        assert_problem(&again, 400, "missing_key");
        let again = claim(&gw, &[b"\"e-1\""], r#"{"name": "Petr"}"#).await;
        assert_problem(&again, 422, "key_reused");
        // 409 needs no correction: the same request is answered once the first completes.
        let first = claim(&gw, &[b"\"e-2\""], LEAD).await;
        assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
        assert_problem(&claim(&gw, &[b"\"e-2\""], LEAD).await, 409, "in_flight");
        let token = first.body["lease_token"].as_str().unwrap();
        let done = complete(&gw, "n8n:e-2", token, "901").await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        let a = claim(&gw, &[b"\"e-2\""], LEAD).await;
        assert_eq!(
            (a.status, a.body["crm_id"].as_str()),
            (StatusCode::OK, Some("901")),
            "{}",
            a.body
        );
        gw.stop().await;
    }
);

each_backend!(
    // §5 (security considerations): the key is validated against its published format
    // before anything is processed, and looked up as a composite with the source.
    section_5_a_key_is_validated_before_anything_is_processed,
    |db| async move {
        let gw = gateway(&db).await;
        let long = format!("\"{}\"", "k".repeat(300));
        for bad in [long.as_bytes(), b"\"lead#accepted-7\""] {
            let a = claim(&gw, &[bad], LEAD).await;
            assert_problem(&a, 400, "invalid_key");
        }
        assert_eq!(
            gw.store()
                .operation(&"n8n:lead#accepted-7".parse().unwrap())
                .await
                .unwrap()
                .map(|o| o.operation_id.to_string()),
            None
        );
        gw.stop().await;
    }
);

each_backend!(
    // Upgrading past the draft's parsing (review of issue 38): Leadgate before it took
    // the field's text as the key, so `Idempotency-Key: "lead-1"` made the operation
    // `n8n:"lead-1"`, quotes and all. The same request retried after the upgrade parses to
    // `lead-1`; taken as a new operation it would be a second lead in the CRM. Operations
    // stored that way are made here as the new parsing names them — the escaped string
    // `"\"lead-1\""` is the key `"lead-1"`, the same row the old gateway wrote — and then
    // migration 0033 runs again, as on the upgrade, to find them.
    a_quoted_key_stored_as_sent_before_the_upgrade_is_found_again,
    |db| async move {
        let gw = gateway(&db).await;
        let store = gw.store();
        let a = claim(&gw, &[br#""\"lead-1\"""#], LEAD).await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
        assert_eq!(a.body["operation_id"], r#"n8n:"lead-1""#);
        let token = a.body["lease_token"].as_str().unwrap().to_owned();
        let done = complete(&gw, r#"n8n:"lead-1""#, &token, "501").await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        let a = claim(&gw, &[br#""\"lead-2\"""#], LEAD).await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
        // A value the draft refuses (a string that never ends) was a key too.
        let a = claim(&gw, &[br#""\"open""#], LEAD).await;
        assert_eq!(a.body["operation_id"], r#"n8n:"open"#, "{}", a.body);
        let olga = json!({"name": "Olga"});
        let a = deliver(&gw, br#""\"web-9\"""#, &olga).await;
        assert_eq!(a.body["operation_id"], r#"json:"web-9""#, "{}", a.body);
        db.run_migration_again(33, "quoted_keys_before_the_draft")
            .await;

        // The request as the integration sent it then, and sends it again now.
        let a = claim(&gw, &[b"\"lead-1\""], LEAD).await;
        assert_eq!(
            (
                a.status,
                a.body["operation_id"].as_str(),
                a.body["crm_id"].as_str()
            ),
            (StatusCode::OK, Some(r#"n8n:"lead-1""#), Some("501")),
            "{}",
            a.body
        );
        assert_eq!(a.headers["idempotent-replayed"], "true");
        // Another body under it is the same conflict as ever.
        let a = claim(&gw, &[b"\"lead-1\""], r#"{"name": "Petr"}"#).await;
        assert_problem(&a, 422, "key_reused");
        assert_eq!(a.body["operation_id"], r#"n8n:"lead-1""#);
        // One still in flight is found too, and so is one the draft's parsing refuses.
        let a = claim(&gw, &[b"  \"lead-2\" "], LEAD).await;
        assert_problem(&a, 409, "in_flight");
        assert_eq!(a.body["operation_id"], r#"n8n:"lead-2""#);
        let a = claim(&gw, &[b"\"open"], LEAD).await;
        assert_problem(&a, 409, "in_flight");
        assert_eq!(a.body["operation_id"], r#"n8n:"open"#);
        // A source keyed by the header (generic-json) finds it alike.
        let a = deliver(&gw, b"\"web-9\"", &olga).await;
        assert_eq!(
            (
                a.status,
                a.body["outcome"].as_str(),
                a.body["operation_id"].as_str()
            ),
            (StatusCode::OK, Some("duplicate"), Some(r#"json:"web-9""#)),
            "{}",
            a.body
        );
        for unquoted in ["n8n:lead-1", "n8n:lead-2", "json:web-9"] {
            assert!(
                store
                    .operation(&unquoted.parse().unwrap())
                    .await
                    .unwrap()
                    .is_none(),
                "{unquoted} was made"
            );
        }

        // Made since the upgrade, a key that begins with a quote is never taken for
        // another lead's value as sent: `"\"x\""` is the key `"x"`, and `"x"` the key `x`.
        let a = claim(&gw, &[br#""\"x\"""#], LEAD).await;
        assert_eq!(a.body["operation_id"], r#"n8n:"x""#, "{}", a.body);
        let a = claim(&gw, &[b"\"x\""], r#"{"name": "Petr"}"#).await;
        assert_eq!(
            (a.status, a.body["operation_id"].as_str()),
            (StatusCode::CREATED, Some("n8n:x")),
            "{}",
            a.body
        );
        // Nor is a quoted key with nothing stored as sent.
        let a = claim(&gw, &[b"\"lead-3\""], LEAD).await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
        assert_eq!(a.body["operation_id"], "n8n:lead-3");
        gw.stop().await;
    }
);
