//! A real n8n for the tests that run in one (tests/n8n.rs, tests/n8n_package.rs): installed
//! by scripts/install-n8n.sh (a missing n8n fails, never skips), run as `n8n` child
//! processes on a private PostgreSQL database and user folder; and a real `leadgate serve`.
#![allow(dead_code)] // each test binary uses its own part

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use leadgate::store;
use sqlx::{Connection, Row};

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn pg_server() -> String {
    std::env::var("LEADGATE_TEST_DATABASE_URL").expect(
        "LEADGATE_TEST_DATABASE_URL is not set: n8n runs on PostgreSQL in this test, on both \
         of Leadgate's backends (`make test` sets it)",
    )
}

pub async fn create_database(prefix: &str) -> String {
    let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&pg_server())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at LEADGATE_TEST_DATABASE_URL: {e}"));
    sqlx::query(&format!("create database {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    name
}

pub async fn drop_database(name: &str) {
    if let Ok(mut admin) = sqlx::PgConnection::connect(&pg_server()).await {
        let _ = sqlx::query(&format!("drop database if exists {name} with (force)"))
            .execute(&mut admin)
            .await;
    }
}

/// The `n8n` command, installed by scripts/install-n8n.sh (idempotent; quick when cached).
pub fn n8n_bin() -> PathBuf {
    let started = Instant::now();
    let out = Command::new(repo().join("scripts/install-n8n.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running scripts/install-n8n.sh");
    assert!(
        out.status.success(),
        "scripts/install-n8n.sh could not install n8n (see its output above): the real-n8n \
         tests cannot run, and must not pass"
    );
    let path = String::from_utf8(out.stdout).unwrap();
    let path = PathBuf::from(
        path.lines()
            .last()
            .expect("the script prints the path")
            .trim(),
    );
    eprintln!(
        "n8n: {} ({} s to install or find)",
        path.display(),
        started.elapsed().as_secs()
    );
    path
}

pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A real n8n: its own user folder and PostgreSQL database, the workflow imported from
/// the committed file and activated, `n8n start` as a child process.
pub struct N8n {
    pub bin: PathBuf,
    pub home: PathBuf,
    pub database: String,
    pub port: u16,
    pub leadgate_url: String,
    /// Leadgate's `[api] integration_token`, as `LEADGATE_INTEGRATION_TOKEN`.
    pub token: String,
    pub crm_url: String,
    pub log: PathBuf,
    /// The workflow the test imports, activates and counts the runs of.
    pub workflow_id: &'static str,
    pub child: Option<Child>,
}

impl N8n {
    pub fn command(&self, args: &[&str]) -> Command {
        let server = pg_server();
        let opts: sqlx::postgres::PgConnectOptions = server.parse().unwrap();
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("N8N_USER_FOLDER", &self.home)
            .env("DB_TYPE", "postgresdb")
            .env("DB_POSTGRESDB_HOST", opts.get_host())
            .env("DB_POSTGRESDB_PORT", opts.get_port().to_string())
            .env("DB_POSTGRESDB_USER", opts.get_username())
            .env("DB_POSTGRESDB_DATABASE", &self.database)
            .env("N8N_LISTEN_ADDRESS", "127.0.0.1")
            .env("N8N_PORT", self.port.to_string())
            .env("N8N_RUNNERS_ENABLED", "false")
            .env("N8N_DIAGNOSTICS_ENABLED", "false")
            .env("N8N_VERSION_NOTIFICATIONS_ENABLED", "false")
            .env("N8N_TEMPLATES_ENABLED", "false")
            .env("N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS", "false")
            // The workflow reads its settings with $env (blocked by default in n8n 2.x).
            .env("N8N_BLOCK_ENV_ACCESS_IN_NODE", "false")
            .env("EXECUTIONS_DATA_SAVE_ON_SUCCESS", "all")
            .env("EXECUTIONS_DATA_SAVE_ON_ERROR", "all")
            .env("EXECUTIONS_DATA_PRUNE", "false")
            .env("LEADGATE_URL", &self.leadgate_url)
            .env("LEADGATE_INTEGRATION_TOKEN", &self.token)
            .env("BITRIX24_WEBHOOK_URL", &self.crm_url);
        cmd
    }

    pub fn run(&self, args: &[&str]) {
        let out = self.command(args).output().unwrap();
        assert!(
            out.status.success(),
            "n8n {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A committed workflow file (`examples/n8n/...`), as a user imports it from the command line.
    pub fn import_and_activate(&self, file: &str) {
        let file = repo().join(file);
        self.run(&["import:workflow", &format!("--input={}", file.display())]);
        self.run(&[
            "update:workflow",
            &format!("--id={}", self.workflow_id),
            "--active=true",
        ]);
    }

    pub fn webhook(&self) -> String {
        self.webhook_at("lead")
    }

    /// The production URL of the Webhook node whose path is `path`.
    pub fn webhook_at(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/webhook/{path}", self.port)
    }

    /// `n8n start`; returns once the production webhook is registered.
    pub async fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = self
            .command(&["start"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn n8n start");
        self.child = Some(child);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(180);
        loop {
            let up = reqwest::get(format!("http://127.0.0.1:{}/healthz", self.port))
                .await
                .is_ok_and(|r| r.status().is_success());
            if up
                && std::fs::read_to_string(&self.log)
                    .unwrap_or_default()
                    .matches("Editor is now accessible")
                    .count()
                    >= self.starts()
            {
                break;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("n8n start exited ({status}):\n{}", tail(&self.log, 60));
            }
            assert!(
                Instant::now() < deadline,
                "n8n did not come up in 180 s:\n{}",
                tail(&self.log, 60)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        eprintln!("n8n started in {} ms", started.elapsed().as_millis());
    }

    /// How many times `n8n start` was run on this log.
    pub fn starts(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches("== n8n start")
            .count()
    }

    pub fn mark_start(&self) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        writeln!(f, "== n8n start").unwrap();
    }

    /// SIGTERM: n8n finishes the runs in flight and exits.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = child.wait();
    }

    /// n8n's own record of the workflow's runs: how many per status.
    pub async fn executions(&self) -> BTreeMap<String, i64> {
        let url = store::postgres::with_database(&pg_server(), &self.database);
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let rows = sqlx::query(
            "select status, count(*) as n from execution_entity where \"workflowId\" = $1 \
             group by status",
        )
        .bind(self.workflow_id)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        rows.iter()
            .map(|r| (r.get::<String, _>("status"), r.get::<i64, _>("n")))
            .collect()
    }
}

impl Drop for N8n {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub struct Serve(pub Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub async fn serve(config: &Path, base: &str, log: &Path) -> Serve {
    let child = Command::new(env!("CARGO_BIN_EXE_leadgate"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .env_remove("LEADGATE_DATABASE_URL")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("spawn leadgate serve");
    let serve = Serve(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(res) = reqwest::get(format!("{base}/healthz")).await {
            if res.status().is_success() {
                return serve;
            }
        }
        assert!(
            Instant::now() < deadline,
            "leadgate serve did not come up:\n{}",
            tail(log, 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
