//! A gateway serves its tenants beside the default one: intake, claim API, reads and
//! metrics, each tenant's own, following the registry.

use super::*;

each_backend!(each_tenants_lead_reaches_its_own_crm, |db| async move {
    let acme_crm = portal().await;
    let (_key_dir, extra) = acme_on(&db, &acme_crm).await;
    let gw = Gateway::start_extended(&db, &extra).await;
    let store = gw.store();

    // The same event to the default tenant and to acme: two leads, one in each CRM.
    let (s, body, _) = gw.post_json("site", &lead("k1")).await;
    assert_eq!(
        (s, body["operation_id"].as_str()),
        (StatusCode::ACCEPTED, Some("site:k1"))
    );
    let (s, body, _) = post_to(&gw, "acme", "site", "acme-site-token", "k1").await;
    assert_eq!(s, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["operation_id"], "acme/site:k1");
    let mine = wait_op(&*store, "site:k1", Status::Completed).await;
    let theirs = wait_op(&*store, "acme/site:k1", Status::Completed).await;
    assert_eq!(gw.fake.calls(CREATE), 1);
    assert_eq!(acme_crm.calls(CREATE), 1);
    // Each CRM holds the key without the tenant, and its own entity is the operation's.
    assert_eq!(origin_ids(&gw.fake), ["site:k1"]);
    assert_eq!(origin_ids(&acme_crm), ["site:k1"]);
    assert_eq!(mine.crm_id, Some(gw.fake.entities()[0].id.to_string()));
    assert_eq!(theirs.crm_id, Some(acme_crm.entities()[0].id.to_string()));

    // A redelivery to acme is acme's duplicate, answered with acme's entity.
    let (s, body, replayed) = post_to(&gw, "acme", "site", "acme-site-token", "k1").await;
    assert_eq!((s, replayed), (StatusCode::OK, true), "{body}");
    assert_eq!(body["crm_id"].as_str(), theirs.crm_id.as_deref());

    // A tenant's source takes its own credentials only; a tenant or a source that is not
    // served is one answer, so the answer does not say which tenants exist.
    let (s, _, _) = post_to(&gw, "acme", "site", "site-token", "k9").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, nobody, _) = post_to(&gw, "acme", "tilda", "acme-site-token", "k9").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, no_tenant, _) = post_to(&gw, "zeta", "site", "acme-site-token", "k9").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(nobody["detail"], no_tenant["detail"]);

    // acme's CRM creates and never answers: acme's worker reconciles by the key its CRM
    // holds (`site:k2`) and creates nothing twice, while the default tenant's lead goes on.
    acme_crm.push_fault(CREATE, Fault::LostAnswerHang, 1);
    let (s, _, _) = post_to(&gw, "acme", "site", "acme-site-token", "k2").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    gw.post_json("site", &lead("k2")).await;
    wait_op(&*store, "site:k2", Status::Completed).await;
    let recovered = wait_op(&*store, "acme/site:k2", Status::Completed).await;
    assert_eq!(recovered.attempts, 1);
    let kinds: Vec<String> = store
        .timeline(&"acme/site:k2".parse().unwrap())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(kinds.iter().any(|k| k == "recovered"), "{kinds:?}");
    assert_eq!(acme_crm.calls(CREATE), 2, "no create was repeated");
    let mut held = origin_ids(&acme_crm);
    held.sort();
    assert_eq!(held, ["site:k1", "site:k2"]);
    assert_eq!(gw.fake.calls(CREATE), 2);

    // A person pauses acme: its leads are still taken, its CRM gets nothing, the default
    // tenant's go on; resumed, acme's lead is created once.
    let paused = store
        .set_tenant_state(
            "acme",
            TenantState::Paused,
            Some("maintenance"),
            "test",
            store.now(),
        )
        .await
        .unwrap();
    assert!(paused);
    let (s, _, _) = post_to(&gw, "acme", "site", "acme-site-token", "k3").await;
    assert_eq!(s, StatusCode::ACCEPTED);
    gw.post_json("site", &lead("k3")).await;
    wait_op(&*store, "site:k3", Status::Completed).await;
    // Its worker polls every 20 ms: a dozen rounds and more, and nothing was taken.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = store
        .operation(&"acme/site:k3".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((waiting.status, waiting.attempts), (Status::Received, 0));
    assert_eq!(acme_crm.calls(CREATE), 2);
    // Its connector reads as paused, with the tenant's reason, though no call of it ever
    // failed (it has no row): a claim already taken waits too.
    let held = store
        .for_tenant(TenantId(1))
        .connector("bitrix24")
        .await
        .unwrap();
    assert!(held.as_ref().is_some_and(|c| c.paused), "{held:?}");
    assert_eq!(held.unwrap().reason.as_deref(), Some("maintenance"));
    assert!(store
        .connector("bitrix24")
        .await
        .unwrap()
        .is_none_or(|c| !c.paused));
    store
        .set_tenant_state("acme", TenantState::Active, None, "test", store.now())
        .await
        .unwrap();
    wait_op(&*store, "acme/site:k3", Status::Completed).await;
    assert_eq!(acme_crm.calls(CREATE), 3);
    gw.stop().await;
});

each_backend!(
    a_gateway_serves_the_registry_as_it_changes,
    |db| async move {
        let acme_crm = portal().await;
        let beta_crm = portal().await;
        let (_key_dir, extra) = acme_on(&db, &acme_crm).await;
        let gw = Gateway::start_extended(&db, &extra).await;
        let store = gw.store();
        let post = |tenant: &'static str, token: &'static str, key: &'static str| {
            let gw = &gw;
            async move { post_to(gw, tenant, "site", token, key).await.0 }
        };
        // Polls until a delivery to `tenant` gets `want` (10 s at most); a new key each time.
        let until = |tenant: &'static str, token: &'static str, want: StatusCode| {
            let post = &post;
            async move {
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    let got = post(tenant, token, "probe").await;
                    if got == want {
                        return;
                    }
                    assert!(Instant::now() < deadline, "{tenant}: {got}, never {want}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        assert_eq!(
            post("beta", "beta-site-token", "b1").await,
            StatusCode::NOT_FOUND
        );

        // beta is applied while the gateway runs: served within a reload, in its own CRM.
        apply(
            &db,
            &tenants_file(&[
                ("acme", &acme_crm, "acme-site-token"),
                ("beta", &beta_crm, "beta-site-token"),
            ]),
        )
        .await;
        until("beta", "beta-site-token", StatusCode::ACCEPTED).await;
        assert_eq!(
            post("beta", "beta-site-token", "b1").await,
            StatusCode::ACCEPTED
        );
        wait_op(&*store, "beta/site:b1", Status::Completed).await;
        wait_op(&*store, "beta/site:probe", Status::Completed).await;
        assert_eq!(origin_ids(&beta_crm).len(), 2);
        assert_eq!(acme_crm.calls(CREATE), 0);

        // acme's source token changes: the old one is refused once the change is read.
        apply(
            &db,
            &tenants_file(&[
                ("acme", &acme_crm, "acme-new-token"),
                ("beta", &beta_crm, "beta-site-token"),
            ]),
        )
        .await;
        until("acme", "acme-site-token", StatusCode::UNAUTHORIZED).await;
        assert_eq!(
            post("acme", "acme-new-token", "a1").await,
            StatusCode::ACCEPTED
        );
        wait_op(&*store, "acme/site:a1", Status::Completed).await;
        // (The probes before the change was read were acme's leads: one, created once.)
        let mut held = origin_ids(&acme_crm);
        held.sort();
        held.dedup();
        assert!(held.contains(&"site:a1".to_owned()), "{held:?}");
        assert_eq!(acme_crm.calls(CREATE), held.len() as u64, "{held:?}");

        // The file drops beta: paused, not deleted; its leads are taken and kept, its CRM
        // gets nothing; named again, it is resumed and its lead created once.
        apply(&db, &tenants_file(&[("acme", &acme_crm, "acme-new-token")])).await;
        assert_eq!(
            post("beta", "beta-site-token", "b2").await,
            StatusCode::ACCEPTED
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let kept = store
            .operation(&"beta/site:b2".parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((kept.status, kept.attempts), (Status::Received, 0));
        assert_eq!(beta_crm.calls(CREATE), 2);
        apply(
            &db,
            &tenants_file(&[
                ("acme", &acme_crm, "acme-new-token"),
                ("beta", &beta_crm, "beta-site-token"),
            ]),
        )
        .await;
        wait_op(&*store, "beta/site:b2", Status::Completed).await;
        assert_eq!(beta_crm.calls(CREATE), 3);
        // The default tenant was never held up.
        gw.post_json("site", &lead("d1")).await;
        wait_op(&*store, "site:d1", Status::Completed).await;
        assert_eq!(origin_ids(&gw.fake), ["site:d1"]);
        gw.stop().await;
    }
);

each_backend!(a_tenants_token_opens_only_its_tenant, |db| async move {
    let acme_crm = portal().await;
    let beta_crm = portal().await;
    let (_key_dir, extra) = acme_on(&db, &acme_crm).await;
    apply(
        &db,
        &tenants_file(&[
            ("acme", &acme_crm, "acme-site-token"),
            ("beta", &beta_crm, "beta-site-token"),
        ]),
    )
    .await;
    let gw = Gateway::start_extended(&db, &extra).await;
    let call = |method: reqwest::Method, path: String, token: &str| {
        let req = gw
            .http
            .request(method, format!("{}{path}", gw.base))
            .bearer_auth(token);
        async move {
            let res = req.send().await.unwrap();
            let status = res.status();
            (
                status,
                res.json::<serde_json::Value>().await.unwrap_or_default(),
            )
        }
    };
    // acme's integration claims through acme's claim API: acme's operation.
    let res = gw
        .http
        .post(format!("{}/v1/tenants/acme/operations", gw.base))
        .bearer_auth("acme-integration")
        .header("Idempotency-Key", "order-1")
        .json(&json!({"name": "Ivan"}))
        .send()
        .await
        .unwrap();
    let (s, claimed, _) = answer(res).await;
    assert_eq!(s, StatusCode::CREATED, "{claimed}");
    assert_eq!(claimed["operation_id"], "acme/api:order-1");
    let id = urlencode("acme/api:order-1");
    let done = gw
        .http
        .post(format!(
            "{}/v1/tenants/acme/operations/{id}/complete",
            gw.base
        ))
        .bearer_auth("acme-integration")
        .json(&json!({"crm_id": "77", "lease_token": claimed["lease_token"]}))
        .send()
        .await
        .unwrap();
    let (s, body, _) = answer(done).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let read = |tenant: &str| format!("/v1/tenants/{tenant}/operations/{id}");
    // acme's tokens and the fleet's read it; beta's do not open acme's routes, and through
    // beta's routes acme's operation does not exist.
    for token in [
        "acme-read",
        "acme-integration",
        READ_TOKEN,
        INTEGRATION_TOKEN,
    ] {
        let (s, op) = call(reqwest::Method::GET, read("acme"), token).await;
        assert_eq!(
            (s, op["crm_id"].as_str()),
            (StatusCode::OK, Some("77")),
            "{token}"
        );
    }
    let (s, _) = call(reqwest::Method::GET, read("acme"), "beta-read").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = call(reqwest::Method::GET, read("beta"), "beta-read").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = call(
        reqwest::Method::GET,
        format!("{}/timeline", read("beta")),
        "beta-read",
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // A read token does not claim; acme's claim API takes acme's keys only.
    let res = gw
        .http
        .post(format!("{}/v1/tenants/acme/operations", gw.base))
        .bearer_auth("acme-read")
        .header("Idempotency-Key", "order-2")
        .json(&json!({"name": "Ivan"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    // Without a token of the tenant's or the fleet's, any path of a tenant is 401, served
    // or not: nothing says which tenants exist.
    for path in [
        "/v1/tenants/acme/nothing",
        "/v1/tenants/zeta/nothing",
        "/v1/tenants/acme/operations",
    ] {
        let res = gw
            .http
            .get(format!("{}{path}", gw.base))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    // A tenant that is not served: the fleet's token hears so, anyone else 401, so the
    // answer says nothing of which tenants exist.
    let (s, _) = call(reqwest::Method::GET, read("zeta"), INTEGRATION_TOKEN).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    for token in ["beta-read", "acme-read"] {
        let (s, _) = call(reqwest::Method::GET, read("zeta"), token).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    // The default tenant's routes are the fleet's: its tokens reach every tenant's
    // operation, a tenant's tokens none.
    let (s, _) = call(
        reqwest::Method::GET,
        format!("/v1/operations/{id}"),
        READ_TOKEN,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = call(
        reqwest::Method::GET,
        format!("/v1/operations/{id}"),
        "acme-read",
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    // Its outcome, though, is reported at its tenant's routes (its claim API's source,
    // retry rules and connector are there): the default tenant's refuse it, recording
    // nothing.
    let claimed2 = gw
        .http
        .post(format!("{}/v1/tenants/acme/operations", gw.base))
        .bearer_auth("acme-integration")
        .header("Idempotency-Key", "order-3")
        .json(&json!({"name": "Ivan"}))
        .send()
        .await
        .unwrap();
    let (s, claimed2, _) = answer(claimed2).await;
    assert_eq!(s, StatusCode::CREATED, "{claimed2}");
    let id3 = urlencode("acme/api:order-3");
    let res = gw
        .http
        .post(format!("{}/v1/operations/{id3}/fail", gw.base))
        .bearer_auth(INTEGRATION_TOKEN)
        .json(&json!({"class": "auth", "error": "token revoked",
                      "lease_token": claimed2["lease_token"]}))
        .send()
        .await
        .unwrap();
    let (s, body, _) = answer(res).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("report its outcome at /v1/tenants/acme/operations/"),
        "{body}"
    );
    let store = gw.store();
    let op = store
        .operation(&"acme/api:order-3".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(op.status, Status::InProgress, "nothing was recorded");
    assert!(store.connectors().await.unwrap().iter().all(|c| !c.paused));
    assert_eq!(acme_crm.calls(CREATE) + beta_crm.calls(CREATE), 0);
    gw.stop().await;
});

each_backend!(
    a_tenant_that_cannot_be_served_holds_up_no_other,
    |db| async move {
        let acme_crm = portal().await;
        let broken_crm = portal().await;
        let (_key_dir, extra) = acme_on(&db, &acme_crm).await;
        // A key intake cannot read, stored by a caller that did not check it as
        // `leadgate tenant apply` does.
        let file = tenants_file(&[
            ("acme", &acme_crm, "acme-site-token"),
            ("broken", &broken_crm, "broken-site-token"),
        ])
        .replacen(
            "key = \"json:/submission_id\"\nignore = [\"/sent_at\"]\ntoken = \"broken-site-token\"",
            "key = \"json:/submission_id\"\ncontent_window = \"1h\"\ntoken = \"broken-site-token\"",
            1,
        );
        assert!(file.contains("content_window"), "{file}");
        apply(&db, &file).await;
        let gw = Gateway::start_extended(&db, &extra).await;
        let store = gw.store();
        let post = |tenant: &'static str, token: &'static str, key: &'static str| {
            let gw = &gw;
            async move { post_to(gw, tenant, "site", token, key).await.0 }
        };
        assert_eq!(
            post("acme", "acme-site-token", "a1").await,
            StatusCode::ACCEPTED
        );
        assert_eq!(
            post("broken", "broken-site-token", "b1").await,
            StatusCode::NOT_FOUND
        );
        gw.post_json("site", &lead("d1")).await;
        wait_op(&*store, "acme/site:a1", Status::Completed).await;
        wait_op(&*store, "site:d1", Status::Completed).await;
        // Fixed in the registry, it is served at the next reload.
        apply(
            &db,
            &tenants_file(&[
                ("acme", &acme_crm, "acme-site-token"),
                ("broken", &broken_crm, "broken-site-token"),
            ]),
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while post("broken", "broken-site-token", "b2").await != StatusCode::ACCEPTED {
            assert!(
                Instant::now() < deadline,
                "the mended tenant was never served"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        wait_op(&*store, "broken/site:b2", Status::Completed).await;
        assert_eq!(origin_ids(&broken_crm), ["site:b2"]);
        gw.stop().await;
    }
);

each_backend!(
    each_tenants_metrics_are_its_own_and_equal_its_crms_count,
    |db| async move {
        let acme_crm = portal().await;
        let (_key_dir, extra) = acme_on(&db, &acme_crm).await;
        let gw = Gateway::start_extended(&db, &extra).await;
        let store = gw.store();
        // acme: three leads (the first rate limited once), one delivered twice; the
        // default tenant: two leads.
        acme_crm.push_fault(
            CREATE,
            Fault::RateLimit {
                retry_after_secs: None,
            },
            1,
        );
        for key in ["a1", "a2", "a3", "a1"] {
            let (s, body, _) = post_to(&gw, "acme", "site", "acme-site-token", key).await;
            assert!(s.is_success(), "{s} {body}");
        }
        for key in ["d1", "d2"] {
            gw.post_json("site", &lead(key)).await;
        }
        for id in [
            "acme/site:a1",
            "acme/site:a2",
            "acme/site:a3",
            "site:d1",
            "site:d2",
        ] {
            wait_op(&*store, id, Status::Completed).await;
        }

        // The fleet's /metrics: every series under its tenant, each tenant's figures
        // equal to what its own CRM counted.
        let (s, text) = scrape(&gw, "/metrics", READ_TOKEN).await;
        assert_eq!(s, StatusCode::OK, "{text}");
        let m = crate::metrics::samples(&text);
        let get = |k: &str| {
            *m.get(k)
                .unwrap_or_else(|| panic!("{k} missing from\n{text}"))
        };
        let created =
            |crm: &FakeBitrix24| crm.entities().iter().filter(|e| e.kind == "lead").count() as f64;
        assert_eq!(
            get("leadgate_crm_entities_created_total{tenant=acme}"),
            created(&acme_crm)
        );
        assert_eq!(get("leadgate_crm_entities_created_total{tenant=acme}"), 3.0);
        assert_eq!(
            get("leadgate_crm_entities_created_total{tenant=default}"),
            created(&gw.fake)
        );
        assert_eq!(
            get("leadgate_crm_entities_created_total{tenant=default}"),
            2.0
        );
        assert_eq!(get("leadgate_operations_total{tenant=acme}"), 3.0);
        assert_eq!(
            get("leadgate_deliveries_total{outcome=duplicate,source=site,tenant=acme}"),
            1.0
        );
        assert_eq!(
            get("leadgate_retries_total{class=rate_limited,tenant=acme}"),
            1.0
        );
        assert!(
            !m.contains_key("leadgate_retries_total{class=rate_limited,tenant=default}"),
            "{text}"
        );
        assert_eq!(
            get("leadgate_operations_by_status{status=completed,tenant=default}"),
            2.0
        );
        // Every sample carries its tenant (this process's own figures — its count of
        // refused requests, which came before any tenant was known, and whether its
        // database answered — aside).
        for (k, _) in m.iter().filter(|(k, _)| {
            !k.starts_with("leadgate_refused_requests") && !k.starts_with("leadgate_database_up")
        }) {
            assert!(k.contains("tenant="), "{k} has no tenant label:\n{text}");
        }

        // acme's /metrics: acme's figures only, opened by acme's tokens, not by the
        // default tenant's route.
        let (s, own) = scrape(&gw, "/v1/tenants/acme/metrics", "acme-read").await;
        assert_eq!(s, StatusCode::OK, "{own}");
        let mine = crate::metrics::samples(&own);
        assert_eq!(
            mine["leadgate_crm_entities_created_total{tenant=acme}"],
            3.0
        );
        assert!(
            mine.keys().all(|k| k.contains("tenant=acme")),
            "another tenant's figures in acme's scrape:\n{own}"
        );
        let (s, _) = scrape(&gw, "/metrics", "acme-read").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);

        // The console's dashboard reads one tenant's: acme's figures and series.
        let acme_store = tenant_store(&store, "acme").await;
        let now = store.now();
        let figures = acme_store
            .metrics(now, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            (figures.unique_operations, figures.crm_entities_created),
            (3, 3)
        );
        let default = store.metrics(now, Duration::from_secs(60)).await.unwrap();
        assert_eq!(
            (default.unique_operations, default.crm_entities_created),
            (2, 2)
        );
        let series = acme_store
            .series(now - TimeDelta::hours(1), now + TimeDelta::minutes(5), 1)
            .await
            .unwrap();
        let deliveries: i64 = series.iter().map(|p| p.deliveries).sum();
        let created: i64 = series.iter().map(|p| p.crm_entities).sum();
        assert_eq!((deliveries, created), (4, 3));
        gw.stop().await;
    }
);

// A tenant's integration reports `not_sent`: once the lead is due again, the tenant's
// redelivery sends it to the tenant's webhook with the tenant's integration token, named by
// the key its claim API takes (`order-9`, not `acme/api:order-9`, which would claim a
// second operation), and claiming that key takes the same operation.
each_backend!(
    a_tenants_integration_is_sent_its_lead_again_under_its_own_key,
    |db| async move {
        let acme_crm = portal().await;
        let (_key_dir, extra) = acme_on(&db, &acme_crm).await;
        let (url, got, server) = crate::claim_api::webhook().await;
        let file = tenants_file(&[("acme", &acme_crm, "acme-site-token")])
            + &format!("[tenant.claim_api]\nredeliver_url = \"{url}\"\nredeliver_every = \"1s\"\n");
        apply(&db, &file).await;
        let gw = Gateway::start_extended(&db, &extra).await;
        let claim = || {
            gw.http
                .post(format!("{}/v1/tenants/acme/operations", gw.base))
                .bearer_auth("acme-integration")
                .header("Idempotency-Key", "order-9")
                .json(&json!({"name": "Ivan", "order": 9}))
                .send()
        };
        let (s, claimed, _) = answer(claim().await.unwrap()).await;
        assert_eq!(s, StatusCode::CREATED, "{claimed}");
        assert_eq!(claimed["operation_id"], "acme/api:order-9");
        let id = urlencode("acme/api:order-9");
        let res = gw
            .http
            .post(format!("{}/v1/tenants/acme/operations/{id}/fail", gw.base))
            .bearer_auth("acme-integration")
            .json(&json!({"class": "not_sent", "error": "connection refused",
                          "lease_token": claimed["lease_token"]}))
            .send()
            .await
            .unwrap();
        let (s, body, _) = answer(res).await;
        assert_eq!(s, StatusCode::OK, "{body}");

        let deadline = Instant::now() + Duration::from_secs(10);
        while got.lock().unwrap().is_empty() {
            assert!(Instant::now() < deadline, "acme's webhook was never called");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (headers, body) = got.lock().unwrap()[0].clone();
        let header = |h: &str| headers[h].to_str().unwrap().to_owned();
        assert_eq!(header("authorization"), "Bearer acme-integration");
        assert_eq!(header("x-leadgate-operation-id"), "acme/api:order-9");
        assert_eq!(header("x-leadgate-idempotency-key"), "order-9");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).unwrap(),
            json!({"name": "Ivan", "order": 9})
        );
        // The integration claims the key it was named: the same operation, leased again.
        let (s, again, _) = answer(claim().await.unwrap()).await;
        assert_eq!(
            (s, again["operation_id"].as_str()),
            (StatusCode::CREATED, Some("acme/api:order-9")),
            "{again}"
        );
        server.abort();
        gw.stop().await;
    }
);
