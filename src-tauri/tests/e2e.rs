//! The console in a real window, driven through WebDriver (tauri-driver + WebKitWebDriver):
//! first-run connection and operator screens, the queue, each case, and confirm / link /
//! authorize-one-retry / keep-original / resume-connector, each checked on screen and in
//! the database; the dashboard and a saved diagnosis. Saves the README's screenshots to docs/screenshots/.
//!
//! The fourth test keeps the original of a payload conflict and updates the CRM: a real
//! gateway and worker on the same database send the changed phone to a fake Bitrix24.
//!
//! One test changes a business rule on the Rules screen while a gateway runs, and
//! checks the gateway matches the next delivery by it.
//!
//! The third test clicks desktop notifications: a private D-Bus session bus with a fake
//! notification server (tests/fake_notifications.py) stands in for the desktop.
//!
//! The last test packages this binary with Tauri's bundler (`scripts/package-console.sh
//! --debug`), installs the .deb with dpkg, opens the installed program in a real window and
//! removes it (root only; under `CI=true` a missing tool or root fails it).
//!
//! Run by `make e2e` (which builds the UI first and provides a display with Xvfb):
//! `cargo test -p leadgate-console --features e2e --test e2e`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::Client;
use serde_json::json;

use leadgate_testkit::steps;
use leadgate_testkit::webdriver::{
    choose, click, css, el, open_row, session, shot, tab, text_until,
};

use leadgate::domain::{OperationId, ReviewReason, Status};
use leadgate::store::{self, Store};
use leadgate_console_model::{Action, ActionRequest, Console};

const DRIVER_PORT: u16 = 4444;
/// Who the console acts as on SQLite: the OS user (local single-operator mode).
fn operator() -> String {
    leadgate_console_model::os_user()
}

/// tauri-driver, stopped with SIGTERM (SIGKILL would leave WebKitWebDriver running).
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
    }
}

fn start_driver(settings: &Path, env: &[(&str, String)]) -> Driver {
    let child =
        Command::new(std::env::var("TAURI_DRIVER").unwrap_or_else(|_| "tauri-driver".into()))
            .args(["--port", &DRIVER_PORT.to_string(), "--native-port", "4445"])
            // No session bus unless a test brings its own (`env` comes last).
            .env("DBUS_SESSION_BUS_ADDRESS", "disabled:")
            .env("NO_AT_BRIDGE", "1")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("LEADGATE_CONSOLE_SETTINGS", settings)
            .env_remove("LEADGATE_DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("tauri-driver on PATH (cargo install tauri-driver --locked)");
    Driver(child)
}

async fn connect_client() -> Client {
    connect_client_to(env!("CARGO_BIN_EXE_leadgate-console")).await
}

/// A WebDriver session with the console binary at `application`.
async fn connect_client_to(application: &str) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "tauri:options".into(),
        json!({ "application": application }),
    );
    caps.insert("browserName".into(), json!("wry"));
    session(&format!("http://127.0.0.1:{DRIVER_PORT}"), caps).await
}

/// Another operator, in another console, authorizes a retry on `case` first.
async fn ivan_grants_a_retry(console: &Console, case: &leadgate::store::ReviewCase) {
    console
        .act(
            "Ivan",
            ActionRequest {
                case_id: case.id,
                expected_version: case.version,
                comment: None,
                action: Action::AuthorizeRetry,
            },
        )
        .await
        .unwrap();
}

async fn op(store: &dyn Store, id: &OperationId) -> leadgate::store::Operation {
    store.operation(id).await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_resolves_every_kind_of_case_in_a_real_window() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
    let db = store::connect(&url).await.unwrap();
    let s = leadgate_testkit::seed::seed(&*db).await.unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({"language": "en", "crm_url_template": "https://example.bitrix24.ru/crm/lead/details/{id}/"})
            .to_string(),
    )
    .unwrap();

    let _driver = start_driver(&settings, &[]);
    let c = connect_client().await;
    // Run the steps as a task so a failed step still closes the session (and the app).
    let steps = tokio::spawn({
        let c = c.clone();
        async move { run(&c, &*db, &s, &url).await }
    })
    .await;
    let _ = c.close().await;
    if let Err(e) = steps {
        std::panic::resume_unwind(e.into_panic());
    }
    eprintln!("e2e finished in {:.1?}", started.elapsed());
}

async fn run(c: &Client, db: &dyn Store, s: &leadgate_testkit::seed::Seeded, url: &str) {
    // First run: the connection screen; who acts is the OS user (local mode), not a name
    // typed in.
    el(c, "[data-testid=connect-screen]").await;
    el(c, "[data-testid=db-url]")
        .await
        .send_keys("sqlite:///nonexistent/dir/x.db")
        .await
        .unwrap();
    click(c, "[data-testid=connect-screen] button[type=submit]").await;
    el(c, "[data-testid=connect-error]").await;
    let input = el(c, "[data-testid=db-url]").await;
    input.clear().await.unwrap();
    input.send_keys(url).await.unwrap();
    click(c, "[data-testid=connect-screen] button[type=submit]").await;
    let me = operator();
    text_until(c, "[data-testid=operator]", &me, |t| t == me).await;
    text_until(
        c,
        "[data-testid=role][data-mode=local]",
        "local mode",
        |t| t == "local single-operator mode",
    )
    .await;

    // The queue with live counts per tab.
    text_until(c, "[data-testid=count-needs_review]", "3", |t| t == "3").await;
    text_until(c, "[data-testid=count-payload_conflict]", "1", |t| t == "1").await;
    text_until(c, "[data-testid=count-stale]", "1", |t| t == "1").await;
    text_until(c, "[data-testid=count-failed_terminal]", "1", |t| t == "1").await;
    // No gateway runs beside this window: it says so before any click (nothing is sent;
    // in local mode a decision is applied at once all the same).
    el(c, "[data-testid=no-gateway]").await;
    el(c, "[data-testid=gateway][data-running=false]").await;
    text_until(c, "[data-testid=count-connectors]", "1", |t| t == "1").await;
    // The paused connector is a banner saying what to do, not only a count on a tab.
    text_until(
        c,
        "[data-testid=paused-banner][data-connector=bitrix24]",
        "the reason",
        |t| t.contains("auth: expired_token") && t.contains("resume"),
    )
    .await;

    // Keyboard: j moves, Enter opens, Esc closes.
    let body = el(c, "body").await;
    body.send_keys("j").await.unwrap();
    body.send_keys("\u{E007}").await.unwrap(); // Enter
    text_until(c, "[data-testid=case-key]", "the second row", |t| {
        t == s.cross_channel.as_str()
    })
    .await;
    body.send_keys("\u{E00C}").await.unwrap(); // Escape
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        c.find(css("[data-testid=case-view]")).await.is_err(),
        "Esc closes the case"
    );

    // Confirm CRM result.
    open_row(c, s.uncertain.as_str()).await;
    el(c, "[data-testid=timeline] [data-kind=crm_response]").await;
    shot(c, "queue.png").await;
    el(c, "[data-testid=crm-id-input]")
        .await
        .send_keys("5555")
        .await
        .unwrap();
    el(c, "[data-testid=comment]")
        .await
        .send_keys("found in Bitrix24 by phone")
        .await
        .unwrap();
    click(c, "[data-testid=confirm]").await;
    el(c, "[data-testid=op-status][data-status=completed]").await;
    el(c, "[data-testid=timeline] [data-kind=human_action]").await;
    shot(c, "case-timeline.png").await;
    let o = op(db, &s.uncertain).await;
    assert_eq!(
        (o.status, o.crm_id.as_deref()),
        (Status::Completed, Some("5555"))
    );
    let human = db.timeline(&s.uncertain).await.unwrap();
    let human = human.iter().find(|e| e.kind == "human_action").unwrap();
    assert_eq!(human.actor, operator());
    assert_eq!(human.detail["comment"], "found in Bitrix24 by phone");
    text_until(c, "[data-testid=count-needs_review]", "2", |t| t == "2").await;
    // The resolved case left the queue and its place went to the next one: `j` opens
    // that one, it does not skip it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    el(c, "body").await.send_keys("j").await.unwrap();
    text_until(
        c,
        "[data-testid=case-key]",
        "the case after the resolved one",
        |t| t == s.cross_channel.as_str(),
    )
    .await;

    // Link to an existing crm_id, picked from the candidates sharing the phone: Link is
    // then the primary action, not Confirm.
    steps::link_candidate(c, db, &s.cross_channel, &s.linked_crm_id).await;

    // Authorize one retry: granted once through the dialog (the connector is paused: the
    // operation waits, received)...
    steps::authorize_retry(c, db, &s.exhausted).await;
    el(c, "[data-testid=op-status][data-status=received]").await;
    assert_eq!(op(db, &s.exhausted).await.status, Status::Received);

    // ...and a second operator who acted first wins: the window refuses, one grant stays.
    let console = Console::open(url).await.unwrap();
    db.open_review(
        &s.exhausted,
        leadgate::domain::ReviewReason::UncertainOutcome,
        "worker:1",
        json!({}),
        store::local_now(),
    )
    .await
    .unwrap();
    // The window shows the new case; then Ivan, in another console, grants first.
    tab(c, "needs_review").await;
    open_row(c, s.exhausted.as_str()).await;
    let case = db.cases_of(&s.exhausted).await.unwrap().pop().unwrap();
    let shown = format!("#{} ", case.id);
    text_until(c, "[data-testid=case-id]", &shown, |t| {
        t.starts_with(&shown)
    })
    .await;
    // The operator opens the dialog; Ivan grants while it is open. Whether or not a poll
    // then shows the case resolved, "yes" answers for the version the operator saw.
    click(c, "[data-testid=authorize]").await;
    el(c, "[data-testid=authorize-dialog-yes]").await;
    ivan_grants_a_retry(&console, &case).await;
    // Let a poll (every 3 s) land first: the dialog must not be swallowed by it.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    click(c, "[data-testid=authorize-dialog-yes]").await;
    text_until(
        c,
        "[data-testid=action-error]",
        "already resolved by Ivan",
        |t| t.contains("already resolved by Ivan"),
    )
    .await;
    let o = op(db, &s.exhausted).await;
    assert_eq!(o.retry_grants, 1, "two authorizations, one grant");
    let grants = db
        .timeline(&s.exhausted)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "human_action" && e.detail["action"] == "retry_authorized")
        .count();
    assert_eq!(grants, 2, "one per case; the refused click added none");

    // A late duplicate arrives while the window is open; the manager decides it is a new
    // request after all: Create new sends it to the worker.
    let mut late = leadgate_testkit::seed::lead(
        "tilda",
        "late-1",
        json!({"name": "Vera", "phone": "+79991112233"}),
        store::local_now(),
    );
    late.review = Some(ReviewReason::LateDuplicate);
    db.record_delivery(late).await.unwrap();
    let late = OperationId::new("tilda", "late-1").unwrap();
    tab(c, "needs_review").await;
    open_row(c, late.as_str()).await;
    click(c, "[data-testid=create-new]").await;
    el(c, "[data-testid=op-status][data-status=received]").await;
    let case = db.cases_of(&late).await.unwrap().pop().unwrap();
    assert_eq!(case.resolution.as_deref(), Some("created_new"));
    assert_eq!(op(db, &late).await.status, Status::Received);

    // Reject: a stale operation is sent to review, then dropped with a reason (the button
    // waits for the comment); dropping a lead for good asks first, and Esc says no.
    steps::reject_stale(c, db, &s.stale, "test submission from the agency").await;

    // Keep original on a payload conflict, after looking at the diff.
    tab(c, "payload_conflict").await;
    open_row(c, s.conflict.as_str()).await;
    el(c, "[data-testid=conflict-diff] tr[data-kind=changed]").await;
    shot(c, "conflict-diff.png").await;
    steps::keep_original(c, db, &s.conflict, &operator()).await;

    // Resume the paused connector.
    tab(c, "connectors").await;
    click(
        c,
        "[data-testid=connector-row][data-operation=bitrix24] [data-testid=resume]",
    )
    .await;
    click(c, "[data-testid=resume-dialog-yes]").await;
    el(c, "[data-testid=flash]").await;
    assert!(!db.connector("bitrix24").await.unwrap().unwrap().paused);

    // The dashboard.
    click(c, "[data-testid=nav-dashboard]").await;
    text_until(c, "[data-testid=m-unique]", "a count", |t| {
        t.chars().any(|c| c.is_ascii_digit())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    shot(c, "dashboard.png").await;

    // The Diagnosis screen: a report `leadgate diagnose` saved in this database (from
    // the Bitrix24 export the integration tests read), shown as its HTML shows it.
    let export = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/diagnose-bitrix24-leads.csv");
    let request = leadgate::diagnose::run::Request {
        crm: leadgate::diagnose::run::CrmInput::Csv {
            path: export,
            offset: chrono::FixedOffset::east_opt(3 * 3600).unwrap(),
        },
        period: None,
        store: None,
        n8n: None,
        options: leadgate::diagnose::Options::default(),
    };
    let d = leadgate::diagnose::run::run(&request, &mut |_| {})
        .await
        .unwrap();
    leadgate::diagnose::run::save(db, &d).await.unwrap();
    let data = leadgate::diagnose::report::data(&d);
    click(c, "[data-testid=nav-diagnosis]").await;
    let pairs = data.pairs.to_string();
    text_until(c, "[data-testid=diag-pairs]", &pairs, |t| t == pairs).await;
    for v in &data.per_verdict {
        let n = v.pairs.to_string();
        text_until(
            c,
            &format!("[data-testid=diag-count-{}]", v.verdict),
            &n,
            |t| t == n,
        )
        .await;
    }
    let mut shown = vec![];
    for p in c.find_all(css("[data-testid=diag-pair]")).await.unwrap() {
        let verdict = p.attr("data-verdict").await.unwrap().unwrap_or_default();
        let title = p
            .find(css("[data-testid=diag-verdict]"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        shown.push((verdict, title));
    }
    let expected: Vec<(String, String)> = data
        .pair_list
        .iter()
        .map(|p| {
            let title = data
                .per_verdict
                .iter()
                .find(|v| v.verdict == p.verdict)
                .unwrap();
            (p.verdict.clone(), title.title.clone())
        })
        .collect();
    assert_eq!(shown, expected, "every pair with its verdict");
    // One verdict at a time.
    click(c, "[data-testid=diag-filter-cross_channel_overlap]").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let only = c.find_all(css("[data-testid=diag-pair]")).await.unwrap();
    assert_eq!(only.len(), 1);
    click(c, "[data-testid=diag-filter-cross_channel_overlap]").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    shot(c, "diagnosis.png").await;

    // Russian, remembered in the settings.
    choose(c, "select[data-testid=language]", "ru").await;
    click(c, "[data-testid=nav-queue]").await;
    text_until(c, "[data-testid=tab-needs_review]", "Russian tabs", |t| {
        t.starts_with("На разборе")
    })
    .await;
    tab(c, "failed_terminal").await;
    open_row(c, s.failed.as_str()).await;
    shot(c, "queue-ru.png").await;

    // The Diagnosis screen in Russian: the report's sentences too, from their codes, and
    // no English sentence left (ids, e-mails, sources and CRM fields apart).
    click(c, "[data-testid=nav-diagnosis]").await;
    text_until(
        c,
        "[data-testid=diag-read]",
        "what was read, in Russian",
        |t| t.contains("сущност") && t.contains("без истории n8n"),
    )
    .await;
    for (selector, said) in [
        ("[data-testid=diag-evidence]", "создана через"),
        ("[data-testid=diag-what]", "создана в CRM"),
    ] {
        let text = el(c, selector).await.text().await.unwrap();
        assert!(text.contains(said), "{selector}: {text}");
    }
    // Every text node of the screen, clipped or not, one apart from the next.
    let screen = c
        .execute(
            "return Array.from(document.querySelectorAll('[data-testid=diagnosis] *'))\
               .flatMap((e) => Array.from(e.childNodes))\
               .filter((n) => n.nodeType === Node.TEXT_NODE)\
               .map((n) => n.textContent)\
               .join(' \\n ');",
            vec![],
        )
        .await
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        screen.contains("выгрузка CSV diagnose-bitrix24-leads.csv"),
        "the input, in Russian: {screen}"
    );
    let english = english_runs(&screen);
    assert!(
        english.is_empty(),
        "English on the Russian Diagnosis screen: {english:?}\n{screen}"
    );
    shot(c, "diagnosis-ru.png").await;
}

/// Runs of three or more English words in `text`: a word is Latin letters only (an
/// apostrophe inside allowed), so ids, e-mails, CRM fields (`ORIGIN_ID`), keys
/// (`site:77`) and method names (`crm.lead.list`) break a run, and so do the names the
/// Russian text keeps (Leadgate, CRM, n8n…).
fn english_runs(text: &str) -> Vec<String> {
    const NAMES: &[&str] = &["Leadgate", "CRM", "n8n", "Bitrix24", "amoCRM", "API", "CSV"];
    let mut runs = vec![];
    let mut run: Vec<&str> = vec![];
    let mut close = |run: &mut Vec<&str>| {
        if run.len() >= 3 {
            runs.push(run.join(" "));
        }
        run.clear();
    };
    for raw in text.split_whitespace() {
        let w = raw
            .trim_start_matches(['(', '«', '"', '`'])
            .trim_end_matches([')', '»', '"', '`', ',', '.', ':', ';']);
        let letters = w
            .split('\'')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphabetic()));
        if letters && !NAMES.contains(&w) {
            run.push(w);
        } else {
            close(&mut run);
        }
    }
    close(&mut run);
    runs
}

#[test]
fn english_runs_finds_english_sentences_and_passes_ids_and_russian() {
    assert_eq!(
        english_runs("entity 102 was created 2 min after entity 101"),
        ["min after entity"]
    );
    assert_eq!(
        english_runs("3 CRM entities (CSV export a.csv), Leadgate's journal, no n8n history"),
        ["Leadgate's journal no"]
    );
    assert!(english_runs(
        "сущность 101 создана в CRM (источник WEB, ORIGINATOR_ID leadgate, ORIGIN_ID site:1); \
         Bitrix24: crm.lead.list и crm.duplicate.findbycomm; a•••@example.ru"
    )
    .is_empty());
}

/// The second walk-through's points 7 and 8 in Russian (`leadgate_testkit::walk`, which
/// the browser suite runs too): durations, refusals, the CRM's words apart, charts,
/// shortcuts, the searching state, filters per tab, the ambiguous match's picks, the
/// badge, and the top bar at the minimum width.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_walk_through_in_russian_in_a_real_window() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
    let db = store::connect(&url).await.unwrap();
    let s = leadgate_testkit::seed::seed(&*db).await.unwrap();
    let w = leadgate_testkit::walk::prepare(&*db).await;
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({"language": "en", "database_url": url,
               "crm_url_template": "https://example.bitrix24.ru/crm/lead/details/{id}/"})
        .to_string(),
    )
    .unwrap();
    let _driver = start_driver(&settings, &[]);
    let c = connect_client().await;
    let steps = tokio::spawn({
        let c = c.clone();
        async move {
            el(&c, "[data-testid=queue-row]").await;
            leadgate_testkit::walk::second_walk_through(&c, &*db, &w, &s.failed, &s.uncertain).await
        }
    })
    .await;
    let _ = c.close().await;
    if let Err(e) = steps {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// A stand-in for the system browser: `xdg-open URL` appends the URL to a file.
fn fake_browser(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let opened = dir.join("opened.txt");
    let script = bin.join("xdg-open");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$1\" >> '{}'\n",
            opened.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, opened)
}

async fn opened_urls(file: &Path, at_least: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let urls: Vec<String> = std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        if urls.len() >= at_least || Instant::now() > deadline {
            return urls;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The console as an all-day tool: leads by name in the queue, the timeline in words in
/// both languages, the CRM opened in the system browser (and nothing else), a bulk retry
/// over an outage's 50 cases with one resolved meanwhile, and an export read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_cleared_in_one_bulk_retry_and_exported_in_a_real_window() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
    let db = store::connect(&url).await.unwrap();
    let outage = leadgate_testkit::seed::outage(&*db, 50).await.unwrap();
    // What the gateway publishes for a Bitrix24 portal (crm::web_links).
    db.publish_crm_links(
        &leadgate::store::CrmLinks {
            connector: "bitrix24".into(),
            entity_url: "https://acme.bitrix24.ru/crm/lead/details/{id}/".into(),
            search_url: Some(
                "https://acme.bitrix24.ru/crm/lead/list/?apply_filter=Y&FIND={q}".into(),
            ),
            contact_url: None,
        },
        store::local_now(),
    )
    .await
    .unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({"language": "en", "database_url": url}).to_string(),
    )
    .unwrap();
    let (bin, opened) = fake_browser(dir.path());
    let exports = dir.path().join("exports");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let _driver = start_driver(
        &settings,
        &[
            ("PATH", path),
            ("LEADGATE_EXPORT_DIR", exports.display().to_string()),
            // An operator in Moscow: times are local, with the zone said.
            ("TZ", "Europe/Moscow".to_string()),
        ],
    );
    let c = connect_client().await;
    let steps = tokio::spawn({
        let c = c.clone();
        let dirs = (opened.clone(), exports.clone());
        async move { all_day(&c, &*db, &outage, &url, &dirs.0, &dirs.1).await }
    })
    .await;
    let _ = c.close().await;
    if let Err(e) = steps {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn all_day(
    c: &Client,
    db: &dyn Store,
    outage: &[OperationId],
    url: &str,
    opened: &Path,
    exports: &Path,
) {
    text_until(c, "[data-testid=count-needs_review]", "50", |t| t == "50").await;
    // Rows name the lead first.
    let first = &outage[0];
    text_until(
        c,
        &format!("[data-testid=queue-row][data-operation='{first}'] [data-testid=row-name]"),
        "the lead's name",
        |t| t == "Olga",
    )
    .await;

    // Search by a phone written otherwise than stored (+79160000005): one lead, found
    // among all operations, opened from the results.
    let fifth = &outage[4];
    el(c, "[data-testid=search]")
        .await
        .send_keys("8 (916) 000-00-05\u{E007}")
        .await
        .unwrap();
    text_until(
        c,
        "[data-testid=search-header]",
        "the normalized phone",
        |t| t.contains("+79160000005"),
    )
    .await;
    let found = c.find_all(css("[data-testid=queue-row]")).await.unwrap();
    assert_eq!(found.len(), 1, "one lead has that phone");
    open_row(c, fifth.as_str()).await;
    shot(c, "search.png").await;
    click(c, "[data-testid=search-clear]").await;
    text_until(c, "[data-testid=count-needs_review]", "50", |t| t == "50").await;

    // The timeline in words, in English and then in Russian.
    open_row(c, first.as_str()).await;
    text_until(
        c,
        "[data-testid=timeline] [data-kind=delivery] [data-testid=event-sentence]",
        "an English sentence",
        |t| t.starts_with("Delivery") && t.ends_with("new operation"),
    )
    .await;
    choose(c, "select[data-testid=language]", "ru").await;
    text_until(
        c,
        "[data-testid=timeline] [data-kind=delivery] [data-testid=event-sentence]",
        "a Russian sentence",
        |t| t.starts_with("Доставка") && t.ends_with("новая операция"),
    )
    .await;
    // Times in the operator's zone (Moscow), the zone said: not UTC without saying so.
    let delivered = db.timeline(first).await.unwrap()[0].at;
    let moscow = delivered.with_timezone(&chrono::FixedOffset::east_opt(3 * 3600).unwrap());
    let want = format!("{} GMT+3", moscow.format("%H:%M:%S"));
    text_until(
        c,
        "[data-testid=timeline] [data-kind=delivery] time",
        "the Moscow time",
        |t| t == want,
    )
    .await;
    text_until(c, "[data-testid=op-status]", "a translated status", |t| {
        t != "needs_review" && !t.is_empty()
    })
    .await;
    shot(c, "case-timeline-ru.png").await;
    choose(c, "select[data-testid=language]", "en").await;

    // Find in CRM before deciding: the system browser opens the portal's list searched
    // for the lead's phone. Any other address is refused by the opener's scope.
    click(c, "[data-testid=find-in-crm]").await;
    let phone = db.operation(first).await.unwrap().unwrap().payload.unwrap()["phone"]
        .as_str()
        .unwrap()
        .to_owned();
    let urls = opened_urls(opened, 1).await;
    assert_eq!(
        urls,
        [format!(
            "https://acme.bitrix24.ru/crm/lead/list/?apply_filter=Y&FIND=%2B{}",
            &phone[1..]
        )]
    );
    let refused = c
        .execute_async(
            "const done = arguments[arguments.length - 1];\
             window.__TAURI_INTERNALS__.invoke('plugin:opener|open_url', {url: 'https://evil.example/x'})\
               .then(() => done('opened'), (e) => done('refused: ' + e));",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        refused.as_str().is_some_and(|r| r.starts_with("refused")),
        "{refused:?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        opened_urls(opened, 2).await.len(),
        1,
        "nothing else was opened"
    );
    el(c, "body").await.send_keys("\u{E00C}").await.unwrap();

    // Bulk: every retries_exhausted case of the outage, one retry each.
    choose(c, "select[aria-label='Reason']", "retries_exhausted").await;
    steps::bulk_preview(c, "authorize_retry", 50).await;
    let start = el(c, "[data-testid=bulk-start]").await;
    assert!(
        !start.is_enabled().await.unwrap(),
        "no bulk action without a comment"
    );
    // Meanwhile another operator resolves one of them alone.
    let console = Console::open(url).await.unwrap();
    let case = db.cases_of(&outage[17]).await.unwrap().pop().unwrap();
    ivan_grants_a_retry(&console, &case).await;
    steps::bulk_run(c, "Bitrix24 outage of the morning is over", 49, 1).await;
    text_until(
        c,
        &format!("[data-testid=bulk-skipped] li[data-case='{}']", case.id),
        "the skipped case and why",
        |t| t.contains("already resolved by Ivan"),
    )
    .await;
    shot(c, "bulk.png").await;
    for id in outage {
        let o = op(db, id).await;
        assert_eq!((o.status, o.retry_grants), (Status::Received, 1), "{id}");
        let decisions = db
            .timeline(id)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == "human_action")
            .count();
        assert_eq!(decisions, 1, "{id} decided once");
    }
    click(c, "[data-testid=bulk-close]").await;
    text_until(c, "[data-testid=count-needs_review]", "0", |t| t == "0").await;

    // Export what a manager asked for, and read it back.
    db.open_review(
        &outage[3],
        ReviewReason::UncertainOutcome,
        "worker:1",
        json!({}),
        store::local_now(),
    )
    .await
    .unwrap();
    choose(c, "select[aria-label='Reason']", "").await;
    text_until(c, "[data-testid=count-needs_review]", "1", |t| t == "1").await;
    click(c, "[data-testid=export]").await;
    let flash = text_until(c, "[data-testid=flash]", "where the file went", |t| {
        t.contains(".csv")
    })
    .await;
    let file = std::fs::read_dir(exports)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "csv"))
        .expect("an exported file");
    assert!(flash.contains(&file.display().to_string()), "{flash}");
    let bytes = std::fs::read(&file).unwrap();
    assert!(bytes.starts_with(b"\xEF\xBB\xBF"), "UTF-8 with BOM");
    let text = String::from_utf8(bytes[3..].to_vec()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("Case,Operation,Name,Phone"),
        "{}",
        lines[0]
    );
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[1].contains(outage[3].as_str()) && lines[1].contains("Ольга"),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains("uncertain outcome"), "{}", lines[1]);

    // At the app's own minimum size (tauri.conf.json: 960 x 600) nothing spills sideways:
    // the queue and the open case both stay usable.
    c.set_window_size(960, 600).await.unwrap();
    open_row(c, outage[3].as_str()).await;
    el(c, "[data-testid=actions]").await;
    let layout = c
        .execute(
            "const q = document.querySelector('aside.queue').getBoundingClientRect();\
             const d = document.querySelector('[data-testid=case-view]').getBoundingClientRect();\
             return [document.documentElement.scrollWidth, window.innerWidth, q.width, d.width];",
            vec![],
        )
        .await
        .unwrap();
    let n = |i: usize| layout[i].as_f64().unwrap();
    assert!(
        n(0) <= n(1),
        "no sideways scroll at the minimum size: {layout}"
    );
    assert!(
        n(2) >= 300.0 && n(3) >= 450.0,
        "queue and case keep their room: {layout}"
    );
    shot(c, "minimum-size.png").await;
}

/// A child process stopped with SIGTERM when dropped.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// The first line a child prints.
fn first_line(child: &mut Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_owned()
}

/// A private session bus (no service activation: only what the test starts is on it).
fn session_bus(dir: &Path) -> (Stopped, String) {
    let config = dir.join("bus.conf");
    std::fs::write(
        &config,
        format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>"#,
            dir.join("bus").display()
        ),
    )
    .unwrap();
    let mut child = Command::new("dbus-daemon")
        .arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--print-address=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dbus-daemon (Debian: dbus-daemon)");
    let address = first_line(&mut child);
    assert!(address.starts_with("unix:"), "bus address: {address:?}");
    (Stopped(child), address)
}

/// One notification as the fake server received it.
#[derive(Debug, serde::Deserialize)]
struct Shown {
    id: u32,
    summary: String,
    body: String,
    actions: Vec<String>,
}

/// tests/fake_notifications.py serving org.freedesktop.Notifications on `bus`.
struct FakeNotifications {
    _child: Stopped,
    log: PathBuf,
    bus: String,
}

const FAKE_SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_notifications.py");

/// Debian's python3, which has python3-dbus and python3-gi (not a pyenv one first on PATH).
fn python() -> String {
    std::env::var("LEADGATE_E2E_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into())
}

impl FakeNotifications {
    fn start(dir: &Path, bus: &str) -> Self {
        let log = dir.join("notifications.jsonl");
        let mut child = Command::new(python())
            .args([FAKE_SERVER, "serve"])
            .arg(&log)
            .env("DBUS_SESSION_BUS_ADDRESS", bus)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 with python3-dbus and python3-gi");
        assert_eq!(
            first_line(&mut child),
            "ready",
            "the fake notification server"
        );
        FakeNotifications {
            _child: Stopped(child),
            log,
            bus: bus.to_owned(),
        }
    }

    fn shown(&self) -> Vec<Shown> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The notifications titled `summary`, once there are at least `n` of them.
    async fn wait_for(&self, summary: &str, n: usize) -> Vec<Shown> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let shown: Vec<Shown> = self
                .shown()
                .into_iter()
                .filter(|s| s.summary == summary)
                .collect();
            if shown.len() >= n {
                return shown;
            }
            assert!(
                Instant::now() < deadline,
                "no notification `{summary}`; shown: {:?}",
                self.shown()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The operator clicks the notification: ActionInvoked(id, "default").
    async fn click(&self, n: &Shown) {
        assert!(
            n.actions.chunks(2).any(|a| a[0] == "default"),
            "a default action: {n:?}"
        );
        // The console subscribes to the answer right after Notify returns.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let ok = Command::new(python())
            .args([FAKE_SERVER, "invoke", &n.id.to_string(), "default"])
            .env("DBUS_SESSION_BUS_ADDRESS", &self.bus)
            .status()
            .unwrap();
        assert!(ok.success(), "invoke {}", n.id);
    }
}

/// The lead's own data must not reach a notification: the screen may be shared or locked.
fn assert_no_personal_data(n: &Shown, lead: &[&str]) {
    for text in [&n.summary, &n.body] {
        for x in lead {
            assert!(!text.contains(x), "`{x}` in a notification: {n:?}");
        }
    }
}

/// Clicking a desktop notification: "New review case" brings the window to the front on
/// the newest of the new cases; "CRM connector paused" on the Connectors tab.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_on_a_notification_opens_the_new_case_in_a_real_window() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
    let db = store::connect(&url).await.unwrap();
    leadgate_testkit::seed::seed(&*db).await.unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({"language": "en", "database_url": url}).to_string(),
    )
    .unwrap();
    let (_bus, address) = session_bus(dir.path());
    let server = FakeNotifications::start(dir.path(), &address);
    let _driver = start_driver(&settings, &[("DBUS_SESSION_BUS_ADDRESS", address)]);
    let c = connect_client().await;
    let steps = tokio::spawn({
        let c = c.clone();
        async move { click_through(&c, &*db, &server).await }
    })
    .await;
    let _ = c.close().await;
    if let Err(e) = steps {
        std::panic::resume_unwind(e.into_panic());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_original_and_update_sends_the_changed_phone_to_the_crm_in_a_real_window() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
    let gw = leadgate_testkit::gateway::Gateway::start_on(&url, "").await;
    // The lead, created by the worker; then the customer corrects the phone and the form
    // sends the same submission again.
    let first = leadgate_testkit::gateway::lead("e2e-upd");
    gw.post_json("site", &first).await;
    gw.wait_status("site:e2e-upd", "completed").await;
    let mut later = first.clone();
    later["phone"] = json!("+7 916 555-44-33");
    later["comment"] = json!("please call after 6 pm");
    let (_, body, _) = gw.post_json("site", &later).await;
    assert_eq!(body["outcome"], "conflict", "{body}");
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({"language": "en", "database_url": url}).to_string(),
    )
    .unwrap();
    let _driver = start_driver(&settings, &[]);
    let c = connect_client().await;
    let steps = tokio::spawn({
        let c = c.clone();
        let store = gw.store();
        async move { update_crm(&c, &*store).await }
    })
    .await;
    let _ = c.close().await;
    if let Err(e) = steps {
        std::panic::resume_unwind(e.into_panic());
    }
    let entity = &gw.fake.entities()[0];
    let phones: Vec<&str> = entity.fields["PHONE"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["VALUE"].as_str().unwrap())
        .collect();
    assert_eq!(phones, ["+7 999 123-45-67", "+7 916 555-44-33"]);
    assert_eq!(entity.fields["COMMENTS"], "please call after 6 pm");
    assert_eq!(gw.fake.calls("crm.lead.update"), 1);
    assert_eq!(gw.fake.calls("crm.lead.add"), 1, "nothing created twice");
    gw.stop().await;
}

/// A lead the CRM refused, fixed and sent again in the window, on the database at `url`
/// beside a running gateway: the fake CRM gets the fixed data, once.
async fn fix_and_resend_in_a_real_window(url: &str) {
    use leadgate_testkit::gateway::{lead, Fault, Gateway};
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::start_on(url, "").await;
    // The CRM refuses the phone (400, nothing created): failed for good.
    gw.fake.push_fault("crm.lead.add", Fault::Validation, 1);
    let mut bad = lead("e2e-fix");
    bad["phone"] = json!("8 (999) 12");
    gw.post_json("site", &bad).await;
    gw.wait_status("site:e2e-fix", "failed_terminal").await;
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({"language": "en", "database_url": url}).to_string(),
    )
    .unwrap();
    let _driver = start_driver(&settings, &[]);
    let c = connect_client().await;
    let mut fixed = bad.clone();
    fixed["phone"] = json!("+7 999 123-45-67");
    fixed["name"] = json!("Ivan Fixed");
    let id: OperationId = "site:e2e-fix".parse().unwrap();
    let steps = tokio::spawn({
        let c = c.clone();
        let store = gw.store();
        async move {
            steps::fix_and_resend(&c, &*store, &id, &fixed).await;
            steps::completed_in_view(&c, &*store, &id).await
        }
    })
    .await;
    let _ = c.close().await;
    let shown = match steps {
        Ok(crm_id) => crm_id,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    let entities = gw.fake.entities();
    assert_eq!(entities.len(), 1, "one entity: {entities:?}");
    assert_eq!(
        entities[0].id.to_string(),
        shown,
        "the fake CRM's id is shown"
    );
    assert!(entities[0].fields.to_string().contains("Ivan Fixed"));
    assert_eq!(
        gw.fake.calls("crm.lead.add"),
        2,
        "the refused create and the one resend"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_fix_and_resend_sends_the_fixed_lead_once_in_a_real_window() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
    fix_and_resend_in_a_real_window(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fix_and_resend_sends_the_fixed_lead_once_in_a_real_window() {
    leadgate_testkit::run(leadgate_testkit::Backend::Postgres, |db| async move {
        fix_and_resend_in_a_real_window(&db.url).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_changes_a_rule_and_the_running_gateway_matches_by_it_in_a_real_window() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
    let gw = leadgate_testkit::gateway::Gateway::start_on(&url, "").await;
    // The form's rule, seeded from the TOML, is `create`: a second form with the same phone
    // would be a second CRM entity.
    gw.post_json("site", &leadgate_testkit::gateway::lead("e2e-r1"))
        .await;
    let first = gw.wait_status("site:e2e-r1", "completed").await;
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({"language": "en", "database_url": url}).to_string(),
    )
    .unwrap();
    let _driver = start_driver(&settings, &[]);
    let c = connect_client().await;
    let steps = tokio::spawn({
        let c = c.clone();
        async move { edit_rules(&c).await }
    })
    .await;
    let _ = c.close().await;
    if let Err(e) = steps {
        std::panic::resume_unwind(e.into_panic());
    }
    // The running gateway, never restarted, matches the next form by the new rule.
    let rules = std::sync::Arc::clone(&gw.running.as_ref().unwrap().rules);
    let want = gw.store().rules_version().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while rules.current().version != want {
        assert!(
            Instant::now() < deadline,
            "the gateway never read the new rules"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, body, _) = gw
        .post_json("site", &leadgate_testkit::gateway::lead("e2e-r2"))
        .await;
    assert_eq!(body["status"], "completed", "linked at intake: {body}");
    assert_eq!(gw.operation("site:e2e-r2").await["crm_id"], first["crm_id"]);
    assert_eq!(gw.fake.calls("crm.lead.add"), 1, "no second entity");
    let history = gw.store().rules_history(Some("site"), 10).await.unwrap();
    assert_eq!(history[0].actor, operator());
    gw.stop().await;
}

async fn edit_rules(c: &Client) {
    click(c, "[data-testid=nav-rules]").await;
    el(c, "[data-testid=rules-row-site]").await;
    choose(c, "[data-testid=rule-site]", "link").await;
    // The site's form and the chat are one channel: a match between them links.
    let channel = el(c, "[data-testid=channel-chat]").await;
    channel.clear().await.unwrap();
    channel.send_keys("site").await.unwrap();
    click(c, "[data-testid=save-chat]").await;
    text_until(c, "[data-testid=rules-notice]", "chat saved", |t| {
        t.contains("chat") && t.contains("version 2")
    })
    .await;
    click(c, "[data-testid=save-site]").await;
    text_until(c, "[data-testid=rules-notice]", "site saved", |t| {
        t.contains("site") && t.contains("version 2")
    })
    .await;
    text_until(
        c,
        "[data-testid=rules-history-row]",
        "the change in the history",
        |t| t.contains(&operator()) && t.contains("create a new lead → link to the newest lead"),
    )
    .await;
    text_until(
        c,
        "[data-testid=rules-row-site]",
        "the channel shared",
        |t| t.contains("One channel with chat"),
    )
    .await;
    // The changed rows and the history below them in one picture.
    c.execute(
        "document.querySelector('[data-testid=rules-row-chat]').scrollIntoView({block: 'start'})",
        vec![],
    )
    .await
    .unwrap();
    shot(c, "rules.png").await;
}

async fn update_crm(c: &Client, db: &dyn Store) {
    tab(c, "payload_conflict").await;
    open_row(c, "site:e2e-upd").await;
    el(c, "[data-testid=conflict-diff] tr[data-kind=changed]").await;
    click(c, "[data-testid=update-crm]").await;
    text_until(
        c,
        "[data-testid=action-dialog]",
        "the update question",
        |t| t.contains("send the changed fields"),
    )
    .await;
    click(c, "[data-testid=action-dialog-yes]").await;
    el(c, "[data-testid=resolved-by]").await;
    // The worker sends it; the case's timeline says so in words (the console polls).
    let said = text_until(
        c,
        "[data-kind=crm_updated] [data-testid=event-sentence]",
        "the update's sentence",
        |t| t.contains("updated: phone, comment"),
    )
    .await;
    assert!(said.starts_with("CRM entity 1 updated"), "{said}");
    c.execute(
        "document.querySelector('[data-kind=crm_update_requested]').scrollIntoView({block: 'start'})",
        vec![],
    )
    .await
    .unwrap();
    shot(c, "conflict-update.png").await;
    let id: OperationId = "site:e2e-upd".parse().unwrap();
    let case = db.cases_of(&id).await.unwrap().pop().unwrap();
    assert_eq!(case.resolution.as_deref(), Some("updated_crm"));
    assert_eq!(case.resolved_by, Some(operator()));
}

async fn click_through(c: &Client, db: &dyn Store, server: &FakeNotifications) {
    text_until(c, "[data-testid=count-needs_review]", "3", |t| t == "3").await;
    // The operator is elsewhere: on the dashboard.
    click(c, "[data-testid=nav-dashboard]").await;
    el(c, "[data-testid=m-unique]").await;

    // Two late duplicates arrive together (one SQLite poll, 3 s): one notification, and a
    // click on it opens the newer.
    let leads = [
        ("notify-1", "Vera", "+79991112233", "vera@example.com"),
        ("notify-2", "Boris", "+79995556677", "boris@example.com"),
    ];
    for (key, name, phone, email) in leads {
        let mut d = leadgate_testkit::seed::lead(
            "tilda",
            key,
            json!({"name": name, "phone": phone, "email": email}),
            store::local_now(),
        );
        d.review = Some(ReviewReason::LateDuplicate);
        db.record_delivery(d).await.unwrap();
    }
    let newest = OperationId::new("tilda", "notify-2").unwrap();
    let shown = server.wait_for("New review case", 1).await;
    // Both in one poll is the rule; should a poll fall between the two inserts, the last
    // notification is the one about the newer lead alone.
    let last = shown.last().unwrap();
    if shown.len() == 1 {
        assert_eq!(last.body, "2 × late duplicate · tilda", "{last:?}");
    }
    let personal = [
        "Vera",
        "Boris",
        "+7999",
        "79991112233",
        "79995556677",
        "@example.com",
    ];
    for n in &shown {
        assert_no_personal_data(n, &personal);
    }
    server.click(last).await;
    text_until(c, "[data-testid=case-key]", "the newest new case", |t| {
        t == newest.as_str()
    })
    .await;
    el(
        c,
        &format!("[data-testid=queue-row][data-operation='{newest}'].open"),
    )
    .await;
    // The notification stays on the timeline of both operations it was about.
    for key in ["notify-1", "notify-2"] {
        let id = OperationId::new("tilda", key).unwrap();
        let notes = db
            .timeline(&id)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == "notification" && e.detail["what"] == "review_opened")
            .count();
        assert_eq!(notes, 1, "{id}");
    }
    shot(c, "notification-click.png").await;

    // A connector pauses while the operator works on that case: the click opens the
    // Connectors tab.
    db.pause_connector(
        "amocrm",
        "auth: invalid_grant",
        "worker:1",
        store::local_now(),
    )
    .await
    .unwrap();
    let paused = server.wait_for("CRM connector paused", 1).await;
    assert_eq!(paused.len(), 1, "{paused:?}");
    assert!(paused[0].body.contains("amocrm"), "{:?}", paused[0]);
    server.click(&paused[0]).await;
    el(c, "[data-testid=tab-connectors].active").await;
    el(
        c,
        "[data-testid=connector-row][data-operation=amocrm] [data-testid=resume]",
    )
    .await;
}

/// Issue 17: people log in with PostgreSQL logins of their own. A `support` login sees
/// the dashboard and no queue; a `sales_ops` login works the queue, decides an uncertain
/// outcome (a gateway applies it, under the login) and is offered nothing on a
/// cross-channel match, which is a manager's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn support_and_sales_ops_logins_see_what_their_roles_allow_in_a_real_window() {
    use leadgate::domain::roles::Role;
    use leadgate_testkit::people::{gateway, People};
    leadgate_testkit::run(leadgate_testkit::Backend::Postgres, |db| async move {
        let store = db.store().await;
        let s = leadgate_testkit::seed::seed(&*store).await.unwrap();
        let site = leadgate::store::SourceRules {
            source: "site".into(),
            rule: leadgate::domain::MatchRule::Create,
            window_secs: 14 * 86400,
            channel: "site".into(),
        };
        store.seed_rules(&[site], store.now()).await.unwrap();
        let people = People::new(&db.url).await;
        let gw = gateway(store.clone());
        let dir = tempfile::tempdir().unwrap();
        let settings = dir.path().join("settings.json");

        // support: figures only.
        std::fs::write(
            &settings,
            json!({"language": "en", "database_url": people.url(Role::Support)}).to_string(),
        )
        .unwrap();
        {
            let _driver = start_driver(&settings, &[]);
            let c = connect_client().await;
            let steps = tokio::spawn({
                let c = c.clone();
                let login = people.login(Role::Support).to_owned();
                async move {
                    text_until(&c, "[data-testid=operator]", &login, |t| t == login).await;
                    text_until(&c, "[data-testid=role][data-mode=person]", "support", |t| {
                        t == "support"
                    })
                    .await;
                    el(&c, "[data-testid=dashboard]").await;
                    text_until(&c, "[data-testid=dashboard]", "figures", |t| !t.is_empty()).await;
                    assert!(
                        c.find(css("[data-testid=nav-queue]")).await.is_err(),
                        "no queue for support"
                    );
                    assert!(
                        c.find(css("[data-testid=search]")).await.is_err(),
                        "no search for support"
                    );
                    shot(&c, "support-view.png").await;
                    // The business rules: read, not changed (a manager's).
                    click(&c, "[data-testid=nav-rules]").await;
                    el(&c, "[data-testid=rules-readonly]").await;
                    text_until(&c, "[data-testid=rule-site]", "the rule, read-only", |t| {
                        t == "create a new lead"
                    })
                    .await;
                    assert!(
                        c.find(css("[data-testid=save-site]")).await.is_err(),
                        "support changes no rule"
                    );
                }
            })
            .await;
            let _ = c.close().await;
            if let Err(e) = steps {
                std::panic::resume_unwind(e.into_panic());
            }
        }

        // sales_ops: the queue, its actions, not a manager's case.
        std::fs::write(
            &settings,
            json!({"language": "en", "database_url": people.url(Role::SalesOps)}).to_string(),
        )
        .unwrap();
        let _driver = start_driver(&settings, &[]);
        let c = connect_client().await;
        let steps = tokio::spawn({
            let c = c.clone();
            let login = people.login(Role::SalesOps).to_owned();
            let s = s.clone();
            async move {
                text_until(
                    &c,
                    "[data-testid=role][data-mode=person]",
                    "sales ops",
                    |t| t == "sales ops",
                )
                .await;
                // Theirs: two; the cross-channel match waits for a manager, apart.
                text_until(&c, "[data-testid=count-needs_review]", "2", |t| t == "2").await;
                steps::for_manager(&c, &s.uncertain).await;
                open_row(&c, s.cross_channel.as_str()).await;
                el(&c, "[data-testid=not-your-case]").await;
                assert!(c.find(css("[data-testid=link]")).await.is_err());
                choose(&c, "select[aria-label='Reason']", "").await;
                open_row(&c, s.uncertain.as_str()).await;
                el(&c, "[data-testid=crm-id-input]")
                    .await
                    .send_keys("5555")
                    .await
                    .unwrap();
                click(&c, "[data-testid=confirm]").await;
                el(&c, "[data-testid=op-status][data-status=completed]").await;
                text_until(&c, "[data-testid=resolved-by]", &login, |t| {
                    t.contains(&login)
                })
                .await;
            }
        })
        .await;
        let _ = c.close().await;
        if let Err(e) = steps {
            std::panic::resume_unwind(e.into_panic());
        }
        let timeline = store.timeline(&s.uncertain).await.unwrap();
        let human = timeline
            .iter()
            .rev()
            .find(|e| e.kind == "human_action")
            .unwrap();
        assert_eq!(human.actor, people.login(Role::SalesOps));
        gw.abort();
        people.drop_all().await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// The console's .deb: the Tauri bundler's package of this test's own binary, installed
// with dpkg, opened from /usr/bin in a real window, removed without a trace.

/// The version this test packages: a leftover of a killed run is recognised by it.
const DEB_TEST_VERSION: &str = "0.0.0-packaging-test";

/// `dpkg-query`'s status and version of leadgate-console, if dpkg knows it.
fn console_package() -> Option<(String, String)> {
    leadgate_testkit::deb::state("leadgate-console")
}

/// Runs `cmd`, which must succeed; its standard output.
fn output_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Purges the package this test installed, however the test ends.
struct ConsoleInstalled;

impl Drop for ConsoleInstalled {
    fn drop(&mut self) {
        if console_package().is_some() {
            let _ = Command::new("dpkg")
                .args(["--purge", "leadgate-console"])
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_deb_installs_opens_in_a_real_window_and_removes_clean() {
    let started = Instant::now();
    let missing: Vec<&str> = ["dpkg", "dpkg-deb", "desktop-file-validate", "ldd", "flock"]
        .into_iter()
        .filter(|t| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .unwrap()
                .status
                .success()
        })
        .collect();
    let root = output_of(Command::new("id").arg("-u")).trim() == "0";
    if !missing.is_empty() || !root {
        let why = format!("the console's .deb test needs root and {missing:?}");
        // scripts/install-console-deps.sh installs the tools; only a developer's machine
        // without root skips, out loud.
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("SKIPPED: {why}");
        return;
    }
    // One run at a time on a machine: they install and remove the same package.
    let _lock = leadgate_testkit::deb::MachineLock::take("/tmp/leadgate-console-packaging.lock");
    match console_package() {
        Some((_, v)) if v == DEB_TEST_VERSION => {
            leadgate_testkit::deb::dpkg(&["--purge", "leadgate-console"])
        }
        Some((s, v)) => panic!(
            "leadgate-console {v} ({s}) is installed on this machine, not by this test: \
             it would be replaced and removed; remove it first"
        ),
        None => {}
    }

    // The bundler packages the binary cargo built for this test: no compiling.
    let root_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out_dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let printed = output_of(
        Command::new(root_dir.join("scripts/package-console.sh"))
            .args(["--debug", "--version", DEB_TEST_VERSION, "--out"])
            .arg(out_dir.path())
            .current_dir(&root_dir),
    );
    let deb = printed.lines().last().unwrap().trim().to_owned();
    let size = std::fs::metadata(&deb).unwrap().len();
    eprintln!(
        "console .deb (debug binary): {:.1} MB in {:.1?}",
        size as f64 / 1e6,
        t.elapsed()
    );

    let info = output_of(Command::new("dpkg-deb").args(["--info", &deb]));
    for field in [
        "Package: leadgate-console",
        &format!("Version: {DEB_TEST_VERSION}"),
        "Section: net",
        "libwebkit2gtk-4.1-0",
        "libgtk-3-0",
    ] {
        assert!(info.contains(field), "{field} not in\n{info}");
    }
    let contents = output_of(Command::new("dpkg-deb").args(["--contents", &deb]));
    let desktop = "/usr/share/applications/Leadgate Console.desktop";
    // dpkg-deb lists `usr/…` or `./usr/…` after the date, as the archive has it.
    let listed = |path: &str| {
        let path = path.trim_start_matches('/');
        contents
            .lines()
            .any(|l| l.ends_with(&format!(" {path}")) || l.ends_with(&format!("./{path}")))
    };
    for path in ["/usr/bin/leadgate-console", desktop] {
        assert!(listed(path), "{path} not in\n{contents}");
    }
    assert!(
        contents
            .lines()
            .any(|l| l.contains("usr/share/icons/hicolor/")
                && l.ends_with("/apps/leadgate-console.png")),
        "no icon in\n{contents}"
    );

    let installed = ConsoleInstalled;
    leadgate_testkit::deb::dpkg(&["-i", &deb]);
    let (status, version) = console_package().expect("installed");
    assert_eq!(
        (status.as_str(), version.as_str()),
        ("ii", DEB_TEST_VERSION)
    );
    let entry = std::fs::read_to_string(desktop).unwrap();
    for line in [
        "Exec=leadgate-console",
        "Icon=leadgate-console",
        "Name=Leadgate Console",
    ] {
        assert!(entry.lines().any(|l| l == line), "{line} not in\n{entry}");
    }
    output_of(Command::new("desktop-file-validate").arg(desktop));
    let libs = output_of(Command::new("ldd").arg("/usr/bin/leadgate-console"));
    assert!(!libs.contains("not found"), "unresolved libraries:\n{libs}");

    // The installed program, from its installed path, on a database with cases to do.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
    let db = store::connect(&url).await.unwrap();
    leadgate_testkit::seed::seed(&*db).await.unwrap();
    let settings = dir.path().join("settings.json");
    std::fs::write(&settings, json!({"language": "en"}).to_string()).unwrap();
    let driver = start_driver(&settings, &[]);
    let c = connect_client_to("/usr/bin/leadgate-console").await;
    let steps = tokio::spawn({
        let c = c.clone();
        async move {
            el(&c, "[data-testid=connect-screen]").await;
            el(&c, "[data-testid=db-url]")
                .await
                .send_keys(&url)
                .await
                .unwrap();
            click(&c, "[data-testid=connect-screen] button[type=submit]").await;
            text_until(&c, "[data-testid=count-needs_review]", "3", |t| t == "3").await;
        }
    })
    .await;
    let _ = c.close().await;
    drop(driver);
    if let Err(e) = steps {
        std::panic::resume_unwind(e.into_panic());
    }

    // Removed: the program and its menu entry are gone; purged: dpkg forgets it.
    leadgate_testkit::deb::dpkg(&["-r", "leadgate-console"]);
    for path in ["/usr/bin/leadgate-console", desktop] {
        assert!(!Path::new(path).exists(), "{path} left after dpkg -r");
    }
    leadgate_testkit::deb::dpkg(&["--purge", "leadgate-console"]);
    assert_eq!(console_package(), None);
    drop(installed);
    eprintln!("console .deb test finished in {:.1?}", started.elapsed());
}

/// Fleet mode: the window shows one tenant at a time; the top bar's switcher shows
/// another, and the next start opens on the tenant shown last (the settings file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_switcher_shows_one_tenant_and_is_remembered_in_a_real_window() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
    let db = store::connect(&url).await.unwrap();
    leadgate_testkit::seed::seed(&*db).await.unwrap();
    let acmes = leadgate_testkit::seed::tenant_with_a_case(&db, "acme").await;
    let settings = dir.path().join("settings.json");
    std::fs::write(
        &settings,
        json!({"language": "en", "database_url": url}).to_string(),
    )
    .unwrap();

    for (start, shown, cases) in [(1, "default", "3"), (2, "acme", "1")] {
        let _driver = start_driver(&settings, &[]);
        let c = connect_client().await;
        let steps = tokio::spawn({
            let c = c.clone();
            let acmes = acmes.clone();
            async move {
                text_until(&c, "[data-testid=count-needs_review]", cases, |t| {
                    t == cases
                })
                .await;
                let switcher = el(&c, "[data-testid=tenant]").await;
                assert_eq!(
                    switcher.prop("value").await.unwrap().as_deref(),
                    Some(shown),
                    "start {start}"
                );
                if start == 1 {
                    choose(&c, "[data-testid=tenant]", "acme").await;
                    text_until(&c, "[data-testid=count-needs_review]", "1", |t| t == "1").await;
                    open_row(&c, acmes.as_str()).await;
                    click(&c, "[data-testid=nav-dashboard]").await;
                    el(&c, "[data-testid=dashboard]").await;
                } else {
                    open_row(&c, acmes.as_str()).await;
                    choose(&c, "[data-testid=tenant]", "default").await;
                    text_until(&c, "[data-testid=count-needs_review]", "3", |t| t == "3").await;
                }
            }
        })
        .await;
        let _ = c.close().await;
        if let Err(e) = steps {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(saved["tenant"], "default", "the tenant shown last: {saved}");
}
