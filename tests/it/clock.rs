//! One clock for leases: two `leadgate serve` processes on one PostgreSQL database, one
//! of them on a machine whose clock runs 25 s ahead (libfaketime, preloaded into the real
//! binary), and a CRM that is healthy but takes 8 s per create. If each process judged
//! leases by its own clock, the fast one would see every lease of the other as expired
//! 5 s after it was granted, take it over while the create was still running, find
//! nothing and create again. Leases are judged by the database server's clock, so it
//! does not.
//!
//! PostgreSQL only: SQLite is one file on one machine, and every process on it shares
//! that machine's clock (ARCHITECTURE.md, "How the backends differ"; `Clock::now`).

use std::path::Path;
use std::time::{Duration, Instant};

use leadgate_fakes::bitrix24::{FakeBitrix24, FakeConfig, Fault};
use serde_json::json;

use leadgate_testkit::gateway::{origin_ids, urlencode, CREATE};
use leadgate_testkit::process::{command, free_port, wait_healthy, GatewayFile, Process, SiteAuth};
use leadgate_testkit::{run, Backend};

/// Debian's libfaketime (package `faketime`; `scripts/install-test-deps.sh` installs it).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The site source's intake token and the read token of both gateways.
const TOKEN: &str = "clock-intake-token";
const READ: &str = "clock-read-token";

fn config(dir: &Path, name: &str, db_url: &str, webhook: &str, port: u16) -> String {
    GatewayFile {
        db_url,
        webhook_url: webhook,
        port,
        lease: "30s",
        concurrency: Some(4),
        retry: None,
        read_token: Some(READ),
        site: SiteAuth::Token(TOKEN),
        crm_timeout: "10s",
        // Short, so that a takeover's "not found" would lead to a second create quickly:
        // what is tested here is that no takeover happens.
        settle: Some("1s"),
    }
    .write(dir, name)
}

/// `leadgate serve` on `config` (its read token is the one in the file), up at `base`.
async fn started(mut cmd: std::process::Command, base: &str) -> Process {
    let process = Process(cmd.stdout(std::process::Stdio::null()).spawn().unwrap());
    wait_healthy(base, Duration::from_secs(20), None).await;
    process
}

fn serve(config: &str) -> std::process::Command {
    command(
        env!("CARGO_BIN_EXE_leadgate"),
        &["serve", "--config", config],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_whose_clock_is_25s_ahead_takes_over_no_live_lease() {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install Debian's faketime (scripts/install-test-deps.sh)"
    );
    // The preload really moves the clock of a process.
    let real = chrono::Utc::now().timestamp();
    let out = std::process::Command::new("date")
        .arg("+%s")
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME", "+25s")
        .output()
        .unwrap();
    let faked: i64 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        (faked - real - 25).abs() <= 2,
        "libfaketime did not shift the clock"
    );

    run(Backend::Postgres, |db| async move {
        let fake = FakeBitrix24::spawn_with(
            "127.0.0.1:0".parse().unwrap(),
            FakeConfig {
                always: vec![(CREATE.into(), Fault::LatencyMs { ms: 8000 })],
                ..FakeConfig::default()
            },
        )
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (pa, pb) = (free_port(), free_port());
        let (a, b) = (
            format!("http://127.0.0.1:{pa}"),
            format!("http://127.0.0.1:{pb}"),
        );
        let ca = config(dir.path(), "a", &db.url, &fake.webhook_url(), pa);
        let cb = config(dir.path(), "b", &db.url, &fake.webhook_url(), pb);
        let _honest = started(serve(&ca), &a).await;
        let mut ahead = serve(&cb);
        ahead.env("LD_PRELOAD", LIBFAKETIME).env("FAKETIME", "+25s");
        let _ahead = started(ahead, &b).await;

        let http = reqwest::Client::new();
        for i in 0..20 {
            let base = if i % 2 == 0 { &a } else { &b };
            let res = http
                .post(format!("{base}/v1/intake/site"))
                .header("x-leadgate-token", TOKEN)
                .json(&json!({"submission_id": format!("c{i}"), "name": "Ivan"}))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 202);
        }
        let deadline = Instant::now() + Duration::from_secs(90);
        for i in 0..20 {
            let id = urlencode(&format!("site:c{i}"));
            loop {
                let op: serde_json::Value = http
                    .get(format!("{a}/v1/operations/{id}"))
                    .bearer_auth(READ)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                if op["status"] == "completed" {
                    break;
                }
                assert!(Instant::now() < deadline, "not completed: {op}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let mut keys = origin_ids(&fake);
        keys.sort();
        let before = keys.len();
        keys.dedup();
        assert_eq!(before, 20, "one CRM entity per lead: {keys:?}");
        assert_eq!(keys.len(), 20);
        let store = db.store().await;
        for i in 0..20 {
            let id = format!("site:c{i}").parse().unwrap();
            let t = store.timeline(&id).await.unwrap();
            assert!(
                !t.iter().any(|e| e.kind == "lease_taken_over"),
                "a live lease was taken over: {:?}",
                t.iter().map(|e| &e.kind).collect::<Vec<_>>()
            );
        }
    })
    .await;
}
