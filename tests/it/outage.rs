//! CRM outages ride out without a person (`domain::outage`): the connector, not each
//! lead, backs off; a probe goes out on a schedule; the first answer drains the queue.
//! Both kinds of outage the real CRMs have: answering 503 (every call, lookups too) and
//! refusing connections (the portal is gone). Time is compressed by short settings; the
//! code path is the production one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use leadgate::config::Config;
use leadgate::crm::{BatchAnswer, Crm, CrmError, Exchange, Lead, Lookup};
use leadgate::domain::ErrorClass;
use leadgate::worker::{Worker, WorkerSettings};
use leadgate_fakes::bitrix24::{FakeBitrix24, Fault};
use leadgate_testkit::gateway::*;
use leadgate_testkit::seed::delivery;
use leadgate_testkit::{each_backend, TestDb};
use reqwest::StatusCode;
use serde_json::json;
use tokio::sync::Notify;

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
            .metrics(leadgate::store::local_now(), Duration::from_secs(3600))
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
    // The attempts that open it, one attempt in flight per caller then (the gateway's
    // four lanes and its reconciler), a call per slot of the schedule since: however
    // long the leads took to arrive on this machine (`OutageConfig::max_calls_while_down`).
    let made = calls();
    let since = store
        .connector("bitrix24")
        .await
        .unwrap()
        .and_then(|c| c.unreachable_since)
        .expect("still unreachable");
    let period = (store.now() - since).to_std().unwrap();
    let callers = gw.config.worker.concurrency as u64 + 1;
    let bound = gw.config.outage.max_calls_while_down(callers, period);
    eprintln!(
        "{made} calls to the down CRM, {period:?} after it became unreachable (bound {bound})"
    );
    assert!(
        made <= bound,
        "{made} calls to a CRM that is down, {period:?} after the breaker opened: the \
         schedule allows {bound}"
    );
    let m = store
        .metrics(leadgate::store::local_now(), Duration::from_secs(3600))
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
            .metrics(leadgate::store::local_now(), Duration::from_secs(3600))
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

/// A CRM that answers nothing, for forcing the interleavings of an outage: the first
/// calls are held until `hold` of them are in flight together, so that every lane has
/// passed its gate and has a call out when the first failures come back (nothing has
/// failed before, so the breaker is closed for all of them however slow the machine);
/// every call fails as a 503 does (`uncertain`: the create may have landed, so a lookup
/// follows). Every call is counted, whatever it is.
struct DownCrm {
    batch: usize,
    lookup_batch: usize,
    hold: usize,
    patience: Duration,
    /// The pacing wait before each call: the gate before a claim is passed this long
    /// before the call leaves.
    pace: Duration,
    calls: AtomicU64,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    /// (calls waiting for the group to fill, the group's number)
    group: Mutex<(usize, u64)>,
    released: Notify,
}

impl DownCrm {
    fn new(batch: usize, lookup_batch: usize, hold: usize) -> DownCrm {
        DownCrm {
            batch,
            lookup_batch,
            hold,
            // Only a safety net: the group fills on any machine.
            patience: Duration::from_secs(60),
            pace: Duration::from_millis(30),
            calls: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            most_in_flight: AtomicUsize::new(0),
            group: Mutex::new((0, 0)),
            released: Notify::new(),
        }
    }

    async fn down<T>(&self, what: &str) -> (Result<T, CrmError>, Exchange) {
        self.calls.fetch_add(1, SeqCst);
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.most_in_flight.fetch_max(now, SeqCst);
        let mine = {
            let mut g = self.group.lock().unwrap();
            g.0 += 1;
            if g.1 > 0 {
                // The first group went: the rest is answered at once.
                None
            } else if g.0 >= self.hold {
                *g = (0, g.1 + 1);
                self.released.notify_waiters();
                None
            } else {
                Some(g.1)
            }
        };
        if let Some(mine) = mine {
            let deadline = tokio::time::Instant::now() + self.patience;
            loop {
                let released = self.released.notified();
                if self.group.lock().unwrap().1 != mine {
                    break;
                }
                if tokio::time::timeout_at(deadline, released).await.is_err() {
                    let mut g = self.group.lock().unwrap();
                    if g.1 == mine {
                        g.0 -= 1;
                    }
                    break;
                }
            }
        }
        self.in_flight.fetch_sub(1, SeqCst);
        let e = CrmError::new(ErrorClass::Uncertain, "HTTP 503 Service Unavailable");
        let exchange = Exchange {
            request: json!({"call": what}),
            response: json!({"status": 503}),
        };
        (Err(e), exchange)
    }
}

#[async_trait::async_trait]
impl Crm for DownCrm {
    fn connector(&self) -> &str {
        "bitrix24"
    }
    fn lookup_is_authoritative(&self) -> bool {
        true
    }
    async fn pace(&self) -> Result<(), CrmError> {
        tokio::time::sleep(self.pace).await;
        Ok(())
    }
    async fn create(&self, _: &Lead) -> (Result<String, CrmError>, Exchange) {
        self.down("create").await
    }
    async fn find(&self, _: &str) -> (Result<Lookup, CrmError>, Exchange) {
        self.down("find").await
    }
    fn batch_limit(&self) -> usize {
        self.batch
    }
    async fn create_many(&self, _: &[Lead]) -> BatchAnswer {
        let (result, exchange) = self.down::<()>("batch").await;
        Err((result.unwrap_err(), exchange))
    }
    fn lookup_batch_limit(&self) -> usize {
        self.lookup_batch
    }
    async fn find_many(&self, _: &[&str]) -> (Result<Vec<Lookup>, CrmError>, Exchange) {
        self.down("find_many").await
    }
}

/// Two processes of four lanes each share the database, in front of a CRM that answers
/// nothing and holds each failing answer until all eight lanes have a call out (so all of
/// them have passed their gate when the breaker opens), with a pacing wait between each
/// lane's gate and its call. The calls the CRM gets are bounded by the schedule
/// (`OutageConfig::max_calls_while_down`), however long the outage and however fast the
/// machine: the attempts that open the breaker, one attempt in flight per caller then,
/// and one call per probe slot since.
async fn a_down_crm_gets_its_schedule(db: &TestDb, batch: usize, lookup_batch: usize) {
    const PROCESSES: usize = 2;
    const LANES: usize = 4;
    let schedule = "[outage]\nafter_failures = 3\nprobes = [\"100ms\"]\nlimit = \"1h\"\n";
    let text = format!(
        "{}\n{schedule}",
        config_toml(&db.url, "http://127.0.0.1:9/")
    );
    let config = Config::parse(&text).unwrap();
    let crm = Arc::new(DownCrm::new(batch, lookup_batch, PROCESSES * LANES));
    let store = db.store().await;
    let leads: i64 = 500;
    for i in 0..leads {
        store
            .record_delivery(delivery(&format!("d{i}"), json!({"name": "Ivan"})))
            .await
            .unwrap();
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut processes = Vec::new();
    for p in 0..PROCESSES {
        let worker = Worker {
            store: db.store().await,
            crm: crm.clone(),
            settings: Arc::new(WorkerSettings {
                poll_interval: Duration::from_millis(20),
                lease: Duration::from_secs(2),
                // Longer than the first group may be held: no call is cut off.
                call_timeout: Duration::from_secs(90),
                settle: Duration::from_millis(300),
                retry: config.retry.clone(),
                outage: config.outage.clone(),
                concurrency: LANES,
                fields: Default::default(),
                look_up_first: false,
            }),
            owner: format!("worker:p{p}"),
            turns: None,
        };
        processes.push(tokio::spawn(worker.run(stopped.clone())));
    }
    // However slow the machine, the breaker opens; then the outage lasts a while.
    let deadline = Instant::now() + Duration::from_secs(60);
    let since = loop {
        let c = store.connector("bitrix24").await.unwrap();
        if let Some(since) = c.and_then(|c| c.unreachable_since) {
            break since;
        }
        assert!(Instant::now() < deadline, "the breaker never opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.send(true).unwrap();
    for p in processes {
        p.await.unwrap();
    }
    let made = crm.calls.load(SeqCst);
    // Measured after the count, so the period can only be longer than the calls' one.
    let period = (store.now() - since).to_std().unwrap();
    // Every process's lanes and its reconciler.
    let callers = (PROCESSES * (LANES + 1)) as u64;
    let bound = config.outage.max_calls_while_down(callers, period);
    let most = crm.most_in_flight.load(SeqCst);
    eprintln!(
        "batch {batch}, lookups {lookup_batch}: {made} calls in {period:?} of outage \
         (bound {bound}), {most} at once"
    );
    assert_eq!(
        most,
        PROCESSES * LANES,
        "every lane had its call out when the first failure came back"
    );
    assert!(
        made <= bound,
        "{made} calls to a CRM that is down, {period:?} after the breaker opened: the \
         schedule allows {bound}"
    );
    // Nobody was asked and nothing was lost: every lead waits (a claim whose lease ran
    // out before its call, on a slow machine, is still `in_progress` until the
    // reconciler puts it back).
    let m = store
        .metrics(leadgate::store::local_now(), Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(m.open_cases_by_reason.is_empty(), "{m:?}");
    let by = |s: &str| m.operations_by_status.get(s).copied().unwrap_or(0);
    assert_eq!(
        by("received") + by("in_progress"),
        leads,
        "{:?}",
        m.operations_by_status
    );
}

each_backend!(
    a_down_crm_gets_its_schedule_from_many_lanes_one_lead_at_a_time,
    |db| async move {
        a_down_crm_gets_its_schedule(&db, 1, 1).await;
    }
);

each_backend!(
    a_down_crm_gets_its_schedule_from_many_lanes_in_batches,
    |db| async move {
        // As amoCRM: fifty creates a request, but one key a lookup.
        a_down_crm_gets_its_schedule(&db, 50, 1).await;
    }
);

each_backend!(
    failures_together_on_a_connector_without_a_row_are_all_counted,
    |db| async move {
        // A fresh installation's first outage: no `connectors` row yet, and every lane of
        // two processes fails at once. Each failure counts (the row is made, then locked),
        // so exactly `after_failures` of them open the breaker.
        const FAILURES: usize = 8;
        let config = leadgate::domain::outage::OutageConfig {
            after_failures: FAILURES as u32,
            ..Default::default()
        };
        let stores = [db.store().await, db.store().await];
        let now = stores[0].now();
        let failed = join_all((0..FAILURES).map(|i| {
            let (store, config) = (stores[i % stores.len()].clone(), &config);
            async move { store.connector_failed("bitrix24", config, now).await }
        }))
        .await;
        let opened = failed.into_iter().filter(|f| f.as_ref().unwrap().is_some());
        assert_eq!(
            opened.count(),
            1,
            "only the last failure finds it unreachable"
        );
        let connector = stores[0].connector("bitrix24").await.unwrap().unwrap();
        assert!(connector.unreachable_since.is_some(), "{connector:?}");
    }
);
