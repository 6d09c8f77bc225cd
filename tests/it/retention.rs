//! Retention: tombstones answer late duplicates; unknown keys from beyond the horizon go
//! to a person; open work is never purged. Both backends.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use leadgate::domain::{ErrorClass, ReviewReason, Status};
use leadgate::store::{self, *};

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{lead, Gateway, CREATE};
use leadgate_testkit::seed::delivery;

each_backend!(
    pilot_8_a_repeat_after_purge_returns_the_first_crm_id,
    |db| async move {
        let gw = Gateway::start(&db).await;
        gw.post_json("site", &lead("old")).await;
        let done = gw.wait_status("site:old", "completed").await;
        let store = gw.store();
        let report = store::purge(
            store.as_ref(),
            store::local_now() + chrono::TimeDelta::seconds(1),
            10,
        )
        .await
        .unwrap();
        assert_eq!(report.operations, 1);
        assert!(report.deliveries >= 1);
        let id = "site:old".parse().unwrap();
        let op = store.operation(&id).await.unwrap().unwrap();
        assert_eq!(op.payload, None, "payload scrubbed");
        assert_eq!(op.contact, ContactKeys::default(), "contact data scrubbed");
        assert!(op.purged_at.is_some());
        assert_eq!(
            op.crm_id.as_deref(),
            done["crm_id"].as_str(),
            "the tombstone keeps crm_id"
        );
        // The late redelivery gets the first result, and the CRM hears nothing.
        let (status, body, replayed) = gw.post_json("site", &lead("old")).await;
        assert_eq!((status, replayed), (StatusCode::OK, true));
        assert_eq!(body["outcome"], "duplicate");
        assert_eq!(body["crm_id"], done["crm_id"]);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(gw.fake.calls(CREATE), 1);
        let timeline = store.timeline(&id).await.unwrap();
        assert!(timeline.iter().any(|e| e.kind == "purged"));
        // Purging again finds nothing.
        let again = store::purge(store.as_ref(), store::local_now(), 10)
            .await
            .unwrap();
        assert_eq!(again.operations, 0);
        gw.stop().await;
    }
);

each_backend!(
    a_late_delivery_of_an_unknown_key_goes_to_review,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let mut late = lead("ancient");
        late["created_at"] = json!("2024-01-01T00:00:00Z"); // beyond the 400-day horizon
        let (status, body, _) = gw.post_json("site", &late).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(body["status"], "needs_review");
        let op = gw.operation("site:ancient").await;
        assert_eq!(op["review_reason"], "late_duplicate");
        assert_eq!(op["open_cases"][0]["reason"], "late_duplicate");
        // A recent event time is an ordinary new lead.
        let mut fresh = lead("fresh");
        fresh["created_at"] = json!(store::local_now().to_rfc3339());
        gw.post_json("site", &fresh).await;
        gw.wait_status("site:fresh", "completed").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(gw.fake.calls(CREATE), 1, "the late one created nothing");
        gw.stop().await;
    }
);

each_backend!(purge_never_touches_open_work, |db| async move {
    let store = db.store().await;
    let lease = Duration::from_secs(30);
    let complete = |key: &'static str| {
        let store = store.clone();
        async move {
            store
                .record_delivery(delivery(key, json!({"k": key})))
                .await
                .unwrap();
            let c = store
                .claim_due("crm", "w", lease, store::local_now())
                .await
                .unwrap()
                .unwrap();
            store
                .finish_attempt(
                    &c.lease,
                    AttemptOutcome::Created { crm_id: key.into() },
                    vec![],
                    store::local_now(),
                )
                .await
                .unwrap();
        }
    };
    complete("done").await;
    complete("done-with-open-case").await;
    store
        .record_delivery(delivery("done-with-open-case", json!({"k": "changed"})))
        .await
        .unwrap();
    store
        .record_delivery(delivery("received", json!({})))
        .await
        .unwrap();
    store
        .record_delivery(delivery("in-progress", json!({})))
        .await
        .unwrap();
    let c = store
        .claim_due("crm", "w", lease, store::local_now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.operation.operation_id.as_str(), "site:received");
    let c2 = store
        .claim_due("crm", "w", lease, store::local_now())
        .await
        .unwrap()
        .unwrap();
    store
        .finish_attempt(
            &c2.lease,
            AttemptOutcome::Review {
                reason: ReviewReason::UncertainOutcome,
                failure: Some(Failure {
                    class: ErrorClass::Uncertain,
                    message: "timeout".into(),
                }),
                detail: json!({}),
            },
            vec![],
            store::local_now(),
        )
        .await
        .unwrap();
    // Everything is "old" for this purge.
    let r = store::purge(
        store.as_ref(),
        store::local_now() + chrono::TimeDelta::days(1),
        1,
    )
    .await
    .unwrap();
    assert_eq!(
        r.operations, 1,
        "only the plain finished operation, in batches of 1"
    );
    for (key, purged) in [
        ("done", true),
        ("done-with-open-case", false),
        ("received", false),
        ("in-progress", false),
    ] {
        let op = store
            .operation(&format!("site:{key}").parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(op.purged_at.is_some(), purged, "{key}");
        assert_eq!(op.payload.is_none(), purged, "{key}");
        if key == "in-progress" {
            assert_eq!(op.status, Status::NeedsReview);
        }
    }
});
