//! Leadgate as separate processes, the way an operator runs it: free ports, children that
//! die with the test, the configuration file a spawned gateway reads, and waiting until
//! it answers. The binary's path is the calling test's `env!("CARGO_BIN_EXE_leadgate")`
//! (Cargo gives it to the `leadgate` package's own tests only).

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `bin args…`, quiet (`RUST_LOG=warn`) and deaf to the developer's own
/// `LEADGATE_DATABASE_URL` and `LEADGATE_ADMIN_DATABASE_URL`.
pub fn command(bin: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env_remove("LEADGATE_DATABASE_URL")
        .env_remove("LEADGATE_ADMIN_DATABASE_URL")
        .env("RUST_LOG", "warn");
    cmd
}

/// A child process, killed (SIGKILL: no chance to save anything) and reaped when dropped.
pub struct Process(pub Child);

impl Process {
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until `base`'s `/healthz` answers with a success, for `within` at most; then
/// panics, with the process's log when there is one.
pub async fn wait_healthy(base: &str, within: Duration, log: Option<&Path>) {
    let deadline = Instant::now() + within;
    while !reqwest::get(format!("{base}/healthz"))
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(
            Instant::now() < deadline,
            "the gateway at {base} did not come up{}",
            log.map(|l| format!(": {}", std::fs::read_to_string(l).unwrap_or_default()))
                .unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How a spawned gateway's `site` source (`key = "json:/submission_id"`) authenticates.
#[derive(Debug, Clone, Copy)]
pub enum SiteAuth<'a> {
    /// Deliveries are signed with this HMAC key.
    Secret(&'a str),
    /// Deliveries carry this token.
    Token(&'a str),
}

/// The configuration file of a spawned `leadgate serve`: one `site` source, a Bitrix24
/// webhook, a worker polling every 50 ms. The tests that spawn gateways differ only in
/// the fields here.
#[derive(Debug, Clone)]
pub struct GatewayFile<'a> {
    pub db_url: &'a str,
    pub webhook_url: &'a str,
    pub port: u16,
    pub lease: &'a str,
    pub concurrency: Option<u32>,
    /// `[retry]`: max_attempts, base_delay, max_delay.
    pub retry: Option<(u32, &'a str, &'a str)>,
    pub read_token: Option<&'a str>,
    pub site: SiteAuth<'a>,
    pub crm_timeout: &'a str,
    pub settle: Option<&'a str>,
}

impl GatewayFile<'_> {
    pub fn toml(&self) -> String {
        let mut t = format!(
            "[database]\nurl = \"{}\"\n[server]\nlisten = \"127.0.0.1:{}\"\n\
             [worker]\npoll_interval = \"50ms\"\nlease = \"{}\"\n",
            self.db_url, self.port, self.lease
        );
        if let Some(n) = self.concurrency {
            t += &format!("concurrency = {n}\n");
        }
        if let Some((attempts, base, max)) = self.retry {
            t += &format!(
                "[retry]\nmax_attempts = {attempts}\nbase_delay = \"{base}\"\nmax_delay = \"{max}\"\n"
            );
        }
        if let Some(token) = self.read_token {
            t += &format!("[api]\nread_token = \"{token}\"\n");
        }
        t += "[[source]]\nname = \"site\"\nkey = \"json:/submission_id\"\n";
        t += &match self.site {
            SiteAuth::Secret(s) => format!("secret = \"{s}\"\n"),
            SiteAuth::Token(s) => format!("token = \"{s}\"\n"),
        };
        t += &format!(
            "[crm]\nkind = \"bitrix24\"\nwebhook_url = \"{}\"\ntimeout = \"{}\"\n",
            self.webhook_url, self.crm_timeout
        );
        if let Some(s) = self.settle {
            t += &format!("settle = \"{s}\"\n");
        }
        t
    }

    /// Writes `dir/{name}.toml` and returns its path.
    pub fn write(&self, dir: &Path, name: &str) -> String {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, self.toml()).unwrap();
        path.display().to_string()
    }
}
