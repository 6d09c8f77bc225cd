//! Which refusals are a lead's and which the connector's (issue 31, points 1 and 2), end
//! to end on both backends against the fake CRMs.
//!
//! A CRM answer that refuses the request, the method, the scope or the address ("this
//! can never work here") pauses the connector with the reason and fails no lead: every
//! lead waits, and a resume sends each exactly once. A timeout inside a Bitrix24 batch
//! is an unknown outcome, looked up by key, never a refusal. A batch whose refusals
//! come in rounds (each 400 naming one invalid lead, or none) fails exactly its invalid
//! leads and creates every valid one once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use leadgate::config::Config;
use leadgate_fakes::amocrm::{self as fake_amocrm, FakeAmoCrm, NameRefusals};
use leadgate_fakes::bitrix24::{FakeBitrix24, Fault};
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{lead, origin_ids, Gateway, CREATE};
use reqwest::StatusCode;
use serde_json::Value;

/// Pauses `connector` and posts one lead per key `site:{prefix}{i}`: they wait, due.
async fn queued<F>(gw: &Gateway<F>, connector: &str, prefix: &str, n: usize) -> Vec<String> {
    let store = gw.store();
    store
        .pause_connector(connector, "test: let work pile up", "test", store.now())
        .await
        .unwrap();
    let mut keys = Vec::with_capacity(n);
    for i in 0..n {
        let (status, body, _) = gw.post_json("site", &lead(&format!("{prefix}{i}"))).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        keys.push(format!("site:{prefix}{i}"));
    }
    keys
}

async fn resume<F>(gw: &Gateway<F>, connector: &str) {
    let store = gw.store();
    assert!(store
        .resume_connector(connector, "anna", store.now())
        .await
        .unwrap());
}

/// Waits until none of `keys` is `received` or `in_progress` (60 s at most, a bound
/// far above the test's schedule); their operations.
async fn settled<F>(gw: &Gateway<F>, keys: &[String]) -> HashMap<String, Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut all = HashMap::new();
        for k in keys {
            all.insert(k.clone(), gw.operation(k).await);
        }
        if all
            .values()
            .all(|op| op["status"] != "received" && op["status"] != "in_progress")
        {
            return all;
        }
        assert!(Instant::now() < deadline, "not settled: {all:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn count(ops: &HashMap<String, Value>, status: &str) -> usize {
    ops.values().filter(|op| op["status"] == status).count()
}

fn per_key(keys: impl IntoIterator<Item = String>) -> HashMap<String, usize> {
    let mut per_key = HashMap::new();
    for k in keys {
        *per_key.entry(k).or_default() += 1;
    }
    per_key
}

/// After `fault` struck every request it could, the connector is paused with a reason
/// holding `reason`, no lead failed or was created, and every lead waits; once the
/// fault is gone and a person resumed, each lead is created exactly once.
async fn pauses_then_sends_all<F>(
    gw: &Gateway<F>,
    connector: &str,
    keys: &[String],
    reason: &str,
    created: impl Fn(&F) -> HashMap<String, usize>,
    clear: impl Fn(&F),
) {
    gw.wait_paused_and_idle(connector).await;
    let store = gw.store();
    let row = store.connector(connector).await.unwrap().unwrap();
    assert!(row.paused);
    let why = row.reason.unwrap_or_default();
    assert!(why.contains(reason), "{reason:?} not in the reason {why:?}");
    for k in keys {
        let op = gw.operation(k).await;
        assert_eq!(op["status"], "received", "{k}: {op}");
    }
    let made = created(&gw.fake);
    assert!(
        keys.iter().all(|k| !made.contains_key(k)),
        "created while refused: {made:?}"
    );
    clear(&gw.fake);
    resume(gw, connector).await;
    let ops = settled(gw, keys).await;
    assert_eq!(count(&ops, "completed"), keys.len(), "{ops:?}");
    let made = created(&gw.fake);
    for k in keys {
        assert_eq!(made.get(k), Some(&1), "{k}: {made:?}");
    }
}

fn bitrix24_created(fake: &FakeBitrix24) -> HashMap<String, usize> {
    per_key(origin_ids(fake))
}

each_backend!(
    a_bitrix24_portal_refusing_the_method_or_the_address_pauses_and_fails_no_lead,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let not_found = |method_error: bool| Fault::Error {
            status: 404,
            error: if method_error {
                "ERROR_METHOD_NOT_FOUND".into()
            } else {
                String::new()
            },
            error_description: "Method not found!".into(),
            after_execute: false,
        };
        // (the method the fault strikes, the fault, what the pause's reason says)
        let cases = [
            // The portal has no `batch` (or the webhook points elsewhere).
            ("batch", not_found(true), "HTTP 404 ERROR_METHOD_NOT_FOUND"),
            // Every add command of the batch refused by its own result_error.
            ("crm.lead.add", not_found(true), "ERROR_METHOD_NOT_FOUND"),
            // A web server's 404 page where the REST API should be.
            ("batch", Fault::HtmlPage { status: 404 }, "404 Not Found"),
            // A scope the webhook does not have.
            (
                "batch",
                Fault::Error {
                    status: 403,
                    error: "insufficient_scope".into(),
                    error_description: "The request requires higher privileges".into(),
                    after_execute: false,
                },
                "insufficient_scope",
            ),
        ];
        for (n, (method, fault, reason)) in cases.into_iter().enumerate() {
            let keys = queued(&gw, "bitrix24", &format!("m{n}-"), 24).await;
            gw.fake.push_fault(method, fault, 100_000);
            resume(&gw, "bitrix24").await;
            pauses_then_sends_all(
                &gw,
                "bitrix24",
                &keys,
                reason,
                bitrix24_created,
                FakeBitrix24::clear_faults,
            )
            .await;
        }
        let store = gw.store();
        let m = store
            .metrics(leadgate::store::local_now(), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            m.operations_by_status.get("failed_terminal"),
            None,
            "{:?}",
            m.operations_by_status
        );
        gw.stop().await;
    }
);

each_backend!(
    a_timeout_inside_a_bitrix24_batch_is_looked_up_and_created_once,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let keys = queued(&gw, "bitrix24", "t", 5).await;
        // The first add of the batch runs, then its entry says Request Timeout (HTTP 408).
        gw.fake.push_fault(
            "crm.lead.add",
            Fault::Error {
                status: 408,
                error: String::new(),
                error_description: "Request Timeout".into(),
                after_execute: true,
            },
            1,
        );
        resume(&gw, "bitrix24").await;
        let ops = settled(&gw, &keys).await;
        assert_eq!(count(&ops, "completed"), 5, "{ops:?}");
        assert_eq!(count(&ops, "failed_terminal"), 0, "{ops:?}");
        let made = bitrix24_created(&gw.fake);
        for k in &keys {
            assert_eq!(made.get(k), Some(&1), "{k}: {made:?}");
        }
        assert_eq!(gw.fake.calls(CREATE), 5, "no add was sent twice");
        let store = gw.store();
        let mut links = HashMap::<String, usize>::new();
        for k in &keys {
            let op = store.operation(&k.parse().unwrap()).await.unwrap().unwrap();
            *links.entry(format!("{:?}", op.crm_link)).or_default() += 1;
        }
        // The timed-out one was found by its key.
        assert_eq!(links.get("Some(\"recovered\")"), Some(&1), "{links:?}");
        assert_eq!(links.get("Some(\"created\")"), Some(&4), "{links:?}");
        gw.stop().await;
    }
);

each_backend!(
    a_bitrix24_batch_refused_as_a_whole_is_split_and_fails_no_valid_lead,
    |db| async move {
        // One claim loop: the 12 leads go in one batch request.
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let toml = leadgate_testkit::gateway::config_toml(&db.url, &fake.webhook_url())
            .replace("concurrency = 4", "concurrency = 1")
            .replace("timeout = \"500ms\"", "timeout = \"5s\"")
            .replace("lease = \"2s\"", "lease = \"15s\"");
        assert!(toml.contains("timeout = \"5s\""), "{toml}");
        let gw = Gateway::start_with(fake, Config::parse(&toml).unwrap()).await;
        let keys = queued(&gw, "bitrix24", "s", 12).await;
        // The portal refuses the batch request itself, then its halves: nothing about
        // any one lead. One lead's data is refused once it is on its own.
        gw.fake.push_fault(
            "batch",
            Fault::Error {
                status: 400,
                error: "ERROR_BATCH_LENGTH_EXCEEDED".into(),
                error_description: "Max batch length exceeded".into(),
                after_execute: false,
            },
            3,
        );
        gw.fake.push_fault(CREATE, Fault::Validation, 1);
        resume(&gw, "bitrix24").await;
        let ops = settled(&gw, &keys).await;
        assert_eq!(count(&ops, "failed_terminal"), 1, "{ops:?}");
        assert_eq!(count(&ops, "completed"), 11, "{ops:?}");
        let made = bitrix24_created(&gw.fake);
        assert_eq!(made.len(), 11, "{made:?}");
        assert!(made.values().all(|n| *n == 1), "{made:?}");
        // The whole, its two halves refused; then four batches of three.
        assert_eq!(gw.fake.calls("batch"), 3 + 4);
        gw.stop().await;
    }
);

fn amocrm_created(fake: &FakeAmoCrm) -> HashMap<String, usize> {
    per_key(fake.leads().iter().map(|l| {
        l["custom_fields_values"][0]["values"][0]["value"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }))
}

/// A gateway on the fake amoCRM with one claim loop (a backlog goes in one request) and
/// a call budget of 5 s, far above what the follow-up requests of a split take.
async fn amocrm_gateway(db: &leadgate_testkit::TestDb) -> Gateway<FakeAmoCrm> {
    let fake = FakeAmoCrm::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let toml = crate::amocrm::config_toml(&db.url, &fake)
        .replace("concurrency = 4", "concurrency = 1")
        .replace("timeout = \"500ms\"", "timeout = \"5s\"")
        .replace("lease = \"2s\"", "lease = \"15s\"");
    assert!(toml.contains("timeout = \"5s\""), "{toml}");
    Gateway::start_with(fake, Config::parse(&toml).unwrap()).await
}

each_backend!(
    an_amocrm_account_refusing_the_integration_pauses_and_fails_no_lead,
    |db| async move {
        use fake_amocrm::Fault;
        let gw = amocrm_gateway(&db).await;
        let cases = [
            (Fault::NoRights, "code 244"),
            (Fault::PaymentRequired, "HTTP 402"),
            (Fault::Blocked, "HTTP 403"),
            (
                Fault::Error {
                    status: 404,
                    detail: "Not Found".into(),
                    after_execute: false,
                },
                "HTTP 404",
            ),
            (Fault::HtmlPage { status: 404 }, "404 Not Found"),
        ];
        for (n, (fault, reason)) in cases.into_iter().enumerate() {
            let keys = queued(&gw, "amocrm", &format!("a{n}-"), 20).await;
            gw.fake.push_fault(fake_amocrm::CREATE, fault, 100_000);
            resume(&gw, "amocrm").await;
            pauses_then_sends_all(
                &gw,
                "amocrm",
                &keys,
                reason,
                amocrm_created,
                FakeAmoCrm::clear_faults,
            )
            .await;
        }
        gw.stop().await;
    }
);

each_backend!(
    an_amocrm_batch_refused_in_rounds_fails_only_its_invalid_leads,
    |db| async move {
        let gw = amocrm_gateway(&db).await;
        for (n, naming) in [NameRefusals::First, NameRefusals::None, NameRefusals::All]
            .into_iter()
            .enumerate()
        {
            let keys = queued(&gw, "amocrm", &format!("r{n}-"), 10).await;
            let invalid = [&keys[1], &keys[4], &keys[8]];
            gw.fake.set_invalid_leads(
                &invalid.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                naming,
            );
            let calls = gw.fake.calls(fake_amocrm::CREATE);
            resume(&gw, "amocrm").await;
            let ops = settled(&gw, &keys).await;
            assert_eq!(count(&ops, "failed_terminal"), 3, "{naming:?}: {ops:?}");
            assert_eq!(count(&ops, "completed"), 7, "{naming:?}: {ops:?}");
            for k in invalid {
                assert_eq!(ops[k]["status"], "failed_terminal", "{naming:?} {k}");
                let err = ops[k]["last_error"].as_str().unwrap_or_default();
                assert!(err.contains("HTTP 400"), "{naming:?} {k}: {err}");
            }
            let made = amocrm_created(&gw.fake);
            for k in &keys {
                let want = if invalid.contains(&k) { None } else { Some(&1) };
                assert_eq!(made.get(k), want, "{naming:?} {k}: {made:?}");
            }
            // Named one a round: the first request and one per invalid lead.
            if naming == NameRefusals::First {
                assert_eq!(gw.fake.calls(fake_amocrm::CREATE) - calls, 4);
            }
            gw.fake.set_invalid_leads(&[], NameRefusals::All);
        }
        gw.stop().await;
    }
);
