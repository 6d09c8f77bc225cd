//! A tenant's own alert channels (`[tenant.alerts]`) watch its figures alone; the
//! deployment's `[alerts]` keep watching every tenant's.

use leadgate_fakes::webhook::FakeWebhook;

use super::*;

/// Posts `key`'s lead to `tenant` (`None`: the default tenant), then a changed body of it:
/// a payload conflict, one review case.
async fn a_conflict(gw: &Gateway, tenant: Option<&str>, key: &str) {
    let mut changed = lead(key);
    changed["name"] = json!("Someone else");
    for body in [lead(key), changed] {
        let (s, answer, _) = match tenant {
            Some(t) => {
                let url = format!("{}/v1/intake/{t}/site?token={t}-site-token", gw.base);
                answer(gw.http.post(url).json(&body).send().await.unwrap()).await
            }
            None => gw.post_json("site", &body).await,
        };
        assert_eq!(s, StatusCode::ACCEPTED, "{answer}");
    }
}

each_backend!(
    a_tenants_alert_channel_tells_of_its_cases_and_no_other_tenants,
    |db| async move {
        let acme_crm = portal().await;
        let (_key_dir, extra) = acme_on(&db, &acme_crm).await;
        let (acme_hook, fleet_hook) = (
            FakeWebhook::spawn("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap(),
            FakeWebhook::spawn("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap(),
        );
        let fast = "interval = \"1s\"\npoll_interval = \"50ms\"\nsettle = \"200ms\"\n\
                    min_spacing = \"100ms\"\ntimeout = \"1s\"\n";
        let file = tenants_file(&[("acme", &acme_crm, "acme-site-token")])
            + &format!(
                "[tenant.alerts]\n{fast}[[tenant.alerts.channel]]\nkind = \"webhook\"\n\
                 name = \"ops\"\nurl = \"{}\"\n",
                acme_hook.url()
            );
        apply(&db, &file).await;
        // The deployment's own channel, of the same name.
        let deployment = format!(
            "{extra}\n[alerts]\n{fast}[[alerts.channel]]\nkind = \"webhook\"\nname = \"ops\"\n\
             url = \"{}\"\n",
            fleet_hook.url()
        );
        let gw = Gateway::start_extended(&db, &deployment).await;
        a_conflict(&gw, Some("acme"), "a1").await;
        a_conflict(&gw, None, "d1").await;
        a_conflict(&gw, None, "d2").await;

        let texts = |hook: &FakeWebhook| -> Vec<String> {
            hook.bodies()
                .into_iter()
                .map(|b| b["text"].as_str().unwrap_or_default().to_owned())
                .collect()
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while texts(&acme_hook).is_empty() || texts(&fleet_hook).is_empty() {
            assert!(
                Instant::now() < deadline,
                "no alert: {:?} {:?}",
                texts(&acme_hook),
                texts(&fleet_hook)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Let any late message come.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (acme, fleet) = (
            texts(&acme_hook).join("\n---\n"),
            texts(&fleet_hook).join("\n---\n"),
        );
        assert!(acme.starts_with("Leadgate: 1 new review case\n"), "{acme}");
        assert!(!acme.contains("2 new") && !acme.contains("3 new"), "{acme}");
        assert!(
            fleet.contains("3 new review cases"),
            "the deployment's sees every tenant's: {fleet}"
        );
        gw.stop().await;
    }
);
