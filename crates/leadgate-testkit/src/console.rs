//! A gateway with its web console, and real browsers to drive it: what the browser tests
//! (`tests/browser/`) and the walk-through bench (`benches/walk_through.rs`) share. The
//! gateway is the `leadgate` binary the caller names (Cargo gives each target its path),
//! a separate process over real HTTP; the browsers are Debian's Chromium (headless, via
//! chromedriver) and Firefox ESR (via geckodriver).

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use leadgate::store::Store;
use leadgate_fakes::bitrix24::FakeBitrix24;
use serde_json::json;

use crate::process::{command, free_port, wait_healthy, GatewayFile, Process, SiteAuth};
use crate::seed::{seed, Seeded};
use crate::webdriver::{click, el, session, Client};

/// Where Chromium saves what the console downloads (CSV exports), one folder per test run.
pub fn downloads_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("leadgate-downloads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The browsers the console is tried in, each through its own WebDriver.
#[derive(Clone, Copy, PartialEq)]
pub enum Browser {
    /// Debian's Chromium, through chromedriver.
    Chromium,
    /// Debian's Firefox ESR, through geckodriver.
    Firefox,
}

impl Browser {
    /// Its WebDriver on a port of its own, killed with the test.
    /// Its WebDriver, started on a free port, and the driver's address.
    pub fn driver(self) -> (Process, String) {
        let ui = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ui/dist/index.html");
        assert!(
            ui.exists(),
            "the console's UI is not built: run `npm --prefix ui ci && npm --prefix ui run build` (make test does)"
        );
        let port = free_port();
        let (program, args) = match self {
            Browser::Chromium => ("chromedriver", vec![format!("--port={port}")]),
            Browser::Firefox => (
                "geckodriver",
                vec![
                    "--port".into(),
                    port.to_string(),
                    "--log".into(),
                    "fatal".into(),
                ],
            ),
        };
        let child = std::process::Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{program} on PATH: run scripts/install-browser-deps.sh (make test does): {e}"
                )
            });
        (Process(child), format!("http://127.0.0.1:{port}"))
    }

    /// A headless session, in English, the size of a laptop's screen.
    /// A new session of this browser (1280 x 800, English).
    pub async fn open(self, driver: &str) -> Client {
        let mut caps = serde_json::Map::new();
        match self {
            Browser::Chromium => {
                caps.insert("browserName".into(), json!("chrome"));
                caps.insert(
                    "goog:chromeOptions".into(),
                    json!({
                        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,800", "--lang=en-US"],
                        "prefs": {
                            "download.default_directory": downloads_dir(),
                            "download.prompt_for_download": false,
                        },
                    }),
                );
            }
            Browser::Firefox => {
                caps.insert("browserName".into(), json!("firefox"));
                caps.insert(
                    "moz:firefoxOptions".into(),
                    json!({
                        "binary": "/usr/bin/firefox-esr",
                        "args": ["-headless", "-width=1280", "-height=800"],
                        "prefs": {"intl.accept_languages": "en-US"},
                    }),
                );
            }
        }
        session(driver, caps).await
    }
}

/// The running gateway with its console, and what the test checks against.
pub struct Deployment {
    pub console: String,
    pub store: Arc<dyn Store>,
    pub seeded: Option<Seeded>,
    /// With [`Seeding::Outage`].
    pub outage: Vec<leadgate::domain::OperationId>,
    _gateway: Process,
    /// The gateway's stdout and stderr.
    pub logs: [std::path::PathBuf; 2],
    pub fake: FakeBitrix24,
    _dir: tempfile::TempDir,
}

impl Deployment {
    /// The cases of [`Seeding::Cases`].
    pub fn cases(&self) -> &Seeded {
        self.seeded.as_ref().expect("deployed with Seeding::Cases")
    }
}

/// What a deployment's database holds before the gateway starts.
#[derive(Clone, Copy)]
pub enum Seeding {
    /// A case of every kind (`seed`), the connector paused.
    Cases,
    /// Only the leads of an outage (`seed::outage`), each in `retries_exhausted`.
    Outage(u32),
}

/// Seeds `db_url`, then starts `leadgate serve` (the binary at `bin`) on it with a fake
/// Bitrix24 and `[console]` plus `console_section`, and waits until it is healthy.
pub async fn deploy(
    bin: &str,
    db_url: &str,
    console_section: &str,
    seeding: Seeding,
) -> Deployment {
    let dir = tempfile::tempdir().unwrap();
    let store = leadgate::store::connect(db_url).await.unwrap();
    let (seeded, outage) = match seeding {
        Seeding::Cases => (Some(seed(&*store).await.unwrap()), vec![]),
        Seeding::Outage(n) => (None, crate::seed::outage(&*store, n).await.unwrap()),
    };
    let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let (port, console_port) = (free_port(), free_port());
    let mut toml = GatewayFile {
        db_url,
        webhook_url: &fake.webhook_url(),
        port,
        lease: "4s",
        concurrency: None,
        retry: None,
        read_token: None,
        site: SiteAuth::Secret("site-secret"),
        crm_timeout: "3s",
        settle: None,
    }
    .toml();
    toml += &format!("[console]\nlisten = \"127.0.0.1:{console_port}\"\n{console_section}");
    let config = dir.path().join("leadgate.toml");
    std::fs::write(&config, toml).unwrap();
    let log = dir.path().join("gateway.log");
    let child = command(bin, &["serve", "--config", config.to_str().unwrap()])
        // Everything the gateway logs about sign-ins, to check what it does not say.
        .env("RUST_LOG", "info")
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("gateway.err")).unwrap())
        .spawn()
        .unwrap();
    let gw = Process(child);
    wait_healthy(
        &format!("http://127.0.0.1:{port}"),
        Duration::from_secs(60),
        Some(&log),
    )
    .await;
    Deployment {
        console: format!("http://127.0.0.1:{console_port}"),
        store,
        seeded,
        outage,
        _gateway: gw,
        logs: [log, dir.path().join("gateway.err")],
        fake,
        _dir: dir,
    }
}

/// Signs in on the console's sign-in screen.
pub async fn sign_in(c: &Client, login: &str, password: &str) {
    el(c, "[data-testid=sign-in-screen]").await;
    let (l, p) = (
        el(c, "[data-testid=login]").await,
        el(c, "[data-testid=password]").await,
    );
    l.clear().await.unwrap();
    l.send_keys(login).await.unwrap();
    p.clear().await.unwrap();
    p.send_keys(password).await.unwrap();
    click(c, "[data-testid=sign-in]").await;
}

/// Runs `steps` in a session of `browser` that is closed whatever happens.
pub async fn in_browser<F, Fut>(browser: Browser, steps: F)
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let (_driver, url) = browser.driver();
    let c = browser.open(&url).await;
    let run = tokio::spawn({
        let c = c.clone();
        async move { steps(c).await }
    })
    .await;
    let _ = c.close().await;
    if let Err(e) = run {
        std::panic::resume_unwind(e.into_panic());
    }
}
