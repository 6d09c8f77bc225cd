//! The journal keeps each tenant's deliveries, keys, contact matches, content windows and
//! signatures apart.

use super::*;

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
