//! `make bench`: draining a backlog at the CRM's documented request limit.
//!
//! `LEADGATE_DRAIN_LEADS` leads (default 10,000) are queued while the connector is paused,
//! as they are after an outage; then it is resumed and the gateway drains them into a fake
//! CRM that enforces the documented limit and refuses what exceeds it: Bitrix24's leaky
//! bucket (2 requests/s, 50 at once; a `batch` of up to 50 adds is one request) and
//! amoCRM's 7 requests/s (a `leads/complex` of up to 50 leads is one). The gateway runs
//! with its default pacing. Printed per backend and CRM: the drain rate after the first
//! burst against limit × batch size (issue 15's goal: ≥ 0.8), the rate over the whole
//! drain, the requests it took and how many the CRM refused (goal: none).
//!
//! PostgreSQL: `LEADGATE_TEST_DATABASE_URL` names the server; a database is created for
//! each run and dropped after (as the tests do).

use std::time::{Duration, Instant};

use leadgate::config::Config;
use leadgate::store::Store;
use leadgate_fakes::amocrm::{self as fake_amocrm, FakeAmoCrm, FIELD_ID};
use leadgate_fakes::bitrix24::{FakeBitrix24, RequestLimit};
use leadgate_testkit::db::{Backend, TestDb};
use leadgate_testkit::gateway::{config_toml, Gateway};
use leadgate_testkit::seed;

/// Bitrix24's documented bucket and amoCRM's documented rate; both take 50 creates a
/// request.
const BITRIX24_RATE: f64 = 2.0;
const BITRIX24_BURST: u32 = 50;
const AMOCRM_RATE: f64 = 7.0;
const BATCH: f64 = 50.0;

struct Drained {
    seconds: f64,
    /// Leads/s after the first burst of requests was spent (all of it for amoCRM, which
    /// has no burst).
    steady: f64,
    requests: u64,
    refused: u64,
}

/// Queues `n` leads with the connector paused.
async fn queue(store: &dyn Store, connector: &str, n: usize) {
    store
        .pause_connector(connector, "bench: the CRM is away", "bench", store.now())
        .await
        .unwrap();
    for i in 0..n {
        let payload = serde_json::json!({"submission_id": format!("d{i}"), "name": "Ivan"});
        store
            .record_delivery(seed::delivery(&format!("d{i}"), payload))
            .await
            .unwrap();
    }
}

/// Resumes the connector and waits until `n` leads are completed; `burst_leads` is how
/// many the first burst may take at once.
async fn drain(store: &dyn Store, connector: &str, n: usize, burst_leads: usize) -> (f64, f64) {
    let start = Instant::now();
    assert!(store
        .resume_connector(connector, "bench", store.now())
        .await
        .unwrap());
    let mut after_burst: Option<(Instant, i64)> = None;
    loop {
        let m = store
            .metrics(leadgate::store::local_now(), Duration::from_secs(3600))
            .await
            .unwrap();
        let done = m
            .operations_by_status
            .get("completed")
            .copied()
            .unwrap_or(0);
        if after_burst.is_none() && done >= burst_leads as i64 {
            after_burst = Some((Instant::now(), done));
        }
        if done >= n as i64 {
            let seconds = start.elapsed().as_secs_f64();
            let steady = match after_burst {
                Some((at, from)) if (n as i64) > from => {
                    (n as i64 - from) as f64 / at.elapsed().as_secs_f64()
                }
                _ => n as f64 / seconds,
            };
            return (seconds, steady);
        }
        assert!(
            m.open_cases_by_reason.is_empty(),
            "review cases during a drain: {:?}",
            m.open_cases_by_reason
        );
        assert!(
            start.elapsed() < Duration::from_secs(1800),
            "the drain stalled at {done} of {n}: {:?}",
            m.operations_by_status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn bitrix24(db: &TestDb, n: usize) -> Drained {
    let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    fake.set_request_limit(Some(RequestLimit {
        per_second: BITRIX24_RATE,
        burst: BITRIX24_BURST,
    }));
    let toml = config_toml(&db.url, &fake.webhook_url());
    let gw = Gateway::start_with(fake, Config::parse(&toml).unwrap()).await;
    let store = gw.store();
    queue(store.as_ref(), "bitrix24", n).await;
    let burst_leads = (BITRIX24_BURST as usize * BATCH as usize).min(n);
    let (seconds, steady) = drain(store.as_ref(), "bitrix24", n, burst_leads).await;
    let drained = Drained {
        seconds,
        steady,
        requests: gw.fake.calls("batch"),
        refused: gw.fake.refused(),
    };
    gw.stop().await;
    drained
}

async fn amocrm(db: &TestDb, n: usize) -> Drained {
    let fake = FakeAmoCrm::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    fake.set_request_limit(Some(AMOCRM_RATE));
    let base = config_toml(&db.url, "http://127.0.0.1:1/rest/1/unused/");
    let cut = base
        .find("[crm]")
        .expect("the test configuration has [crm]");
    let toml = format!(
        "{}[crm]\nkind = \"amocrm\"\nbase_url = \"{}\"\ntoken = \"{}\"\noperation_field_id = {FIELD_ID}\n\
         timeout = \"1s\"\nsettle = \"300ms\"\n",
        &base[..cut],
        fake.base_url(),
        fake.token()
    );
    let gw = Gateway::start_with(fake, Config::parse(&toml).unwrap()).await;
    let store = gw.store();
    queue(store.as_ref(), "amocrm", n).await;
    let (seconds, steady) = drain(store.as_ref(), "amocrm", n, 0).await;
    let drained = Drained {
        seconds,
        steady,
        requests: gw.fake.calls(fake_amocrm::CREATE),
        refused: gw.fake.refused(),
    };
    gw.stop().await;
    drained
}

fn report(backend: &str, crm: &str, n: usize, limit: f64, d: &Drained) {
    let ceiling = limit * BATCH;
    println!(
        "drain {backend:8} {crm:8} {n} leads in {:6.1} s: {:6.1} leads/s after the burst = {:.2} × limit×batch ({ceiling:.0}/s); \
         {:6.1} leads/s overall; {} requests ({:.1} leads each), {} refused",
        d.seconds,
        d.steady,
        d.steady / ceiling,
        n as f64 / d.seconds,
        d.requests,
        n as f64 / d.requests.max(1) as f64,
        d.refused,
    );
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("LEADGATE_DRAIN_LEADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    for (backend, name) in [(Backend::Sqlite, "sqlite"), (Backend::Postgres, "postgres")] {
        let Some(db) = TestDb::new(backend).await else {
            continue;
        };
        let d = bitrix24(&db, n).await;
        report(name, "bitrix24", n, BITRIX24_RATE, &d);
        let Some(db) = TestDb::new(backend).await else {
            continue;
        };
        let d = amocrm(&db, n).await;
        report(name, "amocrm", n, AMOCRM_RATE, &d);
    }
}
