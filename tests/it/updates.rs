//! *Keep original and update the CRM* on a payload conflict: the worker sends the later
//! delivery's changed fields to the entity the operation created, once, in the order
//! they were asked, through a CRM that is slow, finishes requests after the client gave
//! up, and refuses. Every storage guarantee on both backends.

use std::time::{Duration, Instant};

use leadgate::config::Config;
use leadgate::domain::{HumanAction, OperationId, Refusal, ReviewReason, Status};
use leadgate::store::*;
use leadgate_fakes::bitrix24::{FakeBitrix24, FakeConfig, Fault};
use serde_json::{json, Value};

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{config_toml, lead, Gateway, CREATE};
use leadgate_testkit::seed::delivery;

const UPDATE: &str = "crm.lead.update";

fn op(key: &str) -> OperationId {
    OperationId::new("site", key).unwrap()
}

async fn gateway(db: &leadgate_testkit::TestDb, timeout: &str, settle: &str) -> Gateway {
    let fake = FakeBitrix24::spawn_with("127.0.0.1:0".parse().unwrap(), FakeConfig::default())
        .await
        .unwrap();
    let text = config_toml(&db.url, &fake.webhook_url())
        .replace("timeout = \"500ms\"", &format!("timeout = \"{timeout}\""))
        .replace("settle = \"300ms\"", &format!("settle = \"{settle}\""));
    Gateway::start_with(fake, Config::parse(&text).unwrap()).await
}

/// The lead `key` delivered, created, then delivered again with `changes` on top: the
/// open payload-conflict case.
async fn conflict(gw: &Gateway, key: &str, changes: Value) -> ReviewCase {
    let first = lead(key);
    gw.post_json("site", &first).await;
    gw.wait_status(&format!("site:{key}"), "completed").await;
    repeat(gw, key, changes).await
}

/// Delivers `key` again with `changes` and returns the case it opened.
async fn repeat(gw: &Gateway, key: &str, changes: Value) -> ReviewCase {
    let mut later = lead(key);
    for (k, v) in changes.as_object().unwrap() {
        later[k] = v.clone();
    }
    let (status, body, _) = gw.post_json("site", &later).await;
    assert_eq!(body["outcome"], "conflict", "{status} {body}");
    let cases = gw.store().cases_of(&op(key)).await.unwrap();
    cases
        .into_iter()
        .filter(|c| c.reason == ReviewReason::PayloadConflict && c.resolved_at.is_none())
        .max_by_key(|c| c.id)
        .expect("the conflict's case")
}

async fn decide(gw: &Gateway, case: &ReviewCase, action: HumanAction) -> Result<Resolved> {
    resolve(gw.store().as_ref(), case.id, action).await
}

/// Resolves `case_id` with `action` at the version the case has now, as ann.
async fn resolve(store: &dyn Store, case_id: i64, action: HumanAction) -> Result<Resolved> {
    let case = store.case(case_id).await.unwrap().unwrap();
    store
        .resolve(Resolve {
            case_id,
            expected_version: case.version,
            actor: "ann".into(),
            comment: None,
            action,
            now: store.now(),
            bulk: None,
        })
        .await
}

/// A new conflicting delivery of `key` (its case id).
async fn conflicting(store: &dyn Store, key: &str, payload: Value) -> i64 {
    let DeliveryOutcome::Conflict { case_id, .. } = store
        .record_delivery(delivery(key, payload))
        .await
        .unwrap()
        .outcome
    else {
        panic!("a conflict")
    };
    case_id
}

/// Waits until the operation's timeline has `n` events of `kind`; returns the timeline.
async fn events(
    gw: &Gateway,
    id: &str,
    kind: &str,
    n: usize,
    limit: Duration,
) -> Vec<TimelineEvent> {
    let deadline = Instant::now() + limit;
    loop {
        let t = gw.store().timeline(&id.parse().unwrap()).await.unwrap();
        if t.iter().filter(|e| e.kind == kind).count() >= n {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "no {n}× {kind}: {:?}",
            t.iter().map(|e| &e.kind).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn phones(fields: &Value) -> Vec<String> {
    fields["PHONE"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["VALUE"].as_str().unwrap().to_owned())
        .collect()
}

each_backend!(
    keep_original_and_update_sends_the_changed_fields_once,
    |db| async move {
        let gw = gateway(&db, "500ms", "300ms").await;
        let case = conflict(
            &gw,
            "u1",
            json!({"phone": "+7 916 000-00-01", "comment": "call after 6"}),
        )
        .await;
        let detail = gw.store().operation(&op("u1")).await.unwrap().unwrap();
        let allowed =
            leadgate::domain::rules::allowed_actions(case.reason, detail.facts(), gw.store().now());
        assert!(
            allowed.contains(&leadgate::domain::Resolution::UpdatedCrm),
            "{allowed:?}"
        );
        let resolved = decide(&gw, &case, HumanAction::UpdateCrm).await.unwrap();
        assert_eq!(resolved.operation.status, Status::Completed);
        let t = events(&gw, "site:u1", "crm_updated", 1, Duration::from_secs(10)).await;
        let kinds: Vec<&str> = t.iter().map(|e| e.kind.as_str()).collect();
        let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
        assert!(at("human_action") < at("crm_update_requested"));
        assert!(at("crm_update_requested") < at("crm_update_request"));
        assert!(at("crm_update_response") < at("crm_updated"));
        let updated = &t[at("crm_updated")];
        assert_eq!(updated.detail["fields"], json!(["phone", "comment"]));
        // The entity: the new phone beside the old one, the new comment; nothing created.
        let e = &gw.fake.entities()[0];
        assert_eq!(phones(&e.fields), ["+7 999 123-45-67", "+7 916 000-00-01"]);
        assert_eq!(e.fields["COMMENTS"], "call after 6");
        assert_eq!(e.fields["NAME"], "Ivan");
        assert_eq!(gw.fake.calls(UPDATE), 1);
        assert_eq!(gw.fake.calls(CREATE), 1);
        let closed = gw.store().case(case.id).await.unwrap().unwrap();
        assert_eq!(closed.resolution.as_deref(), Some("updated_crm"));
        // No contact value reaches the timeline's update events.
        for e in t.iter().filter(|e| e.kind.starts_with("crm_update")) {
            let text = e.detail.to_string();
            assert!(!text.contains("916"), "{text}");
            assert!(!text.contains("call after"), "{text}");
        }
        // Nothing more goes out.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(gw.fake.calls(UPDATE), 1);
        gw.stop().await;
    }
);

each_backend!(
    a_later_delivery_that_changes_nothing_the_crm_holds_sends_no_update,
    |db| async move {
        // `form` is not mapped to any CRM field: the payloads differ, the lead does not.
        let gw = gateway(&db, "500ms", "300ms").await;
        let case = conflict(&gw, "u2", json!({"form": "Callback"})).await;
        decide(&gw, &case, HumanAction::UpdateCrm).await.unwrap();
        events(
            &gw,
            "site:u2",
            "crm_update_skipped",
            1,
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(gw.fake.calls(UPDATE), 0);
        assert_eq!(gw.fake.calls("crm.lead.get"), 0);
        gw.stop().await;
    }
);

each_backend!(
    an_update_the_crm_finishes_after_the_client_gave_up_goes_again_only_after_the_settle_window,
    |db| async move {
        // The portal executes the update 1.5 s after it arrived; the worker gives up at
        // 500 ms. The same update goes again, but only after the 2 s settle window, and
        // the phone that landed late is not added twice.
        let gw = gateway(&db, "500ms", "2s").await;
        let case = conflict(&gw, "u3", json!({"phone": "+7 916 000-00-03"})).await;
        gw.fake
            .push_fault(UPDATE, Fault::ExecuteLate { ms: 1500 }, 1);
        let asked = Instant::now();
        decide(&gw, &case, HumanAction::UpdateCrm).await.unwrap();
        let t = events(&gw, "site:u3", "crm_updated", 1, Duration::from_secs(15)).await;
        let took = asked.elapsed();
        let retry = t
            .iter()
            .find(|e| e.kind == "crm_update_retry")
            .expect("a retry");
        assert_eq!(retry.detail["class"], "uncertain");
        let requests: Vec<_> = t
            .iter()
            .filter(|e| e.kind == "crm_update_request")
            .collect();
        assert_eq!(requests.len(), 2, "the update, then once more");
        let gap = requests[1].at - requests[0].at;
        assert!(
            gap >= chrono::TimeDelta::milliseconds(2000),
            "sent again {gap} after the first, inside the settle window"
        );
        assert!(took >= Duration::from_secs(2), "{took:?}");
        let e = &gw.fake.entities()[0];
        assert_eq!(phones(&e.fields), ["+7 999 123-45-67", "+7 916 000-00-03"]);
        assert_eq!(gw.fake.calls(CREATE), 1);
        gw.stop().await;
    }
);

each_backend!(
    the_updates_of_one_entity_land_in_the_order_they_were_asked,
    |db| async move {
        // Two conflicting deliveries, each kept with an update. The first update is slow
        // (executed after the worker gave up); the second must not go before the first
        // has settled, or the late first one would overwrite it.
        let gw = gateway(&db, "400ms", "1500ms").await;
        let first = conflict(&gw, "u4", json!({"comment": "first"})).await;
        let second = repeat(&gw, "u4", json!({"comment": "second"})).await;
        gw.fake
            .push_fault(UPDATE, Fault::ExecuteLate { ms: 1000 }, 1);
        decide(&gw, &first, HumanAction::UpdateCrm).await.unwrap();
        decide(&gw, &second, HumanAction::UpdateCrm).await.unwrap();
        let t = events(&gw, "site:u4", "crm_updated", 2, Duration::from_secs(20)).await;
        let updated: Vec<_> = t.iter().filter(|e| e.kind == "crm_updated").collect();
        assert_eq!(
            updated
                .iter()
                .map(|e| e.detail["case_id"].as_i64().unwrap())
                .collect::<Vec<_>>(),
            [first.id, second.id],
            "in the order they were asked"
        );
        // The late first update landed (at ~1 s) long before the second went out.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let e = &gw.fake.entities()[0];
        assert_eq!(e.fields["COMMENTS"], "second");
        assert_eq!(gw.fake.calls(UPDATE), 3, "first, first again, second");
        gw.stop().await;
    }
);

each_backend!(
    a_refused_update_asks_a_person_again_on_the_same_delivery,
    |db| async move {
        let gw = gateway(&db, "500ms", "300ms").await;
        let case = conflict(&gw, "u5", json!({"email": "new@example.com"})).await;
        // The lead was deleted in the CRM meanwhile: Bitrix24 answers "Not found".
        gw.fake.reset();
        decide(&gw, &case, HumanAction::UpdateCrm).await.unwrap();
        let t = events(
            &gw,
            "site:u5",
            "crm_update_failed",
            1,
            Duration::from_secs(10),
        )
        .await;
        let failed = t.iter().find(|e| e.kind == "crm_update_failed").unwrap();
        assert_eq!(failed.detail["class"], "validation");
        let again = failed.detail["review_case"].as_i64().unwrap();
        let again = gw.store().case(again).await.unwrap().unwrap();
        assert_eq!(again.reason, ReviewReason::PayloadConflict);
        assert_eq!(again.delivery_id, case.delivery_id);
        assert!(again.resolved_at.is_none());
        assert_eq!(again.detail["update_failed"]["class"], "validation");
        let o = gw.store().operation(&op("u5")).await.unwrap().unwrap();
        assert_eq!(
            o.status,
            Status::Completed,
            "the operation keeps its result"
        );
        // Keep the CRM as it is: closed, nothing more is sent.
        decide(&gw, &again, HumanAction::KeepOriginal)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(gw.fake.calls(UPDATE), 0, "the read found nothing to update");
        assert_eq!(gw.fake.calls("crm.lead.get"), 1);
        gw.stop().await;
    }
);

each_backend!(
    an_update_is_refused_while_the_lead_is_not_in_the_crm,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("n1", json!({"phone": "1"})))
            .await
            .unwrap();
        let case_id = conflicting(store.as_ref(), "n1", json!({"phone": "2"})).await;
        let err = resolve(store.as_ref(), case_id, HumanAction::UpdateCrm)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Refused(Refusal::UpdateWithoutEntity)),
            "{err}"
        );
        assert!(store
            .case(case_id)
            .await
            .unwrap()
            .unwrap()
            .resolved_at
            .is_none());
    }
);

/// A completed operation with a payload-conflict case decided *update the CRM*: the
/// store alone, no worker.
async fn requested(store: &dyn Store, key: &str) -> (i64, OperationId) {
    let id = op(key);
    store
        .record_delivery(delivery(key, json!({"name": "A", "phone": "1"})))
        .await
        .unwrap();
    let claim = store
        .claim_due("bitrix24", "w", Duration::from_secs(30), local_now())
        .await
        .unwrap()
        .unwrap();
    store
        .finish_attempt(
            &claim.lease,
            AttemptOutcome::Created {
                crm_id: "77".into(),
            },
            vec![],
            local_now(),
        )
        .await
        .unwrap();
    let case_id = conflicting(store, key, json!({"name": "B", "phone": "1"})).await;
    resolve(store, case_id, HumanAction::UpdateCrm)
        .await
        .unwrap();
    (case_id, id)
}

each_backend!(concurrent_workers_claim_an_update_once, |db| async move {
    let store = db.store().await;
    requested(store.as_ref(), "c1").await;
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..8 {
        let store = db.store().await;
        tasks.spawn(async move {
            store
                .claim_update(
                    "bitrix24",
                    &format!("w{n}"),
                    Duration::from_secs(30),
                    local_now(),
                )
                .await
                .unwrap()
        });
    }
    let mut got = vec![];
    while let Some(r) = tasks.join_next().await {
        got.extend(r.unwrap());
    }
    assert_eq!(got.len(), 1, "one claim of eight");
    let claim = &got[0];
    assert_eq!(claim.crm_id, "77");
    assert_eq!(claim.attempts, 1);
    assert_eq!(claim.original.as_ref().unwrap()["name"], "A");
    assert_eq!(claim.later.as_ref().unwrap()["name"], "B");
});

each_backend!(
    a_lease_that_ran_out_sends_nothing_and_a_stale_token_writes_nothing,
    |db| async move {
        let store = db.store().await;
        requested(store.as_ref(), "l1").await;
        // The store's clock, which the resolution's due time was taken by (on PostgreSQL
        // the database's: a few ms ahead of this process's, the claim found nothing due).
        let t0 = store.now();
        let claim = store
            .claim_update("bitrix24", "w1", Duration::from_secs(5), t0)
            .await
            .unwrap()
            .unwrap();
        // Past the lease: the call must not go out.
        let late = t0 + chrono::TimeDelta::seconds(6);
        let err = store
            .start_update(
                &claim,
                Duration::from_secs(5),
                Duration::from_secs(10),
                late,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LeaseLost(_)), "{err}");
        // Another worker takes it over; the first one's report writes nothing.
        let taken = store
            .claim_update("bitrix24", "w2", Duration::from_secs(5), late)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(taken.attempts, 2);
        let err = store
            .finish_update(
                &claim,
                UpdateOutcome::Done {
                    fields: vec!["name".into()],
                },
                vec![],
                late,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LeaseLost(_)), "{err}");
        // Started under its live lease, the call may land until lease + settle: nobody
        // takes the update over before then, even once its lease ran out.
        store
            .start_update(
                &taken,
                Duration::from_secs(5),
                Duration::from_secs(10),
                late,
            )
            .await
            .unwrap();
        let after_lease = late + chrono::TimeDelta::seconds(6);
        assert!(store
            .claim_update("bitrix24", "w3", Duration::from_secs(5), after_lease)
            .await
            .unwrap()
            .is_none());
        let after_settle = late + chrono::TimeDelta::seconds(16);
        let third = store
            .claim_update("bitrix24", "w3", Duration::from_secs(5), after_settle)
            .await
            .unwrap()
            .unwrap();
        store
            .finish_update(
                &third,
                UpdateOutcome::Done {
                    fields: vec!["name".into()],
                },
                vec![],
                after_settle,
            )
            .await
            .unwrap();
        let kinds: Vec<String> = store
            .timeline(&op("l1"))
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(
            kinds.iter().filter(|k| *k == "crm_updated").count(),
            1,
            "{kinds:?}"
        );
    }
);

each_backend!(
    a_paused_connector_and_an_earlier_update_hold_the_next_one_back,
    |db| async move {
        let store = db.store().await;
        let (case_a, _) = requested(store.as_ref(), "p1").await;
        // A second conflict on the same operation, also kept with an update.
        let case_id = conflicting(store.as_ref(), "p1", json!({"name": "C", "phone": "1"})).await;
        resolve(store.as_ref(), case_id, HumanAction::UpdateCrm)
            .await
            .unwrap();
        store
            .pause_connector("bitrix24", "test", "ann", local_now())
            .await
            .unwrap();
        assert!(store
            .claim_update("bitrix24", "w", Duration::from_secs(5), local_now())
            .await
            .unwrap()
            .is_none());
        store
            .resume_connector("bitrix24", "ann", local_now())
            .await
            .unwrap();
        let first = store
            .claim_update("bitrix24", "w", Duration::from_secs(5), local_now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.case_id, case_a);
        // While the first is pending (and then while it may still land), the second waits.
        let t = local_now();
        store
            .start_update(&first, Duration::from_secs(5), Duration::from_secs(10), t)
            .await
            .unwrap();
        let failure = Failure {
            class: leadgate::domain::ErrorClass::Uncertain,
            message: "no answer".into(),
        };
        store
            .finish_update(&first, UpdateOutcome::Failed { failure }, vec![], t)
            .await
            .unwrap();
        let later = t + chrono::TimeDelta::seconds(8);
        assert!(
            store
                .claim_update("bitrix24", "w", Duration::from_secs(5), later)
                .await
                .unwrap()
                .is_none(),
            "the failed first update's call may still land"
        );
        let settled = t + chrono::TimeDelta::seconds(16);
        let second = store
            .claim_update("bitrix24", "w", Duration::from_secs(5), settled)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(second.case_id, case_id);
    }
);

each_backend!(
    retention_keeps_an_operation_whose_update_is_pending,
    |db| async move {
        let store = db.store().await;
        requested(store.as_ref(), "r1").await;
        let future = local_now() + chrono::TimeDelta::days(400);
        let purged = store.purge_batch(future, 100, future).await.unwrap();
        let o = store.operation(&op("r1")).await.unwrap().unwrap();
        assert!(
            o.purged_at.is_none(),
            "purged with a pending update ({purged:?})"
        );
        let claim = store
            .claim_update("bitrix24", "w", Duration::from_secs(5), local_now())
            .await
            .unwrap()
            .unwrap();
        store
            .finish_update(
                &claim,
                UpdateOutcome::Done { fields: vec![] },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        store.purge_batch(future, 100, future).await.unwrap();
        let o = store.operation(&op("r1")).await.unwrap().unwrap();
        assert!(o.purged_at.is_some(), "purged once the update is done");
    }
);

each_backend!(
    an_older_delivery_is_not_sent_over_a_newer_one,
    |db| async move {
        let store = db.store().await;
        let (_, _) = requested(store.as_ref(), "o1").await;
        // requested() sent delivery 2's fields; delivery 3 is newer still, delivery 4
        // newer again. A person decides 4 first, then 3: 3's fields would land over 4's.
        let three = conflicting(store.as_ref(), "o1", json!({"name": "C", "phone": "1"})).await;
        let four = conflicting(store.as_ref(), "o1", json!({"name": "D", "phone": "1"})).await;
        resolve(store.as_ref(), four, HumanAction::UpdateCrm)
            .await
            .unwrap();
        let err = resolve(store.as_ref(), three, HumanAction::UpdateCrm)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Refused(Refusal::UpdateSuperseded)),
            "{err}"
        );
        let case = store.case(three).await.unwrap().unwrap();
        assert!(case.resolved_at.is_none(), "refused: the case stays open");
    }
);

each_backend!(
    two_operations_on_one_entity_update_it_in_delivery_order,
    |db| async move {
        // A second operation that landed on the same entity (amoCRM merging it into the
        // existing lead, or a link): the updates of entity 77 go one at a time.
        let store = db.store().await;
        requested(store.as_ref(), "e1").await;
        store
            .record_delivery(delivery("e2", json!({"name": "X", "phone": "2"})))
            .await
            .unwrap();
        let claim = store
            .claim_due("bitrix24", "w", Duration::from_secs(30), local_now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(claim.operation.operation_id, op("e2"));
        store
            .finish_attempt(
                &claim.lease,
                AttemptOutcome::Created {
                    crm_id: "77".into(),
                },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        let case = conflicting(store.as_ref(), "e2", json!({"name": "Y", "phone": "2"})).await;
        resolve(store.as_ref(), case, HumanAction::UpdateCrm)
            .await
            .unwrap();
        let first = store
            .claim_update("bitrix24", "w1", Duration::from_secs(5), local_now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.operation_id, op("e1"), "the older delivery first");
        assert!(
            store
                .claim_update("bitrix24", "w2", Duration::from_secs(5), local_now())
                .await
                .unwrap()
                .is_none(),
            "the other operation's update of the same entity waits"
        );
        store
            .finish_update(
                &first,
                UpdateOutcome::Done {
                    fields: vec!["name".into()],
                },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        let second = store
            .claim_update("bitrix24", "w2", Duration::from_secs(5), local_now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(second.operation_id, op("e2"));
    }
);

each_backend!(
    refused_credentials_pause_the_connector_and_the_update_waits_uncounted,
    |db| async move {
        let gw = gateway(&db, "500ms", "300ms").await;
        let case = conflict(&gw, "a1", json!({"comment": "new"})).await;
        gw.fake.push_fault(UPDATE, Fault::ExpiredToken, 5);
        decide(&gw, &case, HumanAction::UpdateCrm).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !gw
            .store()
            .connector("bitrix24")
            .await
            .unwrap()
            .is_some_and(|c| c.paused)
        {
            assert!(Instant::now() < deadline, "never paused");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(gw.fake.calls(UPDATE), 1, "nothing more while paused");
        gw.fake.clear_faults();
        gw.store()
            .resume_connector("bitrix24", "ann", local_now())
            .await
            .unwrap();
        let t = events(&gw, "site:a1", "crm_updated", 1, Duration::from_secs(10)).await;
        assert!(!t.iter().any(|e| e.kind == "crm_update_failed"));
        assert_eq!(gw.fake.entities()[0].fields["COMMENTS"], "new");
        gw.stop().await;
    }
);
