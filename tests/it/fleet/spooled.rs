//! A tenant's lead spooled while the database is held is drained into that tenant: its
//! operation, its CRM, once; the default tenant's beside it, in its own.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenants_spooled_lead_is_recorded_in_its_tenant_and_created_in_its_crm() {
    leadgate_testkit::run(leadgate_testkit::Backend::Sqlite, |db| async move {
        use sqlx::Connection;
        let acme_crm = portal().await;
        let (key_dir, extra) = acme_on(&db, &acme_crm).await;
        let extra = format!(
            "{extra}[spool]\ndir = {:?}\npatience = \"1s\"\n",
            key_dir.path().join("spool").display().to_string()
        );
        let gw = Gateway::start_extended(&db, &extra).await;
        let store = gw.store();
        let (s, _, _) = post_to(&gw, "acme", "site", "acme-site-token", "ready").await;
        assert_eq!(s, StatusCode::ACCEPTED);

        // The file's write lock, held by another connection for longer than the patience.
        let mut other = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
        sqlx::query("begin immediate")
            .execute(&mut other)
            .await
            .unwrap();
        let (s, body, _) = post_to(&gw, "acme", "site", "acme-site-token", "k1").await;
        assert_eq!(s, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body["outcome"], "spooled", "{body}");
        assert_eq!(body["operation_id"], "acme/site:k1", "{body}");
        let (s, body, _) = gw.post_json("site", &lead("k1")).await;
        assert_eq!(
            (s, body["outcome"].as_str()),
            (StatusCode::ACCEPTED, Some("spooled"))
        );
        sqlx::query("commit").execute(&mut other).await.unwrap();

        let theirs = wait_op(&*store, "acme/site:k1", Status::Completed).await;
        wait_op(&*store, "site:k1", Status::Completed).await;
        assert_eq!(origin_ids(&acme_crm), ["site:ready", "site:k1"]);
        assert_eq!(theirs.crm_id, Some(acme_crm.entities()[1].id.to_string()));
        assert_eq!(origin_ids(&gw.fake), ["site:k1"]);
        // Drained into acme: acme's own view holds it.
        let acme = tenant_store(&store, "acme").await;
        assert!(acme
            .operation(&"acme/site:k1".parse().unwrap())
            .await
            .unwrap()
            .is_some());
    })
    .await
}
