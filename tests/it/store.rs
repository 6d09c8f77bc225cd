//! The store's conformance suite: every guarantee, on every backend.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use leadgate::domain::{ErrorClass, OperationId, ReviewReason, Status};
use leadgate::store::*;

use leadgate_testkit::each_backend;
use leadgate_testkit::seed::delivery;

const LEASE: Duration = Duration::from_secs(30);
const CRM: &str = "bitrix24";

fn op(key: &str) -> OperationId {
    OperationId::new("site", key).unwrap()
}

async fn claim(store: &dyn Store, owner: &str) -> Option<Claim> {
    store
        .claim_due(CRM, owner, LEASE, local_now())
        .await
        .unwrap()
}

fn kinds(timeline: &[TimelineEvent]) -> Vec<&str> {
    timeline.iter().map(|e| e.kind.as_str()).collect()
}

/// Drives one operation into `needs_review` through an uncertain attempt.
async fn into_review(store: &dyn Store, key: &str) -> ReviewCase {
    store
        .record_delivery(delivery(key, json!({"k": key})))
        .await
        .unwrap();
    let c = claim(store, "w").await.unwrap();
    assert_eq!(c.operation.operation_id, op(key));
    let failure = Failure {
        class: ErrorClass::Uncertain,
        message: "timeout after 10s".into(),
    };
    store
        .finish_attempt(
            &c.lease,
            AttemptOutcome::Review {
                reason: ReviewReason::UncertainOutcome,
                failure: Some(failure),
                detail: json!({}),
            },
            vec![],
            local_now(),
        )
        .await
        .unwrap();
    let cases = store.cases_of(&op(key)).await.unwrap();
    assert_eq!(cases.len(), 1);
    cases.into_iter().next().unwrap()
}

each_backend!(
    new_delivery_then_repeat_returns_the_first_result,
    |db| async move {
        let store = db.store().await;
        let first = store
            .record_delivery(delivery("a", json!({"name": "Ivan"})))
            .await
            .unwrap();
        assert_eq!(
            first.outcome,
            DeliveryOutcome::New {
                status: Status::Received
            }
        );
        let again = store
            .record_delivery(delivery("a", json!({"name": "Ivan"})))
            .await
            .unwrap();
        assert_eq!(
            again.outcome,
            DeliveryOutcome::Duplicate {
                status: Status::Received,
                crm_id: None
            }
        );
        assert_ne!(
            first.delivery_id, again.delivery_id,
            "every delivery is journaled"
        );
        // Complete it; a later repeat gets the saved crm_id.
        let c = claim(store.as_ref(), "w1").await.unwrap();
        store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::Created {
                    crm_id: "101".into(),
                },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        let third = store
            .record_delivery(delivery("a", json!({"name": "Ivan"})))
            .await
            .unwrap();
        assert_eq!(
            third.outcome,
            DeliveryOutcome::Duplicate {
                status: Status::Completed,
                crm_id: Some("101".into())
            }
        );
        let m = store
            .metrics(local_now(), Duration::from_secs(120))
            .await
            .unwrap();
        assert_eq!(m.unique_operations, 1);
        assert_eq!(m.crm_entities_created, 1);
        assert_eq!(m.deliveries[&("site".into(), "new".into())], 1);
        assert_eq!(m.duplicates_absorbed["site"], 2);
        assert_eq!(m.lost, 0);
    }
);

each_backend!(
    concurrent_deliveries_of_one_key_claim_it_once,
    |db| async move {
        let store = db.store().await;
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    store
                        .record_delivery(delivery("same", json!({"name": "Ivan"})))
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut new = 0;
        let mut dup = 0;
        for t in tasks {
            match t.await.unwrap().outcome {
                DeliveryOutcome::New { .. } => new += 1,
                DeliveryOutcome::Duplicate { .. } => dup += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((new, dup), (1, 63));
        let m = store
            .metrics(local_now(), Duration::from_secs(120))
            .await
            .unwrap();
        assert_eq!(m.unique_operations, 1, "one operation row");
        assert_eq!(m.deliveries.values().sum::<i64>(), 64, "64 journal rows");
        // Exactly one worker gets it.
        assert!(claim(store.as_ref(), "w1").await.is_some());
        assert!(claim(store.as_ref(), "w2").await.is_none());
    }
);

each_backend!(
    changed_payload_under_the_same_key_opens_a_conflict,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("c", json!({"name": "Ivan"})))
            .await
            .unwrap();
        let before = store.operation(&op("c")).await.unwrap().unwrap();
        let rec = store
            .record_delivery(delivery("c", json!({"name": "Petr"})))
            .await
            .unwrap();
        let DeliveryOutcome::Conflict { status, case_id } = rec.outcome else {
            panic!("{rec:?}")
        };
        assert_eq!(status, Status::NeedsReview, "unfinished work is blocked");
        let after = store.operation(&op("c")).await.unwrap().unwrap();
        assert_eq!(
            after.payload, before.payload,
            "the original payload is untouched"
        );
        assert_eq!(after.payload_hash, before.payload_hash);
        assert_eq!(after.review_reason, Some(ReviewReason::PayloadConflict));
        let case = store.case(case_id).await.unwrap().unwrap();
        assert_eq!(case.reason, ReviewReason::PayloadConflict);
        assert_eq!(case.delivery_id, Some(rec.delivery_id));
        // Blocked work is not handed to a worker.
        assert!(claim(store.as_ref(), "w").await.is_none());
    }
);

each_backend!(
    conflict_on_a_completed_operation_leaves_it_completed,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("d", json!({"name": "Ivan"})))
            .await
            .unwrap();
        let c = claim(store.as_ref(), "w").await.unwrap();
        store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::Created { crm_id: "7".into() },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        let before = store.operation(&op("d")).await.unwrap().unwrap();
        let rec = store
            .record_delivery(delivery("d", json!({"name": "Other"})))
            .await
            .unwrap();
        assert!(matches!(
            rec.outcome,
            DeliveryOutcome::Conflict {
                status: Status::Completed,
                ..
            }
        ));
        let after = store.operation(&op("d")).await.unwrap().unwrap();
        assert_eq!(after.status, Status::Completed);
        assert_eq!(after.crm_id.as_deref(), Some("7"));
        assert_eq!(after.payload, before.payload);
        assert_eq!(
            store.case_counts().await.unwrap()[&ReviewReason::PayloadConflict],
            1
        );
    }
);

each_backend!(
    eight_workers_drain_a_thousand_operations_each_exactly_once,
    |db| async move {
        let store = db.store().await;
        for i in 0..1000 {
            store
                .record_delivery(delivery(&format!("op{i}"), json!({"i": i})))
                .await
                .unwrap();
        }
        let workers: Vec<_> = (0..8)
            .map(|w| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let owner = format!("worker-{w}");
                    let mut mine = Vec::new();
                    while let Some(c) = store
                        .claim_due(CRM, &owner, LEASE, local_now())
                        .await
                        .unwrap()
                    {
                        let crm_id = format!("crm-{}", c.operation.operation_id);
                        store
                            .finish_attempt(
                                &c.lease,
                                AttemptOutcome::Created { crm_id },
                                vec![],
                                local_now(),
                            )
                            .await
                            .unwrap();
                        mine.push(c.operation.operation_id);
                    }
                    mine
                })
            })
            .collect();
        let mut seen: HashMap<OperationId, usize> = HashMap::new();
        let mut busy_workers = 0;
        for w in workers {
            let mine = w.await.unwrap();
            busy_workers += usize::from(!mine.is_empty());
            for id in mine {
                *seen.entry(id).or_default() += 1;
            }
        }
        assert_eq!(seen.len(), 1000, "none missed");
        assert!(seen.values().all(|&n| n == 1), "none claimed twice");
        assert!(busy_workers > 1, "the work was shared between workers");
        let m = store
            .metrics(local_now(), Duration::from_secs(120))
            .await
            .unwrap();
        assert_eq!(m.operations_by_status["completed"], 1000);
        assert_eq!(m.crm_entities_created, 1000);
        // Every operation's timeline shows exactly one claim.
        for i in [0, 499, 999] {
            let t = store.timeline(&op(&format!("op{i}"))).await.unwrap();
            assert_eq!(kinds(&t).iter().filter(|k| **k == "claimed").count(), 1);
        }
    }
);

each_backend!(
    two_concurrent_retry_authorizations_grant_one,
    |db| async move {
        let store = db.store().await;
        let case = into_review(store.as_ref(), "r").await;
        let authorize = |actor: &'static str| {
            let store = Arc::clone(&store);
            let version = case.version;
            tokio::spawn(async move {
                store
                    .resolve(Resolve {
                        case_id: case.id,
                        expected_version: version,
                        actor: actor.into(),
                        comment: Some("checked the CRM: nothing there".into()),
                        action: HumanAction::AuthorizeRetry,
                        now: local_now(),
                        bulk: None,
                    })
                    .await
            })
        };
        let (a, b) = tokio::join!(authorize("anna"), authorize("boris"));
        let results = [a.unwrap(), b.unwrap()];
        let ok = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(ok, 1, "{results:?}");
        let refused = results.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert!(
            matches!(
                refused,
                StoreError::CaseAlreadyResolved(..) | StoreError::StaleVersion { .. }
            ),
            "{refused}"
        );
        let o = store.operation(&op("r")).await.unwrap().unwrap();
        assert_eq!(o.status, Status::Received);
        assert_eq!(o.retry_grants, 1, "one grant, not two");
        // The worker consumes the grant atomically with its claim.
        let c = claim(store.as_ref(), "w").await.unwrap();
        assert!(c.granted);
        assert_eq!(c.operation.retry_grants, 0);
        assert_eq!(c.operation.attempts, 2);
        let t = store.timeline(&op("r")).await.unwrap();
        assert_eq!(
            kinds(&t).iter().filter(|k| **k == "human_action").count(),
            1
        );
    }
);

each_backend!(
    a_resolution_with_a_stale_version_is_refused,
    |db| async move {
        let store = db.store().await;
        let case = into_review(store.as_ref(), "s").await;
        // Something changes the operation after the operator loaded it.
        store
            .record_delivery(delivery("s", json!({"k": "changed"})))
            .await
            .unwrap();
        let err = store
            .resolve(Resolve {
                case_id: case.id,
                expected_version: case.version,
                actor: "anna".into(),
                comment: None,
                action: HumanAction::ConfirmCrmResult {
                    crm_id: "55".into(),
                },
                now: local_now(),
                bulk: None,
            })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::StaleVersion { .. }), "{err}");
        assert!(err.to_string().contains("reload"));
        let o = store.operation(&op("s")).await.unwrap().unwrap();
        assert_eq!(o.status, Status::NeedsReview);
        assert_eq!(o.crm_id, None);
        // With the current version it goes through.
        let fresh = store.case(case.id).await.unwrap().unwrap();
        let done = store
            .resolve(Resolve {
                case_id: case.id,
                expected_version: fresh.version,
                actor: "anna".into(),
                comment: None,
                action: HumanAction::ConfirmCrmResult {
                    crm_id: "55".into(),
                },
                now: local_now(),
                bulk: None,
            })
            .await
            .unwrap();
        assert_eq!(done.operation.crm_id.as_deref(), Some("55"));
        assert_eq!(done.operation.crm_link.as_deref(), Some("confirmed"));
        // The conflict case opened by the changed delivery is still open: completed anyway,
        // because the person settled the CRM result.
        assert_eq!(done.operation.status, Status::Completed);
        let again = store
            .resolve(Resolve {
                case_id: case.id,
                expected_version: done.operation.version,
                actor: "boris".into(),
                comment: None,
                action: HumanAction::AuthorizeRetry,
                now: local_now(),
                bulk: None,
            })
            .await
            .unwrap_err();
        assert!(
            matches!(again, StoreError::CaseAlreadyResolved(_, ref by) if by == "anna"),
            "{again}"
        );
    }
);

each_backend!(
    full_life_cycle_timeline_holds_every_step_in_order,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("life", json!({"name": "Ivan"})))
            .await
            .unwrap();
        store
            .record_delivery(delivery("life", json!({"name": "Ivan"})))
            .await
            .unwrap();
        // Attempt 1: rate limited -> retry.
        let c = claim(store.as_ref(), "w1").await.unwrap();
        let request = NewEvent::new(
            leadgate::domain::EventKind::CrmRequest,
            json!({"method": "crm.lead.add"}),
        );
        store
            .start_attempt(
                &c.lease,
                LEASE,
                Duration::ZERO,
                vec![request.clone()],
                local_now(),
            )
            .await
            .unwrap();
        let answer = NewEvent::new(
            leadgate::domain::EventKind::CrmResponse,
            json!({"status": 503}),
        );
        store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::Retry {
                    failure: Some(Failure {
                        class: ErrorClass::RateLimited,
                        message: "QUERY_LIMIT_EXCEEDED".into(),
                    }),
                    at: local_now(),
                },
                vec![answer],
                local_now(),
            )
            .await
            .unwrap();
        // Attempt 2: uncertain -> review.
        let c = claim(store.as_ref(), "w2").await.unwrap();
        store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::Review {
                    reason: ReviewReason::UncertainOutcome,
                    failure: Some(Failure {
                        class: ErrorClass::Uncertain,
                        message: "timeout".into(),
                    }),
                    detail: json!({"lookup": "failed"}),
                },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        // A person authorizes one retry; attempt 3 creates.
        let case = store.cases_of(&op("life")).await.unwrap().remove(0);
        store
            .resolve(Resolve {
                case_id: case.id,
                expected_version: case.version,
                actor: "anna".into(),
                comment: Some("not in the CRM".into()),
                action: HumanAction::AuthorizeRetry,
                now: local_now(),
                bulk: None,
            })
            .await
            .unwrap();
        let c = claim(store.as_ref(), "w3").await.unwrap();
        store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::Created {
                    crm_id: "900".into(),
                },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        let t = store.timeline(&op("life")).await.unwrap();
        assert_eq!(
            kinds(&t),
            [
                "delivery",
                "delivery",
                "claimed",
                "status_changed",
                "crm_request",
                // Written by the store: the call's mark for the reconciler.
                "attempt_started",
                "crm_response",
                "retry_scheduled",
                "status_changed",
                "claimed",
                "status_changed",
                "review_opened",
                "status_changed",
                "human_action",
                "status_changed",
                "claimed",
                "status_changed",
                "crm_created",
                "status_changed",
            ]
        );
        assert!(
            t.windows(2)
                .all(|w| w[0].id < w[1].id && w[0].at <= w[1].at),
            "ordered"
        );
        let statuses: Vec<(String, String)> = t
            .iter()
            .filter(|e| e.kind == "status_changed")
            .map(|e| {
                (
                    e.detail["from"].as_str().unwrap().into(),
                    e.detail["to"].as_str().unwrap().into(),
                )
            })
            .collect();
        let expect = [
            ("received", "in_progress"),
            ("in_progress", "received"),
            ("received", "in_progress"),
            ("in_progress", "needs_review"),
            ("needs_review", "received"),
            ("received", "in_progress"),
            ("in_progress", "completed"),
        ];
        assert_eq!(
            statuses,
            expect.map(|(a, b)| (a.to_string(), b.to_string()))
        );
        let human = t.iter().find(|e| e.kind == "human_action").unwrap();
        assert_eq!(human.actor, "anna");
        assert_eq!(human.detail["comment"], "not in the CRM");
        assert_eq!(human.detail["action"], "retry_authorized");
        let retry = t.iter().find(|e| e.kind == "retry_scheduled").unwrap();
        assert_eq!(retry.error_class.as_deref(), Some("rate_limited"));
        assert_eq!(
            t.iter().rfind(|e| e.kind == "claimed").unwrap().detail["granted"],
            true
        );
        let m = store
            .metrics(local_now(), Duration::from_secs(120))
            .await
            .unwrap();
        assert_eq!(m.retries_by_class["rate_limited"], 1);
        assert_eq!(m.resolved_cases, 1);
        assert!(m.mean_seconds_to_resolve.unwrap() >= 0.0);
        assert_eq!(m.unreconstructable, 0);
    }
);

each_backend!(
    the_timeline_is_append_only_in_the_database,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("t", json!({})))
            .await
            .unwrap();
        assert_eq!(store.timeline(&op("t")).await.unwrap().len(), 1);
        let refused = db.outcome("update timeline set kind = 'forged'").await;
        assert!(refused.contains("append-only"), "{refused}");
        let refused = db.outcome("delete from timeline").await;
        assert!(refused.contains("append-only"), "{refused}");
        let t = store.timeline(&op("t")).await.unwrap();
        assert_eq!(kinds(&t), ["delivery"]);
    }
);

each_backend!(
    due_times_leases_and_paused_connectors_gate_the_worker,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("g", json!({})))
            .await
            .unwrap();
        let c = claim(store.as_ref(), "w").await.unwrap();
        let later = local_now() + chrono::TimeDelta::seconds(60);
        store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::Retry {
                    failure: Some(Failure {
                        class: ErrorClass::NotSent,
                        message: "connection refused".into(),
                    }),
                    at: later,
                },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        assert!(claim(store.as_ref(), "w").await.is_none(), "not due yet");
        let c = store
            .claim_due(CRM, "w", LEASE, later)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c.operation.attempts, 2);
        // Auth failure: the connector pauses, the operation goes back unharmed.
        let o = store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::PauseConnector {
                    connector: CRM.into(),
                    failure: Failure {
                        class: ErrorClass::Auth,
                        message: "expired_token".into(),
                    },
                },
                vec![],
                later,
            )
            .await
            .unwrap();
        assert_eq!(o.status, Status::Received);
        assert_eq!(o.attempts, 1, "the refused call does not use up an attempt");
        let conn = store.connector(CRM).await.unwrap().unwrap();
        assert!(conn.paused);
        assert_eq!(conn.reason.as_deref(), Some("expired_token"));
        assert_eq!(
            store.metrics(later, LEASE).await.unwrap().paused_connectors,
            [CRM]
        );
        assert!(
            store
                .claim_due(CRM, "w", LEASE, later)
                .await
                .unwrap()
                .is_none(),
            "paused"
        );
        // Another connector's queue is not blocked by this one's pause.
        assert!(store
            .claim_due("other", "w", LEASE, later)
            .await
            .unwrap()
            .is_some());
        let t = store.timeline(&op("g")).await.unwrap();
        assert!(kinds(&t).contains(&"notification"));
        assert!(store.resume_connector(CRM, "anna", later).await.unwrap());
        assert!(
            !store.resume_connector(CRM, "anna", later).await.unwrap(),
            "not paused any more"
        );
    }
);

each_backend!(
    an_expired_lease_is_taken_over_and_a_late_answer_completes_the_operation,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("l", json!({})))
            .await
            .unwrap();
        let start = local_now();
        let c = store
            .claim_due(CRM, "w1", Duration::from_secs(5), start)
            .await
            .unwrap()
            .unwrap();
        // The create went out (a claim whose call never started is put back instead).
        let c = Claim {
            lease: store
                .start_attempt(
                    &c.lease,
                    Duration::from_secs(5),
                    Duration::ZERO,
                    vec![],
                    start,
                )
                .await
                .unwrap(),
            ..c
        };
        assert!(
            store
                .claim_stale(CRM, "rec", LEASE, start)
                .await
                .unwrap()
                .is_none(),
            "lease still held"
        );
        let later = start + chrono::TimeDelta::seconds(6);
        let page = OperationPage {
            limit: 10,
            ..Default::default()
        };
        assert_eq!(store.stale_in_progress(later, page).await.unwrap().len(), 1);
        let taken = store
            .claim_stale(CRM, "rec", LEASE, later)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(taken.operation.attempts, 1, "a takeover is not an attempt");
        assert_ne!(taken.lease.token, c.lease.token);
        let before = store.operation(&op("l")).await.unwrap().unwrap();
        // The first holder's create answers after the takeover: the lease is lost, but
        // the CRM id is not thrown away.
        let err = store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::Created { crm_id: "1".into() },
                vec![],
                later,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LeaseLost(_)), "{err}");
        let o = store.operation(&op("l")).await.unwrap().unwrap();
        assert_eq!(
            (o.status, o.crm_id.as_deref(), o.crm_link.as_deref()),
            (Status::Completed, Some("1"), Some("created"))
        );
        assert!(
            o.version > before.version,
            "a person looking at it must reload"
        );
        assert_eq!(
            o.lease_owner, None,
            "the takeover's lease is void: the result is known"
        );
        // The reconciler's lookup finds the same entity: nothing more happens.
        let err = store
            .finish_attempt(
                &taken.lease,
                AttemptOutcome::Recovered { crm_id: "1".into() },
                vec![],
                later,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LeaseLost(_)), "{err}");
        let t = store.timeline(&op("l")).await.unwrap();
        assert!(kinds(&t).contains(&"lease_taken_over"));
        assert!(kinds(&t).contains(&"late_outcome"));
        assert_eq!(kinds(&t).iter().filter(|k| **k == "crm_created").count(), 1);
        let m = store.metrics(later, LEASE).await.unwrap();
        assert_eq!(m.crm_entities_created, 1, "one entity, counted once");
    }
);

each_backend!(payload_conflict_resolutions, |db| async move {
    let store = db.store().await;
    // Keep original: the blocked operation goes back to the worker.
    store
        .record_delivery(delivery("k", json!({"v": 1})))
        .await
        .unwrap();
    let DeliveryOutcome::Conflict { case_id, .. } = store
        .record_delivery(delivery("k", json!({"v": 2})))
        .await
        .unwrap()
        .outcome
    else {
        panic!()
    };
    let case = store.case(case_id).await.unwrap().unwrap();
    let wrong = store
        .resolve(Resolve {
            case_id,
            expected_version: case.version,
            actor: "anna".into(),
            comment: None,
            action: HumanAction::AuthorizeRetry,
            now: local_now(),
            bulk: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(wrong, StoreError::Refused(_)), "{wrong}");
    let kept = store
        .resolve(Resolve {
            case_id,
            expected_version: case.version,
            actor: "anna".into(),
            comment: Some("second was a test".into()),
            action: HumanAction::KeepOriginal,
            now: local_now(),
            bulk: None,
        })
        .await
        .unwrap();
    assert_eq!(kept.operation.status, Status::Received);
    assert_eq!(kept.operation.payload, Some(json!({"v": 1})));
    // Accept as new: the conflicting payload becomes its own operation.
    store
        .record_delivery(delivery("n", json!({"v": 1})))
        .await
        .unwrap();
    let DeliveryOutcome::Conflict { case_id, .. } = store
        .record_delivery(delivery("n", json!({"v": 2})))
        .await
        .unwrap()
        .outcome
    else {
        panic!()
    };
    let case = store.case(case_id).await.unwrap().unwrap();
    let accepted = store
        .resolve(Resolve {
            case_id,
            expected_version: case.version,
            actor: "boris".into(),
            comment: None,
            action: HumanAction::AcceptAsNew,
            now: local_now(),
            bulk: None,
        })
        .await
        .unwrap();
    let new_id = accepted.new_operation.unwrap();
    assert!(new_id.as_str().starts_with("site:n#"));
    let new_op = store.operation(&new_id).await.unwrap().unwrap();
    assert_eq!(new_op.payload, Some(json!({"v": 2})));
    assert_eq!(new_op.status, Status::Received);
    assert_eq!(accepted.operation.status, Status::Received);
    // Both are due: two workers get two different operations.
    let a = claim(store.as_ref(), "w1").await.unwrap();
    let b = claim(store.as_ref(), "w2").await.unwrap();
    let c = claim(store.as_ref(), "w3").await.unwrap();
    assert_eq!(
        claim(store.as_ref(), "w4")
            .await
            .map(|c| c.operation.operation_id),
        None
    );
    let mut ids = vec![
        a.operation.operation_id,
        b.operation.operation_id,
        c.operation.operation_id,
    ];
    ids.sort();
    assert_eq!(ids, vec![op("k"), op("n"), new_id]);
});

each_backend!(link_reject_and_invalid_resolutions, |db| async move {
    let store = db.store().await;
    let case = into_review(store.as_ref(), "x").await;
    let base = |action| Resolve {
        case_id: case.id,
        expected_version: case.version,
        actor: "anna".into(),
        comment: None,
        action,
        now: local_now(),
        bulk: None,
    };
    let e = store
        .resolve(base(HumanAction::LinkExisting {
            crm_id: "  ".into(),
        }))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("CRM id is required"), "{e}");
    let mut nameless = base(HumanAction::Reject);
    nameless.actor = " ".into();
    assert!(store
        .resolve(nameless)
        .await
        .unwrap_err()
        .to_string()
        .contains("name"));
    assert!(matches!(
        store
            .resolve(Resolve {
                case_id: 999_999,
                ..base(HumanAction::Reject)
            })
            .await,
        Err(StoreError::UnknownCase(999_999))
    ));
    let linked = store
        .resolve(base(HumanAction::LinkExisting {
            crm_id: "42".into(),
        }))
        .await
        .unwrap();
    assert_eq!(linked.operation.status, Status::Completed);
    assert_eq!(linked.operation.crm_link.as_deref(), Some("linked"));
    let case = into_review(store.as_ref(), "y").await;
    let rejected = store
        .resolve(Resolve {
            case_id: case.id,
            expected_version: case.version,
            actor: "anna".into(),
            comment: Some("spam".into()),
            action: HumanAction::Reject,
            now: local_now(),
            bulk: None,
        })
        .await
        .unwrap();
    assert_eq!(rejected.operation.status, Status::FailedTerminal);
});

each_backend!(
    review_cases_are_paged_filtered_and_counted,
    |db| async move {
        let store = db.store().await;
        for i in 0..7 {
            into_review(store.as_ref(), &format!("p{i}")).await;
        }
        store
            .record_delivery(delivery("q", json!({"v": 1})))
            .await
            .unwrap();
        store
            .record_delivery(delivery("q", json!({"v": 2})))
            .await
            .unwrap();
        let counts = store.case_counts().await.unwrap();
        assert_eq!(counts[&ReviewReason::UncertainOutcome], 7);
        assert_eq!(counts[&ReviewReason::PayloadConflict], 1);
        let filter = CaseFilter {
            reason: Some(ReviewReason::UncertainOutcome),
            ..Default::default()
        };
        let first = store
            .review_cases(
                &filter,
                Page {
                    after_id: None,
                    limit: 5,
                },
            )
            .await
            .unwrap();
        assert_eq!(first.len(), 5);
        let next = store
            .review_cases(
                &filter,
                Page {
                    after_id: Some(first[4].id),
                    limit: 5,
                },
            )
            .await
            .unwrap();
        assert_eq!(next.len(), 2);
        assert!(first
            .iter()
            .chain(&next)
            .all(|c| c.reason == ReviewReason::UncertainOutcome));
        let all = store
            .review_cases(&CaseFilter::default(), Page::default())
            .await
            .unwrap();
        assert_eq!(all.len(), 8);
        let none = CaseFilter {
            source: Some("tilda".into()),
            ..Default::default()
        };
        assert!(store
            .review_cases(&none, Page::default())
            .await
            .unwrap()
            .is_empty());
        let old = CaseFilter {
            opened_before: Some(local_now() - chrono::TimeDelta::hours(1)),
            ..Default::default()
        };
        assert!(store
            .review_cases(&old, Page::default())
            .await
            .unwrap()
            .is_empty());
        let resolved = CaseFilter {
            resolved: true,
            ..Default::default()
        };
        assert!(store
            .review_cases(&resolved, Page::default())
            .await
            .unwrap()
            .is_empty());
    }
);

each_backend!(rejected_deliveries_are_journaled, |db| async move {
    let store = db.store().await;
    let id = store
        .record_rejected(RejectedDelivery {
            source: "site".into(),
            operation_id: None,
            content_type: Some("application/json".into()),
            raw_body: vec![0xff, 0xfe, b'{'],
            reason: "invalid UTF-8".into(),
            received_at: local_now(),
            transform_version: 1,
        })
        .await
        .unwrap();
    assert!(id > 0);
    let m = store.metrics(local_now(), LEASE).await.unwrap();
    assert_eq!(m.deliveries[&("site".into(), "rejected".into())], 1);
    assert_eq!(m.lost, 0);
});

each_backend!(a_schema_newer_than_this_build_is_refused, |db| async move {
    drop(db.store().await);
    db.outcome(
        "insert into _sqlx_migrations (version, description, success, checksum, execution_time) \
         values (99999, 'from the future', true, X'00', 0)",
    )
    .await;
    let pg_fixed = db.outcome("insert into _sqlx_migrations (version, description, success, checksum, execution_time) \
         values (99999, 'from the future', true, '\\x00'::bytea, 0)",
    )
    .await;
    let _ = pg_fixed;
    let err = match connect(&db.url).await {
        Ok(_) => panic!("a newer schema must be refused"),
        Err(e) => e,
    };
    assert!(
        matches!(err, StoreError::SchemaTooNew { found: 99999, .. }),
        "{err}"
    );
});

#[tokio::test]
async fn an_unknown_database_scheme_is_a_clear_error() {
    let err = match connect("mysql://root@localhost/x").await {
        Ok(_) => panic!("mysql is not supported"),
        Err(e) => e,
    };
    assert!(err.to_string().contains("unknown scheme"), "{err}");
    assert!(err.to_string().contains("mysql"));
}

#[tokio::test]
async fn an_in_memory_sqlite_store_reads_what_it_writes() {
    let store = connect("sqlite::memory:").await.unwrap();
    store
        .record_delivery(delivery("mem", json!({"a": 1})))
        .await
        .unwrap();
    let op = store.operation(&op("mem")).await.unwrap();
    assert_eq!(op.map(|o| o.status), Some(Status::Received));
}

each_backend!(
    metric_counters_add_up_under_concurrent_writers,
    |db| async move {
        // 10 keys, 8 deliveries each, all at once: the counters are kept by triggers in
        // each writing transaction (sharded on PostgreSQL) and must sum to the truth.
        let store = db.store().await;
        let tasks: Vec<_> = (0..80)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let key = format!("k{}", i % 10);
                    store
                        .record_delivery(delivery(&key, json!({"key": key})))
                        .await
                        .unwrap()
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // Four workers at once complete four operations.
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let c = claim(store.as_ref(), &format!("w{w}")).await.unwrap();
                    store
                        .finish_attempt(
                            &c.lease,
                            AttemptOutcome::Created {
                                crm_id: format!("{w}"),
                            },
                            vec![],
                            local_now(),
                        )
                        .await
                        .unwrap();
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
        let m = store.metrics(local_now(), LEASE).await.unwrap();
        assert_eq!(m.unique_operations, 10);
        assert_eq!(m.deliveries[&("site".into(), "new".into())], 10);
        assert_eq!(m.duplicates_absorbed["site"], 70);
        assert_eq!(m.operations_by_status["completed"], 4);
        assert_eq!(m.operations_by_status["received"], 6);
        assert_eq!(m.unprocessed, 6);
        assert_eq!(m.crm_entities_created, 4);
        assert_eq!((m.lost, m.unreconstructable), (0, 0));
    }
);

each_backend!(
    lost_and_unreconstructable_are_counted_by_the_database,
    |db| async move {
        // Writes that bypass the store (a script, a bad migration) are counted too: an
        // accepted delivery without an operation, a completion without evidence.
        let store = db.store().await;
        store
            .record_delivery(delivery("fine", json!({})))
            .await
            .unwrap();
        assert_eq!(
            db.outcome("insert into deliveries (source, operation_id, received_at, payload_hash, outcome, transform_version) \
                 values ('site', 'site:ghost', '2026-01-01T00:00:00Z', 'h', 'new', 1)",
            )
            .await,
            "ok"
        );
        assert_eq!(
            db.outcome("update operations set status = 'completed', crm_id = '9' where operation_id = 'site:fine'",
            )
            .await,
            "ok"
        );
        let m = store.metrics(local_now(), LEASE).await.unwrap();
        assert_eq!(m.lost, 1);
        assert_eq!(m.unreconstructable, 1);
        assert_eq!(m.operations_by_status["completed"], 1);
        assert_eq!(m.operations_by_status.get("received"), None);
    }
);

each_backend!(
    a_delivery_that_fails_fails_alone_among_concurrent_ones,
    |db| async move {
        // SQLite records concurrent deliveries together in one transaction; one that the
        // database refuses must not take the others down with it (nor on PostgreSQL).
        let store = db.store().await;
        let refused = match db.backend {
            leadgate_testkit::Backend::Sqlite => db.outcome("create trigger refuse_bad before insert on deliveries when new.source = 'bad' \
                     begin select raise(abort, 'refused by the test'); end",
            )
            .await,
            leadgate_testkit::Backend::Postgres => {
                let f = db.outcome("create function refuse_bad() returns trigger language plpgsql as $$ \
                     begin if new.source = 'bad' then raise exception 'refused by the test'; end if; \
                     return new; end $$",
                )
                .await;
                assert_eq!(f, "ok");
                db.outcome("create trigger refuse_bad before insert on deliveries \
                     for each row execute function refuse_bad()",
                )
                .await
            }
        };
        assert_eq!(refused, "ok");
        let tasks: Vec<_> = (0..41)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let mut d = delivery(&format!("g{i}"), json!({"i": i}));
                    if i == 20 {
                        d.source = "bad".into();
                        d.operation_id = OperationId::new("bad", "g20").unwrap();
                    }
                    (i, store.record_delivery(d).await)
                })
            })
            .collect();
        for t in tasks {
            let (i, result) = t.await.unwrap();
            match result {
                Ok(r) => {
                    assert_ne!(i, 20);
                    assert!(matches!(r.outcome, DeliveryOutcome::New { .. }), "{r:?}");
                }
                Err(e) => {
                    assert_eq!(i, 20, "only the refused delivery fails: {e}");
                    assert!(e.to_string().contains("refused by the test"), "{e}");
                }
            }
        }
        let m = store.metrics(local_now(), LEASE).await.unwrap();
        assert_eq!(
            m.unique_operations, 40,
            "the refused one left nothing behind"
        );
        assert_eq!(m.deliveries[&("site".into(), "new".into())], 40);
        assert!(store
            .operation(&OperationId::new("bad", "g20").unwrap())
            .await
            .unwrap()
            .is_none());
    }
);
