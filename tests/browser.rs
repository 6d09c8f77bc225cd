//! The web console in a real browser (issue 34): `leadgate serve` with `[console]`, as a
//! separate process over real HTTP, driven in Debian's Chromium (headless) through
//! chromedriver, and in Debian's Firefox ESR through geckodriver. A person signs in, sees
//! the queue, opens a case and confirms the CRM result; the database then says the case
//! is resolved by that person. On SQLite the operator of `[console]`, in both browsers;
//! on PostgreSQL a private cluster that checks passwords, with a
//! sales-ops person who resolves, a support person who sees the figures only, and a
//! manager who searches and changes a business rule (the database records it as theirs). Saves
//! the README's browser screenshot (docs/screenshots/browser-console.png).
//!
//! Needs Chromium, chromedriver, Firefox ESR, geckodriver and the built UI: `make test` installs and builds them
//! (scripts/install-browser-deps.sh, `npm --prefix ui run build`); a missing one fails the
//! test with what to run, it never passes unseen.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use leadgate::console_web::password;
use leadgate::domain::roles::Role;
use leadgate::domain::Status;
use leadgate::store::Store;
use leadgate_fakes::bitrix24::FakeBitrix24;
use leadgate_testkit::cluster::Cluster;
use leadgate_testkit::people::People;
use leadgate_testkit::process::{command, free_port, wait_healthy, GatewayFile, Process, SiteAuth};
use leadgate_testkit::seed::{seed, Seeded};
use leadgate_testkit::webdriver::{
    choose, click, css, el, open_row, session, shot, text_until, type_into, Client,
};
use serde_json::json;

const OPERATOR: &str = "anna";
const OPERATOR_PASSWORD: &str = "a long operator password";
const OWNER_PASSWORD: &str = "gateway-owner-password";

/// The browsers the console is tried in, each through its own WebDriver.
#[derive(Clone, Copy, PartialEq)]
enum Browser {
    /// Debian's Chromium, through chromedriver.
    Chromium,
    /// Debian's Firefox ESR, through geckodriver.
    Firefox,
}

impl Browser {
    /// Its WebDriver on a port of its own, killed with the test.
    fn driver(self) -> (Process, String) {
        let ui = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/dist/index.html");
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
    async fn open(self, driver: &str) -> Client {
        let mut caps = serde_json::Map::new();
        match self {
            Browser::Chromium => {
                caps.insert("browserName".into(), json!("chrome"));
                caps.insert(
                    "goog:chromeOptions".into(),
                    json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,800", "--lang=en-US"]}),
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
struct Deployment {
    console: String,
    store: Arc<dyn Store>,
    seeded: Seeded,
    _gateway: Process,
    /// The gateway's stdout and stderr.
    logs: [std::path::PathBuf; 2],
    _fake: FakeBitrix24,
    _dir: tempfile::TempDir,
}

async fn deploy(db_url: &str, console_section: &str) -> Deployment {
    let dir = tempfile::tempdir().unwrap();
    let store = leadgate::store::connect(db_url).await.unwrap();
    let seeded = seed(&*store).await.unwrap();
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
    let child = command(
        env!("CARGO_BIN_EXE_leadgate"),
        &["serve", "--config", config.to_str().unwrap()],
    )
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
        _gateway: gw,
        logs: [log, dir.path().join("gateway.err")],
        _fake: fake,
        _dir: dir,
    }
}

async fn sign_in(c: &Client, login: &str, password: &str) {
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

/// A person resolves the uncertain case in the browser; the database agrees. Chromium's
/// run saves the README's screenshot.
async fn resolve_a_case(c: &Client, d: &Deployment, login: &str, password: &str, b: Browser) {
    // A link to a case, sent by a colleague: it survives the sign-in.
    let linked = d.seeded.exhausted.as_str();
    let path = percent_encoding::utf8_percent_encode(linked, percent_encoding::NON_ALPHANUMERIC);
    c.goto(&format!("{}/case/{path}", d.console)).await.unwrap();
    // A wrong password: a sentence, no session.
    sign_in(c, login, "not the password").await;
    text_until(c, "[data-testid=connect-error]", "the refusal", |t| {
        t.contains("wrong login or password")
    })
    .await;
    sign_in(c, login, password).await;
    text_until(c, "[data-testid=operator]", login, |t| t == login).await;
    text_until(c, "[data-testid=case-key]", linked, |t| t == linked).await;
    text_until(c, "[data-testid=count-needs_review]", "3", |t| t == "3").await;

    open_row(c, d.seeded.uncertain.as_str()).await;
    el(c, "[data-testid=timeline] [data-kind=crm_response]").await;
    // The address follows the open case.
    let at = c.current_url().await.unwrap();
    assert_eq!(
        percent_encoding::percent_decode_str(at.path())
            .decode_utf8()
            .unwrap(),
        format!("/case/{}", d.seeded.uncertain.as_str())
    );
    if b == Browser::Chromium {
        shot(c, "browser-console.png").await;
    }
    type_into(c, "[data-testid=crm-id-input]", "5555").await;
    type_into(c, "[data-testid=comment]", "found in Bitrix24 by phone").await;
    click(c, "[data-testid=confirm]").await;
    el(c, "[data-testid=op-status][data-status=completed]").await;
    let o = d
        .store
        .operation(&d.seeded.uncertain)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (o.status, o.crm_id.as_deref()),
        (Status::Completed, Some("5555"))
    );
    let timeline = d.store.timeline(&d.seeded.uncertain).await.unwrap();
    let human = timeline.iter().find(|e| e.kind == "human_action").unwrap();
    assert_eq!(human.actor, login, "the action is the signed-in person's");

    // A reload keeps the session (the cookie); signing out ends it.
    c.refresh().await.unwrap();
    text_until(c, "[data-testid=operator]", login, |t| t == login).await;
    click(c, "[data-testid=sign-out]").await;
    el(c, "[data-testid=sign-in-screen]").await;
    c.refresh().await.unwrap();
    el(c, "[data-testid=sign-in-screen]").await;

    // The log says who signed in and failed to, never a password or a lead's contacts.
    let log: String = d
        .logs
        .iter()
        .map(|l| std::fs::read_to_string(l).unwrap())
        .collect();
    assert!(
        log.contains("console sign-in") && log.contains(login),
        "{log}"
    );
    for secret in [
        password,
        "not the password",
        "+79035550101",
        "boris@example.com",
    ] {
        assert!(!log.contains(secret), "the log holds {secret:?}");
    }
}

/// Runs `steps` in a session of `browser` that is closed whatever happens.
async fn in_browser<F, Fut>(browser: Browser, steps: F)
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

/// The SQLite operator resolves a case in `browser`.
async fn sqlite_the_operator_resolves_a_case(browser: Browser) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
    let hash = password::hash(OPERATOR_PASSWORD).unwrap();
    let d = deploy(
        &url,
        &format!("operator = \"{OPERATOR}\"\noperator_password_hash = \"{hash}\"\n"),
    )
    .await;
    in_browser(browser, move |c| async move {
        resolve_a_case(&c, &d, OPERATOR, OPERATOR_PASSWORD, browser).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_the_operator_resolves_a_case_in_chromium() {
    sqlite_the_operator_resolves_a_case(Browser::Chromium).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_the_operator_resolves_a_case_in_firefox() {
    sqlite_the_operator_resolves_a_case(Browser::Firefox).await;
}

/// A private cluster that checks passwords (scram-sha-256), as a deployment's must.
fn checked_cluster() -> (Cluster, String) {
    Cluster::checking_passwords(OWNER_PASSWORD)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_each_role_does_in_chromium_what_it_may_resolve_search_rules_figures() {
    let (cluster, url) = checked_cluster();
    // The schema first (the gateway would make it too), then the people in it.
    leadgate::store::connect(&url).await.unwrap();
    let people = People::new(&url).await;
    let d = deploy(&url, "").await;
    let (sales, sales_password) = (
        people.login(Role::SalesOps).to_owned(),
        people.password(Role::SalesOps),
    );
    let (manager, manager_password) = (
        people.login(Role::Manager).to_owned(),
        people.password(Role::Manager),
    );
    let (support, support_password) = (
        people.login(Role::Support).to_owned(),
        people.password(Role::Support),
    );
    in_browser(Browser::Chromium, move |c| async move {
        resolve_a_case(&c, &d, &sales, &sales_password, Browser::Chromium).await;

        // Support: the dashboard, no queue, no search — as the database grants.
        sign_in(&c, &support, &support_password).await;
        text_until(&c, "[data-testid=role]", "support", |t| {
            t.to_lowercase().contains("support")
        })
        .await;
        el(&c, "[data-testid=nav-dashboard]").await;
        assert!(
            c.find(css("[data-testid=nav-queue]")).await.is_err(),
            "support has no queue"
        );
        assert!(
            c.find(css("[data-testid=search]")).await.is_err(),
            "support has no search"
        );
        click(&c, "[data-testid=sign-out]").await;
        el(&c, "[data-testid=sign-in-screen]").await;

        // A manager: finds a lead by its key among all operations (it is completed now),
        // then makes a contact match on the site link to the CRM record — the database's
        // rules change, recorded as the manager.
        sign_in(&c, &manager, &manager_password).await;
        text_until(&c, "[data-testid=operator]", &manager, |t| t == manager).await;
        let key = d.seeded.uncertain.as_str().to_owned();
        type_into(&c, "[data-testid=search]", &format!("{key}\u{E007}")).await;
        text_until(&c, "[data-testid=search-header]", "the search", |t| {
            t.contains(&key)
        })
        .await;
        open_row(&c, d.seeded.uncertain.as_str()).await;
        click(&c, "[data-testid=search-clear]").await;
        click(&c, "[data-testid=nav-rules]").await;
        el(&c, "[data-testid=rules-row-site]").await;
        choose(&c, "[data-testid=rule-site]", "link").await;
        click(&c, "[data-testid=save-site]").await;
        text_until(&c, "[data-testid=rules-notice]", "site saved", |t| {
            t.contains("site") && t.contains("version 2")
        })
        .await;
        let rules = d.store.business_rules().await.unwrap();
        let site = rules.iter().find(|r| r.rules.source == "site").unwrap();
        assert_eq!(
            (site.rules.rule, site.changed_by.as_str(), site.version),
            (leadgate::domain::MatchRule::Link, manager.as_str(), 2)
        );
        click(&c, "[data-testid=sign-out]").await;
        el(&c, "[data-testid=sign-in-screen]").await;
    })
    .await;
    people.drop_all().await;
    drop(cluster);
}
