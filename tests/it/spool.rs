//! The durable intake spool (src/spool.rs, src/intake/spooled.rs) as an operator runs it:
//! `leadgate serve` processes on a database the test holds — PostgreSQL silent behind a
//! proxy that stops forwarding, SQLite's file held by another connection — for longer
//! than `[spool] patience`. Deliveries are answered `202 spooled`, recorded as soon as the
//! database answers, and make one CRM entity each, through two gateways, redeliveries,
//! `kill -9` while spooled and while draining, and a torn record.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use leadgate_fakes::bitrix24::FakeBitrix24;
use serde_json::{json, Value};
use sqlx::Connection;

use leadgate_testkit::process::{free_port, wait_healthy, GatewayFile, Process, SiteAuth};
use leadgate_testkit::{each_backend, Backend, TestDb};

use crate::insiders::Freezer;
use crate::process::leadgate;

const TOKEN: &str = "spool-site-token";
const READ: &str = "spool-read-token";

/// The database as the test holds it.
enum Hold {
    /// Every gateway connection goes through this proxy.
    Postgres(Freezer),
    /// A connection that takes the file's write lock.
    Sqlite(sqlx::SqliteConnection),
}

impl Hold {
    /// The proxy (PostgreSQL), and the URL the gateways use.
    async fn new(db: &TestDb) -> (Hold, String) {
        match db.backend {
            Backend::Postgres => {
                let upstream = "127.0.0.1:5432";
                assert!(db.url.contains(upstream), "{}", db.url);
                let proxy = Freezer::to(upstream.into()).await;
                let url = db.url.replace(upstream, &proxy.addr);
                (Hold::Postgres(proxy), url)
            }
            Backend::Sqlite => {
                let c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
                (Hold::Sqlite(c), db.url.clone())
            }
        }
    }

    async fn hold(&mut self, on: bool) {
        match self {
            Hold::Postgres(proxy) => proxy.freeze(on),
            Hold::Sqlite(c) => {
                let sql = if on { "begin immediate" } else { "commit" };
                sqlx::query(sql).execute(c).await.unwrap();
            }
        }
    }
}

/// A gateway with its own spool in `dir/spool-{name}`.
struct Gateway {
    config: String,
    base: String,
    process: Option<Process>,
}

impl Gateway {
    fn new(dir: &Path, name: &str, db_url: &str, webhook: &str, extra: &str) -> Gateway {
        let port = free_port();
        let mut toml = GatewayFile {
            db_url,
            webhook_url: webhook,
            port,
            lease: "4s",
            concurrency: None,
            retry: None,
            read_token: Some(READ),
            site: SiteAuth::Token(TOKEN),
            crm_timeout: "3s",
            settle: None,
        }
        .toml();
        toml += &format!(
            "[spool]\ndir = {:?}\npatience = \"1s\"\n{extra}",
            dir.join(format!("spool-{name}")).display().to_string()
        );
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, toml).unwrap();
        Gateway {
            config: config.display().to_string(),
            base: format!("http://127.0.0.1:{port}"),
            process: None,
        }
    }

    /// Starts it; `healthy`: waits until its database answers.
    async fn start(&mut self, healthy: bool) {
        let child = leadgate(&["serve", "--config", &self.config])
            .env("LEADGATE_READ_TOKEN", READ)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn leadgate serve");
        self.process = Some(Process(child));
        if healthy {
            wait_healthy(&self.base, Duration::from_secs(30), None).await;
        } else {
            // Listening (its database may be held): intake answers, whatever it says.
            let deadline = Instant::now() + Duration::from_secs(30);
            while reqwest::get(format!("{}/openapi.json", self.base))
                .await
                .is_err()
            {
                assert!(Instant::now() < deadline, "{} never listened", self.base);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    async fn post(&self, key: &str) -> (u16, Value) {
        let res = reqwest::Client::new()
            .post(format!("{}/v1/intake/site", self.base))
            .header("x-leadgate-token", TOKEN)
            .json(&json!({"submission_id": key, "name": "Ivan", "phone": "+7 999 000-00-00"}))
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    /// A figure of its `/metrics`.
    async fn metric(&self, name: &str) -> f64 {
        let text = reqwest::Client::new()
            .get(format!("{}/metrics", self.base))
            .bearer_auth(READ)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"))
            .trim()
            .parse()
            .unwrap()
    }
}

/// Each key's operation status, straight from the database.
async fn statuses(db: &TestDb, keys: &[String]) -> Vec<String> {
    let store = db.store().await;
    let mut out = vec![];
    for k in keys {
        let id = format!("site:{k}").parse().unwrap();
        let status = store.operation(&id).await.unwrap();
        out.push(status.map_or("missing".to_owned(), |o| o.status.as_str().to_owned()));
    }
    out
}

/// Waits until every key's operation is completed.
async fn all_completed(db: &TestDb, keys: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = statuses(db, keys).await;
        if s.iter().all(|s| s == "completed") {
            return;
        }
        assert!(Instant::now() < deadline, "not all completed: {s:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The keys the fake CRM holds an entity for, each as often as it holds one.
fn crm_keys(fake: &FakeBitrix24) -> Vec<String> {
    let mut keys: Vec<String> = fake
        .entities()
        .iter()
        .map(|e| {
            e.fields["ORIGIN_ID"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    keys.sort();
    keys
}

fn expected(keys: &[String]) -> Vec<String> {
    let mut k: Vec<String> = keys.iter().map(|k| format!("site:{k}")).collect();
    k.sort();
    k
}

each_backend!(
    a_delivery_the_database_cannot_take_is_spooled_and_created_once_when_it_answers,
    |db: TestDb| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let (mut hold, url) = Hold::new(&db).await;
        let dir = tempfile::tempdir().unwrap();
        let mut a = Gateway::new(dir.path(), "a", &url, &fake.webhook_url(), "");
        let mut b = Gateway::new(dir.path(), "b", &url, &fake.webhook_url(), "");
        a.start(true).await;
        b.start(true).await;
        // Recorded (or, on a machine too busy to record it within the patience, spooled).
        let (status, body) = a.post("before").await;
        assert_eq!(status, 202, "{body}");

        hold.hold(true).await;
        // The same key through both gateways, and again through one: spooled each time.
        for (g, key) in [(&a, "k1"), (&b, "k1"), (&a, "k2"), (&a, "k1")] {
            let (status, body) = g.post(key).await;
            assert_eq!(status, 202, "{key} at {}: {body}", g.base);
            assert_eq!(body["outcome"], "spooled", "{body}");
            assert_eq!(body["operation_id"], format!("site:{key}"), "{body}");
        }
        // `/metrics` answers meanwhile, with the spool's figures.
        assert!(a.metric("leadgate_spool_records").await >= 3.0);
        assert!(a.metric("leadgate_spool_oldest_age_seconds").await > 0.0);
        if db.backend == Backend::Postgres {
            assert_eq!(a.metric("leadgate_database_up").await, 0.0);
        }
        hold.hold(false).await;

        let keys: Vec<String> = ["before", "k1", "k2"].map(String::from).to_vec();
        all_completed(&db, &keys).await;
        assert_eq!(crm_keys(&fake), expected(&keys), "one entity per key");
        // Every spooled delivery is journaled (a delivery whose group the database took
        // before it went silent may be journaled twice: a duplicate).
        let k1 = db
            .texts("select operation_id from deliveries where operation_id = 'site:k1'")
            .await
            .len();
        assert!(k1 >= 3, "k1's three deliveries are journaled: {k1}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while a.metric("leadgate_spool_records").await > 0.0
            || b.metric("leadgate_spool_records").await > 0.0
        {
            assert!(Instant::now() < deadline, "the spools were not drained");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for (g, spooled) in [(&a, 3.0), (&b, 1.0)] {
            let appended = g.metric("leadgate_spool_appended_total").await;
            assert!(appended >= spooled, "{}: {appended}", g.base);
            assert_eq!(g.metric("leadgate_spool_drained_total").await, appended);
        }
        assert_eq!(a.metric("leadgate_spool_oldest_age_seconds").await, 0.0);
        assert_eq!(a.metric("leadgate_database_up").await, 1.0);
        a.kill();
        b.kill();
    }
);

each_backend!(
    kill_9_while_spooled_and_while_draining_and_a_torn_record_lose_and_double_nothing,
    |db: TestDb| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let (mut hold, url) = Hold::new(&db).await;
        let dir = tempfile::tempdir().unwrap();
        let mut a = Gateway::new(dir.path(), "a", &url, &fake.webhook_url(), "");
        a.start(true).await;

        hold.hold(true).await;
        let keys: Vec<String> = (0..150).map(|i| format!("s{i}")).collect();
        let answers = futures::future::join_all(keys.iter().map(|k| a.post(k))).await;
        for (k, (status, body)) in keys.iter().zip(answers) {
            assert_eq!(
                (status, body["outcome"].as_str()),
                (202, Some("spooled")),
                "{k}: {body}"
            );
        }
        // Killed with everything spooled; a crash in the middle of an append leaves a torn
        // record behind (it was never answered).
        a.kill();
        let log = dir.path().join("spool-a").join("spool.log");
        let mut torn = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        std::io::Write::write_all(&mut torn, &[200, 0, 0, 0, 1, 2]).unwrap();
        drop(torn);
        hold.hold(false).await;

        // Killed again while it drains: some recorded, not all.
        a.start(false).await;
        let recorded = || async {
            db.texts("select operation_id from operations where operation_id like 'site:s%'")
                .await
                .len()
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while recorded().await == 0 {
            assert!(Instant::now() < deadline, "nothing was drained");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        a.kill();
        let at_kill = recorded().await;
        assert!(
            at_kill < keys.len(),
            "all {at_kill} drained before the kill"
        );
        a.start(true).await;

        all_completed(&db, &keys).await;
        assert_eq!(crm_keys(&fake), expected(&keys), "one entity per key");
        let torn = db
            .texts(
                "select reject_reason from deliveries \
                 where reject_reason like 'spool: a record torn%'",
            )
            .await;
        assert_eq!(
            torn.len(),
            1,
            "the torn record's warning is journaled once: {torn:?}"
        );
        assert!(dir.path().join("spool-a").read_dir().unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("torn-")));
        a.kill();
    }
);

/// A spool full of deliveries answers 503 as a gateway without one, and takes again once
/// drained; what it took is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_spool_answers_unavailable_and_loses_nothing_it_took() {
    leadgate_testkit::run(Backend::Sqlite, |db: TestDb| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let (mut hold, url) = Hold::new(&db).await;
        let dir = tempfile::tempdir().unwrap();
        let mut a = Gateway::new(
            dir.path(),
            "a",
            &url,
            &fake.webhook_url(),
            "max_size = \"2KiB\"\n",
        );
        a.start(true).await;
        hold.hold(true).await;
        let mut taken = vec![];
        let refused = loop {
            let key = format!("f{}", taken.len());
            let (status, body) = a.post(&key).await;
            if status != 202 {
                break (status, body);
            }
            assert_eq!(body["outcome"], "spooled", "{body}");
            taken.push(key);
            assert!(taken.len() < 100, "a 2 KiB spool took 100 deliveries");
        };
        assert_eq!(refused.0, 503, "{}", refused.1);
        assert_eq!(refused.1["code"], "unavailable", "{}", refused.1);
        assert!(!taken.is_empty());
        hold.hold(false).await;
        all_completed(&db, &taken).await;
        assert_eq!(crm_keys(&fake), expected(&taken));
        // The drained spool takes again.
        let (status, body) = a.post("after").await;
        assert_eq!(status, 202, "{body}");
        a.kill();
    })
    .await
}

// A spool a gateway finds when it starts (left by its last run): what waited long is
// drained with care. A content-keyed delivery drained more than half an hour after it
// arrived may not find its content's window any more: new to the journal, it goes to a
// person (late_duplicate), not to the CRM; one drained in time is created. A delivery of
// a tenant pruned meanwhile is dropped with a journal entry that keeps none of it.
each_backend!(
    a_spool_found_at_start_is_drained_with_care_for_what_waited_long,
    |db: TestDb| async move {
        use leadgate::spool::{Limits, Spool, SpooledDelivery};
        use leadgate_testkit::gateway::Gateway as InProcess;
        let dir = tempfile::tempdir().unwrap();
        let spool_dir = dir.path().join("spool");
        let now = chrono::Utc::now();
        let form = |phone: &str, received_at| SpooledDelivery {
            tenant: "default".into(),
            source: "form".into(),
            received_at,
            content_type: Some("application/json".into()),
            headers: vec![],
            body: format!(r#"{{"phone":"{phone}","message":"call me"}}"#).into_bytes(),
            payload: json!({"phone": phone, "message": "call me"}),
        };
        {
            let limits = Limits {
                max_bytes: 1 << 20,
                max_age: Duration::from_secs(7 * 24 * 3600),
            };
            let (spool, _) = Spool::open(&spool_dir, limits).unwrap();
            let late = form("+79990000001", now - chrono::TimeDelta::hours(2));
            let in_time = form("+79990000002", now - chrono::TimeDelta::minutes(1));
            let mut ghost = form("+79990000003", now);
            ghost.tenant = "ghost".into();
            for d in [late, in_time, ghost] {
                spool.append(&d, now).unwrap();
            }
        }
        let extra = format!(
            "[spool]\ndir = {:?}\n[[source]]\nname = \"form\"\nkey = \"content:/phone+/message\"\n\
             token = \"form-token\"\n",
            spool_dir.display().to_string()
        );
        let gw = InProcess::start_extended(&db, &extra).await;
        // Each form operation: its key ends with the time its window began (the time its
        // delivery arrived), so the late one sorts first.
        let deadline = Instant::now() + Duration::from_secs(30);
        let forms = loop {
            let mut forms = db
                .texts(
                    "select operation_id || ' ' || status || ' ' || coalesce(review_reason, '-') \
                     from operations where source = 'form'",
                )
                .await;
            // `form:c<hash>-<time> <status> <reason>`: by the time.
            forms.sort_by_key(|f| {
                f.split(' ')
                    .next()
                    .and_then(|id| id.rsplit('-').next())
                    .map(str::to_owned)
            });
            let settled = |f: &String| f.contains(" completed ") || f.contains(" needs_review ");
            if forms.len() == 2 && forms.iter().all(settled) {
                break forms;
            }
            assert!(Instant::now() < deadline, "{forms:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(
            forms[0].ends_with(" needs_review late_duplicate"),
            "{forms:?}"
        );
        assert!(forms[1].ends_with(" completed -"), "{forms:?}");
        assert_eq!(gw.fake.calls(leadgate_testkit::gateway::CREATE), 1);
        // The pruned tenant's delivery: one journal entry, none of its data.
        let dropped = db
            .texts(
                "select reject_reason || ' ' || cast(length(raw_body) as text) from deliveries \
                 where reject_reason like '%tenant `ghost`%'",
            )
            .await;
        assert_eq!(dropped.len(), 1, "{dropped:?}");
        assert!(dropped[0].ends_with(" 0"), "{dropped:?}");
        assert!(!dropped[0].contains("0003"), "{dropped:?}");
        let stats_deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::metadata(spool_dir.join("spool.log"))
            .unwrap()
            .len()
            > 0
        {
            assert!(Instant::now() < stats_deadline, "the spool was not emptied");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
);
