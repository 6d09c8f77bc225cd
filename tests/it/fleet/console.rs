//! The console shows one tenant at a time (step 10): its lists, counts, searches and
//! lookups are the tenant shown's, and a switch shows another of the login's tenants.
//! (A person's login offered only their own tenants: `isolation`.)

use leadgate::domain::ReviewReason;
use leadgate_console_model::{Console, ConsoleError, QueueQuery, Tab};

use super::*;

/// Anna's phone: the default tenant's seeded history has leads with it too.
const PHONE: &str = "+79161234567";

/// Two leads of acme's with Anna's phone and name, and a case opened on the first.
async fn acmes_leads(acme: &dyn Store) -> (Vec<String>, i64) {
    let now = acme.now();
    let mut ids = vec![];
    for key in ["a1", "a2"] {
        let payload = json!({"submission_id": key, "name": "Anna Acme", "phone": PHONE});
        let mut d = seed::lead("site", key, payload, now);
        d.operation_id =
            OperationId::new_in(&TenantSlug::new("acme").unwrap(), "site", key).unwrap();
        d.contact.phone = Some(PHONE.into());
        ids.push(d.operation_id.to_string());
        acme.record_delivery(d).await.unwrap();
    }
    let case = acme
        .open_review(
            &ids[0].parse().unwrap(),
            ReviewReason::UncertainOutcome,
            "test",
            json!({}),
            now,
        )
        .await
        .unwrap();
    (ids, case)
}

/// The operations a queue tab lists.
async fn listed(console: &Console, tab: Tab) -> Vec<String> {
    let page = console.queue(tab, QueueQuery::default()).await.unwrap();
    page.rows
        .into_iter()
        .filter_map(|r| r.operation_id)
        .collect()
}

each_backend!(
    the_console_shows_one_tenant_and_switches_to_another,
    |db| async move {
        let store = db.store().await;
        seed::seed(&*store).await.unwrap();
        let portal = portal().await;
        let _file = acme_on(&db, &portal).await;
        let acme = tenant_store(&store, "acme").await;
        let (acmes, acme_case) = acmes_leads(&*acme).await;

        // The default tenant's console: what it was before fleet mode, and a switcher.
        let default = Console::on(store.clone(), "test".into()).await.unwrap();
        let slugs: Vec<_> = default
            .connection
            .tenants
            .iter()
            .map(|t| t.slug.as_str())
            .collect();
        assert_eq!(slugs, ["default", "acme"]);
        assert_eq!(default.connection.tenant, "default");
        let open_in = |tenant: i32| {
            let db = &db;
            async move {
                db.texts(&format!(
                    "select operation_id from review_cases where resolved_at is null \
                 and reason <> 'payload_conflict' and tenant_id = {tenant} order by id"
                ))
                .await
            }
        };
        let defaults_open = open_in(0).await;
        assert!(
            defaults_open.len() > 2,
            "the seeded history has cases: {defaults_open:?}"
        );
        let counts = default.counts().await.unwrap();
        assert_eq!(counts.needs_review as usize, defaults_open.len());
        let mut shown = listed(&default, Tab::NeedsReview).await;
        shown.sort();
        let mut want = defaults_open.clone();
        want.sort();
        assert_eq!(shown, want, "the default tenant's queue is its own cases");
        let found = default.search(PHONE, None, Some(50)).await.unwrap();
        assert!(!found.rows.is_empty());
        assert!(
            found.rows.iter().all(|r| !acmes.contains(&r.operation_id)),
            "the default tenant's search found acme's leads: {:?}",
            found.rows
        );
        let by_name = default.search("Anna", None, Some(50)).await.unwrap();
        assert!(by_name
            .rows
            .iter()
            .all(|r| !acmes.contains(&r.operation_id)));
        let looked = default.lookup(PHONE).await.unwrap();
        assert!(!looked.rows.is_empty());
        assert!(looked.rows.iter().all(|r| !acmes.contains(&r.operation_id)));

        // acme's: its one case, its two leads, whichever way they are looked for.
        let shown_acme = default.with_tenant("acme").unwrap();
        assert_eq!(shown_acme.connection.tenant, "acme");
        assert_eq!(shown_acme.connection.tenants, default.connection.tenants);
        let counts = shown_acme.counts().await.unwrap();
        assert_eq!(counts.needs_review, 1, "{counts:?}");
        assert_eq!(counts.by_reason.get("uncertain_outcome"), Some(&1));
        assert_eq!(
            listed(&shown_acme, Tab::NeedsReview).await,
            [acmes[0].clone()]
        );
        let page = shown_acme
            .queue(Tab::NeedsReview, QueueQuery::default())
            .await
            .unwrap();
        assert_eq!(page.rows[0].case_id, Some(acme_case));
        // A key as acme's integration knows it (`site:a…`) or as the console shows it.
        for query in [PHONE, "Anna", "acme/site:a", "site:a"] {
            let found = shown_acme.search(query, None, Some(50)).await.unwrap();
            let mut ids: Vec<_> = found.rows.iter().map(|r| r.operation_id.clone()).collect();
            ids.sort();
            assert_eq!(ids, acmes, "acme's search for {query:?}");
        }
        let looked = shown_acme.lookup(PHONE).await.unwrap();
        let mut ids: Vec<_> = looked.rows.iter().map(|r| r.operation_id.clone()).collect();
        ids.sort();
        assert_eq!(ids, acmes);
        // A connector paused in acme is acme's banner only (the seeded history paused one of
        // the default tenant's).
        let defaults_paused = default.counts().await.unwrap().paused_connectors;
        assert_eq!(shown_acme.counts().await.unwrap().paused_connectors, 0);
        acme.pause_connector("bitrix24", "paused by hand", "test", acme.now())
            .await
            .unwrap();
        assert_eq!(shown_acme.counts().await.unwrap().paused_connectors, 1);
        assert_eq!(
            default.counts().await.unwrap().paused_connectors,
            defaults_paused
        );

        // And back, or to a tenant it does not have.
        let back = shown_acme.with_tenant("default").unwrap();
        assert_eq!(
            back.counts().await.unwrap().needs_review as usize,
            defaults_open.len()
        );
        assert!(matches!(
            default.with_tenant("ghost"),
            Err(ConsoleError::Invalid { .. })
        ));
        // A console over acme's store opens on acme.
        let opened = Console::on(acme.clone(), "test".into()).await.unwrap();
        assert_eq!(opened.connection.tenant, "acme");
        assert_eq!(listed(&opened, Tab::NeedsReview).await, [acmes[0].clone()]);
    }
);
