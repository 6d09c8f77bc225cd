//! A tenant's pulled sources: its gateway fetches them as it fetches the default tenant's,
//! and records each event as its tenant's lead.

use leadgate_fakes::telegram::FakeTelegram;

use super::*;

each_backend!(
    a_tenants_pulled_source_is_fetched_and_recorded_as_its_lead,
    |db| async move {
        let acme_crm = portal().await;
        let (_key_dir, extra) = acme_on(&db, &acme_crm).await;
        let tg = FakeTelegram::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        // acme's bot, its token in acme's (sealed) spec.
        let file = tenants_file(&[("acme", &acme_crm, "acme-site-token")])
            + &format!(
                "[[tenant.source]]\nname = \"tg\"\npreset = \"telegram-updates\"\n\
                 [tenant.source.pull]\nurl = \"{}\"\nbot_token = \"{}\"\nevery = \"50ms\"\n",
                tg.api_base(),
                tg.token()
            );
        apply(&db, &file).await;
        let gw = Gateway::start_extended(&db, &extra).await;
        let store = gw.store();
        let update = tg.user_sends(json!({
            "message_id": 7,
            "from": {"id": 5550001, "is_bot": false, "first_name": "Olga"},
            "chat": {"id": 5550001, "type": "private", "first_name": "Olga"},
            "date": chrono::Utc::now().timestamp(),
            "text": "Хочу консультацию",
            "contact": {"phone_number": "+7 912 000-55-44", "first_name": "Olga", "user_id": 5550001},
        }));
        let id = format!("acme/tg:{update}");
        let op = wait_op(&*store, &id, Status::Completed).await;
        assert!(op.crm_id.is_some());
        // acme's CRM has it under the key without the tenant; the update is confirmed.
        assert_eq!(origin_ids(&acme_crm), [format!("tg:{update}")]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !tg.pending_updates().is_empty() {
            assert!(Instant::now() < deadline, "the update was never confirmed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Nothing of it is the default tenant's.
        assert_eq!(
            db.texts("select operation_id from operations where tenant_id = 0")
                .await,
            Vec::<String>::new()
        );
        gw.stop().await;
    }
);
