//! Fleet mode in a real browser: the console shows one tenant at a time and the top bar's
//! switcher shows another; the browser remembers the tenant shown last.

use leadgate_testkit::seed::tenant_with_a_case;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_the_operator_switches_tenants_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("ops.db").display());
    let hash = password::hash(OPERATOR_PASSWORD).unwrap();
    let d = deploy(
        &url,
        &format!("operator = \"{OPERATOR}\"\noperator_password_hash = \"{hash}\"\n"),
    )
    .await;
    let acmes = tenant_with_a_case(&d.store, "acme").await;
    in_browser(Browser::Chromium, move |c| async move {
        c.goto(&d.console).await.unwrap();
        sign_in(&c, OPERATOR, OPERATOR_PASSWORD).await;
        text_until(&c, "[data-testid=operator]", OPERATOR, |t| t == OPERATOR).await;
        // The default tenant: the seeded history's three cases.
        text_until(&c, "[data-testid=count-needs_review]", "3", |t| t == "3").await;
        let switcher = el(&c, "[data-testid=tenant]").await;
        assert_eq!(
            switcher.prop("value").await.unwrap().as_deref(),
            Some("default")
        );

        choose(&c, "[data-testid=tenant]", "acme").await;
        text_until(&c, "[data-testid=count-needs_review]", "1", |t| t == "1").await;
        open_row(&c, acmes.as_str()).await;
        // Search is acme's too: the default tenant's Anna is not found.
        type_into(&c, "[data-testid=search]", "Anna\u{E007}").await;
        el(&c, "[data-testid=search-header]").await;
        text_until(&c, "[data-testid=queue-empty]", "nothing found", |t| {
            !t.is_empty()
        })
        .await;
        click(&c, "[data-testid=search-clear]").await;
        shot(&c, "browser-console-tenants.png").await;

        // A reload keeps the tenant shown.
        c.refresh().await.unwrap();
        text_until(&c, "[data-testid=operator]", OPERATOR, |t| t == OPERATOR).await;
        text_until(&c, "[data-testid=count-needs_review]", "1", |t| t == "1").await;
        let switcher = el(&c, "[data-testid=tenant]").await;
        assert_eq!(
            switcher.prop("value").await.unwrap().as_deref(),
            Some("acme")
        );

        choose(&c, "[data-testid=tenant]", "default").await;
        text_until(&c, "[data-testid=count-needs_review]", "3", |t| t == "3").await;
    })
    .await;
}
