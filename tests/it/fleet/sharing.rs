//! Tenants share the gateway's `[fleet] lanes` (src/turns.rs): a dead CRM and a
//! tenant flooding a paced portal do not hold up a third tenant's lead, and nothing is
//! created twice while they fight for lanes. How the lanes are shared by weight is the
//! unit tests' (`turns::tests`); the fleet benchmark measures the delay.

use super::*;

/// A portal that takes every connection and never answers a byte: a CRM that is down
/// behind a load balancer that still accepts. Its URL, and the task holding it.
async fn black_hole() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = vec![];
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (format!("http://{addr}/rest/1/dead-secret/"), task)
}

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
        let (dead_url, dead) = black_hole().await;
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
        dead.abort();
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
