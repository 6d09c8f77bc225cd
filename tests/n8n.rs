//! The n8n example (examples/n8n/workflow.json) in a real n8n.
//!
//! `scripts/install-n8n.sh` installs n8n 1.97.1 once, under /var/tmp (it fails, and so
//! does this test, when it cannot: a missing n8n is never a skip). Per backend of
//! Leadgate — SQLite, then PostgreSQL — the test creates private databases (one for n8n,
//! which runs on PostgreSQL, and one for Leadgate on PostgreSQL), imports the committed
//! workflow file with `n8n import:workflow`, activates it with `n8n update:workflow`,
//! starts `n8n start`, a real `leadgate serve` (claim API, redelivery to the workflow's
//! webhook) and the fake Bitrix24, and drives the workflow's production webhook:
//!
//! 1. one submission → one lead, the operation completed with its id;
//! 2. the same submission again → no second lead, the saved result;
//! 3. 50 submissions × 3 concurrent deliveries → 50 leads;
//! 4. a create the CRM executes after n8n's 10 s timeout gave up → `uncertain`, review,
//!    one lead; the sender's redelivery gets 409 and creates nothing;
//! 5. a 503 outage, n8n stopped in the middle of it and started again, the outage over →
//!    every lead in the CRM once, by Leadgate's redeliveries alone;
//! 6. a 400 → `failed_terminal`, no retry, the redelivery gets the saved failure;
//! 7. a 401 → the connector paused, a lead during the pause is kept; `leadgate connector
//!    resume` → both leads created once, by redelivery.
//!
//! Each step checks the fake CRM's leads, Leadgate's operations and timelines, and n8n's
//! own record of its runs (`execution_entity`): as many runs as deliveries plus
//! redeliveries, every one `success`.

mod n8n_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::FutureExt;
use leadgate::domain::OperationId;
use leadgate::store::{self, Store};
use leadgate_fakes::bitrix24::{FakeBitrix24, Fault};
use n8n_support::{
    create_database, drop_database, free_port, n8n_bin, pg_server, serve, tail, N8n, Serve,
};
use serde_json::{json, Value};

const CREATE: &str = "crm.lead.add";
const TOKEN: &str = "n8n-test-integration-token";
const WORKFLOW_ID: &str = "leadgateLeadFlow";
/// The claim API's source, and its connector.
const SOURCE: &str = "n8n";

/// Leadgate's redeliveries reach n8n's webhook through this gate, one HTTP request at a
/// time, so the test can hold them back before it stops n8n. n8n's own shutdown drops a
/// run that has not started yet even when its first node (the claim) is already under
/// way; that claim's lease then runs out and goes to a person, as it must (Leadgate cannot
/// know whether the CRM was called). The gate keeps that race out of a scenario about
/// something else: with it shut and n8n's runs finished, nothing is in flight at the stop.
struct Gate {
    url: String,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Redeliveries n8n's webhook accepted (answered 2xx), as counted on the wire.
    accepted: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl Gate {
    async fn spawn(n8n_port: u16) -> Gate {
        use std::sync::atomic::{AtomicBool, Ordering};
        let open = std::sync::Arc::new(AtomicBool::new(true));
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
        let client = reqwest::Client::new();
        let (shared, counted) = (open.clone(), accepted.clone());
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let (open, client, accepted) = (shared.clone(), client.clone(), counted.clone());
            async move {
                use axum::http::StatusCode;
                if !open.load(Ordering::SeqCst) {
                    return (StatusCode::SERVICE_UNAVAILABLE, "gate shut".to_owned());
                }
                let (parts, body) = req.into_parts();
                let body = axum::body::to_bytes(body, 1 << 20)
                    .await
                    .unwrap_or_default();
                let url = format!("http://127.0.0.1:{n8n_port}{}", parts.uri);
                // Forwarded and counted in a task of its own: a redeliverer that stops
                // waiting drops this handler, not the count of what n8n accepted.
                let forward = client
                    .request(parts.method, url)
                    .headers(parts.headers)
                    .body(body)
                    .send();
                let answer = tokio::spawn(async move {
                    match forward.await {
                        Ok(res) => {
                            let status = res.status();
                            if status.is_success() {
                                accepted.fetch_add(1, Ordering::SeqCst);
                            }
                            (status, res.text().await.unwrap_or_default())
                        }
                        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()),
                    }
                });
                answer.await.unwrap()
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/webhook/lead", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Gate {
            url,
            open,
            accepted,
        }
    }

    fn set_open(&self, open: bool) {
        self.open.store(open, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Everything one backend's run needs.
struct Rig {
    n8n: N8n,
    fake: FakeBitrix24,
    store: std::sync::Arc<dyn Store>,
    config: PathBuf,
    http: reqwest::Client,
    /// Deliveries n8n's webhook accepted from the test (the "lead source").
    posts: i64,
    /// Every submission id used, for the timeline counts.
    keys: Vec<String>,
    /// In front of n8n for Leadgate's redeliveries.
    gate: Gate,
    /// Runs n8n may mark `crashed` when it starts again: its recovery relabels a run
    /// whose end had not reached its event log when the process stopped, even one that
    /// had finished and was recorded `success`. Zero until n8n is stopped.
    crashed_allowed: i64,
    _serve: Serve,
}

fn op_id(key: &str) -> OperationId {
    format!("{SOURCE}:{key}").parse().unwrap()
}

fn lead(key: &str) -> Value {
    json!({"submission_id": key, "name": format!("Lead {key}"), "phone": "+79991234567"})
}

impl Rig {
    /// A delivery from the lead source to the workflow's production webhook.
    async fn post(&mut self, key: &str) {
        if !self.keys.iter().any(|k| k == key) {
            self.keys.push(key.to_owned());
        }
        let res = self
            .http
            .post(self.n8n.webhook())
            .json(&lead(key))
            .send()
            .await
            .expect("n8n's webhook answers");
        assert_eq!(
            res.status(),
            200,
            "{}",
            res.text().await.unwrap_or_default()
        );
        self.posts += 1;
    }

    fn leads_of(&self, key: &str) -> usize {
        let origin = op_id(key).to_string();
        self.fake
            .entities()
            .iter()
            .filter(|e| e.fields["ORIGIN_ID"] == origin.as_str())
            .count()
    }

    async fn op(&self, key: &str) -> store::Operation {
        self.store
            .operation(&op_id(key))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no operation for {key}"))
    }

    async fn events(&self, key: &str, kind: &str) -> usize {
        self.store
            .timeline(&op_id(key))
            .await
            .unwrap()
            .iter()
            .filter(|e| e.kind == kind)
            .count()
    }

    async fn wait_status(&self, keys: &[String], status: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let mut pending = Vec::new();
            for k in keys {
                let s = match self.store.operation(&op_id(k)).await.unwrap() {
                    Some(op) => op.status.as_str().to_owned(),
                    None => "absent".into(),
                };
                if s != status {
                    pending.push(format!("{k}: {s}"));
                }
            }
            if pending.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not {status} after {within:?}: {pending:?}\nn8n log:\n{}",
                tail(&self.n8n.log, 40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Redeliveries n8n accepted (sent, and not recorded as failed), over every key.
    async fn redeliveries(&self) -> i64 {
        let mut n = 0;
        for k in &self.keys {
            n += self.events(k, "redelivered").await as i64;
            n -= self.events(k, "redelivery_failed").await as i64;
        }
        n
    }

    /// Waits until n8n has finished one run per delivery and per redelivery its webhook
    /// accepted, then checks that every run succeeded. The redeliveries are counted on
    /// the wire, at the gate: Leadgate's own count (its timelines) can differ by one
    /// that n8n accepted after the redeliverer gave up waiting for the answer.
    async fn executions_settle(&self, within: Duration) -> i64 {
        let deadline = Instant::now() + within;
        loop {
            let accepted = self.gate.accepted.load(std::sync::atomic::Ordering::SeqCst);
            let expected = self.posts + accepted;
            let by_status = self.n8n.executions().await;
            let total: i64 = by_status.values().sum();
            let finished: i64 = by_status
                .iter()
                .filter(|(s, _)| !matches!(s.as_str(), "new" | "running" | "waiting"))
                .map(|(_, n)| n)
                .sum();
            if total == expected && finished == total {
                let crashed = by_status.get("crashed").copied().unwrap_or(0);
                assert!(
                    crashed <= self.crashed_allowed,
                    "n8n runs crashed while n8n was running: {by_status:?}"
                );
                assert_eq!(
                    by_status.get("success").copied().unwrap_or(0) + crashed,
                    total,
                    "every n8n run ends `success`: {by_status:?}"
                );
                return total;
            }
            assert!(
                Instant::now() < deadline,
                "n8n runs {by_status:?}, expected {expected} finished ({} deliveries + \
                 {accepted} redeliveries n8n accepted; Leadgate's timelines count {})\n{}",
                self.posts,
                self.redeliveries().await,
                tail(&self.n8n.log, 40)
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    fn leadgate(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_leadgate"))
            .args(args)
            .args(["--config", self.config.to_str().unwrap()])
            .env_remove("LEADGATE_DATABASE_URL")
            .env("LEADGATE_OPERATOR", "test-operator")
            .output()
            .unwrap()
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

async fn run(backend: Backend) {
    let started = Instant::now();
    let bin = n8n_bin();
    let n8n_db = create_database("lg_n8n").await;
    let lg_db = match backend {
        Backend::Postgres => Some(create_database("lg_test").await),
        Backend::Sqlite => None,
    };
    let dir = tempfile::tempdir().unwrap();
    let result =
        std::panic::AssertUnwindSafe(scenarios(backend, &bin, &n8n_db, &lg_db, dir.path()))
            .catch_unwind()
            .await;
    drop_database(&n8n_db).await;
    if let Some(db) = &lg_db {
        drop_database(db).await;
    }
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    eprintln!(
        "n8n scenarios on {backend:?}: {} s in all",
        started.elapsed().as_secs()
    );
}

async fn scenarios(backend: Backend, bin: &Path, n8n_db: &str, lg_db: &Option<String>, dir: &Path) {
    let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let lg_port = free_port();
    let n8n_port = free_port();
    let gate = Gate::spawn(n8n_port).await;
    let base = format!("http://127.0.0.1:{lg_port}");
    let db_url = match lg_db {
        Some(name) => store::postgres::with_database(&pg_server(), name),
        None => format!("sqlite://{}?mode=rwc", dir.join("leadgate.db").display()),
    };
    let config = dir.join("leadgate.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[database]
url = "{db_url}"
[server]
listen = "127.0.0.1:{lg_port}"
[worker]
poll_interval = "100ms"
[retry]
max_attempts = 30
base_delay = "1s"
max_delay = "2s"
[claim_api]
source = "{SOURCE}"
lease = "30s"
redeliver_url = "{gate}"
redeliver_every = "3s"
[api]
integration_token = "{TOKEN}"
[crm]
kind = "bitrix24"
webhook_url = "{crm}"
"#,
            crm = fake.webhook_url(),
            gate = gate.url,
        ),
    )
    .unwrap();
    let serve_log = dir.join("serve.log");
    let serve = serve(&config, &base, &serve_log).await;
    let store = store::connect(&db_url).await.unwrap();

    let home = dir.join("n8n-home");
    std::fs::create_dir_all(&home).unwrap();
    let mut n8n = N8n {
        bin: bin.to_owned(),
        home,
        database: n8n_db.to_owned(),
        port: n8n_port,
        leadgate_url: base.clone(),
        token: TOKEN.to_owned(),
        crm_url: fake.webhook_url(),
        log: dir.join("n8n.log"),
        workflow_id: WORKFLOW_ID,
        child: None,
    };
    n8n.import_and_activate("examples/n8n/workflow.json");
    n8n.mark_start();
    n8n.start().await;

    let mut rig = Rig {
        n8n,
        fake,
        store,
        config,
        http: reqwest::Client::new(),
        posts: 0,
        keys: Vec::new(),
        gate,
        crashed_allowed: 0,
        _serve: serve,
    };
    let minute = Duration::from_secs(60);

    // 1. One submission: one lead, completed with its id.
    rig.post("one").await;
    rig.wait_status(&["one".into()], "completed", minute).await;
    assert_eq!(rig.leads_of("one"), 1);
    let op = rig.op("one").await;
    let entity = rig
        .fake
        .entities()
        .into_iter()
        .find(|e| e.fields["ORIGIN_ID"] == "n8n:one")
        .unwrap();
    assert_eq!(op.crm_id, Some(entity.id.to_string()));
    assert_eq!(op.attempts, 1);
    assert_eq!(entity.fields["NAME"], "Lead one");
    assert_eq!(rig.executions_settle(minute).await, 1);

    // 2. The sender delivers it again: the saved result, no second create.
    rig.post("one").await;
    rig.executions_settle(minute).await;
    assert_eq!(rig.leads_of("one"), 1);
    assert_eq!(rig.fake.calls(CREATE), 1);
    assert_eq!(rig.op("one").await.attempts, 1);
    assert_eq!(rig.events("one", "delivery").await, 2);

    // 3. 50 submissions, each delivered three times at once.
    let keys: Vec<String> = (0..50).map(|i| format!("burst-{i}")).collect();
    let http = rig.http.clone();
    let webhook = rig.n8n.webhook();
    let sends = keys.iter().flat_map(|k| {
        let (http, webhook) = (http.clone(), webhook.clone());
        (0..3).map(move |_| {
            let (http, webhook, body) = (http.clone(), webhook.clone(), lead(k));
            async move {
                http.post(webhook)
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
                    .status()
            }
        })
    });
    let statuses = futures::future::join_all(sends).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    rig.posts += statuses.len() as i64;
    rig.keys.extend(keys.iter().cloned());
    rig.wait_status(&keys, "completed", 2 * minute).await;
    for k in &keys {
        assert_eq!(rig.leads_of(k), 1, "{k}");
    }
    assert_eq!(rig.fake.calls(CREATE), 51, "one create per submission");
    rig.executions_settle(2 * minute).await;

    // 4. The CRM creates the lead only after n8n's 10 s timeout gave up on the call.
    rig.fake
        .push_fault(CREATE, Fault::ExecuteLate { ms: 12_000 }, 1);
    rig.post("late").await;
    rig.wait_status(&["late".into()], "needs_review", Duration::from_secs(40))
        .await;
    let op = rig.op("late").await;
    assert_eq!(
        op.review_reason.map(|r| r.as_str()),
        Some("uncertain_outcome")
    );
    assert_eq!(op.last_error_class.map(|c| c.as_str()), Some("uncertain"));
    // The sender delivers it again: 409 needs_review, nothing is created.
    rig.post("late").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while rig.leads_of("late") == 0 {
        assert!(Instant::now() < deadline, "the late create never landed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rig.executions_settle(minute).await;
    assert_eq!(rig.leads_of("late"), 1, "one lead, not two");
    assert_eq!(rig.fake.calls(CREATE), 52);
    assert_eq!(rig.op("late").await.status.as_str(), "needs_review");
    assert_eq!(
        rig.events("late", "redelivered").await,
        0,
        "an uncertain outcome is never redelivered"
    );

    // 5. A 503 outage; n8n is stopped in the middle of it and started again; the outage
    //    ends. Nobody re-runs anything: Leadgate's redeliveries bring every lead in once.
    rig.fake.push_fault(
        CREATE,
        Fault::RateLimit {
            retry_after_secs: Some(1),
        },
        100_000,
    );
    let outage: Vec<String> = (0..10).map(|i| format!("outage-{i}")).collect();
    for k in &outage {
        rig.post(k).await;
    }
    // Each is refused, reported rate_limited, and redelivered by Leadgate at least once.
    let deadline = Instant::now() + minute;
    loop {
        let mut all = true;
        for k in &outage {
            all &= rig.events(k, "redelivered").await >= 1 && rig.op(k).await.attempts >= 2;
        }
        if all {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not redelivered during the outage"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(outage.iter().all(|k| rig.leads_of(k) == 0));
    // Redeliveries held back, n8n's runs finished: nothing is between a claim and its
    // report when n8n stops (see `Gate`).
    rig.gate.set_open(false);
    rig.executions_settle(minute).await;
    rig.n8n.stop().await;
    rig.crashed_allowed = outage.len() as i64;
    rig.gate.set_open(true);
    // While n8n is down, redeliveries fail and are kept for later.
    let deadline = Instant::now() + minute;
    loop {
        let mut failed = 0;
        for k in &outage {
            failed += rig.events(k, "redelivery_failed").await;
        }
        if failed > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no redelivery was tried while n8n was down"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    rig.fake.clear_faults();
    rig.n8n.mark_start();
    rig.n8n.start().await;
    rig.wait_status(&outage, "completed", 2 * minute).await;
    for k in &outage {
        assert_eq!(rig.leads_of(k), 1, "{k}: exactly one lead");
        assert_eq!(rig.events(k, "human_action").await, 0, "{k}: nobody acted");
        assert!(rig.events(k, "redelivery_failed").await <= rig.events(k, "redelivered").await);
    }
    rig.executions_settle(minute).await;
    // From here on n8n runs without a stop: nothing more may crash.
    rig.crashed_allowed = rig
        .n8n
        .executions()
        .await
        .get("crashed")
        .copied()
        .unwrap_or(0);

    // 6. A 400: terminal, not retried; the sender's repeat gets the saved failure.
    let creates = rig.fake.calls(CREATE);
    rig.fake.push_fault(CREATE, Fault::Validation, 1);
    rig.post("bad").await;
    rig.wait_status(&["bad".into()], "failed_terminal", minute)
        .await;
    assert_eq!(
        rig.op("bad").await.last_error_class.map(|c| c.as_str()),
        Some("validation")
    );
    rig.post("bad").await;
    rig.executions_settle(minute).await;
    tokio::time::sleep(Duration::from_secs(4)).await; // longer than redeliver_every
    assert_eq!(rig.leads_of("bad"), 0);
    assert_eq!(rig.fake.calls(CREATE), creates + 1, "no retry of a 400");
    assert_eq!(rig.events("bad", "redelivered").await, 0);

    // 7. A 401: the connector pauses; a lead arriving meanwhile is kept, not sent.
    rig.fake.push_fault(CREATE, Fault::ExpiredToken, 1);
    rig.post("auth-1").await;
    let deadline = Instant::now() + minute;
    while !rig
        .store
        .connector(SOURCE)
        .await
        .unwrap()
        .is_some_and(|c| c.paused)
    {
        assert!(Instant::now() < deadline, "the connector was not paused");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        rig.op("auth-1").await.last_error_class.map(|c| c.as_str()),
        Some("auth")
    );
    rig.post("auth-2").await;
    rig.executions_settle(minute).await;
    tokio::time::sleep(Duration::from_secs(4)).await; // longer than redeliver_every
    assert_eq!(rig.fake.calls(CREATE), creates + 2, "no call while paused");
    for k in ["auth-1", "auth-2"] {
        assert_eq!(rig.op(k).await.status.as_str(), "received", "{k}");
        assert_eq!(
            rig.events(k, "redelivered").await,
            0,
            "{k}: none while paused"
        );
    }
    // A person fixes the CRM token and resumes the connector; Leadgate does the rest.
    let out = rig.leadgate(&["connector", "resume", SOURCE]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let both = vec!["auth-1".to_owned(), "auth-2".to_owned()];
    rig.wait_status(&both, "completed", minute).await;
    for k in &both {
        assert_eq!(rig.leads_of(k), 1, "{k}");
        assert!(rig.events(k, "redelivered").await >= 1, "{k}");
    }
    rig.executions_settle(minute).await;

    // Over everything: one lead per submission that reached the CRM, none twice.
    let mut per_key: BTreeMap<String, usize> = BTreeMap::new();
    for e in rig.fake.entities() {
        *per_key
            .entry(e.fields["ORIGIN_ID"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert!(per_key.values().all(|n| *n == 1), "{per_key:?}");
    assert_eq!(per_key.len(), 1 + 50 + 1 + 10 + 2);
    eprintln!(
        "{backend:?}: {} deliveries, {} redeliveries, n8n runs {:?}",
        rig.posts,
        rig.redeliveries().await,
        rig.n8n.executions().await
    );
    rig.n8n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_n8n_workflow_in_a_real_n8n_on_sqlite() {
    run(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_n8n_workflow_in_a_real_n8n_on_postgres() {
    run(Backend::Postgres).await;
}
