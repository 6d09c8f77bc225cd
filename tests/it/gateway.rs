//! The gateway end to end: real HTTP into `leadgate`'s intake, a real worker, and the
//! fake Bitrix24 over real HTTP, on both backends. The pilot scenarios of docs/SPEC.md.

use std::sync::Arc;
use std::time::Duration;

use leadgate::app::{self, Mode};
use leadgate_fakes::bitrix24::Fault;
use reqwest::StatusCode;
use serde_json::{json, Value};

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::*;

each_backend!(
    pilot_1_a_webhook_delivered_twice_makes_one_crm_record,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let (status, body, replayed) = gw.post_json("site", &lead("s1")).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body["outcome"], "new");
        assert_eq!(body["operation_id"], "site:s1");
        assert!(!replayed);
        let done = gw.wait_status("site:s1", "completed").await;
        // The redelivery (with a new volatile sent_at) returns the first result.
        let mut again = lead("s1");
        again["sent_at"] = json!("2026-11-30T10:05:00Z");
        let (status, body, replayed) = gw.post_json("site", &again).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["outcome"], "duplicate");
        assert_eq!(body["crm_id"], done["crm_id"]);
        assert!(replayed, "Idempotent-Replayed: true");
        assert_eq!(gw.fake.calls(CREATE), 1);
        assert_eq!(origin_ids(&gw.fake), ["site:s1"]);
        let e = &gw.fake.entities()[0];
        assert_eq!(e.fields["ORIGINATOR_ID"], "leadgate");
        assert_eq!(e.fields["NAME"], "Ivan");
        gw.stop().await;
    }
);

each_backend!(
    pilot_2_the_crm_created_but_the_answer_was_lost,
    |db| async move {
        let gw = Gateway::start(&db).await;
        // The CRM creates the lead, then the answer never comes (timeout) or the connection
        // drops: the outcome is unknown, so the worker reconciles instead of creating again.
        for (key, fault) in [
            ("hang", Fault::LostAnswerHang),
            ("drop", Fault::LostAnswerDrop),
        ] {
            gw.fake.push_fault(CREATE, fault, 1);
            gw.post_json("site", &lead(key)).await;
            let id = format!("site:{key}");
            let op = gw.wait_status(&id, "completed").await;
            assert_eq!(op["attempts"], 1, "{op}");
            let timeline = gw.store().timeline(&id.parse().unwrap()).await.unwrap();
            let kinds: Vec<&str> = timeline.iter().map(|e| e.kind.as_str()).collect();
            assert!(kinds.contains(&"reconciliation"), "{kinds:?}");
            assert!(kinds.contains(&"recovered"), "{kinds:?}");
            let answer = timeline.iter().find(|e| e.kind == "crm_response").unwrap();
            assert_eq!(answer.error_class.as_deref(), Some("uncertain"));
        }
        assert_eq!(gw.fake.calls(CREATE), 2, "no create was repeated");
        assert_eq!(origin_ids(&gw.fake).len(), 2);
        // A 500 on create that did execute: recovered the same way.
        gw.fake.push_fault(CREATE, Fault::ServerErrorAfterCreate, 1);
        gw.post_json("site", &lead("after500")).await;
        gw.wait_status("site:after500", "completed").await;
        // A 500 that did not execute: the authoritative lookup finds nothing, so it is
        // attempted again, and created once.
        gw.fake.push_fault(CREATE, Fault::ServerError, 1);
        gw.post_json("site", &lead("plain500")).await;
        let op = gw.wait_status("site:plain500", "completed").await;
        assert_eq!(op["attempts"], 2);
        let mut ids = origin_ids(&gw.fake);
        ids.sort();
        assert_eq!(
            ids,
            ["site:after500", "site:drop", "site:hang", "site:plain500"]
        );
        gw.stop().await;
    }
);

each_backend!(
    pilot_3_two_workers_get_the_same_leads_at_once,
    |db| async move {
        let gw = Gateway::start(&db).await;
        // A second process's worker on the same database.
        let other = app::start(&gw.config, Mode::Worker).await.unwrap();
        gw.fake.push_fault(CREATE, Fault::LatencyMs { ms: 30 }, 40);
        for i in 0..40 {
            gw.post_json("site", &lead(&format!("w{i}"))).await;
        }
        for i in 0..40 {
            gw.wait_status(&format!("site:w{i}"), "completed").await;
        }
        let mut ids = origin_ids(&gw.fake);
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 40);
        assert_eq!(
            gw.fake.calls(CREATE),
            40,
            "each operation claimed exactly once"
        );
        other.stop().await;
        gw.stop().await;
    }
);

each_backend!(
    fifty_concurrent_deliveries_of_one_submission_make_one_create,
    |db| async move {
        let gw = Arc::new(Gateway::start(&db).await);
        let sends: Vec<_> = (0..50)
            .map(|_| {
                let gw = Arc::clone(&gw);
                tokio::spawn(async move { gw.post_json("site", &lead("burst")).await })
            })
            .collect();
        let mut new = 0;
        for s in sends {
            let (status, body, _) = s.await.unwrap();
            assert!(status.is_success(), "{body}");
            new += usize::from(body["outcome"] == "new");
        }
        assert_eq!(new, 1);
        gw.wait_status("site:burst", "completed").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(gw.fake.calls(CREATE), 1);
        Arc::into_inner(gw).unwrap().stop().await;
    }
);

each_backend!(
    pilot_4_a_workflow_restarted_after_the_create_gets_the_saved_crm_id,
    |db| async move {
        let mut gw = Gateway::start(&db).await;
        gw.post_json("site", &lead("r1")).await;
        let done = gw.wait_status("site:r1", "completed").await;
        gw.restart().await;
        let (status, body, replayed) = gw.post_json("site", &lead("r1")).await;
        assert_eq!((status, replayed), (StatusCode::OK, true));
        assert_eq!(body["crm_id"], done["crm_id"]);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(gw.fake.calls(CREATE), 1, "create was not repeated");
        gw.stop().await;
    }
);

each_backend!(
    pilot_5_a_validation_error_is_not_retried_and_the_reason_is_kept,
    |db| async move {
        let gw = Gateway::start(&db).await;
        gw.fake.push_fault(CREATE, Fault::Validation, 1);
        gw.post_json("site", &lead("v1")).await;
        let op = gw.wait_status("site:v1", "failed_terminal").await;
        let err = op["last_error"].as_str().unwrap();
        assert!(err.contains("Lead Name"), "{err}");
        assert!(!err.contains("<br"), "{err}");
        assert!(!err.contains("fake-secret"), "{err}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(gw.fake.calls(CREATE), 1, "no automatic retry");
        assert_eq!(gw.operation("site:v1").await["attempts"], 1);
        gw.stop().await;
    }
);

each_backend!(
    pilot_6_lost_token_rights_pause_without_a_loop_and_lose_nothing,
    |db| async move {
        let gw = Gateway::start(&db).await;
        gw.fake.push_fault(CREATE, Fault::ExpiredToken, 1000);
        for i in 0..3 {
            gw.post_json("site", &lead(&format!("a{i}"))).await;
        }
        gw.wait_paused_and_idle("bitrix24").await;
        let store = gw.store();
        let calls = gw.fake.calls(CREATE);
        // Bounded: at most one call per worker slot (concurrency = 4), then none.
        assert!((1..=4).contains(&calls), "{calls} calls");
        // New deliveries keep being accepted while paused.
        let (status, _, _) = gw.post_json("site", &lead("a3")).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            gw.fake.calls(CREATE),
            calls,
            "no calls while paused, not even retries"
        );
        for i in 0..4 {
            assert_eq!(
                gw.operation(&format!("site:a{i}")).await["status"],
                "received"
            );
        }
        let op = store
            .operation(&"site:a0".parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(op.retry_grants, 0);
        // The token is fixed; a person resumes the connector and nothing was lost.
        gw.fake.reset();
        assert!(store
            .resume_connector("bitrix24", "anna", leadgate::store::local_now())
            .await
            .unwrap());
        for i in 0..4 {
            gw.wait_status(&format!("site:a{i}"), "completed").await;
        }
        assert_eq!(origin_ids(&gw.fake).len(), 4);
        gw.stop().await;
    }
);

each_backend!(
    pilot_7_changed_data_under_the_same_key_goes_to_review,
    |db| async move {
        let gw = Gateway::start(&db).await;
        gw.fake.push_fault(CREATE, Fault::LatencyMs { ms: 0 }, 0);
        let store = gw.store();
        // Pause the connector so the first delivery is still unfinished when the second comes.
        store
            .pause_connector(
                "bitrix24",
                "test hold",
                "test",
                leadgate::store::local_now(),
            )
            .await
            .unwrap();
        gw.post_json("site", &lead("c1")).await;
        let mut changed = lead("c1");
        changed["name"] = json!("Petr");
        let (status, body, _) = gw.post_json("site", &changed).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        assert_eq!(body["outcome"], "conflict");
        assert_eq!(body["status"], "needs_review");
        store
            .resume_connector("bitrix24", "test", leadgate::store::local_now())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let op = gw.operation("site:c1").await;
        assert_eq!(op["status"], "needs_review");
        assert_eq!(op["review_reason"], "payload_conflict");
        assert_eq!(op["open_cases"][0]["reason"], "payload_conflict");
        assert_eq!(gw.fake.calls(CREATE), 0, "nothing reached the CRM");
        gw.stop().await;
    }
);

each_backend!(
    a_lead_with_an_e_mail_longer_than_any_address_is_taken_without_it,
    |db| async move {
        // 3.5 KB a visitor typed into the e-mail field (within the test gateway's 4 KiB
        // body): no address (at most 254 characters), and over PostgreSQL's index row
        // limit (2,704 bytes) if it were kept. The lead is taken on both backends; its
        // e-mail is not a contact key.
        let gw = Gateway::start(&db).await;
        let huge: String = (0..110)
            .map(|_| uuid::Uuid::new_v4().simple().to_string())
            .collect();
        let mut body = lead("long-email");
        body["email"] = json!(format!("{huge}@example.com"));
        let (status, answer, _) = gw.post_json("site", &body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
        assert_eq!(answer["outcome"], "new", "{answer}");
        // beside a lead whose e-mail is one
        let (status, _, _) = gw.post_json("site", &lead("short-email")).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let kept = db
            .texts("select coalesce(contact_email, '-') from operations order by operation_id")
            .await;
        assert_eq!(kept, ["-", "ivan@example.com"]);
    }
);

each_backend!(
    bad_input_gets_its_status_code_and_the_gateway_stays_healthy,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let url = |source: &str| gw.intake_url(source);
        let send =
            |req: reqwest::RequestBuilder| async move { answer(req.send().await.unwrap()).await };
        let json_ct = "application/json";
        let now = chrono::Utc::now().timestamp();
        let cases: Vec<(&str, reqwest::RequestBuilder, StatusCode, &str)> = vec![
            (
                "bad JSON",
                gw.http
                    .post(url("site"))
                    .header("content-type", json_ct)
                    .body("{nope"),
                StatusCode::BAD_REQUEST,
                "malformed_body",
            ),
            (
                "invalid UTF-8",
                gw.http
                    .post(url("site"))
                    .header("content-type", json_ct)
                    .body(vec![b'{', 0xff, b'}']),
                StatusCode::BAD_REQUEST,
                "malformed_body",
            ),
            (
                "missing key",
                gw.http.post(url("site")).json(&json!({"name": "x"})),
                StatusCode::BAD_REQUEST,
                "missing_key",
            ),
            (
                "control character in key",
                gw.http
                    .post(url("site"))
                    .json(&json!({"submission_id": "a\u{1}b"})),
                StatusCode::BAD_REQUEST,
                "invalid_key",
            ),
            (
                "unknown source",
                gw.http.post(url("nope")).json(&lead("x")),
                StatusCode::NOT_FOUND,
                "unknown_source",
            ),
            (
                "unsigned",
                gw.http
                    .post(url("signed"))
                    .header("idempotency-key", "k1")
                    .json(&lead("x")),
                StatusCode::UNAUTHORIZED,
                "missing_signature",
            ),
            (
                "wrong signature",
                gw.http
                    .post(url("signed"))
                    .header("idempotency-key", "k1")
                    .header("x-leadgate-timestamp", now.to_string())
                    .header("x-leadgate-signature", "sha256=00")
                    .json(&lead("x")),
                StatusCode::UNAUTHORIZED,
                "bad_signature",
            ),
            (
                "NUL character in a field",
                gw.http
                    .post(url("site"))
                    .json(&json!({"submission_id": "nul", "name": "a\u{0}b"})),
                StatusCode::BAD_REQUEST,
                "nul_character",
            ),
            (
                "NUL character in a form field",
                gw.http
                    .post(url("tilda"))
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body("tranid=9&Name=a%00b"),
                StatusCode::BAD_REQUEST,
                "nul_character",
            ),
            (
                "zero-width character in key",
                gw.http
                    .post(url("site"))
                    .json(&json!({"submission_id": "12345\u{200b}"})),
                StatusCode::BAD_REQUEST,
                "invalid_key",
            ),
            (
                "bidi override in key",
                gw.http
                    .post(url("site"))
                    .json(&json!({"submission_id": "\u{202e}54321"})),
                StatusCode::BAD_REQUEST,
                "invalid_key",
            ),
            (
                "form value that is not UTF-8",
                gw.http
                    .post(url("tilda"))
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body("tranid=10&Name=%FF"),
                StatusCode::BAD_REQUEST,
                "malformed_body",
            ),
            (
                "too large",
                gw.http
                    .post(url("site"))
                    .json(&json!({"submission_id": "big", "comment": "x".repeat(5000)})),
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
            ),
            (
                "unsupported type",
                gw.http
                    .post(url("site"))
                    .header("content-type", "text/xml")
                    .body("<a/>"),
                StatusCode::BAD_REQUEST,
                "unsupported_media_type",
            ),
        ];
        for (what, req, status, code) in cases {
            let (got, body, _) = send(req).await;
            assert_eq!(got, status, "{what}: {body}");
            assert_eq!(body["error"], code, "{what}: {body}");
            assert!(
                body["message"].as_str().is_some_and(|m| m.len() > 10),
                "{what}: {body}"
            );
        }
        // Tilda's connection check: 200, no operation.
        let (status, _, _) = send(gw.http.post(url("tilda")).form(&[("test", "test")])).await;
        assert_eq!(status, StatusCode::OK);
        // A correctly signed delivery goes through.
        let body = serde_json::to_vec(&lead("sig")).unwrap();
        let sig = leadgate::intake::sources::sign(b"hmac-key", now, &body);
        let (status, b, _) = send(
            gw.http
                .post(url("signed"))
                .header("idempotency-key", "k1")
                .header("x-leadgate-timestamp", now.to_string())
                .header("x-leadgate-signature", sig)
                .header("content-type", json_ct)
                .body(body),
        )
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{b}");
        assert_eq!(b["operation_id"], "signed:k1");
        // A Tilda form delivery is keyed by tranid.
        let (status, b, _) = send(gw.http.post(url("tilda")).form(&[
            ("tranid", "777:1"),
            ("Name", "Olga"),
            ("Phone", "89991234567"),
        ]))
        .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{b}");
        assert_eq!(b["operation_id"], "tilda:777:1");
        let done = gw.wait_status("tilda:777:1", "completed").await;
        let created = gw
            .fake
            .entities()
            .into_iter()
            .find(|e| e.fields["ORIGIN_ID"] == "tilda:777:1")
            .unwrap();
        assert_eq!(
            created.fields["NAME"], "Olga",
            "Tilda's capitalised fields are mapped"
        );
        assert!(done["crm_id"].is_string());
        // Rejections are journaled, and the gateway keeps serving.
        let m = gw
            .store()
            .metrics(leadgate::store::local_now(), Duration::from_secs(60))
            .await
            .unwrap();
        let rejected: i64 = m
            .deliveries
            .iter()
            .filter(|((_, o), _)| o == "rejected")
            .map(|(_, n)| n)
            .sum();
        assert_eq!(rejected, 14);
        // The unknown source name is not a stored source name nor a metric label.
        assert!(
            m.deliveries.keys().all(|(source, _)| source != "nope"),
            "{:?}",
            m.deliveries
        );
        assert_eq!(
            m.deliveries.get(&(
                leadgate::intake::UNKNOWN_SOURCE.to_string(),
                "rejected".to_string()
            )),
            Some(&1)
        );
        let res = gw
            .http
            .get(format!("{}/healthz", gw.base))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let res = gw
            .get(&format!("/v1/operations/{}", urlencode("site:none")))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        let res = gw
            .get(&format!(
                "/v1/operations/{}/timeline",
                urlencode("tilda:777:1")
            ))
            .send()
            .await
            .unwrap();
        let t: Value = res.json().await.unwrap();
        assert_eq!(t["events"][0]["kind"], "delivery");
        gw.stop().await;
    }
);

each_backend!(
    retryable_failures_until_the_attempts_run_out_go_to_review,
    |db| async move {
        let gw = start_without_breaker(&db).await;
        gw.fake.push_fault(
            CREATE,
            Fault::RateLimit {
                retry_after_secs: None,
            },
            100,
        );
        gw.post_json("site", &lead("tired")).await;
        let op = gw.wait_status("site:tired", "needs_review").await;
        assert_eq!(op["review_reason"], "retries_exhausted");
        assert_eq!(op["attempts"], 3, "max_attempts = 3");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(gw.fake.calls(CREATE), 3, "and then no more calls");
        let kinds = gw.timeline_kinds("site:tired").await;
        assert_eq!(kinds.iter().filter(|k| *k == "retry_scheduled").count(), 2);
        gw.stop().await;
    }
);

each_backend!(
    reconciliation_finding_several_or_failing_goes_to_review,
    |db| async move {
        let gw = start_without_breaker(&db).await;
        // Someone already created a lead carrying this key (a duplicate in the CRM); then the
        // gateway's own create answers 500 after executing: the lookup finds two.
        let res = gw
        .http
        .post(format!("{}crm.lead.add.json", gw.fake.webhook_url()))
        .json(&json!({"fields": {"TITLE": "manual", "ORIGINATOR_ID": "leadgate", "ORIGIN_ID": "site:amb"}}))
        .send()
        .await
        .unwrap();
        assert!(res.status().is_success());
        gw.fake.push_fault(CREATE, Fault::ServerErrorAfterCreate, 1);
        gw.post_json("site", &lead("amb")).await;
        let op = gw.wait_status("site:amb", "needs_review").await;
        assert_eq!(op["review_reason"], "ambiguous_match");
        let cases = gw
            .store()
            .cases_of(&"site:amb".parse().unwrap())
            .await
            .unwrap();
        assert_eq!(cases[0].detail["crm_ids"].as_array().unwrap().len(), 2);
        // The create fails uncertainly and every lookup fails too: looked up again after
        // the settle window, then with backoff, until the attempts are used up; then a
        // person decides. Nothing is created again without an answer.
        gw.fake.push_fault(CREATE, Fault::ServerError, 1);
        gw.fake.push_fault("crm.lead.list", Fault::ServerError, 10);
        gw.post_json("site", &lead("blind")).await;
        let op = gw.wait_status("site:blind", "needs_review").await;
        assert_eq!(op["review_reason"], "uncertain_outcome");
        assert_eq!(op["attempts"], 3, "{op}");
        let kinds = gw.timeline_kinds("site:blind").await;
        assert_eq!(
            kinds.iter().filter(|k| *k == "verify_scheduled").count(),
            2,
            "{kinds:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        // The test's own manual create, "amb" and "blind": one each.
        assert_eq!(gw.fake.calls(CREATE), 3, "nothing was re-created");
        gw.stop().await;
    }
);

/// The per-lead attempt limits alone: with three failures in a row and nothing answered in
/// between, the connector would count as unreachable and the lead would wait for its
/// probes instead (tests/it/outage.rs). These tests are about what happens to a lead that
/// keeps failing while the CRM is otherwise there.
async fn start_without_breaker(db: &leadgate_testkit::db::TestDb) -> Gateway {
    Gateway::start_extended(db, "[outage]\nafter_failures = 1000\n").await
}
