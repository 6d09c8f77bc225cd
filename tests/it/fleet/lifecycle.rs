//! A tenant leaves with its data and is erased; a portal moves in without a second
//! create.

use super::*;

each_backend!(
    erasing_a_tenant_keeps_its_tombstones_and_touches_no_other,
    |db| async move {
        let acme_crm = portal().await;
        let (_key_dir, extra) = acme_on(&db, &acme_crm).await;
        let gw = Gateway::start_extended(&db, &extra).await;
        let store = gw.store();
        for key in ["a1", "a2"] {
            post_to(&gw, "acme", "site", "acme-site-token", key).await;
        }
        gw.post_json("site", &lead("d1")).await;
        for id in ["acme/site:a1", "acme/site:a2", "site:d1"] {
            wait_op(&*store, id, Status::Completed).await;
        }
        // a1 changed: a payload-conflict case keeps it open to a person.
        let mut changed = lead("a1");
        changed["name"] = json!("Other");
        let url = format!("{}/v1/intake/acme/site?token=acme-site-token", gw.base);
        let (s, body, _) = answer(gw.http.post(url).json(&changed).send().await.unwrap()).await;
        assert_eq!(body["outcome"], "conflict", "{s} {body}");
        let acme_store = tenant_store(&store, "acme").await;

        // The export: acme's two operations, each with its data and timeline, nothing else.
        let mut out = vec![];
        let n = leadgate::tenants::export(&*acme_store, &mut out)
            .await
            .unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!((n, lines.len()), (2, 2));
        let ids: Vec<&str> = lines
            .iter()
            .map(|l| l["operation"]["operation_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["acme/site:a1", "acme/site:a2"]);
        for l in &lines {
            assert_eq!(l["operation"]["payload"]["name"], "Ivan", "{l}");
            assert!(l["timeline"].as_array().unwrap().len() >= 2, "{l}");
        }

        // The CLI erases only a paused tenant, and only when told so.
        let cli = |args: &[&str]| {
            let out = crate::process::leadgate(args)
                .env("LEADGATE_DATABASE_URL", &db.url)
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        // The CLI's export: the same lines, in a file only its owner may read, never
        // over an existing one.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("acme.jsonl");
        let path = file.to_str().unwrap();
        let (code, _, err) = cli(&["tenant", "export", "acme", "--out", path]);
        assert_eq!(code, Some(0), "{err}");
        assert!(err.contains("wrote 2 operations of tenant `acme`"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 2);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        let (code, _, err) = cli(&["tenant", "export", "acme", "--out", path]);
        assert_eq!(code, Some(2), "{err}");

        let (code, _, err) = cli(&["tenant", "erase", "acme", "--yes"]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains("is active: erasing is for a tenant that left"),
            "{err}"
        );
        store
            .set_tenant_state(
                "acme",
                TenantState::Paused,
                Some("leaving"),
                "test",
                store.now(),
            )
            .await
            .unwrap();
        let (code, _, err) = cli(&["tenant", "erase", "acme"]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("cannot be undone: say --yes"), "{err}");
        let (code, said, err) = cli(&["tenant", "erase", "acme", "--yes"]);
        assert_eq!(code, Some(0), "{err}");
        assert!(
            said.contains("1 finished operations scrubbed to tombstones")
                && said.contains("1 operations left whole"),
            "{said}"
        );

        // a2 is a tombstone: no payload, no contact data, its CRM id kept; its journal's
        // bodies are gone. a1 (open case) and the default tenant's d1 are whole.
        let a2 = store
            .operation(&"acme/site:a2".parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(a2.payload, None);
        assert_eq!(a2.contact, leadgate::store::ContactKeys::default());
        assert!(a2.purged_at.is_some() && a2.crm_id.is_some(), "{a2:?}");
        let bodies = db
            .texts(
                "select operation_id from deliveries where operation_id like 'acme/site:a2' \
                 and (raw_body is not null or payload is not null)",
            )
            .await;
        assert!(bodies.is_empty(), "{bodies:?}");
        for id in ["acme/site:a1", "site:d1"] {
            let op = store
                .operation(&id.parse().unwrap())
                .await
                .unwrap()
                .unwrap();
            assert!(
                op.payload.is_some() && op.purged_at.is_none(),
                "{id}: {op:?}"
            );
        }
        // The default tenant is retention's to erase.
        let (code, _, err) = cli(&["tenant", "erase", "default", "--yes"]);
        assert_eq!(code, Some(2), "{err}");
        gw.stop().await;
    }
);

each_backend!(
    a_moved_portal_finds_what_it_holds_instead_of_creating_again,
    |db| async move {
        let acme_crm = portal().await;
        let beta_crm = portal().await;
        // Both portals hold `site:m1` from the deployment each had of its own; acme says so.
        let acme_old = created_elsewhere(&acme_crm, "site:m1").await;
        created_elsewhere(&beta_crm, "site:m1").await;
        let file = tenants_file(&[
            ("acme", &acme_crm, "acme-site-token"),
            ("beta", &beta_crm, "beta-site-token"),
        ])
        .replacen(
            "name = \"acme portal\"\n",
            "name = \"acme portal\"\nlook_up_first = true\n",
            1,
        );
        assert!(file.contains("look_up_first = true"), "{file}");
        apply(&db, &file).await;
        let (_key_dir, extra) = acme_on(&db, &acme_crm).await;
        // acme_on applied acme alone: the file again, with beta.
        apply(&db, &file).await;
        let gw = Gateway::start_extended(&db, &extra).await;
        let store = gw.store();
        for (tenant, token) in [("acme", "acme-site-token"), ("beta", "beta-site-token")] {
            for key in ["m1", "m2"] {
                let deadline = Instant::now() + Duration::from_secs(10);
                while post_to(&gw, tenant, "site", token, key).await.0 != StatusCode::ACCEPTED {
                    assert!(Instant::now() < deadline, "{tenant} was never served");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        let leads = |crm: &FakeBitrix24| {
            let mut ids = origin_ids(crm);
            ids.sort();
            ids
        };
        // acme: m1 found where it was, m2 created once.
        let m1 = wait_op(&*store, "acme/site:m1", Status::Completed).await;
        assert_eq!(
            (m1.crm_id.as_deref(), m1.crm_link.as_deref()),
            (Some(acme_old.as_str()), Some("recovered"))
        );
        wait_op(&*store, "acme/site:m2", Status::Completed).await;
        assert_eq!(leads(&acme_crm), ["site:m1", "site:m2"]);
        // beta did not say so: its m1 is created a second time. What look_up_first is for.
        wait_op(&*store, "beta/site:m1", Status::Completed).await;
        wait_op(&*store, "beta/site:m2", Status::Completed).await;
        assert_eq!(leads(&beta_crm), ["site:m1", "site:m1", "site:m2"]);
        gw.stop().await;
    }
);

each_backend!(
    a_tenant_with_its_own_retention_is_scrubbed_at_its_window_and_no_other,
    |db| async move {
        let (acme_crm, beta_crm) = (portal().await, portal().await);
        let (_key_dir, extra) = acme_on(&db, &acme_crm).await;
        // acme keeps payloads 2 days and keys 3 (its source reads the event's time);
        // beta keeps the deployment's windows.
        let acme = tenants_file(&[("acme", &acme_crm, "acme-site-token")]).replace(
            "token = \"acme-site-token\"",
            "token = \"acme-site-token\"\nevent_time = \"json:/created_at\"",
        ) + "[tenant.retention]\nfull = \"2d\"\ntombstone = \"3d\"\n";
        let beta = tenants_file(&[("beta", &beta_crm, "beta-site-token")]).replace(
            "token = \"beta-site-token\"",
            "token = \"beta-site-token\"\nevent_time = \"json:/created_at\"",
        );
        apply(&db, &(acme + &beta)).await;
        let gw = Gateway::start_extended(&db, &extra).await;
        let store = gw.store();
        post_to(&gw, "acme", "site", "acme-site-token", "a1").await;
        post_to(&gw, "beta", "site", "beta-site-token", "b1").await;
        gw.post_json("site", &lead("d1")).await;
        for id in ["acme/site:a1", "beta/site:b1", "site:d1"] {
            wait_op(&*store, id, Status::Completed).await;
        }
        // a1 and b1 finished three days ago.
        let three_days_ago =
            (store.now() - TimeDelta::days(3)).to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        db.execute(&format!(
            "update operations set updated_at = '{three_days_ago}' \
             where operation_id in ('acme/site:a1', 'beta/site:b1')"
        ))
        .await;
        // People's answered requests (PostgreSQL): a Fix and resend's holds a lead's data.
        let postgres = db.backend == leadgate_testkit::Backend::Postgres;
        let one_day_ago =
            (store.now() - TimeDelta::days(1)).to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        if postgres {
            // Past the request checks (as if each had been asked and applied), as the owner.
            db.execute(&format!(
                "alter table human_requests disable trigger user; \
                 insert into human_requests (kind, operation_id, body, tenant_id, applied_at, outcome) values \
                 ('notified', 'acme/site:a1', '{{\"acme\": 3}}', 1, '{three_days_ago}', '{{}}'), \
                 ('notified', 'acme/site:a1', '{{\"acme\": 1}}', 1, '{one_day_ago}', '{{}}'), \
                 ('notified', 'beta/site:b1', '{{\"beta\": 3}}', 2, '{three_days_ago}', '{{}}'); \
                 alter table human_requests enable trigger user"
            ))
            .await;
        }
        let requests = || async {
            if postgres {
                db.texts("select body from human_requests order by id")
                    .await
            } else {
                vec![]
            }
        };
        let purged = |id: &'static str| {
            let store = store.clone();
            async move {
                let op = store
                    .operation(&id.parse().unwrap())
                    .await
                    .unwrap()
                    .unwrap();
                op.purged_at.is_some()
            }
        };

        // acme's own window: a1 only.
        let own = leadgate::app::purge_own_windows(&*store).await.unwrap();
        assert_eq!(own.operations, 1, "{own:?}");
        assert!(purged("acme/site:a1").await);
        assert!(
            !purged("beta/site:b1").await,
            "beta keeps the deployment's 30 days"
        );
        assert!(!purged("site:d1").await);
        if postgres {
            assert_eq!(requests().await, [r#"{"acme": 1}"#, r#"{"beta": 3}"#]);
        }

        // The deployment's scrub, everything finished until now: all but acme's.
        post_to(&gw, "acme", "site", "acme-site-token", "a2").await;
        wait_op(&*store, "acme/site:a2", Status::Completed).await;
        let cutoff = store.now() + TimeDelta::seconds(1);
        let all = leadgate::store::purge(&*store, cutoff, 10).await.unwrap();
        assert_eq!(all.operations, 2, "{all:?}");
        assert!(purged("beta/site:b1").await && purged("site:d1").await);
        assert!(
            !purged("acme/site:a2").await,
            "acme's lead is scrubbed at acme's window"
        );
        if postgres {
            assert_eq!(
                requests().await,
                [r#"{"acme": 1}"#],
                "acme's are acme's window's"
            );
        }

        // acme's keys are kept 3 days: an unknown key from 4 days ago is a person's to
        // decide there, and a new lead at beta.
        let four_days_ago = (store.now() - TimeDelta::days(4)).to_rfc3339();
        for (tenant, key, want) in [("acme", "old", "needs_review"), ("beta", "old", "received")] {
            let mut late = lead(key);
            late["created_at"] = json!(four_days_ago);
            let url = format!(
                "{}/v1/intake/{tenant}/site?token={tenant}-site-token",
                gw.base
            );
            let (s, body, _) = answer(gw.http.post(url).json(&late).send().await.unwrap()).await;
            assert_eq!(s, StatusCode::ACCEPTED, "{tenant}: {body}");
            assert_eq!(body["status"], want, "{tenant}: {body}");
        }
        wait_op(&*store, "beta/site:old", Status::Completed).await;
        let op = store
            .operation(&"acme/site:old".parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(op.review_reason.map(|r| r.as_str()), Some("late_duplicate"));
        gw.stop().await;
    }
);
