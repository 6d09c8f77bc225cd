//! The pilot scenarios of docs/SPEC.md against the fake amoCRM, end to end on both backends:
//! real HTTP into the intake, a real worker, and the fake account over real HTTP.
//!
//! The difference to Bitrix24 is the lookup: amoCRM's search may lag behind a create,
//! so "not found" is not proof and an uncertain create that the search does not show
//! goes to a person (`needs_review` / `uncertain_outcome`) instead of being re-created.

use std::time::Duration;

use leadgate::app::{self, Mode};
use leadgate::config::Config;
use leadgate::store::CrmToken;
use leadgate_fakes::amocrm::{FakeAmoCrm, Fault, CONTACT_UPDATE, CREATE, FIELD_ID, SEARCH, TOKEN};
use reqwest::StatusCode;
use serde_json::{json, Value};

use leadgate_testkit::each_backend;
use leadgate_testkit::TestDb;

pub(crate) fn config_toml(db_url: &str, fake: &FakeAmoCrm) -> String {
    format!(
        r#"
[database]
url = "{db_url}"

[server]
listen = "127.0.0.1:0"

[worker]
poll_interval = "20ms"
lease = "2s"
concurrency = 4

[retry]
max_attempts = 3
base_delay = "20ms"
max_delay = "100ms"

[[source]]
name = "site"
key = "json:/submission_id"
ignore = ["/sent_at"]
event_time = "json:/created_at"
token = "site-token"

[api]
integration_token = "{integration}"
read_token = "{read}"

[crm]
kind = "amocrm"
base_url = "{base}"
token = "{token}"
operation_field_id = {FIELD_ID}
rate_limit = 200
timeout = "500ms"
settle = "300ms"
"#,
        base = fake.base_url(),
        token = fake.token(),
        integration = leadgate_testkit::gateway::INTEGRATION_TOKEN,
        read = leadgate_testkit::gateway::READ_TOKEN,
    )
}

type Gateway = leadgate_testkit::gateway::Gateway<FakeAmoCrm>;

async fn start(db: &TestDb) -> Gateway {
    let fake = FakeAmoCrm::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let config = Config::parse(&config_toml(&db.url, &fake)).unwrap();
    Gateway::start_with(fake, config).await
}

fn lead(id: &str) -> Value {
    json!({"submission_id": id, "name": "Ivan", "phone": "+7 999 123-45-67", "email": "ivan@example.com",
           "sent_at": "2026-11-30T10:00:00Z"})
}

/// The operation_id in each fake lead's key field, by lead id.
fn keys(fake: &FakeAmoCrm) -> Vec<String> {
    fake.leads()
        .iter()
        .map(|l| {
            l["custom_fields_values"][0]["values"][0]["value"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

each_backend!(
    amocrm_pilot_1_a_webhook_delivered_twice_makes_one_crm_record,
    |db| async move {
        let gw = start(&db).await;
        let (status, body, replayed) = gw.post_json("site", &lead("s1")).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert!(!replayed);
        let done = gw.wait_status("site:s1", "completed").await;
        let mut again = lead("s1");
        again["sent_at"] = json!("2026-11-30T10:05:00Z");
        let (status, body, replayed) = gw.post_json("site", &again).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["outcome"], "duplicate");
        assert_eq!(body["crm_id"], done["crm_id"]);
        assert!(replayed);
        assert_eq!(gw.fake.calls(CREATE), 1);
        assert_eq!(keys(&gw.fake), ["site:s1"]);
        let l = &gw.fake.leads()[0];
        assert_eq!(l["_embedded"]["tags"][0]["name"], "site:s1");
        assert_eq!(gw.fake.contacts()[0]["first_name"], "Ivan");
        gw.stop().await;
    }
);

each_backend!(
    amocrm_pilot_2_the_crm_created_but_the_answer_was_lost,
    |db| async move {
        let gw = start(&db).await;
        // The search shows the lead: recovered by the exact key, not created again.
        for (key, fault) in [
            ("hang", Fault::LostAnswerHang),
            ("drop", Fault::LostAnswerDrop),
            ("after500", Fault::ServerErrorAfterCreate),
        ] {
            gw.fake.push_fault(CREATE, fault, 1);
            gw.post_json("site", &lead(key)).await;
            let id = format!("site:{key}");
            let op = gw.wait_status(&id, "completed").await;
            assert_eq!(op["attempts"], 1, "{op}");
            let kinds = gw.timeline_kinds(&id).await;
            assert!(kinds.iter().any(|k| k == "reconciliation"), "{kinds:?}");
            assert!(kinds.iter().any(|k| k == "recovered"), "{kinds:?}");
        }
        assert_eq!(gw.fake.calls(CREATE), 3, "no create was repeated");

        // The search lags: the lead exists but is not found yet, neither at once nor
        // after the settle window. Not authoritative, so a person decides; nothing is
        // created again.
        gw.fake.set_search_lag(Duration::from_secs(60));
        gw.fake.push_fault(CREATE, Fault::LostAnswerDrop, 1);
        gw.post_json("site", &lead("lagged")).await;
        let op = gw.wait_status("site:lagged", "needs_review").await;
        assert_eq!(op["review_reason"], "uncertain_outcome", "{op}");
        assert_eq!(
            op["attempts"], 2,
            "the create, then the lookup after the window"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(gw.fake.calls(CREATE), 4);
        assert_eq!(
            keys(&gw.fake)
                .iter()
                .filter(|k| *k == "site:lagged")
                .count(),
            1
        );
        let timeline = gw
            .store()
            .timeline(&"site:lagged".parse().unwrap())
            .await
            .unwrap();
        let verdicts: Vec<_> = timeline
            .iter()
            .filter(|e| e.kind == "reconciliation")
            .collect();
        assert_eq!(verdicts.len(), 2, "at once, and after the settle window");
        for v in verdicts {
            assert_eq!(v.detail["verdict"], "not_found");
            assert_eq!(v.detail["authoritative"], false);
        }

        // A 500 that did not execute looks the same from outside: review, not a blind retry.
        gw.fake.set_search_lag(Duration::ZERO);
        gw.fake.push_fault(CREATE, Fault::ServerError, 1);
        gw.post_json("site", &lead("plain500")).await;
        let op = gw.wait_status("site:plain500", "needs_review").await;
        assert_eq!(op["review_reason"], "uncertain_outcome");
        assert!(!keys(&gw.fake).contains(&"site:plain500".to_owned()));
        assert!(gw.fake.calls(SEARCH) >= 5);
        gw.stop().await;
    }
);

each_backend!(
    amocrm_pilot_3_two_workers_get_the_same_leads_at_once,
    |db| async move {
        let gw = start(&db).await;
        let other = app::start(&gw.config, Mode::Worker).await.unwrap();
        gw.fake.push_fault(CREATE, Fault::LatencyMs { ms: 30 }, 30);
        for i in 0..30 {
            gw.post_json("site", &lead(&format!("w{i}"))).await;
        }
        for i in 0..30 {
            gw.wait_status(&format!("site:w{i}"), "completed").await;
        }
        let mut ids = keys(&gw.fake);
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 30);
        assert_eq!(
            gw.fake.leads().len(),
            30,
            "each operation created exactly once"
        );
        // Drained in batches: never more requests than leads.
        assert!(gw.fake.calls(CREATE) <= 30, "{}", gw.fake.calls(CREATE));
        other.stop().await;
        gw.stop().await;
    }
);

each_backend!(
    amocrm_pilot_4_a_workflow_restarted_after_the_create_gets_the_saved_crm_id,
    |db| async move {
        let mut gw = start(&db).await;
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
    amocrm_pilot_5_a_validation_error_is_not_retried_and_the_reason_is_kept,
    |db| async move {
        let gw = start(&db).await;
        gw.fake.push_fault(CREATE, Fault::Validation, 1);
        gw.post_json("site", &lead("v1")).await;
        let op = gw.wait_status("site:v1", "failed_terminal").await;
        let err = op["last_error"].as_str().unwrap();
        assert!(err.contains("NotSupportedChoice"), "{err}");
        assert!(err.contains("HTTP 400"), "{err}");
        assert!(!err.contains(gw.fake.token()), "{err}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(gw.fake.calls(CREATE), 1, "no automatic retry");
        assert_eq!(gw.operation("site:v1").await["attempts"], 1);
        gw.stop().await;
    }
);

each_backend!(
    amocrm_pilot_6_a_blocked_account_pauses_without_a_loop_and_loses_nothing,
    |db| async move {
        let gw = start(&db).await;
        // Repeated rate abuse: every call answers 403 with an nginx page.
        gw.fake.push_fault("*", Fault::Blocked, 1000);
        for i in 0..3 {
            gw.post_json("site", &lead(&format!("a{i}"))).await;
        }
        gw.wait_paused_and_idle("amocrm").await;
        let store = gw.store();
        let calls = gw.fake.calls(CREATE);
        assert!((1..=4).contains(&calls), "{calls} calls");
        let (status, _, _) = gw.post_json("site", &lead("a3")).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(gw.fake.calls(CREATE), calls, "no calls while paused");
        for i in 0..4 {
            assert_eq!(
                gw.operation(&format!("site:a{i}")).await["status"],
                "received"
            );
        }
        let op = gw.operation("site:a0").await;
        let err = op["last_error"].as_str().unwrap_or_default();
        assert!(err.is_empty() || err.contains("403"), "{err}");
        // The block is lifted; a person resumes the connector and nothing was lost.
        gw.fake.reset();
        assert!(store
            .resume_connector("amocrm", "anna", leadgate::store::local_now())
            .await
            .unwrap());
        for i in 0..4 {
            gw.wait_status(&format!("site:a{i}"), "completed").await;
        }
        assert_eq!(keys(&gw.fake).len(), 4);
        gw.stop().await;
    }
);

each_backend!(
    amocrm_pilot_7_changed_data_under_the_same_key_goes_to_review,
    |db| async move {
        let gw = start(&db).await;
        let store = gw.store();
        store
            .pause_connector("amocrm", "test hold", "test", leadgate::store::local_now())
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
            .resume_connector("amocrm", "test", leadgate::store::local_now())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let op = gw.operation("site:c1").await;
        assert_eq!(op["status"], "needs_review");
        assert_eq!(op["review_reason"], "payload_conflict");
        assert_eq!(gw.fake.calls(CREATE), 0, "nothing reached the CRM");
        gw.stop().await;
    }
);

each_backend!(
    amocrm_pilot_8_a_repeat_after_purge_returns_the_first_crm_id,
    |db| async move {
        let gw = start(&db).await;
        gw.post_json("site", &lead("old")).await;
        let done = gw.wait_status("site:old", "completed").await;
        let store = gw.store();
        let cutoff = leadgate::store::local_now() + chrono::TimeDelta::seconds(1);
        let purged = leadgate::store::purge(store.as_ref(), cutoff, 50)
            .await
            .unwrap();
        assert_eq!(purged.operations, 1);
        let (status, body, replayed) = gw.post_json("site", &lead("old")).await;
        assert_eq!((status, replayed), (StatusCode::OK, true));
        assert_eq!(body["crm_id"], done["crm_id"]);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            gw.fake.calls(CREATE),
            1,
            "the tombstone answered; amoCRM heard nothing"
        );
        // An unknown key from beyond the tombstone horizon goes to a person.
        let mut late = lead("ancient");
        late["created_at"] = json!("2024-01-01T00:00:00Z");
        let (_, body, _) = gw.post_json("site", &late).await;
        assert_eq!(body["status"], "needs_review");
        assert_eq!(
            gw.operation("site:ancient").await["review_reason"],
            "late_duplicate"
        );
        gw.stop().await;
    }
);

each_backend!(
    amocrm_oauth_a_lead_completes_across_an_access_token_expiry,
    |db| async move {
        let config = leadgate_fakes::amocrm::FakeConfig {
            access_ttl_secs: 1,
            ..Default::default()
        };
        let fake = FakeAmoCrm::spawn_with("127.0.0.1:0".parse().unwrap(), config)
            .await
            .unwrap();
        let (client_id, client_secret, redirect_uri) = fake.oauth_client();
        let long_lived = format!("token = \"{}\"\n", fake.token());
        // The key the tokens are sealed with in crm_tokens, in a key file.
        let keys_dir = tempfile::tempdir().unwrap();
        let key_file = keys_dir.path().join("token.key");
        std::fs::write(&key_file, "5a".repeat(32)).unwrap();
        let oauth = format!(
            "client_id = \"{client_id}\"\nclient_secret = \"{client_secret}\"\n\
             redirect_uri = \"{redirect_uri}\"\nrefresh_token = \"{}\"\n\
             token_key_file = \"{}\"\n",
            fake.initial_refresh_token(),
            key_file.display()
        );
        let toml = config_toml(&db.url, &fake).replace(&long_lived, &oauth);
        assert!(toml.contains("client_secret"), "{toml}");
        // Without a key, OAuth is refused at start.
        let no_key = Config::parse(&toml.replace(
            &format!("token_key_file = \"{}\"\n", key_file.display()),
            "",
        ))
        .unwrap();
        if std::env::var(leadgate::crm::vault::KEY_ENV).is_err() {
            let err = leadgate::app::start(&no_key, leadgate::app::Mode::Serve)
                .await
                .err()
                .expect("OAuth without a token key must not start");
            assert!(format!("{err:#}").contains("LEADGATE_TOKEN_KEY"), "{err:#}");
        }
        let gw = Gateway::start_with(fake, Config::parse(&toml).unwrap()).await;
        gw.post_json("site", &lead("t1")).await;
        gw.wait_status("site:t1", "completed").await;
        assert_eq!(gw.fake.calls(TOKEN), 1);
        // The access token expires; the next lead refreshes it and completes.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        gw.post_json("site", &lead("t2")).await;
        let op = gw.wait_status("site:t2", "completed").await;
        assert_eq!(op["attempts"], 1, "{op}");
        assert!(gw.fake.calls(TOKEN) >= 2);
        // At rest the row holds ciphertext only; with the key it opens to the current pair.
        let row = gw.store().crm_token("amocrm").await.unwrap().unwrap();
        let current = gw.fake.current_refresh_token();
        let raw = format!("{} {:?}", row.refresh_token, row.access_token);
        assert!(
            raw.starts_with("enc:v1:") && !raw.contains("fake-"),
            "{raw}"
        );
        let vault = leadgate::crm::vault::Vault::new([0x5a; 32]);
        assert_eq!(
            vault
                .open("crm_tokens/amocrm/refresh_token", &row.refresh_token)
                .unwrap(),
            current
        );
        assert!(gw
            .store()
            .connector("amocrm")
            .await
            .unwrap()
            .is_none_or(|c| !c.paused));
        // Nothing on the timeline carries a token or the client secret.
        for id in ["site:t1", "site:t2"] {
            let timeline = gw.store().timeline(&id.parse().unwrap()).await.unwrap();
            let text = serde_json::to_string(&timeline).unwrap();
            for needle in ["fake-access-", "fake-refresh-", &client_secret] {
                assert!(!text.contains(needle), "{needle} in {text}");
            }
        }
        assert_eq!(keys(&gw.fake), ["site:t1", "site:t2"]);
        // The key is changed: the stored pair cannot be opened, the configured refresh
        // token was rotated long ago and is refused, so the connector pauses (leads queue)
        // until a person restores the key or reconnects the integration.
        let mut gw = gw;
        std::fs::write(&key_file, "a5".repeat(32)).unwrap();
        gw.restart().await;
        gw.post_json("site", &lead("t3")).await;
        gw.wait_paused_and_idle("amocrm").await;
        let op = gw.operation("site:t3").await;
        assert_ne!(op["status"], "completed", "{op}");
        assert_eq!(
            keys(&gw.fake),
            ["site:t1", "site:t2"],
            "nothing sent without a token"
        );
        gw.stop().await;
    }
);

// ---------------------------------------------------------------------------------
// The shared OAuth token row (`CrmAccess::crm_token` / `save_crm_token`): conformance on
// both backends. amoCRM rotates refresh tokens, so processes coordinate through it.

fn token(access: Option<&str>, refresh: &str, version: i64) -> CrmToken {
    CrmToken {
        access_token: access.map(str::to_owned),
        refresh_token: refresh.to_owned(),
        expires_at: access.map(|_| leadgate::store::local_now() + chrono::TimeDelta::seconds(3600)),
        version,
    }
}

each_backend!(crm_tokens_seed_once_then_compare_and_set, |db| async move {
    let store = db.store().await;
    assert_eq!(store.crm_token("amocrm").await.unwrap(), None);
    // Seeding inserts only if absent: a second seed (another process) changes nothing.
    let seed = token(None, "r0", 0);
    assert!(store.save_crm_token("amocrm", &seed, None).await.unwrap());
    assert!(!store
        .save_crm_token("amocrm", &token(None, "other", 0), None)
        .await
        .unwrap());
    assert_eq!(store.crm_token("amocrm").await.unwrap(), Some(seed));
    // A refresh replaces the row only under the version it saw.
    let first = token(Some("a1"), "r1", 1);
    assert!(store
        .save_crm_token("amocrm", &first, Some(0))
        .await
        .unwrap());
    assert_eq!(
        store.crm_token("amocrm").await.unwrap(),
        Some(first.clone())
    );
    assert!(!store
        .save_crm_token("amocrm", &token(Some("late"), "late", 1), Some(0))
        .await
        .unwrap());
    assert_eq!(store.crm_token("amocrm").await.unwrap(), Some(first));
    // A CAS on a connector without a row saves nothing; connectors are separate rows.
    assert!(!store
        .save_crm_token("other", &token(Some("x"), "y", 1), Some(0))
        .await
        .unwrap());
    assert_eq!(store.crm_token("other").await.unwrap(), None);
    let debug = format!("{:?}", store.crm_token("amocrm").await.unwrap());
    assert!(!debug.contains("a1") && !debug.contains("r1"), "{debug}");
});

each_backend!(
    crm_tokens_two_concurrent_refreshes_exactly_one_wins,
    |db| async move {
        let store = db.store().await;
        assert!(store
            .save_crm_token("amocrm", &token(Some("a0"), "r0", 3), None)
            .await
            .unwrap());
        for round in 0..5 {
            let version = 3 + round;
            let mut saves = Vec::new();
            for who in ["a", "b"] {
                let store = store.clone();
                let mine = token(
                    Some(&format!("{who}{round}")),
                    &format!("r-{who}{round}"),
                    version + 1,
                );
                saves.push(tokio::spawn(async move {
                    let won = store
                        .save_crm_token("amocrm", &mine, Some(version))
                        .await
                        .unwrap();
                    (won, mine)
                }));
            }
            let mut winners = Vec::new();
            for s in saves {
                let (won, mine) = s.await.unwrap();
                if won {
                    winners.push(mine);
                }
            }
            assert_eq!(winners.len(), 1, "round {round}: exactly one refresh wins");
            // The loser re-reads and finds the winner's tokens.
            assert_eq!(
                store.crm_token("amocrm").await.unwrap().as_ref(),
                Some(&winners[0])
            );
        }
    }
);

each_backend!(
    amocrm_a_create_the_account_executes_after_the_timeout_is_recovered_after_the_settle_window,
    |db| async move {
        // timeout 500 ms, the account lands the lead 1.5 s after it arrived, the search
        // sees it at once from then on. The lookup right after the timeout finds
        // nothing — not proof on amoCRM, and not a reason for review yet either: the
        // lookup after the settle window finds it and the lead completes by itself.
        let fake = FakeAmoCrm::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let text = config_toml(&db.url, &fake).replace("settle = \"300ms\"", "settle = \"3s\"");
        let gw = Gateway::start_with(fake, Config::parse(&text).unwrap()).await;
        gw.fake
            .push_fault(CREATE, Fault::ExecuteLate { ms: 1500 }, 1);
        gw.post_json("site", &lead("late")).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let op = loop {
            let op = gw.operation("site:late").await;
            if op["status"] != "received" && op["status"] != "in_progress" {
                break op;
            }
            assert!(std::time::Instant::now() < deadline, "{op}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(op["status"], "completed", "{op}");
        assert_eq!(keys(&gw.fake), vec!["site:late"]);
        assert_eq!(gw.fake.calls(CREATE), 1);
        gw.stop().await;
    }
);

each_backend!(
    amocrm_keep_original_and_update_changes_the_contact_once_through_a_late_answer,
    |db| async move {
        // The contact gets the new name and the new phone first, the old phone kept
        // (amoCRM replaces a field's values with the list it is sent). The PATCH is
        // executed after the worker gave up; sent again after the settle window, the
        // phone is not listed twice.
        let fake = FakeAmoCrm::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let text = config_toml(&db.url, &fake).replace("settle = \"300ms\"", "settle = \"1500ms\"");
        let gw = Gateway::start_with(fake, Config::parse(&text).unwrap()).await;
        gw.post_json("site", &lead("upd")).await;
        gw.wait_status("site:upd", "completed").await;
        let mut later = lead("upd");
        later["name"] = json!("Иван Петров");
        later["phone"] = json!("+7 916 000-00-09");
        let (_, body, _) = gw.post_json("site", &later).await;
        assert_eq!(body["outcome"], "conflict", "{body}");
        let id: leadgate::domain::OperationId = "site:upd".parse().unwrap();
        let case = gw
            .store()
            .cases_of(&id)
            .await
            .unwrap()
            .into_iter()
            .find(|c| c.resolved_at.is_none())
            .unwrap();
        gw.fake
            .push_fault(CONTACT_UPDATE, Fault::ExecuteLate { ms: 1000 }, 1);
        gw.store()
            .resolve(leadgate::store::Resolve {
                case_id: case.id,
                expected_version: case.version,
                actor: "ann".into(),
                comment: None,
                action: leadgate::domain::HumanAction::UpdateCrm,
                now: gw.store().now(),
                bulk: None,
            })
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while !gw
            .timeline_kinds("site:upd")
            .await
            .iter()
            .any(|k| k == "crm_updated")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                gw.timeline_kinds("site:upd").await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let kinds = gw.timeline_kinds("site:upd").await;
        assert!(kinds.iter().any(|k| k == "crm_update_retry"), "{kinds:?}");
        let contact = &gw.fake.contacts()[0];
        assert_eq!(contact["first_name"], "Иван Петров");
        let phones: Vec<&str> = contact["custom_fields_values"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["field_code"] == "PHONE")
            .flat_map(|f| f["values"].as_array().unwrap().iter())
            .map(|v| v["value"].as_str().unwrap())
            .collect();
        assert_eq!(phones, ["+7 916 000-00-09", "+7 999 123-45-67"]);
        assert_eq!(
            gw.fake.calls(CONTACT_UPDATE),
            2,
            "once, then once more after the window"
        );
        assert_eq!(gw.fake.calls(CREATE), 1);
        assert_eq!(gw.fake.contacts().len(), 1, "no contact created");
        gw.stop().await;
    }
);
