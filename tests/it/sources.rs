//! Source presets on recorded-shape deliveries, and cross-channel matching of contact
//! keys (the third kind of repeat), on both backends.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use leadgate::store::{self, HumanAction, Resolve};

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{answer, origin_ids, Gateway, CREATE};

fn sign(secret: &[u8], body: &[u8]) -> (String, String) {
    let now = chrono::Utc::now().timestamp();
    (
        now.to_string(),
        leadgate::intake::sources::sign(secret, now, body),
    )
}

each_backend!(presets_take_recorded_shape_deliveries, |db| async move {
    let gw = Gateway::start(&db).await;
    let url = |s: &str| gw.intake_url(s);
    // Tilda: the connection check, then a form with tranid; Tilda wants a plain `ok`.
    let res = gw
        .http
        .post(url("tilda-preset"))
        .form(&[("test", "test")])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let form = [
        ("Name", "Ольга"),
        ("Phone", "8 (999) 123-45-67"),
        ("Email", "Olga@Example.com"),
        ("tranid", "4937563:2381923"),
        ("formid", "form123"),
    ];
    let res = gw
        .http
        .post(url("tilda-preset"))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.text().await.unwrap(), "ok");
    let op = gw
        .wait_status("tilda-preset:4937563:2381923", "completed")
        .await;
    assert!(op["crm_id"].is_string());
    let stored = gw
        .store()
        .operation(&"tilda-preset:4937563:2381923".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.contact.phone.as_deref(),
        Some("+79991234567"),
        "normalized at intake"
    );
    assert_eq!(stored.contact.email.as_deref(), Some("olga@example.com"));

    // amoCRM webhook: flat form keys; add and status events of one lead stay apart.
    let add = [
        ("leads[add][0][id]", "9774766"),
        ("leads[add][0][status_id]", "142"),
        ("leads[add][0][pipeline_id]", "1"),
        ("account[id]", "29085955"),
        ("account[subdomain]", "acme"),
    ];
    let (s, b, _) = answer(gw.http.post(url("amo")).form(&add).send().await.unwrap()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(b["operation_id"], "amo:leads[add][0][id]:9774766");
    let status = [
        ("leads[status][0][id]", "9774766"),
        ("leads[status][0][status_id]", "143"),
        ("account[id]", "29085955"),
    ];
    let (_, b, _) = answer(gw.http.post(url("amo")).form(&status).send().await.unwrap()).await;
    assert_eq!(b["operation_id"], "amo:leads[status][0][id]:9774766");
    let (s, b, replayed) = answer(gw.http.post(url("amo")).form(&add).send().await.unwrap()).await;
    assert_eq!(
        (s, replayed),
        (StatusCode::OK, true),
        "amoCRM's redelivery is a duplicate: {b}"
    );

    // Bitrix24 event: keyed by event, id and ts; the application token is checked and
    // the auth fields do not count in the fingerprint.
    let event = |token: &'static str, access: &'static str| {
        [
            ("event", "ONCRMLEADADD"),
            ("event_handler_id", "3"),
            ("data[FIELDS][ID]", "271"),
            ("ts", "1732960000"),
            ("auth[domain]", "acme.bitrix24.ru"),
            ("auth[access_token]", access),
            ("auth[application_token]", token),
        ]
    };
    let (s, b, _) = answer(
        gw.http
            .post(url("b24"))
            .form(&event("wrong", "a1"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{b}");
    let (s, b, _) = answer(
        gw.http
            .post(url("b24"))
            .form(&event("app-token-1", "a1"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(b["operation_id"], "b24:ONCRMLEADADD:271:1732960000");
    let (s, b, _) = answer(
        gw.http
            .post(url("b24"))
            .form(&event("app-token-1", "a2"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, b["outcome"].as_str()),
        (StatusCode::OK, Some("duplicate")),
        "{b}"
    );

    // Generic JSON: Idempotency-Key header and an HMAC signature.
    let body = serde_json::to_vec(&json!({"name": "Ivan", "phone": "+7 999 765-43-21"})).unwrap();
    let send = |(ts, sig): (String, String)| {
        gw.http
            .post(url("json"))
            .header("content-type", "application/json")
            .header("Idempotency-Key", "order-77")
            .header("X-Leadgate-Timestamp", ts)
            .header("X-Leadgate-Signature", sig)
            .body(body.clone())
    };
    let (ts, _) = sign(b"json-secret", &body);
    let (s, _, _) = answer(send((ts, "sha256=00".into())).send().await.unwrap()).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, b, _) = answer(send(sign(b"json-secret", &body)).send().await.unwrap()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(b["operation_id"], "json:order-77");
    gw.stop().await;
});

each_backend!(each_matching_rule, |db| async move {
    let gw = Gateway::start(&db).await;
    // A form lead, then the same person calls and writes, with the phone written
    // differently each time.
    gw.post_json(
        "site",
        &json!({"submission_id": "f1", "name": "Ivan", "phone": "8 (999) 123-45-67"}),
    )
    .await;
    let form = gw.wait_status("site:f1", "completed").await;

    // create (site's default): a new CRM entity; the match is noted on the timeline.
    gw.post_json(
        "site",
        &json!({"submission_id": "f2", "name": "Ivan", "phone": "+7 999 1234567"}),
    )
    .await;
    let f2 = gw.wait_status("site:f2", "completed").await;
    assert_ne!(f2["crm_id"], form["crm_id"]);
    let t = gw
        .store()
        .timeline(&"site:f2".parse().unwrap())
        .await
        .unwrap();
    let m = t
        .iter()
        .find(|e| e.kind == "contact_match")
        .expect("match noted");
    assert_eq!(m.detail["rule"], "create");
    assert_eq!(m.detail["matches"][0]["operation_id"], "site:f1");

    // link: the call completes with the form's crm_id; the CRM is not called.
    let (_, b, _) = gw
        .post_json("calls", &json!({"call_id": "c1", "phone": "89991234567"}))
        .await;
    assert_eq!(b["status"], "completed", "{b}");
    let call = gw.operation("calls:c1").await;
    assert_eq!(
        call["crm_id"], f2["crm_id"],
        "the most recent matching operation's entity"
    );
    let linked = gw
        .store()
        .operation(&"calls:c1".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(linked.crm_link.as_deref(), Some("linked"));

    // review: the chat message waits for a manager.
    let (_, b, _) = gw
        .post_json(
            "chat",
            &json!({"message_id": "m1", "phone": "+79991234567"}),
        )
        .await;
    assert_eq!(b["status"], "needs_review", "{b}");
    let (_, b, _) = gw
        .post_json(
            "chat",
            &json!({"message_id": "m2", "email": "nobody@example.com"}),
        )
        .await;
    assert_eq!(b["status"], "received", "no match, no review: {b}");
    let before = gw.fake.calls(CREATE);

    // The manager links m1 to the form's entity ...
    let store = gw.store();
    let case = store
        .cases_of(&"chat:m1".parse().unwrap())
        .await
        .unwrap()
        .remove(0);
    assert_eq!(case.reason.as_str(), "cross_channel_match");
    assert_eq!(case.detail["matches"].as_array().unwrap().len(), 3);
    let crm_id = form["crm_id"].as_str().unwrap().to_owned();
    let done = store
        .resolve(Resolve {
            case_id: case.id,
            expected_version: case.version,
            actor: "manager".into(),
            comment: Some("same client, called after the form".into()),
            action: HumanAction::LinkExisting {
                crm_id: crm_id.clone(),
            },
            now: store::local_now(),
            bulk: None,
        })
        .await
        .unwrap();
    assert_eq!(done.operation.crm_id.as_deref(), Some(crm_id.as_str()));
    // ... and decides that m3 is a new request after all.
    gw.post_json(
        "chat",
        &json!({"message_id": "m3", "phone": "8 999 123 45 67"}),
    )
    .await;
    let case = store
        .cases_of(&"chat:m3".parse().unwrap())
        .await
        .unwrap()
        .remove(0);
    store
        .resolve(Resolve {
            case_id: case.id,
            expected_version: case.version,
            actor: "manager".into(),
            comment: None,
            action: HumanAction::CreateNew,
            now: store::local_now(),
            bulk: None,
        })
        .await
        .unwrap();
    gw.wait_status("chat:m3", "completed").await;
    gw.wait_status("chat:m2", "completed").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        gw.fake.calls(CREATE) - before,
        2,
        "m2 and m3 created; m1 and c1 did not call the CRM"
    );
    let mut ids = origin_ids(&gw.fake);
    ids.sort();
    assert_eq!(ids, ["chat:m2", "chat:m3", "site:f1", "site:f2"]);
    gw.stop().await;
});

each_backend!(
    bitrix24_event_credentials_are_never_stored,
    |db| async move {
        // An outgoing Bitrix24 event carries the portal's access token and the app's
        // token: casework (sales-ops, managers) reads the journal and the payload, so
        // neither may be stored, of an accepted delivery nor of a refused one; a
        // stranger's refused request keeps no body at all.
        let gw = Gateway::start(&db).await;
        let event = |token: &'static str, access: &'static str| {
            [
                ("event", "ONCRMLEADADD"),
                ("data[FIELDS][ID]", "272"),
                ("ts", "1732960001"),
                ("auth[domain]", "acme.bitrix24.ru"),
                ("auth[access_token]", access),
                ("auth[refresh_token]", "refresh-SECRET-3"),
                ("auth[application_token]", token),
            ]
        };
        let send = |form: [(&'static str, &'static str); 7]| {
            let req = gw.http.post(gw.intake_url("b24")).form(&form);
            async move { answer(req.send().await.unwrap()).await }
        };
        let (s, b, _) = send(event("app-token-1", "access-SECRET-1")).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        // A rotated access token: the same event, a duplicate (the fingerprint leaves
        // out what is never stored).
        let (s, b, _) = send(event("app-token-1", "access-SECRET-2")).await;
        assert_eq!(
            (s, b["outcome"].as_str()),
            (StatusCode::OK, Some("duplicate")),
            "{b}"
        );
        // Authenticated but unusable (no event id): refused, journaled without secrets.
        let mut no_id = event("app-token-1", "access-SECRET-4");
        no_id[1] = ("data[FIELDS][NAME]", "x");
        let (s, b, _) = send(no_id).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
        // A stranger with a wrong token: refused, no body kept.
        let (s, b, _) = send(event("wrong-token", "access-SECRET-5")).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{b}");

        // The journaled bytes as text (PostgreSQL's bytea would cast to hex).
        let body = match db.backend {
            leadgate_testkit::Backend::Sqlite => "cast(raw_body as text)",
            leadgate_testkit::Backend::Postgres => "convert_from(raw_body, 'UTF8')",
        };
        let stored = db
            .texts(&format!(
                "select coalesce({body}, '') || ' ' || coalesce(reject_reason, '') \
                 from deliveries where source = 'b24' order by id"
            ))
            .await;
        let payloads = db
            .texts("select cast(payload as text) from operations where source = 'b24'")
            .await;
        assert_eq!((stored.len(), payloads.len()), (4, 1), "{stored:?}");
        for text in stored.iter().chain(&payloads) {
            for secret in ["SECRET", "app-token-1", "wrong-token"] {
                assert!(!text.contains(secret), "{secret} stored: {text}");
            }
        }
        assert!(payloads[0].contains("[redacted]"), "{}", payloads[0]);
        assert!(
            stored[0].contains("acme.bitrix24.ru"),
            "the rest is kept: {}",
            stored[0]
        );
        assert!(
            stored[3].contains("body not kept") && stored[3].contains("sha256"),
            "{}",
            stored[3]
        );
        gw.stop().await;
    }
);
