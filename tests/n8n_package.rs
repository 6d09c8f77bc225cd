//! The community node `n8n-nodes-leadgate` as n8n's users get it: packed, passed by n8n's
//! own checks, installed into a real n8n 1.97.1 from the tarball and run there; and the
//! node's own tests run on the installed package, not on the source tree.
//!
//! 1. `scripts/pack-n8n-node.sh`: `npm ci` of the pinned tools, n8n's community-node lint
//!    (eslint-plugin-n8n-nodes-base and @n8n/eslint-plugin-community-nodes), the build,
//!    `npm pack`, and n8n's scanner (@n8n/scan-community-package) on the tarball and the
//!    sources. Any finding fails here.
//! 2. The tarball goes into a fresh n8n user folder the way n8n 1.97.1's Settings →
//!    Community Nodes → Install puts a package from npm (`CommunityPackagesService`):
//!    unpacked into `.n8n/nodes/node_modules/<name>`, its package.json without dev, peer
//!    and optional dependencies, `npm install` there with n8n's flags (and `--offline`:
//!    nothing downloads), the version recorded in `.n8n/nodes/package.json`.
//! 3. `n8n start` (scripts/install-n8n.sh's n8n, on PostgreSQL) loads it: its node and
//!    credential types and icons are served; the Leadgate API credential and
//!    `examples/n8n/workflow-node.json` (Webhook → the node's Claim → Bitrix24 → Complete
//!    or Fail) are imported with n8n's CLI; against a real `leadgate serve` (SQLite) and the
//!    fake Bitrix24, a lead is created once and its operation completed with the CRM's id,
//!    its repeat creates nothing, a CRM `400` ends its lead `failed_terminal` through the
//!    node's Fail; every n8n run ends `success`.
//! 4. The node's vitest tests (examples/n8n/n8n-nodes-leadgate/test) with
//!    `LEADGATE_NODE_PACKAGE` set to the installed package and `NODE_PATH` to n8n's
//!    node_modules, as n8n sets it for community packages, against the same gateway; the
//!    source tree's dist/ is renamed away meanwhile, so only the tarball's code can run.

mod n8n_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::FutureExt;
use leadgate::domain::OperationId;
use leadgate::store::{self, Store};
use leadgate_fakes::bitrix24::{FakeBitrix24, Fault};
use n8n_support::{create_database, drop_database, free_port, n8n_bin, repo, serve, tail, N8n};
use serde_json::{json, Value};

const PACKAGE: &str = "n8n-nodes-leadgate";
const TOKEN: &str = "n8n-package-test-integration-token";
const WORKFLOW_ID: &str = "leadgateNodeFlow";
const WEBHOOK_PATH: &str = "lead-node";
const SOURCE: &str = "n8n";
/// A tenant the gateway serves beside the default one (fleet mode), for the node's
/// tenant credential; its own fake Bitrix24 and integration token.
const TENANT: &str = "acme";
const TENANT_TOKEN: &str = "n8n-package-test-acme-integration-token";
const CREATE: &str = "crm.lead.add";

/// Runs `cmd`, failing the test with its output when it fails.
fn check(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Step 1: the tarball, after n8n's lint and scanner.
fn pack(out: &Path) -> PathBuf {
    let started = Instant::now();
    let mut cmd = Command::new(repo().join("scripts/pack-n8n-node.sh"));
    cmd.arg(out).stderr(std::process::Stdio::inherit());
    let stdout = check(
        &mut cmd,
        "scripts/pack-n8n-node.sh (lint, build, pack, scan)",
    );
    let tarball = PathBuf::from(stdout.lines().last().expect("the tarball's path").trim());
    assert!(tarball.is_file(), "{} is not a file", tarball.display());
    eprintln!(
        "packed, linted and scanned: {} ({} s)",
        tarball.display(),
        started.elapsed().as_secs()
    );
    tarball
}

/// Step 2: what n8n 1.97.1 does for Settings → Community Nodes → Install, with the
/// registry's `npm pack NAME@VERSION` replaced by our tarball. Returns the package's folder.
fn install_into_n8n(tarball: &Path, n8n_home: &Path) -> PathBuf {
    let nodes = n8n_home.join(".n8n/nodes");
    let package_dir = nodes.join("node_modules").join(PACKAGE);
    std::fs::create_dir_all(&package_dir).unwrap();
    check(
        Command::new("tar")
            .arg("-xzf")
            .arg(tarball)
            .arg("-C")
            .arg(&package_dir)
            .arg("--strip-components=1"),
        "unpacking the tarball",
    );
    let manifest = package_dir.join("package.json");
    let mut package: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    for field in [
        "devDependencies",
        "peerDependencies",
        "optionalDependencies",
    ] {
        package.as_object_mut().unwrap().remove(field);
    }
    std::fs::write(&manifest, serde_json::to_vec_pretty(&package).unwrap()).unwrap();
    check(
        Command::new("npm")
            .args([
                "install",
                "--audit=false",
                "--fund=false",
                "--bin-links=false",
                "--install-strategy=shallow",
                "--ignore-scripts=true",
                "--package-lock=false",
                "--offline",
                "--loglevel=error",
            ])
            .current_dir(&package_dir),
        "npm install in the package's folder, as n8n runs it",
    );
    let version = package["version"].as_str().unwrap().to_owned();
    std::fs::write(
        nodes.join("package.json"),
        serde_json::to_vec_pretty(&json!({
            "name": "installed-nodes",
            "private": true,
            "dependencies": { PACKAGE: version },
        }))
        .unwrap(),
    )
    .unwrap();
    // Nothing of the source tree in it: only what the tarball brought.
    assert!(package_dir
        .join("dist/nodes/Leadgate/Leadgate.node.js")
        .is_file());
    assert!(!package_dir.join("nodes").exists() && !package_dir.join("test").exists());
    package_dir
}

/// A directory renamed away until dropped (also when the test fails).
struct Hidden(PathBuf, PathBuf);

impl Hidden {
    fn new(path: &Path) -> Hidden {
        let away = path.with_extension("hidden-by-n8n-package-test");
        std::fs::rename(path, &away).unwrap_or_else(|e| panic!("hiding {}: {e}", path.display()));
        Hidden(path.to_owned(), away)
    }
}

impl Drop for Hidden {
    fn drop(&mut self) {
        let _ = std::fs::rename(&self.1, &self.0);
    }
}

fn op_id(key: &str) -> OperationId {
    format!("{SOURCE}:{key}").parse().unwrap()
}

struct Run<'a> {
    n8n: &'a N8n,
    fake: &'a FakeBitrix24,
    store: &'a dyn Store,
    http: reqwest::Client,
    /// Deliveries n8n's webhook accepted.
    posts: i64,
}

impl Run<'_> {
    async fn post(&mut self, key: &str) {
        let res = self
            .http
            .post(self.n8n.webhook_at(WEBHOOK_PATH))
            .json(&json!({"submission_id": key, "name": format!("Lead {key}"), "phone": "+79991234567"}))
            .send()
            .await
            .expect("n8n's webhook answers");
        let status = res.status();
        let body = res.text().await.unwrap_or_default();
        assert_eq!(status, 200, "{body}\nn8n log:\n{}", tail(&self.n8n.log, 40));
        self.posts += 1;
    }

    async fn wait_status(&self, key: &str, status: &str) -> store::Operation {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let op = self.store.operation(&op_id(key)).await.unwrap();
            if let Some(op) = op.filter(|op| op.status.as_str() == status) {
                return op;
            }
            assert!(
                Instant::now() < deadline,
                "{key} not {status} within 60 s\nn8n log:\n{}",
                tail(&self.n8n.log, 40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits for one finished n8n run per delivery; every one must be `success`.
    async fn runs_settle(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let runs = self.n8n.executions().await;
            let total: i64 = runs.values().sum();
            let busy = ["new", "running", "waiting"]
                .iter()
                .any(|s| runs.contains_key(*s));
            if total == self.posts && !busy {
                assert_eq!(
                    runs.get("success").copied(),
                    Some(total),
                    "every n8n run ends `success`: {runs:?}\n{}",
                    tail(&self.n8n.log, 40)
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "n8n runs {runs:?}, expected {} finished\n{}",
                self.posts,
                tail(&self.n8n.log, 40)
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    fn leads_of(&self, key: &str) -> usize {
        let origin = op_id(key).to_string();
        self.fake
            .entities()
            .iter()
            .filter(|e| e.fields["ORIGIN_ID"] == origin.as_str())
            .count()
    }
}

/// Step 3's check that n8n loaded the package: the types and icons its editor gets.
async fn assert_loaded(n8n: &N8n) {
    let base = format!("http://127.0.0.1:{}", n8n.port);
    let nodes = reqwest::get(format!("{base}/types/nodes.json"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        nodes.contains(&format!("\"{PACKAGE}.leadgate\"")),
        "n8n's node types lack {PACKAGE}.leadgate\n{}",
        tail(&n8n.log, 40)
    );
    let credentials = reqwest::get(format!("{base}/types/credentials.json"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(credentials.contains("\"leadgateApi\""), "no leadgateApi");
    for icon in ["leadgate.svg", "leadgate.dark.svg"] {
        let res = reqwest::get(format!("{base}/icons/{PACKAGE}/dist/icons/{icon}"))
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "n8n serves the package's {icon}");
        assert!(res.text().await.unwrap().starts_with("<svg"), "{icon}");
    }
    let log = std::fs::read_to_string(&n8n.log).unwrap_or_default();
    assert!(
        !log.lines()
            .any(|l| l.contains(PACKAGE) && l.to_lowercase().contains("error")),
        "n8n logged an error about the package:\n{}",
        tail(&n8n.log, 60)
    );
}

/// Waits until the gateway serves [`TENANT`] (it reads the registry as it starts): its
/// figures answer the tenant's token.
async fn wait_served(base: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let res = reqwest::Client::new()
            .get(format!("{base}/v1/tenants/{TENANT}/metrics"))
            .bearer_auth(TENANT_TOKEN)
            .send()
            .await;
        if res.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway does not serve the tenant:\n{}",
            tail(log, 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn scenarios(bin: &Path, n8n_db: &str, dir: &Path) {
    let tarball = pack(&dir.join("pack"));
    let home = dir.join("n8n-home");
    let installed = install_into_n8n(&tarball, &home);

    let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let tenant_crm = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let lg_port = free_port();
    let base = format!("http://127.0.0.1:{lg_port}");
    let db_url = format!("sqlite://{}?mode=rwc", dir.join("leadgate.db").display());
    let config = dir.join("leadgate.toml");
    let token_key = dir.join("token.key");
    std::fs::write(&token_key, format!("{}\n", "5a".repeat(32))).unwrap();
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
[claim_api]
source = "{SOURCE}"
lease = "30s"
[api]
integration_token = "{TOKEN}"
[crm]
kind = "bitrix24"
webhook_url = "{crm}"
timeout = "2s"
settle = "2s"
[fleet]
token_key_file = "{key}"
"#,
            crm = fake.webhook_url(),
            key = token_key.display(),
        ),
    )
    .unwrap();
    let tenants = dir.join("tenants.toml");
    std::fs::write(
        &tenants,
        format!(
            r#"
[[tenant]]
slug = "{TENANT}"
name = "ACME"
[tenant.crm]
kind = "bitrix24"
webhook_url = "{crm}"
timeout = "2s"
settle = "2s"
[tenant.claim_api]
source = "{SOURCE}"
lease = "30s"
[tenant.api]
integration_token = "{TENANT_TOKEN}"
"#,
            crm = tenant_crm.webhook_url(),
        ),
    )
    .unwrap();
    check(
        Command::new(env!("CARGO_BIN_EXE_leadgate"))
            .arg("tenant")
            .arg("apply")
            .arg(&tenants)
            .arg("--config")
            .arg(&config)
            .env_remove("LEADGATE_DATABASE_URL"),
        "leadgate tenant apply",
    );
    let _serve = serve(&config, &base, &dir.join("serve.log")).await;
    wait_served(&base, &dir.join("serve.log")).await;
    let store = store::connect(&db_url).await.unwrap();

    let mut n8n = N8n {
        bin: bin.to_owned(),
        home: home.clone(),
        database: n8n_db.to_owned(),
        port: free_port(),
        leadgate_url: base.clone(),
        token: TOKEN.to_owned(),
        crm_url: fake.webhook_url(),
        log: dir.join("n8n.log"),
        workflow_id: WORKFLOW_ID,
        child: None,
    };
    // The credential as a user would enter it; n8n encrypts it on import.
    let credentials = dir.join("credentials.json");
    std::fs::write(
        &credentials,
        serde_json::to_vec(&json!([{
            "id": "leadgateCredential",
            "name": "Leadgate",
            "type": "leadgateApi",
            "data": { "url": base, "integrationToken": TOKEN },
        }]))
        .unwrap(),
    )
    .unwrap();
    n8n.run(&[
        "import:credentials",
        &format!("--input={}", credentials.display()),
    ]);
    std::fs::remove_file(&credentials).unwrap();
    n8n.import_and_activate("examples/n8n/workflow-node.json");
    n8n.mark_start();
    n8n.start().await;
    assert_loaded(&n8n).await;

    let mut run = Run {
        n8n: &n8n,
        fake: &fake,
        store: store.as_ref(),
        http: reqwest::Client::new(),
        posts: 0,
    };
    // A lead: claimed by the node, created once, completed with the CRM's id.
    run.post("one").await;
    let op = run.wait_status("one", "completed").await;
    let entity = fake
        .entities()
        .into_iter()
        .find(|e| e.fields["ORIGIN_ID"] == "n8n:one")
        .expect("the lead is in the CRM");
    assert_eq!(op.crm_id, Some(entity.id.to_string()));
    assert_eq!(entity.fields["NAME"], "Lead one");
    assert_eq!(op.attempts, 1);
    run.runs_settle().await;
    // Its repeat: the node's Claim answers `done`, nothing goes to the CRM.
    run.post("one").await;
    run.runs_settle().await;
    assert_eq!(run.leads_of("one"), 1);
    assert_eq!(fake.calls(CREATE), 1);
    // The CRM refuses a lead (400): the node's Fail, From HTTP Status, ends it.
    fake.push_fault(CREATE, Fault::Validation, 1);
    run.post("refused").await;
    let op = run.wait_status("refused", "failed_terminal").await;
    assert_eq!(op.last_error_class.map(|c| c.as_str()), Some("validation"));
    run.runs_settle().await;
    assert_eq!(run.leads_of("refused"), 0);
    assert_eq!(fake.calls(CREATE), 2);
    n8n.stop().await;

    // Step 4: the node's tests on the installed package, against the same gateway.
    let started = Instant::now();
    let node_modules = bin
        .parent()
        .and_then(Path::parent)
        .expect("n8n's bin is in node_modules/.bin");
    let report = dir.join("vitest.json");
    // The source tree's build is out of reach while they run: only the installed package is.
    let _hidden = Hidden::new(&repo().join("examples/n8n/n8n-nodes-leadgate/dist"));
    let mut vitest = Command::new("npx");
    vitest
        .args([
            "--no-install",
            "vitest",
            "run",
            "--reporter=default",
            "--reporter=json",
        ])
        .arg(format!("--outputFile.json={}", report.display()))
        .current_dir(repo().join("examples/n8n/n8n-nodes-leadgate"))
        .env("LEADGATE_NODE_PACKAGE", &installed)
        .env("NODE_PATH", node_modules)
        .env("LEADGATE_URL", &base)
        .env("LEADGATE_INTEGRATION_TOKEN", TOKEN)
        .env("LEADGATE_CLAIM_SOURCE", SOURCE)
        .env("LEADGATE_TENANT", TENANT)
        .env("LEADGATE_TENANT_TOKEN", TENANT_TOKEN);
    eprintln!(
        "{}",
        check(&mut vitest, "the node's tests on the installed package")
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let files: Vec<&str> = report["testResults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    for file in ["test/leadgate.test.ts", "test/package.test.ts"] {
        assert!(
            files.iter().any(|f| f.ends_with(file)),
            "{file} ran: {files:?}"
        );
    }
    let total = report["numTotalTests"].as_i64().unwrap();
    assert!(total > 0);
    assert_eq!(
        report["numPassedTests"].as_i64(),
        Some(total),
        "every test of the node passed, none skipped: {report}"
    );
    eprintln!(
        "the node's tests on {}: {} s",
        installed.display(),
        started.elapsed().as_secs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_packed_community_node_passes_n8ns_checks_and_runs_in_a_real_n8n() {
    let started = Instant::now();
    let bin = n8n_bin();
    let n8n_db = create_database("lg_n8npkg").await;
    let dir = tempfile::tempdir().unwrap();
    let result = std::panic::AssertUnwindSafe(scenarios(&bin, &n8n_db, dir.path()))
        .catch_unwind()
        .await;
    drop_database(&n8n_db).await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    eprintln!(
        "the packed community node in n8n: {} s in all",
        started.elapsed().as_secs()
    );
}
