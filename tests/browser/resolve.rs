//! A person resolves a case: on SQLite the operator, in Chromium and in Firefox ESR; on
//! PostgreSQL each role does what it may.

use super::*;

/// A person resolves the uncertain case in the browser; the database agrees. Chromium's
/// run saves the README's screenshot.
/// `manager_only`: the open cases the person's role does not decide (sales ops: the
/// cross-channel match), counted apart from theirs.
async fn resolve_a_case(
    c: &Client,
    d: &Deployment,
    (login, password): (&str, &str),
    manager_only: usize,
    b: Browser,
) {
    // A link to a case, sent by a colleague: it survives the sign-in.
    let linked = d.cases().exhausted.as_str();
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
    // The gateway serving this page beats: no "no gateway" warning.
    el(c, "[data-testid=gateway][data-running=true]").await;
    assert!(c.find(css("[data-testid=no-gateway]")).await.is_err());
    let mine = (3 - manager_only).to_string();
    text_until(c, "[data-testid=count-needs_review]", &mine, |t| t == mine).await;
    if manager_only > 0 {
        let waiting = el(c, "[data-testid=for-manager]").await;
        assert_eq!(
            waiting.attr("data-count").await.unwrap(),
            Some(manager_only.to_string())
        );
    } else {
        assert!(c.find(css("[data-testid=for-manager]")).await.is_err());
    }

    open_row(c, d.cases().uncertain.as_str()).await;
    el(c, "[data-testid=timeline] [data-kind=crm_response]").await;
    // The address follows the open case.
    let at = c.current_url().await.unwrap();
    assert_eq!(
        percent_encoding::percent_decode_str(at.path())
            .decode_utf8()
            .unwrap(),
        format!("/case/{}", d.cases().uncertain.as_str())
    );
    if b == Browser::Chromium {
        shot(c, "browser-console.png").await;
    }
    type_into(c, "[data-testid=comment]", "found in Bitrix24 by phone").await;
    // Enter in the CRM-id field confirms it.
    type_into(c, "[data-testid=crm-id-input]", "5555\u{E007}").await;
    el(c, "[data-testid=op-status][data-status=completed]").await;
    let o = d
        .store
        .operation(&d.cases().uncertain)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (o.status, o.crm_id.as_deref()),
        (Status::Completed, Some("5555"))
    );
    let timeline = d.store.timeline(&d.cases().uncertain).await.unwrap();
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
        resolve_a_case(&c, &d, (OPERATOR, OPERATOR_PASSWORD), 0, browser).await;
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
        resolve_a_case(&c, &d, (&sales, &sales_password), 1, Browser::Chromium).await;

        // Support: the dashboard, no queue, no search — as the database grants.
        sign_in(&c, &support, &support_password).await;
        text_until(&c, "[data-testid=role]", "support", |t| {
            t.to_lowercase().contains("support")
        })
        .await;
        el(&c, "[data-testid=nav-dashboard]").await;
        // A gateway says deliveries wait in its spool: support sees it before a click,
        // and sees it go once the gateway has drained them.
        let beats = leadgate::store::connect(&url).await.unwrap();
        let beat = |records| {
            let beats = beats.clone();
            async move {
                let now = beats.now();
                let spooled = leadgate::store::Spooled {
                    records,
                    oldest: (records > 0).then(|| now - chrono::TimeDelta::minutes(3)),
                };
                beats
                    .beat("serve:spooling:1", "serve", now, now, spooled)
                    .await
                    .unwrap();
            }
        };
        beat(4).await;
        let banner = el(&c, "[data-testid=spooled][data-count='4']").await;
        assert!(banner.text().await.unwrap().contains("4 deliveries wait"));
        beat(0).await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while c.find(css("[data-testid=spooled]")).await.is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "the drained spool is still shown"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        assert!(
            c.find(css("[data-testid=nav-queue]")).await.is_err(),
            "support has no queue"
        );
        assert!(
            c.find(css("[data-testid=search]")).await.is_err(),
            "support has no search"
        );
        // ...but answers "did my lead arrive?" by the lead's key or CRM id: the status and
        // whether the CRM has it, nothing a lead said.
        let key = d.cases().uncertain.as_str().to_owned();
        for asked in [key.as_str(), "5555"] {
            let input = el(&c, "[data-testid=lookup-input]").await;
            input.clear().await.unwrap();
            input.send_keys(asked).await.unwrap();
            click(&c, "[data-testid=lookup-go]").await;
            let row =
                format!("[data-testid=lookup-row][data-operation='{key}'][data-status=completed]");
            text_until(
                &c,
                &format!("{row} [data-testid=lookup-crm]"),
                "in the CRM",
                |t| t == "yes · 5555",
            )
            .await;
        }
        shot(&c, "support-lookup.png").await;
        click(&c, "[data-testid=sign-out]").await;
        el(&c, "[data-testid=sign-in-screen]").await;

        // A manager: finds a lead by its key among all operations (it is completed now),
        // then makes a contact match on the site link to the CRM record — the database's
        // rules change, recorded as the manager.
        sign_in(&c, &manager, &manager_password).await;
        text_until(&c, "[data-testid=operator]", &manager, |t| t == manager).await;
        // The manager starts at the queue, not on the screen support signed out of.
        el(&c, "[data-testid=nav-queue].active").await;
        el(&c, "[data-testid=queue-list]").await;
        let key = d.cases().uncertain.as_str().to_owned();
        type_into(&c, "[data-testid=search]", &format!("{key}\u{E007}")).await;
        text_until(&c, "[data-testid=search-header]", "the search", |t| {
            t.contains(&key)
        })
        .await;
        open_row(&c, d.cases().uncertain.as_str()).await;
        // Opened from search, the lead shows its last decision: who, and why.
        text_until(&c, "[data-testid=resolved-by]", "the decision", |t| {
            t.contains(&sales)
        })
        .await;
        text_until(&c, "[data-testid=decision-comment]", "its comment", |t| {
            t == "found in Bitrix24 by phone"
        })
        .await;
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
