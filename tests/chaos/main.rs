//! The chaos run, bounded so `make test` runs it (`make chaos` runs a long one).
//!
//! Two `leadgate serve` processes share one database — a SQLite file, then a PostgreSQL
//! cluster of the test's own (so it can be restarted without disturbing other tests) —
//! and one fake Bitrix24 that misbehaves at random the way a portal under load does: it
//! hangs after creating, refuses with 503, answers 500 after creating, refuses with 500,
//! and executes creates 2.5 s late, after the client's 1 s timeout gave up on them; its
//! lists lag behind writes. Every couple of seconds a random gateway is killed with
//! SIGKILL and started again; PostgreSQL is restarted (immediate shutdown) mid-run. Leads
//! are delivered like a webhook sender does: again on any failure, and sometimes twice.
//! Each gateway has its durable intake spool: what the database does not take within a
//! second is spooled and answered, and drained by the gateway (killed in the middle of
//! that too) once the database answers.
//!
//! Then: no operation has more than one CRM entity, every lead ends completed, and the
//! gateway's `/metrics` count exactly the entities the CRM holds.
//!
//! Sizes come from the environment, for the long run: `LEADGATE_CHAOS_LEADS` (default
//! 240 per backend) and `LEADGATE_CHAOS_SECONDS` (default 25 s of traffic per backend).
//!
//! `fleet`: the same with a fleet of tenants, each on a CRM of its own (fleet mode).

mod fleet;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leadgate_fakes::amocrm::FakeAmoCrm;
use leadgate_fakes::bitrix24::{FakeBitrix24, FakeConfig, Fault};
use leadgate_fakes::RandomFault;
use leadgate_testkit::gateway::CREATE;
use leadgate_testkit::process::{command, free_port, wait_healthy, GatewayFile, Process, SiteAuth};
use rand::Rng;
use serde_json::json;

/// The site source's intake token and the gateways' read token.
const TOKEN: &str = "chaos-intake-token";
const READ: &str = "chaos-read-token";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A `leadgate serve` that can be killed and started again on the same port.
struct Gateway {
    config: String,
    port: u16,
    log: PathBuf,
    process: Option<Process>,
}

impl Gateway {
    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = command(
            env!("CARGO_BIN_EXE_leadgate"),
            &["serve", "--config", &self.config],
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn leadgate serve");
        self.process = Some(Process(child));
    }

    /// SIGKILL (dropping the process kills it).
    fn kill(&mut self) {
        self.process = None;
    }

    async fn wait_up(&self) {
        wait_healthy(&self.base(), Duration::from_secs(30), Some(&self.log)).await;
    }
}

/// A PostgreSQL cluster of the test's own, on its own port, run by the `postgres` user
/// when the test runs as root (the server refuses to run as root).
struct PgCluster {
    _dir: tempfile::TempDir,
    data: PathBuf,
    bin: PathBuf,
    port: u16,
}

impl PgCluster {
    fn pg_bin() -> PathBuf {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL server binaries under /usr/lib/postgresql (Debian's postgresql)")
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("pg_ctl").exists())
            .collect();
        versions.sort();
        versions.pop().expect("pg_ctl")
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let as_root = nix_uid() == 0;
        let mut cmd = if as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd.args(args).output().expect("run a PostgreSQL tool");
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn start() -> PgCluster {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        if nix_uid() == 0 {
            chmod(dir.path(), 0o755);
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success());
        }
        let cluster = PgCluster {
            data,
            bin: Self::pg_bin(),
            port: free_port(),
            _dir: dir,
        };
        let d = cluster.data.display().to_string();
        cluster.run(
            "initdb",
            &["-D", &d, "-A", "trust", "-U", "postgres", "--no-sync"],
        );
        cluster.pg_ctl_start();
        cluster
    }

    fn pg_ctl_start(&self) {
        let d = self.data.display().to_string();
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=100",
            self.port, d
        );
        let log = format!("{d}/server.log");
        self.run(
            "pg_ctl",
            &["-D", &d, "-o", &opts, "-l", &log, "-w", "start"],
        );
    }

    /// Kills the server the way a crash does (no checkpoint) and starts it again.
    fn crash_restart(&self) {
        let d = self.data.display().to_string();
        self.run("pg_ctl", &["-D", &d, "-m", "immediate", "-w", "stop"]);
        self.pg_ctl_start();
    }

    fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let d = self.data.display().to_string();
        let exe = self.bin.join("pg_ctl");
        let mut cmd = if nix_uid() == 0 {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let _ = cmd.args(["-D", &d, "-m", "immediate", "stop"]).output();
    }
}

fn nix_uid() -> u32 {
    // `id -u` rather than a libc binding for one number.
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Gateways `a` and `b`, each on a free port with the configuration `config(name, port)`
/// writes, started and answering.
async fn two_gateways(dir: &Path, config: impl Fn(&str, u16) -> String) -> Vec<Gateway> {
    let mut gateways: Vec<Gateway> = ["a", "b"]
        .iter()
        .map(|name| {
            let port = free_port();
            Gateway {
                config: config(name, port),
                port,
                log: dir.join(format!("{name}.log")),
                process: None,
            }
        })
        .collect();
    for g in &mut gateways {
        g.spawn();
    }
    for g in &gateways {
        g.wait_up().await;
    }
    gateways
}

fn config(dir: &Path, name: &str, db_url: &str, webhook: &str, port: u16) -> String {
    let path = GatewayFile {
        db_url,
        webhook_url: webhook,
        port,
        lease: "3s",
        concurrency: Some(4),
        retry: Some((30, "100ms", "1s")),
        read_token: Some(READ),
        site: SiteAuth::Token(TOKEN),
        crm_timeout: "1s",
        // The fake lands a late create at most 2.5 s after it arrived and its lists lag
        // 300 ms.
        settle: Some("4s"),
    }
    .write(dir, name);
    // This portal keeps no request limit: the gateways need not keep Bitrix24's (what is
    // tested here is kill -9 and a faulty CRM; pacing has tests of its own), so the
    // reconciliation of everything a kill leaves in flight is not held at 2 lookups a
    // second.
    let mut toml = std::fs::read_to_string(&path).unwrap();
    toml += "rate_limit = 200.0\nburst = 200\n";
    // Each gateway keeps its own spool across its kills: what the database does not take
    // within a second (it crashes once, a killed gateway's leases hold rows) is spooled,
    // answered, and drained after the next start.
    toml += &format!(
        "[spool]\ndir = {:?}\npatience = \"1s\"\n",
        dir.join(format!("spool-{name}")).display().to_string()
    );
    std::fs::write(&path, toml).unwrap();
    path
}

fn chaotic_portal() -> FakeConfig {
    let random = |probability, fault| RandomFault {
        method: CREATE.into(),
        probability,
        fault,
    };
    FakeConfig {
        random: vec![
            random(0.04, Fault::LostAnswerHang),
            random(
                0.05,
                Fault::RateLimit {
                    retry_after_secs: None,
                },
            ),
            random(0.04, Fault::ServerErrorAfterCreate),
            random(0.03, Fault::ServerError),
            random(0.06, Fault::ExecuteLate { ms: 2500 }),
            RandomFault {
                method: "crm.lead.list".into(),
                probability: 0.05,
                fault: Fault::RateLimit {
                    retry_after_secs: None,
                },
            },
        ],
        search_lag: Duration::from_millis(300),
        ..FakeConfig::default()
    }
}

#[derive(Debug, Default)]
struct Figures {
    leads: usize,
    deliveries: u64,
    refused_or_failed: u64,
    /// Answered `202 spooled` (the database did not take them within a second).
    spooled: u64,
    kills: u64,
    db_restarts: u64,
    entities: usize,
    metrics_entities: i64,
    create_calls: u64,
    recovered: usize,
    verify_passes: usize,
    review_cases: usize,
    seconds: f64,
}

/// Delivers one lead until a gateway accepts it, like a webhook sender with retries;
/// false if none did within a minute.
async fn deliver(
    http: &reqwest::Client,
    bases: &[String],
    key: &str,
    figures: &mut Figures,
) -> bool {
    deliver_to(http, bases, "site", TOKEN, key, figures).await
}

/// [`deliver`] to `/v1/intake/{path}` with `token`.
async fn deliver_to(
    http: &reqwest::Client,
    bases: &[String],
    path: &str,
    token: &str,
    key: &str,
    figures: &mut Figures,
) -> bool {
    let body = json!({"submission_id": key, "name": "Ivan", "phone": "+7 999 000-00-00"});
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let base = &bases[rand::rng().random_range(0..bases.len())];
        figures.deliveries += 1;
        let res = http
            .post(format!("{base}/v1/intake/{path}"))
            .header("x-leadgate-token", token)
            .timeout(Duration::from_secs(5))
            .json(&body)
            .send()
            .await;
        match res {
            Ok(r) if r.status().is_success() => {
                let body: serde_json::Value = r.json().await.unwrap_or_default();
                if body["outcome"] == "spooled" {
                    figures.spooled += 1;
                }
                return true;
            }
            _ => figures.refused_or_failed += 1,
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn chaos(db_url: &str, pg: Option<&PgCluster>) -> Figures {
    let started = Instant::now();
    let leads = env_or("LEADGATE_CHAOS_LEADS", 240) as usize;
    let traffic = Duration::from_secs(env_or("LEADGATE_CHAOS_SECONDS", 25));
    let fake = FakeBitrix24::spawn_with("127.0.0.1:0".parse().unwrap(), chaotic_portal())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut gateways = two_gateways(dir.path(), |name, port| {
        config(dir.path(), name, db_url, &fake.webhook_url(), port)
    })
    .await;
    let bases: Vec<String> = gateways.iter().map(Gateway::base).collect();
    let mut figures = Figures {
        leads,
        ..Figures::default()
    };
    let http = reqwest::Client::new();
    let pace = traffic / leads as u32;
    let mut next_kill = Instant::now() + Duration::from_secs(2);
    let restart_db_at = leads / 2;
    for i in 0..leads {
        let key = format!("chaos-{i}");
        let redelivered = rand::rng().random_bool(0.1); // a redelivery of the same event
        for _ in 0..1 + usize::from(redelivered) {
            if !deliver(&http, &bases, &key, &mut figures).await {
                let logs: Vec<String> = gateways
                    .iter()
                    .map(|g| std::fs::read_to_string(&g.log).unwrap_or_default())
                    .collect();
                panic!(
                    "{key} was never accepted; gateway logs:\n{}",
                    logs.join("\n---\n")
                );
            }
        }
        if Instant::now() >= next_kill {
            let victim = rand::rng().random_range(0..gateways.len());
            gateways[victim].kill();
            figures.kills += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
            gateways[victim].spawn();
            next_kill =
                Instant::now() + Duration::from_millis(rand::rng().random_range(1500..3500));
        }
        if i == restart_db_at {
            if let Some(pg) = pg {
                pg.crash_restart();
                figures.db_restarts += 1;
            }
        }
        tokio::time::sleep(pace).await;
    }
    // Let both gateways drain what is left.
    for g in &mut gateways {
        if g.process.is_none() {
            g.spawn();
        }
    }
    for g in &gateways {
        g.wait_up().await;
    }
    let store = leadgate::store::connect(db_url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = store
            .metrics(store.now(), Duration::from_secs(60))
            .await
            .unwrap();
        let done = m
            .operations_by_status
            .get("completed")
            .copied()
            .unwrap_or(0);
        if done as usize == leads {
            break;
        }
        if Instant::now() > deadline {
            panic!("not every lead completed: {:?}", m.operations_by_status);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // One entity per operation, the metrics equal the CRM's own count.
    let mut per_key: BTreeMap<String, usize> = BTreeMap::new();
    for e in fake.entities() {
        let key = e.fields["ORIGIN_ID"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        *per_key.entry(key).or_default() += 1;
    }
    let duplicated: Vec<_> = per_key.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "operations with more than one CRM entity: {duplicated:?}"
    );
    figures.entities = per_key.values().sum();
    figures.create_calls = fake.calls(CREATE);
    let text = http
        .get(format!("{}/metrics", bases[0]))
        .bearer_auth(READ)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    figures.metrics_entities = text
        .lines()
        .find_map(|l| l.strip_prefix("leadgate_crm_entities_created_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("crm_entities_created in /metrics");
    for i in 0..leads {
        let id = format!("site:chaos-{i}").parse().unwrap();
        let op = store.operation(&id).await.unwrap().unwrap();
        assert_eq!(op.status.as_str(), "completed", "{id}");
        assert!(op.crm_id.is_some());
        let t = store.timeline(&id).await.unwrap();
        figures.recovered += t.iter().filter(|e| e.kind == "recovered").count();
        figures.verify_passes += t.iter().filter(|e| e.kind == "verify_scheduled").count();
        figures.review_cases += store.cases_of(&id).await.unwrap().len();
    }
    figures.seconds = started.elapsed().as_secs_f64();
    // Straight to the process's stderr, past the test harness's capture: CI logs show the
    // figures of every run, passing or not.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "chaos figures ({}): {figures:?}",
        store.backend()
    );
    assert_eq!(
        figures.entities, figures.leads,
        "every lead reached the CRM exactly once"
    );
    assert_eq!(
        figures.metrics_entities, figures.entities as i64,
        "/metrics must count what the CRM holds"
    );
    figures
}

/// The two runs share the machine's two cores: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_two_gateways_kill_9_and_a_chaotic_crm_make_one_entity_per_lead() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("chaos.db").display()
    );
    chaos(&url, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_two_gateways_kill_9_a_server_crash_and_a_chaotic_crm_make_one_entity_per_lead() {
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = PgCluster::start();
    let admin = pg.url("postgres");
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
        .await
        .unwrap();
    sqlx::query("create database chaos")
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    chaos(&pg.url("chaos"), Some(&pg)).await;
}

/// The `[crm]` of an amoCRM gateway on `fake`, in place of the test file's Bitrix24 one:
/// amoCRM's own pace (7 requests a second, no burst), batches of `leads/complex`.
fn amocrm_config(dir: &Path, name: &str, db_url: &str, fake: &FakeAmoCrm, port: u16) -> String {
    let path = config(dir, name, db_url, "http://unused/", port);
    let toml = std::fs::read_to_string(&path).unwrap();
    let (head, _) = toml.split_once("[crm]").unwrap();
    let toml = format!(
        "{head}[crm]\nkind = \"amocrm\"\nbase_url = \"{}\"\ntoken = \"{}\"\n\
         operation_field_id = {}\ntimeout = \"1s\"\nsettle = \"2s\"\n",
        fake.base_url(),
        fake.token(),
        leadgate_fakes::amocrm::FIELD_ID
    );
    std::fs::write(&path, toml).unwrap();
    path
}

/// The operation keys a fake amoCRM lead carries in its custom fields.
fn amo_keys(lead: &serde_json::Value) -> Vec<String> {
    lead["custom_fields_values"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|f| f["values"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v["value"].as_str().map(str::to_owned))
        .collect()
}

#[derive(Debug, Default)]
struct AmoFigures {
    leads: usize,
    kills: u64,
    completed: i64,
    in_review: i64,
    /// Leads sent to a person whose create never reached the CRM: the process died
    /// after recording the attempt and before the request left.
    in_review_never_received: usize,
    /// Leads sent to a person whose create reached the CRM, which did not finish it (the
    /// fake stops a create whose client hung up during its latency).
    in_review_arrived: usize,
    crm_leads: usize,
    /// From an attempt recorded as started to its request's arrival at the CRM, in ms:
    /// the window in which a kill strands a lead (median and largest).
    window_ms_median: i64,
    window_ms_max: i64,
    seconds: f64,
}

/// amoCRM, whose search lags and so proves no absence: a lead whose attempt was
/// recorded but whose request never left (the process was killed in between) cannot be
/// told from one the CRM created and does not show yet, and goes to a person. Two
/// gateways, `LEADGATE_AMO_CHAOS_LEADS` leads (default 100), 30 % delivered twice, two
/// kill -9: no lead is created twice, every lead is completed or with a person, and
/// the figures say how many were sent to a person for a request that never left.
async fn amocrm_chaos(db_url: &str) -> AmoFigures {
    let started = Instant::now();
    let leads = env_or("LEADGATE_AMO_CHAOS_LEADS", 100) as usize;
    let fake = FakeAmoCrm::spawn_with(
        "127.0.0.1:0".parse().unwrap(),
        leadgate_fakes::amocrm::FakeConfig {
            settings: leadgate_fakes::amocrm::Settings {
                search_lag_ms: 1000,
                ..Default::default()
            },
            // A real account takes a few hundred ms per `leads/complex`.
            always: vec![(
                leadgate_fakes::amocrm::CREATE.into(),
                leadgate_fakes::amocrm::Fault::LatencyMs { ms: 250 },
            )],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut gateways = two_gateways(dir.path(), |name, port| {
        amocrm_config(dir.path(), name, db_url, &fake, port)
    })
    .await;
    let bases: Vec<String> = gateways.iter().map(Gateway::base).collect();
    let mut figures = AmoFigures {
        leads,
        ..AmoFigures::default()
    };
    let mut delivered = Figures::default();
    let http = reqwest::Client::new();
    let kills = env_or("LEADGATE_AMO_CHAOS_KILLS", 2) as usize;
    let kill_at: Vec<usize> = (1..=kills).map(|k| k * leads / (kills + 1)).collect();
    for i in 0..leads {
        let key = format!("amo-{i}");
        let twice = rand::rng().random_bool(0.3);
        for _ in 0..1 + usize::from(twice) {
            assert!(
                deliver(&http, &bases, &key, &mut delivered).await,
                "{key} was never accepted"
            );
        }
        if kill_at.contains(&i) {
            let victim = rand::rng().random_range(0..gateways.len());
            gateways[victim].kill();
            figures.kills += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
            gateways[victim].spawn();
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    for g in &gateways {
        g.wait_up().await;
    }
    let store = leadgate::store::connect(db_url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let m = store
            .metrics(store.now(), Duration::from_secs(60))
            .await
            .unwrap();
        let of = |s: &str| m.operations_by_status.get(s).copied().unwrap_or(0);
        (figures.completed, figures.in_review) = (of("completed"), of("needs_review"));
        if (figures.completed + figures.in_review) as usize == leads {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every lead settled: {:?}",
            m.operations_by_status
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut per_key: BTreeMap<String, usize> = BTreeMap::new();
    for lead in fake.leads() {
        for key in amo_keys(&lead) {
            *per_key.entry(key).or_default() += 1;
        }
    }
    figures.crm_leads = fake.leads().len();
    let duplicated: Vec<_> = per_key.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "operations with more than one CRM lead: {duplicated:?}"
    );
    let arrivals = fake.arrivals();
    let mut windows = Vec::new();
    for i in 0..leads {
        let id: leadgate::domain::OperationId = format!("site:amo-{i}").parse().unwrap();
        let op = store.operation(&id).await.unwrap().unwrap();
        let in_crm = per_key.contains_key(&id.to_string());
        let started: Vec<_> = store
            .timeline(&id)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == "attempt_started")
            .map(|e| e.at)
            .collect();
        for (arrived, _) in arrivals
            .iter()
            .filter(|(_, ids)| ids.iter().any(|k| *k == id.to_string()))
        {
            if let Some(at) = started.iter().filter(|at| *at <= arrived).max() {
                windows.push((*arrived - *at).num_milliseconds());
            }
        }
        let arrived = arrivals
            .iter()
            .any(|(_, ids)| ids.iter().any(|k| *k == id.to_string()));
        match op.status.as_str() {
            "completed" => assert!(in_crm, "{id} completed without a lead in the CRM"),
            _ if !arrived => figures.in_review_never_received += 1,
            _ => figures.in_review_arrived += 1,
        }
    }
    windows.sort_unstable();
    assert!(!windows.is_empty(), "no create reached the CRM");
    assert_eq!(figures.kills as usize, kills);
    assert_eq!(
        figures.crm_leads,
        per_key.len(),
        "every lead in the CRM is one operation's"
    );
    assert!(figures.crm_leads <= figures.leads);
    figures.window_ms_median = windows[windows.len() / 2];
    figures.window_ms_max = *windows.last().unwrap();
    figures.seconds = started.elapsed().as_secs_f64();
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "amoCRM chaos figures ({}): {figures:?}",
        store.backend()
    );
    figures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_amocrm_two_gateways_kill_9_create_no_lead_twice() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("amo.db").display());
    amocrm_chaos(&url).await;
}
