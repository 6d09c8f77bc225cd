//! Every kind of case decided in Chromium, and an outage cleared with one bulk retry, on
//! both backends. On SQLite the operator does it all; on PostgreSQL each step is done by
//! the role whose it is (sales ops, a manager for the cross-channel match, an admin for
//! the connector), through the person's own database session and a running gateway.

use super::*;
use leadgate::domain::OperationId;
use leadgate_testkit::steps::{self, absent};

/// Who signs in for a step: on SQLite always the operator.
struct Team {
    people: Option<People>,
}

impl Team {
    fn login(&self, role: Role) -> (String, String) {
        match &self.people {
            Some(p) => (p.login(role).to_owned(), p.password(role)),
            None => (OPERATOR.to_owned(), OPERATOR_PASSWORD.to_owned()),
        }
    }
}

/// A deployment on `backend` and its team: on SQLite the `[console]` operator, on
/// PostgreSQL a private cluster that checks passwords with a person per role.
async fn team_and_deployment(
    backend: leadgate_testkit::Backend,
    seeding: Seeding,
) -> (Team, Deployment, Option<Cluster>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    match backend {
        leadgate_testkit::Backend::Sqlite => {
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
            let hash = password::hash(OPERATOR_PASSWORD).unwrap();
            let console =
                format!("operator = \"{OPERATOR}\"\noperator_password_hash = \"{hash}\"\n");
            let d = deploy_with(&url, &console, seeding).await;
            (Team { people: None }, d, None, dir)
        }
        leadgate_testkit::Backend::Postgres => {
            let (cluster, url) = checked_cluster();
            leadgate::store::connect(&url).await.unwrap();
            let people = People::new(&url).await;
            let d = deploy_with(&url, "", seeding).await;
            (
                Team {
                    people: Some(people),
                },
                d,
                Some(cluster),
                dir,
            )
        }
    }
}

async fn op(d: &Deployment, id: &OperationId) -> leadgate::store::Operation {
    d.store.operation(id).await.unwrap().unwrap()
}

async fn sign_in_as(c: &Client, team: &Team, role: Role) -> String {
    let (login, password) = team.login(role);
    sign_in(c, &login, &password).await;
    text_until(c, "[data-testid=operator]", &login, |t| t == login).await;
    login
}

/// `steps` as a boxed `Send` future: the compiler cannot see through these long
/// scenarios' borrows that they are `Send` for every lifetime `in_browser` asks about.
fn sendable<'a>(
    steps: impl std::future::Future<Output = ()> + Send + 'a,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
    Box::pin(steps)
}

async fn sign_out(c: &Client) {
    click(c, "[data-testid=sign-out]").await;
    el(c, "[data-testid=sign-in-screen]").await;
}

/// Retry, reject, keep original, link and resume, each by whose it is.
async fn every_kind_of_case(c: &Client, d: &Deployment, team: &Team) {
    let s = d.cases();
    c.goto(&d.console).await.unwrap();
    let sales = sign_in_as(c, team, Role::SalesOps).await;

    // A bulk re-check over every reason: the preview counts reason by reason, refuses
    // the cross-channel match (a manager's, and nothing was sent for it: a retry would
    // create it) and warns that the connector is paused.
    steps::bulk_preview(c, "authorize_retry", 2).await;
    el(
        c,
        "[data-testid=bulk-by-reason] li[data-reason=cross_channel_match][data-applies='0'][data-refused='1']",
    )
    .await;
    // Sales ops are told first that it is not theirs to decide; the operator, that a
    // re-check would create it.
    let code = if team.people.is_some() {
        "not_your_role"
    } else {
        "bulk_would_create"
    };
    el(
        c,
        &format!("[data-testid=bulk-refused] li[data-code={code}]"),
    )
    .await;
    el(c, "[data-testid=bulk-paused]").await;
    el(c, "body").await.send_keys("\u{E00C}").await.unwrap();
    assert!(
        absent(c, "[data-testid=bulk-dialog]").await,
        "Esc closes the preview"
    );

    steps::authorize_retry(c, &*d.store, &s.exhausted).await;
    steps::reject_stale(c, &*d.store, &s.stale, "test submission from the agency").await;
    steps::keep_original(c, &*d.store, &s.conflict, &sales).await;
    // The lead the CRM refused: its data fixed and sent again (it waits for the paused
    // connector like every other).
    let fixed = serde_json::json!({"submission_id": "1005", "name": "Maria Fixed",
                                   "phone": "+79001112233"});
    steps::fix_and_resend(c, &*d.store, &s.failed, &fixed).await;

    // A cross-channel match is a manager's: sales ops find it apart, "waiting for a
    // manager", one click away, and are offered no link.
    tab(c, "needs_review").await;
    if team.people.is_some() {
        steps::for_manager(c, &s.uncertain).await;
    }
    open_row(c, s.cross_channel.as_str()).await;
    if team.people.is_some() {
        el(c, "[data-testid=case-key]").await;
        assert!(
            absent(c, "[data-testid=link]").await,
            "sales ops may not decide a cross-channel match"
        );
        sign_out(c).await;
        sign_in_as(c, team, Role::Manager).await;
    }
    steps::link_candidate(c, &*d.store, &s.cross_channel, &s.linked_crm_id).await;

    // Resuming the paused connector is an admin's.
    if team.people.is_some() {
        assert!(
            absent(c, "[data-testid=banner-resume]").await,
            "a manager may not resume a connector"
        );
        sign_out(c).await;
        sign_in_as(c, team, Role::Admin).await;
    }
    click(c, "[data-testid=banner-resume]").await;
    click(c, "[data-testid=resume-dialog-yes]").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while d.store.connector("bitrix24").await.unwrap().unwrap().paused {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the connector stays paused"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The worker then sends the retried lead, once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while op(d, &s.exhausted).await.status != Status::Completed {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the retried lead was never sent"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // ... and the fixed one, once, with the fixed data: completed with the CRM's id.
    if team.people.is_some() {
        sign_out(c).await;
        sign_in_as(c, team, Role::SalesOps).await;
    }
    type_into(c, "[data-testid=search]", &format!("{}\u{E007}", s.failed)).await;
    open_row(c, s.failed.as_str()).await;
    let crm_id = steps::completed_in_view(c, &*d.store, &s.failed).await;
    let sent: Vec<_> = d
        .fake
        .entities()
        .into_iter()
        .filter(|e| e.fields["ORIGIN_ID"] == s.failed.as_str())
        .collect();
    assert_eq!(sent.len(), 1, "one entity for the fixed lead: {sent:?}");
    assert_eq!(sent[0].id.to_string(), crm_id);
    assert!(
        sent[0].fields.to_string().contains("Maria Fixed"),
        "{:?}",
        sent[0].fields
    );

    // A CRM maintenance window: an admin pauses the connector by hand, saying why.
    if team.people.is_some() {
        sign_out(c).await;
        sign_in_as(c, team, Role::Admin).await;
    }
    let by =
        steps::pause_by_hand_and_resume(c, &*d.store, "bitrix24", "the portal moves to a new plan")
            .await;
    assert_eq!(
        by,
        team.login(Role::Admin).0,
        "paused as the person signed in"
    );
    // A system downstream subscribes to the event feed: its secret is shown once.
    steps::add_feed_subscriber(c, &*d.store, "https://hooks.example.com/leadgate").await;
    sign_out(c).await;
}

/// 50 leads of an outage: found by a phone written otherwise, exported as CSV (the file
/// the browser downloads), then retried in one bulk action; the running worker creates
/// each once.
async fn outage_cleared(c: &Client, d: &Deployment, team: &Team) {
    c.goto(&d.console).await.unwrap();
    let who = sign_in_as(c, team, Role::SalesOps).await;
    text_until(c, "[data-testid=count-needs_review]", "50", |t| t == "50").await;

    // Search by a phone written otherwise than stored (+79160000005).
    let fifth = &d.outage[4];
    type_into(c, "[data-testid=search]", "8 (916) 000-00-05\u{E007}").await;
    open_row(c, fifth.as_str()).await;
    text_until(c, "[data-testid=case-key]", fifth.as_str(), |t| {
        t == fifth.as_str()
    })
    .await;
    // Find in CRM: a new tab at the portal's list searched by the lead's phone — the
    // address the gateway published for this CRM, nothing else.
    let tabs = c.windows().await.unwrap().len();
    click(c, "[data-testid=find-in-crm]").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let console_tab = c.window().await.unwrap();
    let opened = loop {
        let all = c.windows().await.unwrap();
        if all.len() > tabs {
            break all.into_iter().find(|w| *w != console_tab).unwrap();
        }
        assert!(tokio::time::Instant::now() < deadline, "no tab opened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    c.switch_to_window(opened).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let portal = d.fake.webhook_url();
    let origin = portal.split("/rest/").next().unwrap().to_owned();
    let at = loop {
        let at = c.current_url().await.unwrap().to_string();
        if at != "about:blank" || tokio::time::Instant::now() > deadline {
            break at;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        at.starts_with(&origin) && at.contains("79160000005"),
        "{at} is not the portal's search for the lead's phone ({origin})"
    );
    c.close_window().await.unwrap();
    c.switch_to_window(console_tab).await.unwrap();
    click(c, "[data-testid=search-clear]").await;

    // Export the queue: the browser downloads the file.
    let downloads = downloads_dir();
    let file = downloads.join("leadgate-export.csv");
    let _ = std::fs::remove_file(&file);
    click(c, "[data-testid=export]").await;
    text_until(c, "[data-testid=flash]", "50 rows exported", |t| {
        t.contains("50")
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let csv = loop {
        match std::fs::read_to_string(&file) {
            Ok(text) if text.lines().count() == 51 => break text,
            _ => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no download in {downloads:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(csv.starts_with('\u{feff}'), "a BOM, for spreadsheets");
    assert!(csv.contains(fifth.as_str()));
    std::fs::remove_file(&file).unwrap();

    // During the outage Bitrix24 finished 20 of the creates after Leadgate gave up on
    // them (as it does, up to a minute later): those leads are in the CRM already.
    let http = reqwest::Client::new();
    for id in &d.outage[..20] {
        let r = http
            .post(format!("{}crm.lead.add.json", d.fake.webhook_url()))
            .json(&json!({"fields": {
                "TITLE": format!("Lead {id}"),
                "ORIGINATOR_ID": "leadgate",
                "ORIGIN_ID": id.as_str(),
            }}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }

    // One bulk re-check, with a reason.
    choose(c, "select[aria-label='Reason']", "retries_exhausted").await;
    steps::bulk_preview(c, "authorize_retry", 50).await;
    steps::bulk_run(c, "Bitrix24 outage of the morning is over", 50, 0).await;
    // What the worker makes of them is counted as it happens: the 20 found in the CRM
    // complete with the lead found there, the 30 others are created, once.
    let outcomes = "[data-testid=bulk-outcomes][data-waiting='0']";
    // The worker's pace, on a busy machine: minutes at worst, not the UI's patience.
    let o = c
        .wait()
        .at_most(Duration::from_secs(180))
        .for_element(css(outcomes))
        .await
        .unwrap_or_else(|e| panic!("the re-check never settled: {e}"));
    let counts = (
        o.attr("data-found").await.unwrap(),
        o.attr("data-created").await.unwrap(),
        o.attr("data-back").await.unwrap(),
    );
    assert_eq!(
        counts,
        (Some("20".into()), Some("30".into()), Some("0".into())),
        "{}",
        o.text().await.unwrap()
    );
    click(c, "[data-testid=bulk-close]").await;
    text_until(c, "[data-testid=count-needs_review]", "0", |t| t == "0").await;

    // The worker sends each lead once; each decision is the person's, once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    for id in &d.outage {
        while op(d, id).await.status != Status::Completed {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{id} never completed"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let created = d
            .fake
            .entities()
            .iter()
            .filter(|e| e.fields["ORIGIN_ID"] == id.as_str())
            .count();
        assert_eq!(created, 1, "{id}: one lead in the CRM");
        let decided: Vec<_> = d
            .store
            .timeline(id)
            .await
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == "human_action")
            .map(|e| e.actor)
            .collect();
        assert_eq!(
            decided,
            std::slice::from_ref(&who),
            "{id} decided once, by the person"
        );
    }
    sign_out(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_every_kind_of_case_is_decided_in_chromium() {
    let (team, d, _cluster, _dir) =
        team_and_deployment(leadgate_testkit::Backend::Sqlite, Seeding::Cases).await;
    in_browser(Browser::Chromium, move |c| async move {
        sendable(every_kind_of_case(&c, &d, &team)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_every_kind_of_case_is_decided_by_whose_it_is_in_chromium() {
    let (team, d, cluster, _dir) =
        team_and_deployment(leadgate_testkit::Backend::Postgres, Seeding::Cases).await;
    let team = Arc::new(team);
    let t = Arc::clone(&team);
    in_browser(Browser::Chromium, move |c| async move {
        sendable(every_kind_of_case(&c, &d, &t)).await;
    })
    .await;
    // The steps' task has ended: its handle on the team is gone.
    if let Some(p) = Arc::try_unwrap(team).ok().and_then(|t| t.people) {
        p.drop_all().await;
    }
    drop(cluster);
}

/// The second walk-through in Russian (`leadgate_testkit::walk`, as the real window runs
/// it), signed in as the `[console]` operator.
async fn walk_through(c: &Client, d: &Deployment, team: &Team) {
    let w = leadgate_testkit::walk::prepare(&*d.store).await;
    c.goto(&d.console).await.unwrap();
    sign_in_as(c, team, Role::SalesOps).await;
    el(c, "[data-testid=queue-row]").await;
    let s = d.cases();
    leadgate_testkit::walk::second_walk_through(c, &*d.store, &w, &s.failed, &s.uncertain).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_the_second_walk_through_in_russian_in_chromium() {
    let (team, d, _cluster, _dir) =
        team_and_deployment(leadgate_testkit::Backend::Sqlite, Seeding::Cases).await;
    in_browser(Browser::Chromium, move |c| async move {
        sendable(walk_through(&c, &d, &team)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_the_second_walk_through_in_russian_in_firefox() {
    let (team, d, _cluster, _dir) =
        team_and_deployment(leadgate_testkit::Backend::Sqlite, Seeding::Cases).await;
    in_browser(Browser::Firefox, move |c| async move {
        sendable(walk_through(&c, &d, &team)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_an_outage_is_cleared_in_one_bulk_retry_in_chromium() {
    let (team, d, _cluster, _dir) =
        team_and_deployment(leadgate_testkit::Backend::Sqlite, Seeding::Outage(50)).await;
    in_browser(Browser::Chromium, move |c| async move {
        sendable(outage_cleared(&c, &d, &team)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_an_outage_is_cleared_in_one_bulk_retry_in_chromium() {
    let (team, d, cluster, _dir) =
        team_and_deployment(leadgate_testkit::Backend::Postgres, Seeding::Outage(50)).await;
    let team = Arc::new(team);
    let t = Arc::clone(&team);
    in_browser(Browser::Chromium, move |c| async move {
        sendable(outage_cleared(&c, &d, &t)).await;
    })
    .await;
    // The steps' task has ended: its handle on the team is gone.
    if let Some(p) = Arc::try_unwrap(team).ok().and_then(|t| t.people) {
        p.drop_all().await;
    }
    drop(cluster);
}

/// The browser's Notification API as the console uses it, with the person's permission
/// given: each notification shown is recorded (title, body), the last one kept to click.
const NOTIFICATIONS: &str = "
    const Real = window.Notification;
    window.__shown = [];
    class Recorded extends Real {
        constructor(title, options) {
            super(title, options);
            window.__shown.push({ title, body: options && options.body });
            window.__last = this;
        }
        static get permission() { return 'granted'; }
    }
    window.Notification = Recorded;
";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_new_case_raises_a_browser_notification_whose_click_opens_it() {
    let (team, d, _cluster, _dir) =
        team_and_deployment(leadgate_testkit::Backend::Sqlite, Seeding::Cases).await;
    in_browser(Browser::Chromium, move |c| {
        sendable(async move {
            c.goto(&d.console).await.unwrap();
            let who = sign_in_as(&c, &team, Role::SalesOps).await;
            text_until(&c, "[data-testid=count-needs_review]", "3", |t| t == "3").await;
            c.execute(NOTIFICATIONS, vec![]).await.unwrap();
            // The operator is elsewhere, on the dashboard, when a late duplicate arrives.
            click(&c, "[data-testid=nav-dashboard]").await;
            let mut late = leadgate_testkit::seed::lead(
                "tilda",
                "late-1",
                json!({"name": "Vera", "phone": "+79991112233"}),
                leadgate::store::local_now(),
            );
            late.review = Some(leadgate::domain::ReviewReason::LateDuplicate);
            d.store.record_delivery(late).await.unwrap();
            let late = OperationId::new("tilda", "late-1").unwrap();

            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let shown = loop {
                let shown = c.execute("return window.__shown", vec![]).await.unwrap();
                if shown.as_array().is_some_and(|a| !a.is_empty()) {
                    break shown;
                }
                assert!(tokio::time::Instant::now() < deadline, "no notification");
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            assert_eq!(shown.as_array().unwrap().len(), 1, "{shown}");
            assert_eq!(shown[0]["title"], "New review case");
            let body = shown[0]["body"].as_str().unwrap();
            for personal in ["Vera", "+7999", "79991112233"] {
                assert!(!body.contains(personal), "personal data in {body:?}");
            }
            // A click brings the console forward with the new case open.
            c.execute("window.__last.onclick()", vec![]).await.unwrap();
            text_until(&c, "[data-testid=case-key]", late.as_str(), |t| {
                t == late.as_str()
            })
            .await;
            // The timeline says who was told.
            let told: Vec<_> = d
                .store
                .timeline(&late)
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.kind == "notification")
                .map(|e| e.actor)
                .collect();
            assert_eq!(told, [who]);
        })
    })
    .await;
}
