//! CRM outages ride out without a person (`domain::outage`): the connector, not each
//! lead, backs off; a probe goes out on a schedule; the first answer drains the queue.
//! Both kinds of outage the real CRMs have: answering 503 (every call, lookups too) and
//! refusing connections (the portal is gone). Time is compressed by short settings; the
//! code path is the production one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::future::join_all;
use leadgate::config::Config;
use leadgate_fakes::bitrix24::{FakeBitrix24, Fault};
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::*;
use reqwest::StatusCode;

const LEADS: usize = 1000;

/// The outage settings of a compressed day: three failures in a row make the CRM
/// unreachable, probes every few hundred milliseconds.
const OUTAGE: &str =
    "[outage]\nafter_failures = 3\nprobes = [\"200ms\", \"400ms\", \"800ms\"]\nlimit = \"1h\"\n";

async fn post_leads<F>(gw: &Gateway<F>, prefix: &str) -> Vec<String> {
    let keys: Vec<String> = (0..LEADS).map(|i| format!("{prefix}{i}")).collect();
    for chunk in keys.chunks(50) {
        let bodies: Vec<_> = chunk.iter().map(|k| lead(k)).collect();
        let answers = join_all(bodies.iter().map(|b| gw.post_json("site", b))).await;
        for (status, body, _) in answers {
            assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        }
    }
    keys
}

/// Waits until every lead is completed; then each has exactly one entity in the CRM and
/// nobody was asked anything.
async fn all_created_once<F>(gw: &Gateway<F>, keys: &[String], fake: &FakeBitrix24) {
    let store = gw.store();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let m = store
            .metrics(leadgate::store::now(), Duration::from_secs(3600))
            .await
            .unwrap();
        let done = m
            .operations_by_status
            .get("completed")
            .copied()
            .unwrap_or(0);
        if done == keys.len() as i64 {
            assert!(
                m.open_cases_by_reason.is_empty(),
                "{:?}",
                m.open_cases_by_reason
            );
            assert_eq!(m.resolved_cases, 0, "nobody acted");
            break;
        }
        if Instant::now() >= deadline {
            for k in keys {
                let op = gw.operation(&format!("site:{k}")).await;
                if op["status"] != "completed" {
                    let kinds = gw.timeline_kinds(&format!("site:{k}")).await;
                    panic!("{k} is not completed: {op}\n{kinds:?}");
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {} completed: {:?}, cases {:?}",
            keys.len(),
            m.operations_by_status,
            m.open_cases_by_reason
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut per_key: HashMap<String, usize> = HashMap::new();
    for id in origin_ids(fake) {
        *per_key.entry(id).or_default() += 1;
    }
    for k in keys {
        assert_eq!(
            per_key.get(&format!("site:{k}")),
            Some(&1),
            "{k}: exactly one lead"
        );
    }
    assert_eq!(per_key.len(), keys.len(), "no entity that is not a lead's");
}

/// While the CRM is down, only the probes go out and no lead uses up its attempts.
async fn waits_for_probes<F>(gw: &Gateway<F>, calls: impl Fn() -> u64, keys: &[String]) {
    let store = gw.store();
    let start = Instant::now();
    let mut unreachable = false;
    // A compressed outage: several probe periods.
    while start.elapsed() < Duration::from_secs(3) {
        let connectors = store.connectors().await.unwrap();
        unreachable |= connectors
            .iter()
            .any(|c| c.name == "bitrix24" && c.unreachable_since.is_some());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(unreachable, "the connector never counted as unreachable");
    // 3 to open it, the calls in flight then (4 workers, a lookup each), a probe (and its
    // lookup) per slot of the schedule: a few dozen, not thousands.
    let made = calls();
    assert!(made < 60, "{made} calls to a CRM that is down");
    let m = store
        .metrics(leadgate::store::now(), Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(
        m.open_cases_by_reason.is_empty(),
        "{:?}",
        m.open_cases_by_reason
    );
    // Said where support looks: the metrics and `/metrics`.
    assert!(m.unreachable_connectors.contains_key("bitrix24"), "{m:?}");
    let text = gw
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let gauge = text
        .lines()
        .find(|l| l.contains("connector_unreachable_since_seconds{connector=\"bitrix24\"}"))
        .unwrap_or_else(|| panic!("no unreachable gauge in\n{text}"));
    assert!(!gauge.ends_with(" 0"), "{gauge}");
    for k in keys.iter().step_by(97) {
        let op = gw.operation(&format!("site:{k}")).await;
        assert_eq!(op["status"], "received", "{k}: {op}");
        assert!(op["attempts"].as_i64().unwrap() <= 1, "{k}: {op}");
    }
}

each_backend!(
    a_crm_answering_503_for_a_while_loses_nobody_and_asks_nobody,
    |db| async move {
        let gw = Gateway::start_extended(&db, OUTAGE).await;
        let down = Fault::Error {
            status: 503,
            error: String::new(),
            error_description: "Service Unavailable".into(),
            after_execute: false,
        };
        gw.fake.push_fault("*", down, u32::MAX);
        let keys = post_leads(&gw, "o").await;
        waits_for_probes(
            &gw,
            || {
                gw.fake.calls("crm.lead.add")
                    + gw.fake.calls("crm.lead.list")
                    + gw.fake.calls("batch")
            },
            &keys,
        )
        .await;
        gw.fake.clear_faults();
        all_created_once(&gw, &keys, &gw.fake).await;
        let connectors = gw.store().connectors().await.unwrap();
        assert!(
            connectors.iter().all(|c| c.unreachable_since.is_none()),
            "{connectors:?}"
        );
        let m = gw
            .store()
            .metrics(leadgate::store::now(), Duration::from_secs(3600))
            .await
            .unwrap();
        assert!(m.unreachable_connectors.is_empty(), "{m:?}");
        gw.stop().await;
    }
);

each_backend!(
    a_crm_refusing_connections_for_a_while_loses_nobody_and_asks_nobody,
    |db| async move {
        // The portal is gone: its port refuses connections until it comes back.
        let gone = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let (addr, url) = (gone.addr(), gone.webhook_url());
        drop(gone);
        let config = Config::parse(&format!("{}\n{OUTAGE}", config_toml(&db.url, &url))).unwrap();
        let gw = Gateway::start_with((), config).await;
        let keys = post_leads(&gw, "r").await;
        waits_for_probes(&gw, || 0, &keys).await;
        let back = FakeBitrix24::spawn(addr).await.unwrap();
        all_created_once(&gw, &keys, &back).await;
        gw.stop().await;
    }
);
