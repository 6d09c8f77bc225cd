//! Fleet mode (issue 35) at work, on both backends: the journal keeps each tenant's
//! deliveries, keys, contact matches, content windows and signatures apart, and a gateway
//! serves its tenants beside the default one, each lead in its own tenant's operations and
//! its own CRM, the CRM given the key without the tenant.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use reqwest::StatusCode;
use serde_json::json;

use leadgate::crm::vault::Vault;
use leadgate::domain::contact::{normalize_phone, Region};
use leadgate::domain::{MatchRule, OperationId, Status, TenantId, TenantSlug};
use leadgate::store::{DeliveryOutcome, Matching, NewDelivery, Store, TenantState};
use leadgate_fakes::bitrix24::{FakeBitrix24, Fault};
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::*;
use leadgate_testkit::seed;

/// A fake Bitrix24 portal on a port of its own.
async fn portal() -> FakeBitrix24 {
    FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// Posts `key`'s lead to `tenant`'s `source` with `token`.
async fn post_to(
    gw: &Gateway,
    tenant: &str,
    source: &str,
    token: &str,
    key: &str,
) -> (StatusCode, serde_json::Value, bool) {
    let url = format!("{}/v1/intake/{tenant}/{source}?token={token}", gw.base);
    answer(gw.http.post(url).json(&lead(key)).send().await.unwrap()).await
}

/// A lead of `source` in `tenant` (`None`: the default tenant) at `at`.
fn lead_in(tenant: Option<&str>, key: &str, at: DateTime<Utc>) -> NewDelivery {
    let mut d = seed::lead("site", key, json!({"submission_id": key}), at);
    if let Some(t) = tenant {
        d.operation_id = OperationId::new_in(&TenantSlug::new(t).unwrap(), "site", key).unwrap();
    }
    d
}

/// `lead_in` with a phone, matched by `rule` over the last hour.
fn caller(tenant: Option<&str>, key: &str, at: DateTime<Utc>, shared_after: u32) -> NewDelivery {
    let mut d = lead_in(tenant, key, at);
    d.contact.phone = normalize_phone("+7 999 123-45-67", Region::default());
    d.matching = Some(Matching {
        rule: MatchRule::Review,
        since: at - TimeDelta::hours(1),
        same_channel: vec![],
        shared_after,
    });
    d
}

fn status(outcome: &DeliveryOutcome) -> Status {
    match outcome {
        DeliveryOutcome::New { status }
        | DeliveryOutcome::Duplicate { status, .. }
        | DeliveryOutcome::Conflict { status, .. } => *status,
    }
}

each_backend!(same_key_in_two_tenants_is_two_operations, |db| async move {
    let store = db.store().await;
    let acme = store.for_tenant(TenantId(1));
    let now = store.now();
    let first = store
        .record_delivery(lead_in(None, "k1", now))
        .await
        .unwrap();
    assert!(matches!(first.outcome, DeliveryOutcome::New { .. }));
    // The same event in another tenant is that tenant's lead, not a duplicate.
    let other = acme
        .record_delivery(lead_in(Some("acme"), "k1", now))
        .await
        .unwrap();
    assert!(
        matches!(other.outcome, DeliveryOutcome::New { .. }),
        "{other:?}"
    );
    let again = acme
        .record_delivery(lead_in(Some("acme"), "k1", now))
        .await
        .unwrap();
    assert!(
        matches!(again.outcome, DeliveryOutcome::Duplicate { .. }),
        "{again:?}"
    );
    // Each row carries its tenant: the operation, its journal rows, its timeline.
    assert_eq!(
        db.texts("select operation_id || ' ' || tenant_id from operations order by operation_id")
            .await,
        ["acme/site:k1 1", "site:k1 0"]
    );
    assert_eq!(
        db.texts(
            "select operation_id || ' ' || tenant_id || ' ' || outcome from deliveries order by id"
        )
        .await,
        [
            "site:k1 0 new",
            "acme/site:k1 1 new",
            "acme/site:k1 1 duplicate"
        ]
    );
    assert_eq!(
        db.texts(
            "select operation_id || ' ' || tenant_id || ' ' || count(*) from timeline \
             group by operation_id, tenant_id order by operation_id"
        )
        .await,
        ["acme/site:k1 1 2", "site:k1 0 1"]
    );
    // A refusal is journaled as the tenant's that refused it.
    let refused = leadgate::store::RejectedDelivery {
        source: "site".into(),
        operation_id: None,
        content_type: None,
        raw_body: vec![],
        reason: "no key".into(),
        received_at: now,
        transform_version: 1,
    };
    acme.record_rejected(refused).await.unwrap();
    assert_eq!(
        db.texts("select tenant_id || '' from deliveries where outcome = 'rejected'")
            .await,
        ["1"]
    );
});

each_backend!(matching_never_crosses_tenants, |db| async move {
    let store = db.store().await;
    let acme = store.for_tenant(TenantId(1));
    let beta = store.for_tenant(TenantId(2));
    let t0 = store.now();
    let at = |s: i64| t0 + TimeDelta::seconds(s);
    let record = |s: &Arc<dyn Store>, d: NewDelivery| {
        let s = Arc::clone(s);
        async move { status(&s.record_delivery(d).await.unwrap().outcome) }
    };
    // One phone in two tenants: the first lead of each matches nothing.
    assert_eq!(
        record(&store, caller(None, "a", at(0), 0)).await,
        Status::Received
    );
    assert_eq!(
        record(&acme, caller(Some("acme"), "b", at(1), 0)).await,
        Status::Received,
        "a lead matched another tenant's caller"
    );
    // The second of each matches its own tenant's first (the rule: review).
    assert_eq!(
        record(&acme, caller(Some("acme"), "c", at(2), 0)).await,
        Status::NeedsReview
    );
    assert_eq!(
        record(&store, caller(None, "d", at(3), 0)).await,
        Status::NeedsReview
    );
    let matched = db
        .texts("select detail from timeline where kind = 'contact_match' order by id")
        .await;
    assert_eq!(matched.len(), 2, "{matched:?}");
    assert!(
        matched[0].contains("acme/site:b") && !matched[0].contains("\"site:a\""),
        "{}",
        matched[0]
    );
    assert!(
        matched[1].contains("\"site:a\"") && !matched[1].contains("acme/"),
        "{}",
        matched[1]
    );
    // Two of the default tenant's leads carry the phone: shared there, with
    // `shared_after = 2`, and not in a tenant that has none.
    record(&beta, caller(Some("beta"), "e", at(4), 2)).await;
    record(&store, caller(None, "f", at(5), 2)).await;
    let delivered = |id: &'static str| {
        let db = &db;
        async move {
            db.texts(&format!(
                "select detail from timeline where kind = 'delivery' and operation_id = '{id}'"
            ))
            .await
            .remove(0)
        }
    };
    assert!(!delivered("beta/site:e").await.contains("shared_contact"));
    assert!(delivered("site:f").await.contains("shared_contact"));
});

each_backend!(
    content_keys_and_signatures_are_per_tenant,
    |db| async move {
        let store = db.store().await;
        let acme = store.for_tenant(TenantId(1));
        let now = store.now();
        let until = now + TimeDelta::minutes(10);
        let hash = "ab".repeat(32);
        for use_once in [
            |s: &Arc<dyn Store>, h: String, id: &'static str, until, now| {
                let s = Arc::clone(s);
                Box::pin(
                    async move { s.use_content_key("site", &h, id, until, now).await.unwrap() },
                )
                    as std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>
            },
            |s: &Arc<dyn Store>, h: String, id: &'static str, until, now| {
                let s = Arc::clone(s);
                Box::pin(async move { s.use_signature("site", &h, id, until, now).await.unwrap() })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>
            },
        ] {
            assert_eq!(
                use_once(&store, hash.clone(), "site:c1", until, now).await,
                "site:c1"
            );
            // The same content in another tenant keys that tenant's own operation.
            assert_eq!(
                use_once(&acme, hash.clone(), "acme/site:c2", until, now).await,
                "acme/site:c2"
            );
            assert_eq!(
                use_once(&store, hash.clone(), "site:c3", until, now).await,
                "site:c1"
            );
            assert_eq!(
                use_once(&acme, hash.clone(), "acme/site:c4", until, now).await,
                "acme/site:c2"
            );
        }
    }
);

/// The token key `[fleet] token_key_file` names, as the gateway reads it.
const KEY: [u8; 32] = [9; 32];

/// A tenants file: each (slug, its fake Bitrix24, its `site` source's token).
fn tenants_file(tenants: &[(&str, &FakeBitrix24, &str)]) -> String {
    let mut toml = String::new();
    for (slug, crm, token) in tenants {
        toml += &format!(
            r#"
[[tenant]]
slug = "{slug}"
name = "{slug} portal"
[tenant.crm]
kind = "bitrix24"
webhook_url = "{}"
timeout = "500ms"
settle = "300ms"
[[tenant.source]]
name = "site"
key = "json:/submission_id"
ignore = ["/sent_at"]
token = "{token}"
[tenant.api]
integration_token = "{slug}-integration"
read_token = "{slug}-read"
"#,
            crm.webhook_url()
        );
    }
    toml
}

/// Applies `file` (a tenants file) to the test database, as `leadgate tenant apply` does.
async fn apply(db: &leadgate_testkit::TestDb, file: &str) {
    let wanted = leadgate::config::tenants::parse_toml(file, None).unwrap();
    let store = db.store().await;
    leadgate::tenants::apply(
        &*store,
        &Vault::new(KEY),
        &wanted,
        false,
        false,
        None,
        "test",
    )
    .await
    .unwrap();
}

/// A tenant `acme` on its own fake Bitrix24, applied to the test database; the file
/// holding the token key, and the configuration that names it (and reads the registry
/// every 100 ms).
async fn acme_on(db: &leadgate_testkit::TestDb, crm: &FakeBitrix24) -> (tempfile::TempDir, String) {
    apply(db, &tenants_file(&[("acme", crm, "acme-site-token")])).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token.key");
    std::fs::write(&file, hex::encode(KEY)).unwrap();
    let extra = format!(
        "[fleet]\ntoken_key_file = {:?}\nreload_every = \"100ms\"\n",
        file.display().to_string()
    );
    (dir, extra)
}

/// Polls `id` in `store` until it is `want` (10 s at most).
async fn wait_op(store: &dyn Store, id: &str, want: Status) -> leadgate::store::Operation {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let op = store.operation(&id.parse().unwrap()).await.unwrap();
        if let Some(op) = op.filter(|op| op.status == want) {
            return op;
        }
        assert!(Instant::now() < deadline, "{id} never became {want:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

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

/// `url` read with `token`: its status and body.
async fn scrape(gw: &Gateway, path: &str, token: &str) -> (StatusCode, String) {
    let res = gw
        .http
        .get(format!("{}{path}", gw.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (res.status(), res.text().await.unwrap())
}

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
        // Every sample carries its tenant (this process's count of refused requests,
        // which came before any tenant was known, aside).
        for (k, _) in m
            .iter()
            .filter(|(k, _)| !k.starts_with("leadgate_refused_requests"))
        {
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
        let acme = store
            .tenants()
            .await
            .unwrap()
            .into_iter()
            .find(|t| t.slug == "acme")
            .unwrap();
        let acme_store = store.for_tenant(TenantId(acme.id));
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
        let acme = TenantId(
            store
                .tenants()
                .await
                .unwrap()
                .into_iter()
                .find(|t| t.slug == "acme")
                .unwrap()
                .id,
        );
        let acme_store = store.for_tenant(acme);

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
        let (code, _, err) = cli(&["tenant", "erase", "acme", "--yes"]);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("is active: pause it first"), "{err}");
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

/// Creates a lead in `crm` as an earlier deployment of Leadgate would have: under the
/// key's local part. Its id.
async fn created_elsewhere(crm: &FakeBitrix24, origin: &str) -> String {
    let res = reqwest::Client::new()
        .post(format!("{}crm.lead.add.json", crm.webhook_url()))
        .json(
            &json!({"fields": {"TITLE": "before the move", "ORIGINATOR_ID": "leadgate",
                                 "ORIGIN_ID": origin}}),
        )
        .send()
        .await
        .unwrap();
    let body: serde_json::Value = res.json().await.unwrap();
    body["result"].as_u64().unwrap().to_string()
}

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
