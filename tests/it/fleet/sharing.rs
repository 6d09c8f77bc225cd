//! Tenants share the gateway's `[fleet] lanes` (src/turns.rs): a dead CRM and a
//! tenant flooding a paced portal do not hold up a third tenant's lead, and nothing is
//! created twice while they fight for lanes. How the lanes are shared by weight is the
//! unit tests' (`turns::tests`); tests/fleet.rs measures the delay.

use super::*;

/// A tenant of the file: its slug, CRM webhook, `site` token and extra `[tenant]` and
/// `[tenant.crm]` lines.
fn tenant(slug: &str, url: &str, tenant_lines: &str, crm_lines: &str) -> String {
    format!(
        r#"
[[tenant]]
slug = "{slug}"
name = "{slug} portal"
{tenant_lines}
[tenant.crm]
kind = "bitrix24"
webhook_url = "{url}"
timeout = "500ms"
settle = "300ms"
{crm_lines}
[[tenant.source]]
name = "site"
key = "json:/submission_id"
token = "{slug}-token"
[tenant.api]
integration_token = "{slug}-integration"
read_token = "{slug}-read"
"#
    )
}

each_backend!(
    a_dead_crm_and_a_flood_do_not_hold_up_a_third_tenant,
    |db| async move {
        // `dead`: every call hangs until its 500 ms timeout, on two loops. `flood`: a
        // portal paced at 20 calls a second, a contact and a deal per lead, one lead at a
        // time, with a backlog of 100 leads on four loops: more than 10 s of calls, most
        // of it spent waiting for its pace while holding a lane. `calm`: one lead. Three
        // lanes for the lot.
        let dead = leadgate_fakes::black_hole::BlackHole::spawn()
            .await
            .unwrap();
        let dead_url = dead.webhook_url();
        let flood_crm = portal().await;
        let calm_crm = portal().await;
        let file = tenant("dead", &dead_url, "max_in_flight = 2", "")
            + &tenant(
                "flood",
                &flood_crm.webhook_url(),
                "max_in_flight = 4",
                "entity = \"contact_deal\"\nrate_limit = 20",
            )
            + &tenant("calm", &calm_crm.webhook_url(), "max_in_flight = 1", "");
        apply(&db, &file).await;
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("token.key");
        std::fs::write(&key_file, hex::encode(KEY)).unwrap();
        let extra = format!(
            "[fleet]\ntoken_key_file = {:?}\nlanes = 3\n",
            key_file.display().to_string()
        );
        let gw = Gateway::start_extended(&db, &extra).await;
        let store = gw.store();

        const FLOOD: u64 = 100;
        for n in 0..20 {
            let (s, body, _) = post_to(&gw, "dead", "site", "dead-token", &format!("d{n}")).await;
            assert_eq!(s, StatusCode::ACCEPTED, "{body}");
        }
        for n in 0..FLOOD {
            let (s, body, _) = post_to(&gw, "flood", "site", "flood-token", &format!("f{n}")).await;
            assert_eq!(s, StatusCode::ACCEPTED, "{body}");
        }
        // The flood is under way.
        let deadline = Instant::now() + Duration::from_secs(30);
        while flood_crm.calls("crm.deal.add") < 5 {
            assert!(Instant::now() < deadline, "the flood never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let (s, body, _) = post_to(&gw, "calm", "site", "calm-token", "c1").await;
        assert_eq!(s, StatusCode::ACCEPTED, "{body}");
        let calm = wait_op(&*store, "calm/site:c1", Status::Completed).await;
        let flooded = flood_crm.calls("crm.deal.add");
        assert!(
            flooded < FLOOD,
            "calm's lead waited for the whole flood ({flooded} deals of {FLOOD} were made first)"
        );
        assert_eq!(calm_crm.calls(CREATE), 1);
        assert_eq!(
            calm.crm_id,
            Some(calm_crm.entities()[0].id.to_string()),
            "calm's lead is calm's portal's entity"
        );
        // The dead CRM's leads are all still someone's to finish: none is lost or created.
        let dead_store = tenant_store(&store, "dead").await;
        for n in 0..20 {
            let op = dead_store
                .operation(&format!("dead/site:d{n}").parse().unwrap())
                .await
                .unwrap()
                .expect("every lead was journaled");
            assert_ne!(op.status, Status::Completed, "{op:?}");
        }

        gw.stop().await;
        drop(dead);
        // Nothing was created twice while the tenants fought for lanes.
        let mut keys: Vec<String> = flood_crm
            .entities()
            .iter()
            .filter(|e| e.kind == "deal")
            .map(|e| e.fields["ORIGIN_ID"].as_str().unwrap().to_owned())
            .collect();
        let made = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), made, "a flood lead was created twice");
        assert!(
            u64::try_from(made).unwrap() >= flooded,
            "every deal counted is there"
        );
    }
);

each_backend!(
    the_board_names_each_tenants_work_and_whose_loops_it_is_for,
    |db| async move {
        let (a, b, c) = (portal().await, portal().await, portal().await);
        apply(
            &db,
            &(tenant("acme", &a.webhook_url(), "", "")
                + &tenant("beta", &b.webhook_url(), "", "")
                + &tenant("gamma", &c.webhook_url(), "", "")),
        )
        .await;
        let store = db.store().await;
        assert_eq!(store.tenants_with_work(store.now()).await.unwrap(), []);
        // acme: a lead due; beta: an attempt whose lease ran out; gamma: a lead due, but
        // the tenant is paused. The default tenant's work is its own worker's.
        for slug in ["acme", "beta", "gamma"] {
            tenant_store(&store, slug)
                .await
                .record_delivery(seed::delivery(
                    &format!("{slug}-1"),
                    json!({"name": "Ivan"}),
                ))
                .await
                .unwrap();
        }
        store
            .record_delivery(seed::delivery("default-1", json!({"name": "Ivan"})))
            .await
            .unwrap();
        db.execute(
            "update operations set status = 'in_progress', lease_owner = 'gone', \
         lease_expires_at = next_attempt_at \
         where tenant_id = (select id from tenants where slug = 'beta')",
        )
        .await;
        assert!(store
            .set_tenant_state(
                "gamma",
                TenantState::Paused,
                Some("test"),
                "test",
                store.now()
            )
            .await
            .unwrap());
        let ids = |slug: &str| {
            let store = Arc::clone(&store);
            let slug = slug.to_owned();
            async move {
                store
                    .tenants()
                    .await
                    .unwrap()
                    .into_iter()
                    .find(|t| t.slug == slug)
                    .unwrap()
                    .id
            }
        };
        let work = store
            .tenants_with_work(store.now() + TimeDelta::seconds(1))
            .await
            .unwrap();
        assert_eq!(
            work,
            [
                leadgate::store::TenantWork {
                    tenant: ids("acme").await,
                    due: true,
                    stale: false
                },
                leadgate::store::TenantWork {
                    tenant: ids("beta").await,
                    due: false,
                    stale: true
                },
            ]
        );
    }
);
