//! Nobody gets in without credentials: every intake source authenticates its senders,
//! the admin surface (claim API, operation reads, `/metrics`) wants a bearer token, and
//! a configuration that would let anyone in is refused at start. Real HTTP, both
//! backends.

use std::process::Stdio;
use std::time::{Duration, Instant};

use leadgate::config::Config;
use leadgate_fakes::bitrix24::FakeBitrix24;
use reqwest::StatusCode;
use serde_json::json;

use crate::process::leadgate;
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{
    answer, config_toml, lead, urlencode, Gateway, CREATE, INTEGRATION_TOKEN, READ_TOKEN,
};

/// Every admin endpoint, the scope it needs, and a request body where it takes one.
fn admin_endpoints() -> Vec<(reqwest::Method, String, bool)> {
    let id = urlencode("site:x");
    vec![
        (reqwest::Method::POST, "/v1/operations".into(), true),
        (
            reqwest::Method::POST,
            format!("/v1/operations/{id}/complete"),
            true,
        ),
        (
            reqwest::Method::POST,
            format!("/v1/operations/{id}/fail"),
            true,
        ),
        (reqwest::Method::GET, format!("/v1/operations/{id}"), false),
        (
            reqwest::Method::GET,
            format!("/v1/operations/{id}/timeline"),
            false,
        ),
        (reqwest::Method::GET, "/metrics".into(), false),
    ]
}

async fn call(
    gw: &Gateway,
    method: &reqwest::Method,
    path: &str,
    bearer: Option<&str>,
) -> reqwest::Response {
    let mut req = gw
        .http
        .request(method.clone(), format!("{}{path}", gw.base))
        .header("Idempotency-Key", "admin-probe")
        .json(&json!({"crm_id": "1", "lease_token": "t", "class": "auth", "error": "x"}));
    if let Some(b) = bearer {
        req = req.bearer_auth(b);
    }
    req.send().await.unwrap()
}

each_backend!(
    the_admin_surface_answers_401_without_its_token,
    |db| async move {
        let gw = Gateway::start(&db).await;
        for (method, path, integration) in admin_endpoints() {
            for bearer in [None, Some("wrong"), Some(""), Some("test-read-token-")] {
                let res = call(&gw, &method, &path, bearer).await;
                assert_eq!(
                    res.headers()
                        .get("www-authenticate")
                        .map(|v| v.to_str().unwrap()),
                    Some("Bearer"),
                    "{method} {path} with {bearer:?}"
                );
                let (s, b, _) = answer(res).await;
                assert_eq!(
                    s,
                    StatusCode::UNAUTHORIZED,
                    "{method} {path} with {bearer:?}: {b}"
                );
                assert_eq!(b["error"], "unauthorized");
            }
            // The read token opens reads, not the claim API.
            let s = call(&gw, &method, &path, Some(READ_TOKEN)).await.status();
            if integration {
                assert_eq!(
                    s,
                    StatusCode::UNAUTHORIZED,
                    "{method} {path} with the read token"
                );
            } else {
                assert_ne!(
                    s,
                    StatusCode::UNAUTHORIZED,
                    "{method} {path} with the read token"
                );
            }
            // The integration token opens everything.
            let s = call(&gw, &method, &path, Some(INTEGRATION_TOKEN))
                .await
                .status();
            assert_ne!(s, StatusCode::UNAUTHORIZED, "{method} {path}: {s}");
        }
        // Not with another scheme either.
        let res = gw
            .http
            .get(format!("{}/metrics", gw.base))
            .basic_auth("x", Some(READ_TOKEN))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        // Nobody without the integration token claimed anything or paused the connector.
        let store = gw.store();
        assert!(store
            .operation(&"n8n:admin-probe".parse().unwrap())
            .await
            .unwrap()
            .is_some_and(|op| op.status.as_str() == "in_progress"));
        assert!(store.connectors().await.unwrap().iter().all(|c| !c.paused));
        // Health stays open: it says nothing about operations.
        let res = gw
            .http
            .get(format!("{}/healthz", gw.base))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        gw.stop().await;
    }
);

each_backend!(
    without_api_tokens_the_admin_surface_is_closed,
    |db| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let toml = config_toml(&db.url, &fake.webhook_url())
            .replace(&format!("integration_token = \"{INTEGRATION_TOKEN}\""), "")
            .replace(&format!("read_token = \"{READ_TOKEN}\""), "");
        let config = Config::parse(&toml).unwrap();
        assert!(config.api.integration_token.is_none() && config.api.read_token.is_none());
        let gw = Gateway::start_with(fake, config).await;
        // Intake still works...
        let (s, b, _) = gw.post_json("site", &lead("open-1")).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        // ...but no token opens anything else.
        for (method, path, _) in admin_endpoints() {
            for bearer in [None, Some(INTEGRATION_TOKEN), Some(READ_TOKEN), Some("")] {
                let s = call(&gw, &method, &path, bearer).await.status();
                assert_eq!(
                    s,
                    StatusCode::UNAUTHORIZED,
                    "{method} {path} with {bearer:?}"
                );
            }
        }
        gw.stop().await;
    }
);

each_backend!(
    an_unauthenticated_sender_cannot_take_a_real_leads_key,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let intake = format!("{}/v1/intake/tilda-preset", gw.base);
        let real = [
            ("tranid", "555:1"),
            ("Name", "Olga"),
            ("Phone", "89991234567"),
        ];
        let forged = [("tranid", "555:1"), ("Name", "Mallory")];
        // Tilda's tranid is guessable: an attacker posts it first, without or with a wrong
        // token, in the URL or the header.
        for req in [
            gw.http.post(&intake),
            gw.http.post(format!("{intake}?token=guess")),
            gw.http.post(&intake).header("x-leadgate-token", "guess"),
            gw.http
                .post(format!("{intake}?token="))
                .header("x-leadgate-token", ""),
        ] {
            let (s, b, _) = answer(req.form(&forged).send().await.unwrap()).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{b}");
            assert!(
                ["missing_token", "bad_token"].contains(&b["error"].as_str().unwrap()),
                "{b}"
            );
        }
        // The refusals are journaled (a misconfigured sender can be found), but no
        // operation exists.
        let store = gw.store();
        let id = "tilda-preset:555:1".parse().unwrap();
        assert!(store.operation(&id).await.unwrap().is_none());
        let m = store
            .metrics(leadgate::store::local_now(), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            m.deliveries
                .get(&("tilda-preset".to_string(), "rejected".to_string())),
            Some(&4)
        );
        // The real lead, with the token in the URL (Tilda) or a header, is new, not a
        // payload conflict.
        let res = gw
            .http
            .post(gw.intake_url("tilda-preset"))
            .form(&real)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let op = gw.wait_status("tilda-preset:555:1", "completed").await;
        assert_eq!(op["review_reason"], serde_json::Value::Null);
        let res = gw
            .http
            .post(&intake)
            .header("x-leadgate-token", "tilda-preset-token")
            .form(&real)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "a repeat, header token");
        assert_eq!(gw.fake.calls(CREATE), 1);
        // amoCRM webhooks too.
        let add = [("leads[add][0][id]", "1"), ("account[id]", "2")];
        let res = gw
            .http
            .post(format!("{}/v1/intake/amo", gw.base))
            .form(&add)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        gw.stop().await;
    }
);

each_backend!(
    signed_sources_take_both_secrets_while_rotating_and_refuse_old_signatures,
    |db| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let toml = config_toml(&db.url, &fake.webhook_url()).replace(
            "secret = \"hmac-key\"",
            "secret = \"hmac-key-2\"\nprevious_secret = \"hmac-key\"\nreplay_window = \"60s\"",
        );
        let gw = Gateway::start_with(fake, Config::parse(&toml).unwrap()).await;
        let send = |key: &'static [u8], ts: i64, id: &'static str| {
            let body = serde_json::to_vec(&lead(id)).unwrap();
            gw.http
                .post(format!("{}/v1/intake/signed", gw.base))
                .header("content-type", "application/json")
                .header("idempotency-key", id)
                .header("x-leadgate-timestamp", ts.to_string())
                .header(
                    "x-leadgate-signature",
                    leadgate::intake::sources::sign(key, ts, &body),
                )
                .body(body)
        };
        let now = chrono::Utc::now().timestamp();
        for (key, id) in [(&b"hmac-key-2"[..], "r1"), (b"hmac-key", "r2")] {
            let (s, b, _) = answer(send(key, now, id).send().await.unwrap()).await;
            assert_eq!(s, StatusCode::ACCEPTED, "{b}");
        }
        let (s, b, _) = answer(send(b"hmac-key-0", now, "r3").send().await.unwrap()).await;
        assert_eq!(
            (s, b["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("bad_signature"))
        );
        // A captured delivery sent again within the window under another key: the
        // signature does not cover the key header, so it is refused, not a new lead; under
        // its own key it is the duplicate it always was.
        let body = serde_json::to_vec(&lead("r1")).unwrap();
        let sig = leadgate::intake::sources::sign(b"hmac-key-2", now, &body);
        let replay = |key: &str| {
            gw.http
                .post(format!("{}/v1/intake/signed", gw.base))
                .header("content-type", "application/json")
                .header("idempotency-key", key)
                .header("x-leadgate-timestamp", now.to_string())
                .header("x-leadgate-signature", sig.clone())
                .body(body.clone())
        };
        let (s, b, _) = answer(replay("r1-again").send().await.unwrap()).await;
        assert_eq!(
            (s, b["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("signature_replayed")),
            "{b}"
        );
        // The same signature written in upper case is the same signature.
        let upper = gw
            .http
            .post(format!("{}/v1/intake/signed", gw.base))
            .header("content-type", "application/json")
            .header("idempotency-key", "r1-upper")
            .header("x-leadgate-timestamp", now.to_string())
            .header(
                "x-leadgate-signature",
                format!(
                    " sha256={} ",
                    sig.trim_start_matches("sha256=").to_uppercase()
                ),
            )
            .body(body.clone());
        let (s, b, _) = answer(upper.send().await.unwrap()).await;
        assert_eq!(
            (s, b["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("signature_replayed")),
            "{b}"
        );
        let (s, b, replayed) = answer(replay("r1").send().await.unwrap()).await;
        assert_eq!((s, replayed), (StatusCode::OK, true), "{b}");
        assert!(gw
            .store()
            .operation(&leadgate::domain::OperationId::new("signed", "r1-again").unwrap())
            .await
            .unwrap()
            .is_none());
        // A captured delivery replayed after the window: refused, signature and all.
        let (s, b, _) = answer(send(b"hmac-key-2", now - 120, "r4").send().await.unwrap()).await;
        assert_eq!(
            (s, b["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("signature_expired"))
        );
        gw.stop().await;
    }
);

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn serve_refuses_a_source_without_authentication_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}?mode=rwc", dir.path().join("x.db").display());
    let base = format!(
        "[database]\nurl = \"{db}\"\n[server]\nlisten = \"127.0.0.1:0\"\n\
         [crm]\nkind = \"bitrix24\"\nwebhook_url = \"http://127.0.0.1:9/rest/1/s/\"\n"
    );
    for (source, needle) in [
        (
            "[[source]]\nname = \"webform\"\nkey = \"json:/id\"\n",
            "source `webform` has no authentication",
        ),
        (
            "[[source]]\nname = \"tilda\"\npreset = \"tilda\"\n",
            "source `tilda` has no authentication",
        ),
        (
            "[[source]]\nname = \"t\"\npreset = \"tilda\"\ntoken = \"\"\n",
            "source `t`: token is empty",
        ),
    ] {
        let config = write(dir.path(), "bad.toml", &format!("{base}{source}"));
        let out = leadgate(&["serve", "--config", &config]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{source}: started anyway");
        assert!(stderr.contains(needle), "{source}: {stderr}");
    }
    assert!(
        !dir.path().join("x.db").exists(),
        "refused before touching the database"
    );
}

#[test]
fn auth_none_is_logged_as_a_warning_at_every_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}?mode=rwc", dir.path().join("x.db").display());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = write(
        dir.path(),
        "open.toml",
        &format!(
            "[database]\nurl = \"{db}\"\n[server]\nlisten = \"127.0.0.1:{port}\"\n\
             [[source]]\nname = \"lan-form\"\nkey = \"json:/id\"\nauth = \"none\"\n\
             [crm]\nkind = \"bitrix24\"\nwebhook_url = \"http://127.0.0.1:9/rest/1/s/\"\n"
        ),
    );
    for start in 0..2 {
        let log = dir.path().join(format!("serve-{start}.log"));
        let mut child = leadgate(&["serve", "--config", &config])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "serve did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("WARN") && text.contains("lan-form") && text.contains("auth = \"none\""),
            "start {start}: {text}"
        );
    }
}

each_backend!(
    a_bitrix24_answer_with_an_absurd_reset_time_does_not_kill_the_worker,
    |db| async move {
        use axum::routing::post;
        // A portal that answers the first lead's create with QUERY_LIMIT_EXCEEDED and
        // `operating_reset_at: 1e20` (found in review: Duration::from_secs_f64 panicked
        // and the claim loop died for good), and creates everything else.
        let app = axum::Router::new().route(
            "/rest/1/hook/{method}",
            post(|axum::extract::Path(method): axum::extract::Path<String>, body: String| async move {
                if body.contains("poison") {
                    (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        r#"{"error":"QUERY_LIMIT_EXCEEDED","error_description":"slow down","time":{"operating_reset_at":1e20}}"#,
                    )
                } else if method.starts_with("batch") {
                    // A batch of one create (the worker drains in batches).
                    (
                        axum::http::StatusCode::OK,
                        r#"{"result":{"result":{"c00":4242},"result_error":[]}}"#,
                    )
                } else {
                    (axum::http::StatusCode::OK, r#"{"result":4242}"#)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hook = format!("http://{}/rest/1/hook/", listener.local_addr().unwrap());
        let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        // One claim loop only: if it died, nothing else would be processed.
        let toml = config_toml(&db.url, &hook).replace("concurrency = 4", "concurrency = 1");
        let gw = Gateway::start_with(fake, Config::parse(&toml).unwrap()).await;
        let mut poison = lead("poison-1");
        poison["comment"] = json!("poison");
        gw.post_json("site", &poison).await;
        let op = gw
            .wait_for("site:poison-1", "the rate limit to be recorded", |op| {
                op["attempts"] == 1 && op["status"] == "received"
            })
            .await;
        assert!(
            op["last_error"]
                .as_str()
                .unwrap_or("")
                .contains("slow down"),
            "{op}"
        );
        let stored = gw
            .store()
            .operation(&"site:poison-1".parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        let wait = stored.next_attempt_at.unwrap() - leadgate::store::local_now();
        assert!(
            wait > chrono::TimeDelta::minutes(30) && wait <= chrono::TimeDelta::minutes(61),
            "the wait is capped at an hour: {wait}"
        );
        // The same loop goes on with the next lead.
        gw.post_json("site", &lead("later-1")).await;
        let done = gw.wait_status("site:later-1", "completed").await;
        assert_eq!(done["crm_id"], "4242");
        gw.stop().await;
        server.abort();
    }
);

#[tokio::test]
async fn a_new_sqlite_database_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.db");
    let store = leadgate::store::connect(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .unwrap();
    store.ping().await.unwrap();
    for file in ["ops.db", "ops.db-wal", "ops.db-shm"] {
        let p = dir.path().join(file);
        if file == "ops.db" || p.exists() {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{file}: {mode:o}");
        }
    }
}
