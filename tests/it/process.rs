//! The `leadgate` binary as an operator runs it: separate processes, real signals.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leadgate_fakes::bitrix24::{FakeBitrix24, Fault};
use serde_json::{json, Value};

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{urlencode, CREATE};
use leadgate_testkit::process::{command, free_port, wait_healthy, GatewayFile, Process, SiteAuth};

/// `leadgate args…`, with the read token given through the environment.
pub fn leadgate(args: &[&str]) -> Command {
    let mut cmd = command(env!("CARGO_BIN_EXE_leadgate"), args);
    cmd.env("LEADGATE_READ_TOKEN", READ_TOKEN);
    cmd
}

/// The site source's HMAC key, and the read token given through the environment.
const SITE_SECRET: &str = "proc-site-hmac-key";
const READ_TOKEN: &str = "proc-read-token";

/// A signed delivery to the site source.
async fn post_lead(http: &reqwest::Client, base: &str, lead: &Value) -> reqwest::Response {
    let body = serde_json::to_vec(lead).unwrap();
    let now = chrono::Utc::now().timestamp();
    http.post(format!("{base}/v1/intake/site"))
        .header("content-type", "application/json")
        .header("x-leadgate-timestamp", now.to_string())
        .header(
            "x-leadgate-signature",
            leadgate::intake::sources::sign(SITE_SECRET.as_bytes(), now, &body),
        )
        .body(body)
        .send()
        .await
        .unwrap()
}

fn write_config(dir: &Path, db_url: &str, webhook: &str, port: u16) -> String {
    GatewayFile {
        db_url,
        webhook_url: webhook,
        port,
        lease: "4s",
        concurrency: None,
        retry: None,
        read_token: None,
        site: SiteAuth::Secret(SITE_SECRET),
        crm_timeout: "3s",
        settle: None,
    }
    .write(dir, "leadgate")
}

async fn serve(config: &str, base: &str) -> Process {
    let child = leadgate(&["serve", "--config", config])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn leadgate serve");
    let process = Process(child);
    wait_healthy(base, Duration::from_secs(20), None).await;
    process
}

each_backend!(
    a_gateway_killed_after_the_crm_created_recovers_without_a_second_create,
    |db| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        // The CRM creates the lead and then never answers: the worker is waiting when killed.
        fake.push_fault(CREATE, Fault::LostAnswerHang, 1);
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let config = write_config(dir.path(), &db.url, &fake.webhook_url(), port);
        let mut first = serve(&config, &base).await;
        let http = reqwest::Client::new();
        let res = post_lead(
            &http,
            &base,
            &json!({"submission_id": "k9", "name": "Ivan"}),
        )
        .await;
        assert_eq!(res.status(), 202);
        let deadline = Instant::now() + Duration::from_secs(10);
        while fake.entities().is_empty() {
            assert!(Instant::now() < deadline, "the CRM never got the create");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // SIGKILL: no chance to save anything.
        first.0.kill().unwrap();
        first.0.wait().unwrap();
        let store = db.store().await;
        let id = "site:k9".parse().unwrap();
        let op = store.operation(&id).await.unwrap().unwrap();
        assert_eq!(
            op.status.as_str(),
            "in_progress",
            "the result was never saved"
        );
        assert_eq!(op.crm_id, None);

        let _second = serve(&config, &base).await;
        let deadline = Instant::now() + Duration::from_secs(15);
        let op: Value = loop {
            let op: Value = http
                .get(format!("{base}/v1/operations/{}", urlencode("site:k9")))
                .bearer_auth(READ_TOKEN)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if op["status"] == "completed" {
                break op;
            }
            assert!(Instant::now() < deadline, "not recovered: {op}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let created = fake.entities();
        assert_eq!(created.len(), 1, "no second create");
        assert_eq!(fake.calls(CREATE), 1);
        assert_eq!(op["crm_id"], created[0].id.to_string());
        let op = store.operation(&id).await.unwrap().unwrap();
        assert_eq!(op.crm_link.as_deref(), Some("recovered"));

        // What support sees in a terminal.
        let out = leadgate(&["ops", "show", "site:k9", "--config", &config])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        for needle in [
            "completed",
            "recovered",
            "attempt_started",
            "lease_taken_over",
            "reconciliation",
        ] {
            assert!(text.contains(needle), "{needle} missing from:\n{text}");
        }
        let out = leadgate(&["ops", "show", "site:nope", "--config", &config])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("no operation"));
    }
);

each_backend!(
    a_gateway_killed_between_a_batch_s_send_and_its_commit_recovers_every_lead_once,
    |db| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        // One claim loop: the ten leads go in one batch request.
        let config = GatewayFile {
            db_url: &db.url,
            webhook_url: &fake.webhook_url(),
            port,
            lease: "4s",
            concurrency: Some(1),
            retry: None,
            read_token: None,
            site: SiteAuth::Secret(SITE_SECRET),
            crm_timeout: "3s",
            settle: None,
        }
        .write(dir.path(), "leadgate");
        let store = db.store().await;
        // The leads pile up while the connector is paused (as after an outage).
        store
            .pause_connector("bitrix24", "test: let work pile up", "test", store.now())
            .await
            .unwrap();
        let mut first = serve(&config, &base).await;
        let http = reqwest::Client::new();
        let keys: Vec<String> = (0..10).map(|i| format!("kb{i}")).collect();
        for k in &keys {
            let res = post_lead(&http, &base, &json!({"submission_id": k, "name": "Ivan"})).await;
            assert_eq!(res.status(), 202);
        }
        // The portal executes every add of the batch, then never answers.
        fake.push_fault("batch", Fault::LostAnswerHang, 1);
        assert!(store
            .resume_connector("bitrix24", "test", store.now())
            .await
            .unwrap());
        let deadline = Instant::now() + Duration::from_secs(15);
        while fake.entities().len() < keys.len() {
            assert!(Instant::now() < deadline, "the CRM never got the batch");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // SIGKILL while the worker waits for the answer: nothing of it is saved.
        first.0.kill().unwrap();
        first.0.wait().unwrap();
        assert_eq!(fake.calls("batch"), 1);
        for k in &keys {
            let op = store
                .operation(&format!("site:{k}").parse().unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                op.status.as_str(),
                "in_progress",
                "{k}: the result was never saved"
            );
            assert_eq!(op.crm_id, None);
        }

        let _second = serve(&config, &base).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        for k in &keys {
            let id = format!("site:{k}").parse().unwrap();
            let op = loop {
                let op = store.operation(&id).await.unwrap().unwrap();
                if op.status.as_str() == "completed" {
                    break op;
                }
                assert!(Instant::now() < deadline, "{k} not recovered: {op:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            assert_eq!(op.crm_link.as_deref(), Some("recovered"), "{k}");
        }
        assert_eq!(fake.entities().len(), keys.len(), "no second create");
        assert_eq!(
            fake.calls(CREATE),
            keys.len() as u64,
            "no add was sent twice"
        );
    }
);

each_backend!(
    logs_are_json_lines_with_the_operation_id_and_no_secrets_or_contacts,
    |db| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        // The file says one port; LEADGATE_LISTEN says where it really listens.
        let config = write_config(dir.path(), &db.url, &fake.webhook_url(), 9);
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let log = dir.path().join("serve.log");
        let child = leadgate(&["serve", "--config", &config])
            .env("LEADGATE_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .env("LEADGATE_LISTEN", format!("127.0.0.1:{port}"))
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut process = Process(child);
        wait_healthy(&base, Duration::from_secs(20), Some(&log)).await;
        let http = reqwest::Client::new();
        let res = post_lead(&http, &base, &json!({"submission_id": "log1", "name": "Secretive", "phone": "+79995550101", "email": "hidden@example.com"})).await;
        assert_eq!(res.status(), 202);
        // A validation failure puts the CRM's message through the log path too.
        fake.push_fault(CREATE, Fault::Validation, 1);
        post_lead(
            &http,
            &base,
            &json!({"submission_id": "log2", "name": "Secretive", "phone": "+79995550101"}),
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while fake.calls(CREATE) < 2 {
            assert!(Instant::now() < deadline, "the worker never called the CRM");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = process.0.kill();
        let _ = process.0.wait();
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"))
            })
            .collect();
        assert!(
            lines.iter().any(|l| l.to_string().contains("site:log1")),
            "no line carries the operation_id:\n{text}"
        );
        for secret in [
            "fake-secret",
            SITE_SECRET,
            READ_TOKEN,
            "79995550101",
            "hidden@example.com",
            "Secretive",
        ] {
            assert!(
                !text.contains(secret),
                "`{secret}` reached the log:\n{text}"
            );
        }
        // Support's view of the same figures.
        let out = leadgate(&["metrics", "--config", &config])
            .output()
            .unwrap();
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(
            table.contains("unique operations") && table.contains("2"),
            "{table}"
        );
        assert!(table.contains("operations failed_terminal"), "{table}");
    }
);

each_backend!(
    the_connector_is_paused_and_resumed_from_the_command_line,
    |db| async move {
        let store = db.store().await;
        store
            .pause_connector(
                "bitrix24",
                "expired_token",
                "worker",
                leadgate::store::local_now(),
            )
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(
            dir.path(),
            &db.url,
            "http://127.0.0.1:9/rest/1/x/",
            free_port(),
        );
        let out = leadgate(&["connector", "list", "--config", &config])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            text.contains("PAUSED") && text.contains("expired_token"),
            "{text}"
        );
        let out = leadgate(&["connector", "resume", "--config", &config])
            .env("LEADGATE_OPERATOR", "anna")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("resumed"));
        let c = store.connector("bitrix24").await.unwrap().unwrap();
        assert!(!c.paused);
        assert_eq!(c.changed_by, "cli:anna");
        let out = leadgate(&["connector", "resume", "bitrix24", "--config", &config])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains("was not paused"));

        // Paused by hand: a reason is required, the name must be one that exists, and a
        // second pause changes nothing.
        let pause = |args: &[&str]| {
            let mut all = vec!["connector", "pause"];
            all.extend_from_slice(args);
            all.extend_from_slice(&["--config", &config]);
            let out = leadgate(&all)
                .env("LEADGATE_OPERATOR", "olga")
                .output()
                .unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).to_string(),
                String::from_utf8_lossy(&out.stderr).to_string(),
            )
        };
        let (ok, _, err) = pause(&["--reason", "  "]);
        assert!(
            !ok && err.contains("say why the connector is paused"),
            "{err}"
        );
        let (ok, _, err) = pause(&["bitrix42", "--reason", "maintenance"]);
        assert!(
            !ok && err.contains("there is no connector `bitrix42`") && err.contains("bitrix24"),
            "{err}"
        );
        assert!(!store.connector("bitrix24").await.unwrap().unwrap().paused);
        let (ok, out, err) = pause(&["--reason", "portal maintenance, call +7 999 123-45-67"]);
        assert!(
            ok && out.contains("connector `bitrix24` paused"),
            "{out}{err}"
        );
        let c = store.connector("bitrix24").await.unwrap().unwrap();
        assert!(c.paused && c.by_hand, "{c:?}");
        assert_eq!(c.changed_by, "cli:olga");
        let reason = c.reason.unwrap();
        assert!(
            reason.starts_with("portal maintenance") && !reason.contains("123-45-67"),
            "a phone number in a reason is masked: {reason}"
        );
        let (ok, out, _) = pause(&["bitrix24", "--reason", "again"]);
        assert!(ok && out.contains("was paused already"), "{out}");
        let out = leadgate(&["connector", "list", "--config", &config])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            text.contains("PAUSED by hand") && text.contains("by cli:olga: portal maintenance"),
            "{text}"
        );
        let out = leadgate(&["connector", "resume", "--config", &config])
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains("resumed"));
        assert!(!store.connector("bitrix24").await.unwrap().unwrap().by_hand);
    }
);

#[test]
fn the_shipped_binary_has_no_developer_commands() {
    // The fake CRMs and the demo player are `leadgate-dev`'s (crates/leadgate-testkit).
    for dev in ["fake-crm", "demo"] {
        let out = leadgate(&[dev, "--help"]).output().unwrap();
        assert!(!out.status.success(), "`leadgate {dev}` exists");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("unrecognized subcommand"), "{err}");
    }
}

#[test]
fn a_bad_config_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[database]\nurl = \"sqlite::memory:\"\n[worker]\nlease = \"soon\"\n",
    )
    .unwrap();
    let out = leadgate(&["migrate", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("lease"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let out = leadgate(&["migrate"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config"));
    // LEADGATE_DATABASE_URL alone is enough for commands that only need the database.
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("env.db").display());
    let out = leadgate(&["migrate"])
        .env("LEADGATE_DATABASE_URL", &url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("sqlite operations database is up to date")
    );
}

each_backend!(
    two_gateways_started_at_once_on_a_new_database_both_come_up,
    |db| async move {
        // Two machines (or two units) started together on a database nobody migrated yet:
        // PostgreSQL serialises the migrations under its advisory lock, SQLite's loser of a
        // race (a migration, or switching the new file to WAL) tries again.
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let rounds = if db.backend == leadgate_testkit::Backend::Sqlite {
            3
        } else {
            1
        };
        for round in 0..rounds {
            let files = tempfile::tempdir().unwrap();
            let url = match db.backend {
                leadgate_testkit::Backend::Sqlite => format!(
                    "sqlite://{}?mode=rwc",
                    files.path().join(format!("new{round}.db")).display()
                ),
                leadgate_testkit::Backend::Postgres => db.url.clone(),
            };
            let mut gateways = vec![];
            for name in ["a", "b"] {
                let dir = files.path().join(name);
                std::fs::create_dir(&dir).unwrap();
                let port = free_port();
                let config = write_config(&dir, &url, &fake.webhook_url(), port);
                let child = leadgate(&["serve", "--config", &config])
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(dir.join("err.log")).unwrap())
                    .spawn()
                    .unwrap();
                gateways.push((Process(child), format!("http://127.0.0.1:{port}"), dir));
            }
            for (process, base, dir) in &mut gateways {
                let deadline = Instant::now() + Duration::from_secs(30);
                while !reqwest::get(format!("{base}/healthz"))
                    .await
                    .is_ok_and(|r| r.status().is_success())
                {
                    let exited = process.0.try_wait().unwrap();
                    assert!(
                        exited.is_none() && Instant::now() < deadline,
                        "round {round}: a gateway did not come up: {}",
                        std::fs::read_to_string(dir.join("err.log")).unwrap_or_default()
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
);

/// Runs `script` in bash after sourcing the demo's port helpers (scripts/demo-ports.sh).
fn demo_ports(script: &str, env: &[(&str, String)]) -> std::process::Output {
    let helpers = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/demo-ports.sh");
    let mut cmd = std::process::Command::new("bash");
    cmd.args(["-c", &format!("set -euo pipefail; . {helpers}; {script}")])
        .env_remove("DEMO_GATEWAY_PORT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn the_demo_never_plays_against_a_program_holding_its_port() {
    // `make demo` with its port held by another program played its scenarios against
    // that program and printed 0/10 FAIL. Now a taken default is skipped (and said, with
    // the holder's pid), a taken port asked for is refused, and a port chosen once is
    // never chosen again for another of the demo's processes.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let me = format!("(pid {})", std::process::id());

    let out = demo_ports(
        &format!("choose_port A DEMO_GATEWAY_PORT {port}; choose_port B DEMO_DEALS_PORT {port}; echo \"$A $B\""),
        &[],
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    let chosen: Vec<u16> = stdout
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(chosen.len(), 2, "{stdout}");
    assert!(chosen.iter().all(|&p| p != port), "{chosen:?} / {port}");
    assert_ne!(chosen[0], chosen[1], "two processes, one port");
    assert!(stderr.contains(&me), "names who holds it: {stderr}");

    let out = demo_ports(
        "choose_port A DEMO_GATEWAY_PORT 18080; echo chosen",
        &[("DEMO_GATEWAY_PORT", port.to_string())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a taken port asked for is refused");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("chosen"));
    assert!(
        stderr.contains(&format!("port {port} (DEMO_GATEWAY_PORT) is taken by"))
            && stderr.contains(&me),
        "{stderr}"
    );

    // The demo waits for *its* process on the port, not for whoever answers there.
    let out = demo_ports(
        &format!(
            "port_owner_is {port} {me} && echo mine; port_owner_is {port} 1 || echo other",
            me = std::process::id()
        ),
        &[],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "mine\nother\n");
    drop(held);
}
