//! *Fix and resend…* (issue 37, point 8): a person fixes a failed lead's data and sends it
//! again, exactly once. The edited payload replaces the operation's (the worker sends
//! it); the fingerprint stays the original's, so a repeat of the original request is a
//! duplicate; after an attempt the key is looked up in the CRM before anything is
//! created. On both backends, through the console model (`Console::resend`), and against
//! the fake Bitrix24 over real HTTP.

use std::time::Duration;

use serde_json::{json, Value};

use leadgate::domain::roles::Role;
use leadgate::domain::{ErrorClass, OperationId, ReviewReason, Status};
use leadgate::store::*;
use leadgate_console_model::*;
use leadgate_fakes::bitrix24::Fault;

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{lead, origin_ids, Gateway, CREATE};
use leadgate_testkit::people::{gateway, People};
use leadgate_testkit::seed::delivery;
use leadgate_testkit::{run, Backend};

const LEASE: Duration = Duration::from_secs(30);

fn op(key: &str) -> OperationId {
    OperationId::new("site", key).unwrap()
}

/// A lead the CRM refused (`validation`) after one attempt: `failed_terminal`.
async fn failed_after_an_attempt(store: &dyn Store, key: &str, payload: Value) {
    store.record_delivery(delivery(key, payload)).await.unwrap();
    let c = store
        .claim_due("bitrix24", "w", LEASE, local_now())
        .await
        .unwrap()
        .unwrap();
    let failure = Failure {
        class: ErrorClass::Validation,
        message: "PHONE is malformed".into(),
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

/// A lead nothing was sent for, rejected by a person: `failed_terminal`, no attempt.
async fn rejected_before_any_attempt(store: &dyn Store, key: &str, payload: Value) {
    let mut d = delivery(key, payload);
    d.review = Some(ReviewReason::LateDuplicate);
    store.record_delivery(d).await.unwrap();
    let case = store.cases_of(&op(key)).await.unwrap().remove(0);
    store
        .resolve(Resolve {
            case_id: case.id,
            expected_version: case.version,
            actor: "anna".into(),
            comment: Some("looked like spam".into()),
            action: HumanAction::Reject,
            now: local_now(),
            bulk: None,
        })
        .await
        .unwrap();
}

/// Opens an `uncertain_outcome` case on `key` (as a person opening a review would) and
/// resolves it with `action` through the store directly, at the version the case left.
async fn open_and_resolve(
    store: &dyn Store,
    key: &str,
    action: HumanAction,
) -> Result<Resolved, StoreError> {
    let case_id = store
        .open_review(
            &op(key),
            ReviewReason::UncertainOutcome,
            "anna",
            json!({}),
            local_now(),
        )
        .await
        .unwrap();
    let seen = store.operation(&op(key)).await.unwrap().unwrap();
    store
        .resolve(Resolve {
            case_id,
            expected_version: seen.version,
            actor: "anna".into(),
            comment: None,
            action,
            now: local_now(),
            bulk: None,
        })
        .await
}

fn resend_request(o: &Operation, payload: &str) -> ResendRequest {
    ResendRequest {
        operation_id: o.operation_id.to_string(),
        expected_version: o.version,
        payload: payload.into(),
        comment: Some("fixed the phone".into()),
    }
}

fn refused_code<T: std::fmt::Debug>(r: &ApiResult<T>) -> String {
    match r {
        Err(ConsoleError::Refused { code, .. }) => code.clone(),
        other => panic!("not a refusal: {other:?}"),
    }
}

each_backend!(
    fix_and_resend_stores_the_edited_data_and_keeps_the_original_fingerprint,
    |db| async move {
        let store = db.store().await;
        let console = Console::open(&db.url).await.unwrap();
        let original = json!({"name": "Ivan", "phone": "8 (999) 12", "utm": {"source": "ya"}});
        failed_after_an_attempt(&*store, "r1", original.clone()).await;
        let before = store.operation(&op("r1")).await.unwrap().unwrap();
        assert_eq!(before.status, Status::FailedTerminal);
        assert!(before.attempts > 0, "{before:?}");
        let detail = console.case_detail("site:r1", None, None).await.unwrap();
        assert!(detail.may_resend, "a failed lead may be fixed and resent");

        let edited = json!({"name": "Ivan", "phone": "+79991234567", "utm": {"source": "yandex"},
                            "comment": "call after 18:00"});
        let done = console
            .resend("Olga", resend_request(&before, &edited.to_string()))
            .await
            .unwrap();
        assert_eq!(done.operation.status, "received");

        let after = store.operation(&op("r1")).await.unwrap().unwrap();
        assert_eq!(
            after.payload.as_ref(),
            Some(&edited),
            "the edited data is stored"
        );
        assert_eq!(
            after.payload_hash, before.payload_hash,
            "the fingerprint stays"
        );
        assert_eq!(after.retry_grants, 1);
        assert!(
            after.verify_first,
            "after an attempt the key is looked up first"
        );
        // The case it opened is resolved as fixed and resent, by the person.
        let cases = store.cases_of(&op("r1")).await.unwrap();
        assert_eq!(cases.len(), 1, "{cases:?}");
        assert_eq!(cases[0].resolution.as_deref(), Some("resent_edited"));
        assert_eq!(cases[0].resolved_by.as_deref(), Some("Olga"));
        // The timeline says who edited which fields, never the values.
        let t = store.timeline(&op("r1")).await.unwrap();
        let human = t.iter().rfind(|e| e.kind == "human_action").unwrap();
        assert_eq!(human.actor, "Olga");
        assert_eq!(human.detail["action"], "resent_edited");
        assert_eq!(human.detail["comment"], "fixed the phone");
        assert_eq!(
            human.detail["edited"],
            json!({"added": ["comment"], "changed": ["phone", "utm.source"], "removed": []})
        );
        let text = human.detail.to_string();
        assert!(
            !text.contains("+79991234567") && !text.contains("yandex") && !text.contains("18:00"),
            "{text}"
        );
        // The original delivery is still in the journal, as the source sent it.
        let first = t.iter().find(|e| e.kind == "delivery").unwrap();
        let delivery_id = first.detail["delivery_id"].as_i64().unwrap();
        let journal = store.delivery(delivery_id).await.unwrap().unwrap();
        assert_eq!(journal.payload.as_ref(), Some(&original));
        assert_eq!(
            journal.payload_hash.as_deref(),
            Some(before.payload_hash.as_str())
        );

        // A repeat of the ORIGINAL request is a duplicate, absorbed: no case, no change.
        let again = store
            .record_delivery(delivery("r1", original.clone()))
            .await
            .unwrap();
        assert!(
            matches!(again.outcome, DeliveryOutcome::Duplicate { .. }),
            "{:?}",
            again.outcome
        );
        let still = store.operation(&op("r1")).await.unwrap().unwrap();
        assert_eq!(still.payload.as_ref(), Some(&edited));
        assert_eq!(still.status, Status::Received);
        assert_eq!(store.cases_of(&op("r1")).await.unwrap().len(), 1);

        // The worker's claim carries the edited data, and verifies first.
        let c = store
            .claim_due("bitrix24", "w2", LEASE, local_now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c.operation.payload.as_ref(), Some(&edited));
        assert!(c.operation.verify_first);
    }
);

each_backend!(
    fix_and_resend_without_an_earlier_attempt_creates_once_without_a_look_up,
    |db| async move {
        let store = db.store().await;
        let console = Console::open(&db.url).await.unwrap();
        rejected_before_any_attempt(&*store, "r0", json!({"name": ""})).await;
        let before = store.operation(&op("r0")).await.unwrap().unwrap();
        assert_eq!(
            (before.status, before.attempts),
            (Status::FailedTerminal, 0)
        );
        console
            .resend(
                "Olga",
                resend_request(&before, r#"{"name": "Ivan Petrov"}"#),
            )
            .await
            .unwrap();
        let after = store.operation(&op("r0")).await.unwrap().unwrap();
        assert_eq!(after.payload, Some(json!({"name": "Ivan Petrov"})));
        assert!(!after.verify_first, "nothing was sent before: it creates");
        assert_eq!(after.retry_grants, 1);
        // The rejected case stays as it was; a new one was opened and resolved.
        let cases = store.cases_of(&op("r0")).await.unwrap();
        assert_eq!(
            cases
                .iter()
                .map(|c| c.resolution.as_deref().unwrap_or("open"))
                .collect::<Vec<_>>(),
            ["rejected", "resent_edited"]
        );
        // Exactly one more attempt: once claimed, the grant is spent.
        let c = store
            .claim_due("bitrix24", "w", LEASE, local_now())
            .await
            .unwrap()
            .unwrap();
        assert!(!c.operation.verify_first);
        assert_eq!(c.operation.retry_grants, 0);
    }
);

each_backend!(
    fix_and_resend_refuses_bad_data_and_where_a_retry_is_refused_changing_nothing,
    |db| async move {
        let store = db.store().await;
        let console = Console::open(&db.url).await.unwrap();
        failed_after_an_attempt(&*store, "bad", json!({"name": "x", "phone": "1"})).await;
        let before = store.operation(&op("bad")).await.unwrap().unwrap();
        let events = store.timeline(&op("bad")).await.unwrap().len();
        for (text, code) in [
            (r#"{"name": "x", "phone": "+7999"#, "payload_malformed"),
            ("not json", "payload_malformed"),
            (r#"["name", "x"]"#, "payload_not_object"),
            (r#""just text""#, "payload_not_object"),
            ("null", "payload_not_object"),
        ] {
            let got = console.resend("Olga", resend_request(&before, text)).await;
            assert_eq!(refused_code(&got), code, "{text}");
        }
        // A stale view is refused before anything is opened.
        let mut stale = resend_request(&before, r#"{"name": "y"}"#);
        stale.expected_version -= 1;
        let got = console.resend("Olga", stale).await;
        assert!(matches!(got, Err(ConsoleError::Changed { .. })), "{got:?}");
        // Nothing changed: no case, no event, the data and version as they were.
        let same = store.operation(&op("bad")).await.unwrap().unwrap();
        assert_eq!(same.version, before.version);
        assert_eq!(same.payload, before.payload);
        assert!(store.cases_of(&op("bad")).await.unwrap().is_empty());
        assert_eq!(store.timeline(&op("bad")).await.unwrap().len(), events);

        // A known CRM result: a conflict arrived while the create was in flight, and the
        // create landed (crm_id 77, waiting in review). A resend would be a second entity.
        store
            .record_delivery(delivery("known", json!({"name": "Ivan"})))
            .await
            .unwrap();
        let claim = store
            .claim_due("bitrix24", "w", LEASE, local_now())
            .await
            .unwrap()
            .unwrap();
        store
            .record_delivery(delivery("known", json!({"name": "Petr"})))
            .await
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
        let known = store.operation(&op("known")).await.unwrap().unwrap();
        assert_eq!(known.crm_id.as_deref(), Some("77"));
        let detail = console.case_detail("site:known", None, None).await.unwrap();
        assert!(!detail.may_resend);
        let got = console
            .resend("Olga", resend_request(&known, r#"{"name": "Ivan"}"#))
            .await;
        assert_eq!(refused_code(&got), "retry_over_known_result");
        // ... and through the store directly, on a case opened for it.
        let err = open_and_resolve(
            &*store,
            "known",
            HumanAction::ResendEdited {
                payload: json!({"name": "Ivan"}),
            },
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&err, StoreError::Refused(r) if r.code() == "retry_over_known_result"),
            "{err}"
        );
        // A lead sent again already is not resent twice.
        failed_after_an_attempt(&*store, "done", json!({"name": "z"})).await;
        let done = store.operation(&op("done")).await.unwrap().unwrap();
        let ok = console
            .resend("Olga", resend_request(&done, r#"{"name": "Zoe"}"#))
            .await
            .unwrap();
        assert_eq!(ok.operation.status, "received");
        let done = store.operation(&op("done")).await.unwrap().unwrap();
        let got = console
            .resend("Olga", resend_request(&done, r#"{"name": "Zoe"}"#))
            .await;
        assert_eq!(refused_code(&got), "retry_not_in_review");
        // The store refuses data that is not an object, whoever asks.
        let err = open_and_resolve(
            &*store,
            "bad",
            HumanAction::ResendEdited {
                payload: json!(["x"]),
            },
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&err, StoreError::Refused(r) if r.code() == "payload_not_object"),
            "{err}"
        );
        assert_eq!(
            store.operation(&op("bad")).await.unwrap().unwrap().payload,
            before.payload
        );
    }
);

/// PostgreSQL: a person's login asks a gateway; sales ops and managers may fix and
/// resend, support and admin may not — neither through the console nor through SQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_roles_that_may_authorize_a_retry_fix_and_resend() {
    run(Backend::Postgres, |db| async move {
        let store = db.store().await;
        let people = People::new(&db.url).await;
        let _gw = gateway(store.clone());
        failed_after_an_attempt(&*store, "p1", json!({"name": "x", "phone": "1"})).await;
        failed_after_an_attempt(&*store, "p2", json!({"name": "y", "phone": "2"})).await;
        // p2 waits in a case someone opened already (Fix and resend then resolves it).
        let p2_case = store
            .open_review(
                &op("p2"),
                ReviewReason::UncertainOutcome,
                "anna",
                json!({}),
                store.now(),
            )
            .await
            .unwrap();
        for role in [Role::Support, Role::Admin] {
            let console = Console::open(people.url(role)).await.unwrap();
            let o = store.operation(&op("p1")).await.unwrap().unwrap();
            let got = console
                .resend(
                    "anyone",
                    resend_request(&o, r#"{"name": "x", "phone": "+7999"}"#),
                )
                .await;
            assert!(
                matches!(got, Err(ConsoleError::Forbidden { .. })),
                "{role}: {got:?}"
            );
            // psql cannot ask for it either.
            let mut sql = people.sql(role).await;
            let refused = sqlx::query(
                "insert into human_requests (kind, case_id, expected_version, body) \
                 values ('resolve', $1, 1, $2)",
            )
            .bind(p2_case)
            .bind(json!({"resolution": "resent_edited", "payload": {"a": 1}}).to_string())
            .execute(&mut sql)
            .await;
            assert!(refused.is_err(), "{role}");
        }
        let untouched = store.operation(&op("p1")).await.unwrap().unwrap();
        assert_eq!(untouched.status, Status::FailedTerminal);
        assert!(store.cases_of(&op("p1")).await.unwrap().is_empty());

        // Sales ops: through a gateway, recorded under the login.
        let sales = Console::open(people.url(Role::SalesOps)).await.unwrap();
        let o = store.operation(&op("p1")).await.unwrap().unwrap();
        // Bad data is refused before anything is asked.
        let got = sales.resend("x", resend_request(&o, "{oops")).await;
        assert_eq!(refused_code(&got), "payload_malformed");
        let done = sales
            .resend(
                "a name the client sends",
                resend_request(&o, r#"{"name": "x", "phone": "+79990001122"}"#),
            )
            .await
            .unwrap();
        assert_eq!(done.operation.status, "received");
        let after = store.operation(&op("p1")).await.unwrap().unwrap();
        assert_eq!(
            after.payload,
            Some(json!({"name": "x", "phone": "+79990001122"}))
        );
        assert_eq!(after.payload_hash, o.payload_hash);
        let t = store.timeline(&op("p1")).await.unwrap();
        let human = t.iter().rfind(|e| e.kind == "human_action").unwrap();
        assert_eq!(human.actor, people.login(Role::SalesOps));
        assert_eq!(human.detail["edited"]["changed"], json!(["phone"]));

        // A resolution carrying data is only Fix and resend; Fix and resend carries an object.
        let mut sql = people.sql(Role::Manager).await;
        // Only Fix and resend may be longer than 16 KiB (here: blanks a client could pad with).
        let padded = format!(
            "{{\"resolution\": \"rejected\", \"comment\": \"spam\"{}}}",
            " ".repeat(17_000)
        );
        for body in [
            json!({"resolution": "retry_authorized", "payload": {"a": 1}}).to_string(),
            json!({"resolution": "resent_edited"}).to_string(),
            json!({"resolution": "resent_edited", "payload": [1]}).to_string(),
            padded,
        ] {
            let refused = sqlx::query(
                "insert into human_requests (kind, case_id, expected_version, body) \
                 values ('resolve', $1, 1, $2)",
            )
            .bind(p2_case)
            .bind(&body)
            .execute(&mut sql)
            .await;
            assert!(refused.is_err(), "{body}");
        }
        // A large lead (more than the 16 KiB other requests may have) is taken.
        let manager = Console::open(people.url(Role::Manager)).await.unwrap();
        let o = store.operation(&op("p2")).await.unwrap().unwrap();
        let big = json!({"name": "y", "phone": "+79990001123", "notes": "n".repeat(40_000)});
        manager
            .resend("m", resend_request(&o, &big.to_string()))
            .await
            .unwrap();
        let after = store.operation(&op("p2")).await.unwrap().unwrap();
        assert_eq!(after.payload, Some(big));
        assert_eq!(
            store.cases_of(&op("p2")).await.unwrap()[0]
                .resolution
                .as_deref(),
            Some("resent_edited"),
            "the case already open is the one resolved"
        );
        // The requests hold the leads' edited data: retention forgets answered ones with
        // the payloads (what they did stays on the timeline).
        let holding = |phone: &'static str| {
            let url = db.url.clone();
            async move {
                let mut c = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
                    .await
                    .unwrap();
                sqlx::query_scalar::<_, i64>(
                    "select count(*) from human_requests where body like '%' || $1 || '%'",
                )
                .bind(phone)
                .fetch_one(&mut c)
                .await
                .unwrap()
            }
        };
        assert_eq!(holding("+79990001122").await, 1);
        let purged =
            leadgate::store::purge(&*store, store.now() + chrono::TimeDelta::seconds(1), 100)
                .await
                .unwrap();
        assert!(purged.requests >= 2, "{purged:?}");
        assert_eq!(holding("+79990001122").await, 0);
        assert_eq!(holding("+79990001123").await, 0);
        people.drop_all().await;
    })
    .await;
}

/// Waits until the operation is `status`, and returns it.
async fn wait_status(gw: &Gateway, id: &str, status: &str) -> Value {
    gw.wait_status(id, status).await
}

each_backend!(
    the_crm_gets_the_edited_data_once_and_a_create_that_landed_is_found_not_repeated,
    |db| async move {
        let gw = Gateway::start(&db).await;
        let console = Console::open(&db.url).await.unwrap();
        let store = gw.store();

        // The CRM refuses the data (400, nothing created): failed for good.
        gw.fake.push_fault(CREATE, Fault::Validation, 1);
        let mut bad = lead("e1");
        bad["phone"] = json!("8 (999) 12");
        gw.post_json("site", &bad).await;
        wait_status(&gw, "site:e1", "failed_terminal").await;
        assert!(gw.fake.entities().is_empty());
        // Fixed and resent: looked up first (nothing there), then created with the edit.
        let o = store.operation(&op("e1")).await.unwrap().unwrap();
        let mut fixed = bad.clone();
        fixed["phone"] = json!("+7 999 123-45-67");
        fixed["name"] = json!("Ivan Fixed");
        console
            .resend("Olga", resend_request(&o, &fixed.to_string()))
            .await
            .unwrap();
        let done = wait_status(&gw, "site:e1", "completed").await;
        let entities = gw.fake.entities();
        assert_eq!(entities.len(), 1, "{entities:?}");
        let sent = entities[0].fields.to_string();
        assert!(
            sent.contains("Ivan Fixed"),
            "the CRM got the edited data: {sent}"
        );
        assert!(!sent.contains("8 (999) 12"), "{sent}");
        assert_eq!(done["crm_id"], json!(entities[0].id.to_string()));
        assert_eq!(
            gw.fake.calls(CREATE),
            2,
            "the refused create and the one resend"
        );
        // The original request again: a duplicate with the result, nothing sent.
        let (_, body, _) = gw.post_json("site", &bad).await;
        assert_eq!(body["outcome"], "duplicate");
        assert_eq!(gw.fake.calls(CREATE), 2);

        // The CRM created the lead but answered with a refusal: failed, yet it is there.
        gw.fake.push_fault(
            CREATE,
            Fault::Error {
                status: 400,
                error: String::new(),
                error_description: "Phone is malformed<br />".into(),
                after_execute: true,
            },
            1,
        );
        gw.post_json("site", &lead("e2")).await;
        wait_status(&gw, "site:e2", "failed_terminal").await;
        assert_eq!(origin_ids(&gw.fake), ["site:e1", "site:e2"]);
        let o = store.operation(&op("e2")).await.unwrap().unwrap();
        assert!(o.attempts > 0);
        let mut fixed = lead("e2");
        fixed["name"] = json!("Ivan Again");
        console
            .resend("Olga", resend_request(&o, &fixed.to_string()))
            .await
            .unwrap();
        let done = wait_status(&gw, "site:e2", "completed").await;
        // Found by its key: no second entity, no second create.
        assert_eq!(
            origin_ids(&gw.fake),
            ["site:e1", "site:e2"],
            "exactly one entity"
        );
        assert_eq!(gw.fake.calls(CREATE), 3);
        let e2 = gw.fake.entities().into_iter().nth(1).unwrap();
        assert_eq!(done["crm_id"], json!(e2.id.to_string()));
        let kinds = gw.timeline_kinds("site:e2").await;
        assert!(kinds.contains(&"recovered".to_owned()), "{kinds:?}");
        gw.stop().await;
    }
);

// A lead whose create went out and was cut off, then met a CRM outage: the outage gives
// the attempt back (attempts 0) but owes a lookup (`verify_first`). A person who then
// authorizes a retry, or fixes and resends the lead, must not lower that: the granted
// attempt looks the key up before it creates (the review of this change found the grant
// overwriting it with "attempts > 0"). The console says "re-check", not "send".
each_backend!(
    a_retry_after_an_outage_gave_the_attempt_back_still_looks_the_key_up_first,
    |db| async move {
        let store = db.store().await;
        let console = Console::open(&db.url).await.unwrap();
        for key in ["o1", "o2"] {
            store
                .record_delivery(delivery(
                    key,
                    json!({"name": "Ivan", "phone": "+79991234567"}),
                ))
                .await
                .unwrap();
        }
        // Both are claimed before either is given back (one claim each).
        let mut claims = vec![];
        for _ in 0..2 {
            claims.push(
                store
                    .claim_due("bitrix24", "w", LEASE, local_now())
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        for c in claims {
            store
                .finish_attempt(
                    &c.lease,
                    AttemptOutcome::Outage {
                        failure: Failure {
                            class: ErrorClass::Uncertain,
                            message: "no answer within the budget".into(),
                        },
                        at: local_now() + chrono::TimeDelta::seconds(60),
                        verify: true,
                    },
                    vec![],
                    local_now(),
                )
                .await
                .unwrap();
        }
        for (key, resend) in [("o1", false), ("o2", true)] {
            let o = store.operation(&op(key)).await.unwrap().unwrap();
            assert_eq!((o.attempts, o.verify_first), (0, true), "{o:?}");
            let detail = console
                .case_detail(&format!("site:{key}"), None, None)
                .await
                .unwrap();
            assert!(
                detail.operation.checks_first,
                "the console offers a re-check, not a first send"
            );
            let action = if resend {
                HumanAction::ResendEdited {
                    payload: json!({"name": "Ivan", "phone": "+79991234568"}),
                }
            } else {
                HumanAction::AuthorizeRetry
            };
            open_and_resolve(&*store, key, action).await.unwrap();
            let o = store.operation(&op(key)).await.unwrap().unwrap();
            assert_eq!(o.retry_grants, 1);
            assert!(o.verify_first, "{key}: the owed lookup stays owed: {o:?}");
        }
    }
);

// A failed lead with a payload conflict open: a grant would wait behind the conflict for
// ever (settling it does not move a failed lead), so both ways of sending it again are
// refused with a sentence until the conflict is settled; and edited data is never a
// bulk action's.
each_backend!(
    a_failed_lead_behind_an_open_conflict_is_not_sent_again_until_it_is_settled,
    |db| async move {
        let store = db.store().await;
        let original = json!({"name": "Ivan", "phone": "8 (999) 12"});
        failed_after_an_attempt(&*store, "c1", original.clone()).await;
        // The source sends the same key with other data: a conflict case opens.
        store
            .record_delivery(delivery(
                "c1",
                json!({"name": "Ivan P.", "phone": "8 (999) 12"}),
            ))
            .await
            .unwrap();
        let conflict = store.cases_of(&op("c1")).await.unwrap();
        assert!(
            conflict
                .iter()
                .any(|c| c.reason == ReviewReason::PayloadConflict && c.resolved_at.is_none()),
            "{conflict:?}"
        );
        // The console offers no Fix and resend, and refuses one before it opens a case.
        let console = Console::open(&db.url).await.unwrap();
        let detail = console.case_detail("site:c1", None, None).await.unwrap();
        assert!(!detail.may_resend);
        let seen = store.operation(&op("c1")).await.unwrap().unwrap();
        let got = console
            .resend("Olga", resend_request(&seen, r#"{"name": "Ivan"}"#))
            .await;
        assert_eq!(refused_code(&got), "retry_while_conflict_open");
        assert_eq!(
            store.cases_of(&op("c1")).await.unwrap().len(),
            conflict.len(),
            "no case opened for a resend that is refused"
        );
        let case_id = store
            .open_review(
                &op("c1"),
                ReviewReason::UncertainOutcome,
                "anna",
                json!({}),
                local_now(),
            )
            .await
            .unwrap();
        for (action, bulk) in [
            (HumanAction::AuthorizeRetry, None),
            (
                HumanAction::ResendEdited {
                    payload: json!({"name": "Ivan", "phone": "+79991234567"}),
                },
                None,
            ),
            (
                HumanAction::ResendEdited {
                    payload: json!({"name": "Ivan", "phone": "+79991234567"}),
                },
                Some(Bulk {
                    id: "b1".into(),
                    of: 1,
                }),
            ),
        ] {
            let before = store.operation(&op("c1")).await.unwrap().unwrap();
            let in_bulk = bulk.is_some();
            let r = store
                .resolve(Resolve {
                    case_id,
                    expected_version: before.version,
                    actor: "anna".into(),
                    comment: Some("fixed".into()),
                    action,
                    now: local_now(),
                    bulk,
                })
                .await;
            let code = match r {
                Err(StoreError::Refused(r)) => r.code(),
                other => panic!("refused, not {other:?}"),
            };
            assert_eq!(
                code,
                if in_bulk {
                    "not_in_bulk"
                } else {
                    "retry_while_conflict_open"
                }
            );
            let after = store.operation(&op("c1")).await.unwrap().unwrap();
            assert_eq!(
                (after.version, after.retry_grants, after.payload.as_ref()),
                (before.version, 0, Some(&original)),
                "nothing changed"
            );
        }
    }
);
