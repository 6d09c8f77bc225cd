//! Store queries the operator console needs beyond the review queue, on both backends.

use std::time::Duration;

use serde_json::json;

use leadgate::domain::{ErrorClass, OperationId, ReviewReason, Status};
use leadgate::store::*;

use leadgate_testkit::each_backend;
use leadgate_testkit::seed::delivery;

const LEASE: Duration = Duration::from_secs(30);

fn op(key: &str) -> OperationId {
    OperationId::new("site", key).unwrap()
}

async fn fail_terminally(store: &dyn Store, key: &str) {
    store
        .record_delivery(delivery(key, json!({"k": key})))
        .await
        .unwrap();
    let c = store
        .claim_due("bitrix24", "w", LEASE, local_now())
        .await
        .unwrap()
        .unwrap();
    let failure = Failure {
        class: ErrorClass::Validation,
        message: "TITLE is required".into(),
    };
    store
        .finish_attempt(
            &c.lease,
            AttemptOutcome::Terminal { failure },
            vec![],
            local_now(),
        )
        .await
        .unwrap();
}

each_backend!(failed_operations_page_by_keyset, |db| async move {
    let store = db.store().await;
    for key in ["a", "b", "c", "d", "e"] {
        fail_terminally(&*store, key).await;
    }
    store
        .record_delivery(delivery("open", json!({})))
        .await
        .unwrap();
    let mut seen = vec![];
    let mut page = OperationPage {
        limit: 2,
        ..Default::default()
    };
    loop {
        let ops = store
            .operations_with_status(Status::FailedTerminal, page.clone())
            .await
            .unwrap();
        if ops.is_empty() {
            break;
        }
        assert!(ops.len() <= 2);
        let last = ops.last().unwrap();
        page.after = Some((last.updated_at, last.operation_id.to_string()));
        seen.extend(ops.into_iter().map(|o| o.operation_id.to_string()));
    }
    assert_eq!(seen, ["site:a", "site:b", "site:c", "site:d", "site:e"]);
    // Newest first, by the same keyset.
    let mut page = OperationPage {
        limit: 3,
        newest_first: true,
        ..Default::default()
    };
    let first = store
        .operations_with_status(Status::FailedTerminal, page.clone())
        .await
        .unwrap();
    let last = first.last().unwrap();
    page.after = Some((last.updated_at, last.operation_id.to_string()));
    let rest = store
        .operations_with_status(Status::FailedTerminal, page)
        .await
        .unwrap();
    let newest: Vec<_> = first
        .iter()
        .chain(&rest)
        .map(|o| o.operation_id.to_string())
        .collect();
    assert_eq!(newest, ["site:e", "site:d", "site:c", "site:b", "site:a"]);
    // The source filter is in the query: a page is full or the last one.
    let other = OperationPage {
        limit: 2,
        source: Some("tilda".into()),
        ..Default::default()
    };
    assert!(store
        .operations_with_status(Status::FailedTerminal, other)
        .await
        .unwrap()
        .is_empty());
    let counts = store.queue_counts(local_now()).await.unwrap();
    assert_eq!(counts.failed_terminal, 5);
    assert_eq!(counts.stale_in_progress, 0);
});

each_backend!(stale_leases_are_counted, |db| async move {
    let store = db.store().await;
    store
        .record_delivery(delivery("s", json!({})))
        .await
        .unwrap();
    let c = store
        .claim_due("bitrix24", "w", LEASE, local_now())
        .await
        .unwrap()
        .unwrap();
    let before = store.queue_counts(local_now()).await.unwrap();
    assert_eq!(before.stale_in_progress, 0);
    let later = after(c.lease.expires_at, Duration::from_secs(1));
    assert_eq!(
        store.queue_counts(later).await.unwrap().stale_in_progress,
        1
    );
});

each_backend!(stale_operations_page_by_keyset, |db| async move {
    let store = db.store().await;
    let mut leases = vec![];
    for key in ["s1", "s2", "s3", "s4", "s5"] {
        store
            .record_delivery(delivery(key, json!({"k": key})))
            .await
            .unwrap();
        let c = store
            .claim_due("bitrix24", "w", LEASE, local_now())
            .await
            .unwrap()
            .unwrap();
        leases.push(c.lease.expires_at);
    }
    let later = after(*leases.last().unwrap(), Duration::from_secs(1));
    let mut page = OperationPage {
        limit: 2,
        ..Default::default()
    };
    let mut seen = vec![];
    loop {
        let ops = store.stale_in_progress(later, page.clone()).await.unwrap();
        if ops.is_empty() {
            break;
        }
        assert!(ops.len() <= 2);
        let last = ops.last().unwrap();
        page.after = Some((
            last.lease_expires_at.unwrap(),
            last.operation_id.to_string(),
        ));
        seen.extend(ops.into_iter().map(|o| o.operation_id.to_string()));
    }
    assert_eq!(
        seen,
        ["site:s1", "site:s2", "site:s3", "site:s4", "site:s5"]
    );
    // Only leases that ran out before the time given.
    let mid = after(leases[1], Duration::from_micros(1));
    let early = OperationPage {
        limit: 10,
        ..Default::default()
    };
    assert_eq!(store.stale_in_progress(mid, early).await.unwrap().len(), 2);
});

each_backend!(link_candidates_share_phone_or_email, |db| async move {
    let store = db.store().await;
    let with = |key: &str, phone: Option<&str>, email: Option<&str>| {
        let mut d = delivery(key, json!({"k": key}));
        d.contact = ContactKeys {
            phone: phone.map(Into::into),
            email: email.map(Into::into),
            name: None,
        };
        d
    };
    for d in [
        with("me", Some("+79990001122"), Some("ann@example.com")),
        with("same-phone", Some("+79990001122"), None),
        with("same-mail", None, Some("ann@example.com")),
        with("both", Some("+79990001122"), Some("ann@example.com")),
        with("other", Some("+70000000000"), Some("bob@example.com")),
        with("none", None, None),
    ] {
        store.record_delivery(d).await.unwrap();
    }
    let mut ids: Vec<String> = store
        .link_candidates(&op("me"), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.operation_id.to_string())
        .collect();
    ids.sort();
    assert_eq!(ids, ["site:both", "site:same-mail", "site:same-phone"]);
    // No contact keys: nobody matches (null never equals null).
    assert!(store
        .link_candidates(&op("none"), 10)
        .await
        .unwrap()
        .is_empty());
});

each_backend!(the_conflicting_delivery_is_readable, |db| async move {
    let store = db.store().await;
    store
        .record_delivery(delivery("x", json!({"name": "Ann"})))
        .await
        .unwrap();
    let rec = store
        .record_delivery(delivery("x", json!({"name": "Anna"})))
        .await
        .unwrap();
    let DeliveryOutcome::Conflict { case_id, .. } = rec.outcome else {
        panic!("expected a conflict: {:?}", rec.outcome);
    };
    let case = store.case(case_id).await.unwrap().unwrap();
    assert_eq!(case.reason, ReviewReason::PayloadConflict);
    let d = store
        .delivery(case.delivery_id.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.payload, Some(json!({"name": "Anna"})));
    assert_eq!(d.outcome, "conflict");
    assert_eq!(d.operation_id.as_deref(), Some("site:x"));
    assert!(store.delivery(987654).await.unwrap().is_none());
});

each_backend!(series_count_per_bucket, |db| async move {
    let store = db.store().await;
    // A 5-minute boundary: the series' resolution.
    let t0 = chrono::DateTime::from_timestamp(local_now().timestamp() / 300 * 300, 0).unwrap();
    let hour = Duration::from_secs(3600);
    let at = |h: u64| after(t0, hour * h as u32);
    for (key, h) in [("a", 0), ("b", 0), ("c", 2)] {
        let mut d = delivery(key, json!({"k": key}));
        d.received_at = at(h);
        store.record_delivery(d).await.unwrap();
    }
    let mut dup = delivery("a", json!({"k": "a"}));
    dup.received_at = after(at(2), Duration::from_secs(299));
    store.record_delivery(dup).await.unwrap();
    let points = store.series(t0, at(3), 3).await.unwrap();
    assert_eq!(points.len(), 3);
    let col = |f: fn(&SeriesPoint) -> i64| points.iter().map(f).collect::<Vec<_>>();
    assert_eq!(col(|p| p.deliveries), [2, 0, 2]);
    assert_eq!(col(|p| p.new_operations), [2, 0, 1]);
    assert_eq!(col(|p| p.duplicates_absorbed), [0, 0, 1]);
    assert_eq!(points[0].start, t0);
    assert_eq!(points[2].end, at(3));
    // An unaligned range widens to whole slots; every slot lands in one bucket.
    let wide = store
        .series(after(t0, Duration::from_secs(7)), at(3), 3)
        .await
        .unwrap();
    assert_eq!(wide.iter().map(|p| p.deliveries).sum::<i64>(), 4);
    // Compacting past slots changes no figure.
    store.compact_metrics(at(4)).await.unwrap();
    assert_eq!(store.series(t0, at(3), 3).await.unwrap(), points);
});

each_backend!(
    series_fold_shards_written_by_many_connections,
    |db| async move {
        // Concurrent writers land on several shards (PostgreSQL); the series sums them, and
        // compaction leaves one row per slot and figure without changing a sum.
        let store = db.store().await;
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let store = std::sync::Arc::clone(&store);
                tokio::spawn(async move {
                    let key = format!("p{i}");
                    store
                        .record_delivery(delivery(&key, json!({"k": key})))
                        .await
                        .unwrap();
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let from = before(local_now(), Duration::from_secs(3600));
        let to = after(local_now(), Duration::from_secs(600));
        let total = |p: &[SeriesPoint]| p.iter().map(|p| p.new_operations).sum::<i64>();
        let points = store.series(from, to, 12).await.unwrap();
        assert_eq!(total(&points), 40);
        store.compact_metrics(to).await.unwrap();
        let compacted = store.series(from, to, 12).await.unwrap();
        assert_eq!(compacted, points);
    }
);

each_backend!(schema_version_is_read_without_migrating, |db| async move {
    let fresh = open(&db.url).await.unwrap();
    assert_eq!(fresh.schema_version().await.unwrap(), None);
    drop(fresh);
    drop(db.store().await);
    let migrated = open(&db.url).await.unwrap();
    assert_eq!(
        migrated.schema_version().await.unwrap(),
        Some(known_schema_version())
    );
});
