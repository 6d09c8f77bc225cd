//! A slow CRM still gets exactly one create per operation: leases that cover the whole
//! call, a settle window before a "not found" counts, late answers that are never
//! thrown away, guards against a second create on top of a known result, and outcome
//! commits that survive a database hiccup. The fake Bitrix24 plays the timing faults of
//! a real portal under load: a create executed after the client gave up, a create
//! slower than the client waits, a search that lags behind writes.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leadgate::config::Config;
use leadgate::domain::{ErrorClass, OperationId, ReviewReason, Status};
use leadgate::store::*;
use leadgate_fakes::bitrix24::{FakeBitrix24, FakeConfig, Fault};
use serde_json::{json, Value};
use std::collections::BTreeMap;

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{config_toml, lead, origin_ids, Gateway, CREATE};
use leadgate_testkit::seed::delivery;

const LIST: &str = "crm.lead.list";
const LEASE: Duration = Duration::from_secs(30);

fn op(key: &str) -> OperationId {
    OperationId::new("site", key).unwrap()
}

/// The gateway test configuration with the CRM timing settings replaced.
fn timed_config(db_url: &str, webhook: &str, timeout: &str, lease: &str, settle: &str) -> Config {
    let text = config_toml(db_url, webhook)
        .replace("timeout = \"500ms\"", &format!("timeout = \"{timeout}\""))
        .replace("settle = \"300ms\"", &format!("settle = \"{settle}\""))
        .replace("lease = \"2s\"", &format!("lease = \"{lease}\""));
    Config::parse(&text).unwrap()
}

async fn gateway_with(
    db: &leadgate_testkit::TestDb,
    fake: FakeConfig,
    timing: (&str, &str, &str),
) -> Gateway {
    let fake = FakeBitrix24::spawn_with("127.0.0.1:0".parse().unwrap(), fake)
        .await
        .unwrap();
    let (timeout, lease, settle) = timing;
    let config = timed_config(&db.url, &fake.webhook_url(), timeout, lease, settle);
    Gateway::start_with(fake, config).await
}

/// Waits (up to `limit`) until the operation is completed, and returns it.
async fn completed(gw: &Gateway, id: &str, limit: Duration) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    loop {
        let o = gw.operation(id).await;
        if o["status"] == "completed" {
            return o;
        }
        assert!(Instant::now() < deadline, "never completed: {o}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

each_backend!(
    a_create_the_crm_executes_after_the_client_gave_up_is_found_not_repeated,
    |db| async move {
        // timeout 500 ms; the portal keeps working and the lead lands after 1.5 s. The
        // lookup right after the timeout finds nothing; only the one after the settle
        // window (3 s) decides — and finds it.
        let gw = gateway_with(&db, FakeConfig::default(), ("500ms", "2s", "3s")).await;
        gw.fake
            .push_fault(CREATE, Fault::ExecuteLate { ms: 1500 }, 1);
        let (status, _, _) = gw.post_json("site", &lead("late1")).await;
        assert_eq!(status, 202);
        let o = completed(&gw, "site:late1", Duration::from_secs(15)).await;
        assert_eq!(
            origin_ids(&gw.fake),
            vec!["site:late1"],
            "exactly one entity"
        );
        assert_eq!(gw.fake.calls(CREATE), 1, "no second create");
        let kinds = gw.timeline_kinds("site:late1").await;
        assert!(kinds.contains(&"verify_scheduled".to_owned()), "{kinds:?}");
        assert!(kinds.contains(&"recovered".to_owned()), "{kinds:?}");
        assert_eq!(o["crm_id"], json!(gw.fake.entities()[0].id.to_string()));
        let m = gw.store().metrics(local_now(), LEASE).await.unwrap();
        assert_eq!(m.crm_entities_created, 1);
        gw.stop().await;
    }
);

each_backend!(
    a_found_entity_completes_at_once_without_waiting_for_the_settle_window,
    |db| async move {
        // The answer is lost but the lead is there already: recovered by the first
        // lookup, long before the (60 s) settle window would end.
        let gw = gateway_with(&db, FakeConfig::default(), ("500ms", "2s", "60s")).await;
        gw.fake.push_fault(CREATE, Fault::ServerErrorAfterCreate, 1);
        gw.post_json("site", &lead("fast")).await;
        let o = completed(&gw, "site:fast", Duration::from_secs(5)).await;
        assert_eq!(o["crm_id"], json!(gw.fake.entities()[0].id.to_string()));
        assert_eq!(gw.fake.calls(CREATE), 1);
        gw.stop().await;
    }
);

each_backend!(
    a_search_that_lags_behind_the_create_is_asked_again_after_the_settle_window,
    |db| async move {
        // The create executes and the answer hangs; lists show the lead only 2 s later.
        let fake = FakeConfig {
            search_lag: Duration::from_secs(2),
            ..FakeConfig::default()
        };
        let gw = gateway_with(&db, fake, ("500ms", "2s", "3s")).await;
        gw.fake.push_fault(CREATE, Fault::LostAnswerHang, 1);
        gw.post_json("site", &lead("lag")).await;
        completed(&gw, "site:lag", Duration::from_secs(15)).await;
        assert_eq!(origin_ids(&gw.fake), vec!["site:lag"]);
        assert_eq!(gw.fake.calls(CREATE), 1);
        assert!(
            gw.fake.calls(LIST) >= 2,
            "looked up at once and after the window"
        );
        gw.stop().await;
    }
);

/// A worker (with its reconciler) on `store`, built directly so its settings need not
/// pass the configuration's checks.
fn direct_worker(
    store: Arc<dyn Store>,
    fake: &FakeBitrix24,
    lease: Duration,
    call_timeout: Duration,
    settle: Duration,
) -> leadgate::worker::Worker {
    let text = config_toml("sqlite::memory:", &fake.webhook_url()).replace(
        "timeout = \"500ms\"",
        &format!("timeout = \"{}ms\"", call_timeout.as_millis()),
    );
    let config = Config::parse(&text.replace("lease = \"2s\"", "lease = \"60s\"")).unwrap();
    let crm = leadgate::crm::from_config(config.crm.as_ref().unwrap(), store.clone()).unwrap();
    leadgate::worker::Worker {
        store,
        crm,
        settings: Arc::new(leadgate::worker::WorkerSettings {
            poll_interval: Duration::from_millis(20),
            lease,
            call_timeout,
            settle,
            retry: config.retry.clone(),
            outage: config.outage.clone(),
            concurrency: 1,
            fields: Default::default(),
            look_up_first: false,
        }),
        owner: "worker:test".into(),
        turns: None,
    }
}

each_backend!(
    a_create_slower_than_the_lease_it_was_claimed_with_is_not_taken_over,
    |db| async move {
        // The configuration refuses a lease shorter than one whole CRM call.
        let text =
            config_toml(&db.url, "http://x/").replace("timeout = \"500ms\"", "timeout = \"4s\"");
        let refused = Config::parse(&text).unwrap_err().to_string();
        assert!(
            refused.contains("worker.lease") && refused.contains("crm.timeout"),
            "{refused}"
        );
        // And the worker does not rely on it: claimed with a 1 s lease, a create the CRM
        // needs 2 s for gets its lease extended to the call's budget before it goes out,
        // so the reconciler running beside it does not take over. (With no settle window
        // at all, a takeover would look up at once, find nothing and create again.)
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        fake.push_fault(CREATE, Fault::ExecuteLate { ms: 2000 }, 1);
        let store = db.store().await;
        let worker = direct_worker(
            store.clone(),
            &fake,
            Duration::from_secs(1),
            Duration::from_secs(4),
            Duration::ZERO,
        );
        store
            .record_delivery(delivery("slow", json!({"name": "Ivan"})))
            .await
            .unwrap();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let reconciler = tokio::spawn(leadgate::reconcile::run(
            store.clone(),
            worker.crm.clone(),
            worker.settings.clone(),
            "reconciler:test".into(),
            None,
            stopped,
        ));
        assert!(worker.step().await.unwrap());
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.send(true).unwrap();
        reconciler.await.unwrap();
        let o = store.operation(&op("slow")).await.unwrap().unwrap();
        assert_eq!(
            (o.status, o.crm_link.as_deref()),
            (Status::Completed, Some("created"))
        );
        assert_eq!(fake.calls(CREATE), 1);
        assert_eq!(fake.entities().len(), 1);
        let t = store.timeline(&op("slow")).await.unwrap();
        assert!(!t.iter().any(|e| e.kind == "lease_taken_over"));
    }
);

each_backend!(
    a_call_longer_than_its_budget_is_cut_and_settled_by_key,
    |db| async move {
        // The CRM needs 2.5 s, the whole call may take 1 s: the worker cuts it (the
        // outcome is unknown), the lead lands anyway, the lookup after the window finds it.
        let gw = gateway_with(&db, FakeConfig::default(), ("1s", "2s", "3s")).await;
        gw.fake
            .push_fault(CREATE, Fault::ExecuteLate { ms: 2500 }, 1);
        gw.post_json("site", &lead("cut")).await;
        let o = completed(&gw, "site:cut", Duration::from_secs(15)).await;
        assert_eq!(
            o["attempts"], 2,
            "the create, then the verify pass that found it"
        );
        assert_eq!(gw.fake.calls(CREATE), 1);
        assert_eq!(gw.fake.entities().len(), 1);
        gw.stop().await;
    }
);

each_backend!(
    a_verify_pass_that_finds_nothing_creates_once,
    |db| async move {
        // Refused before execution with a 500 (the fake's plain ServerError): the outcome
        // is unknown to Leadgate, nothing lands, and after the window the one retry
        // creates it.
        let gw = gateway_with(&db, FakeConfig::default(), ("500ms", "2s", "1s")).await;
        gw.fake.push_fault(CREATE, Fault::ServerError, 1);
        gw.post_json("site", &lead("none")).await;
        let o = completed(&gw, "site:none", Duration::from_secs(10)).await;
        assert_eq!(o["attempts"], 2);
        assert_eq!(gw.fake.calls(CREATE), 2);
        assert_eq!(origin_ids(&gw.fake), vec!["site:none"]);
        gw.stop().await;
    }
);

/// Records `key`, claims it for `w1` with a 5 s lease, and lets the reconciler take it
/// over once that ran out: the first holder's answer may still arrive. Returns both
/// claims and the takeover's time.
async fn claimed_then_taken_over(
    store: &dyn Store,
    key: &str,
) -> (Claim, Claim, chrono::DateTime<chrono::Utc>) {
    store
        .record_delivery(delivery(key, json!({"k": key})))
        .await
        .unwrap();
    let t0 = local_now();
    let first = store
        .claim_due("bitrix24", "w1", Duration::from_secs(5), t0)
        .await
        .unwrap()
        .unwrap();
    // Its create went out: a claim whose call never started is put back, not taken over.
    let first = Claim {
        lease: store
            .start_attempt(
                &first.lease,
                Duration::from_secs(5),
                Duration::ZERO,
                vec![],
                t0,
            )
            .await
            .unwrap(),
        ..first
    };
    let t1 = t0 + chrono::TimeDelta::seconds(6);
    let taken = store
        .claim_stale("bitrix24", "rec", LEASE, t1)
        .await
        .unwrap()
        .unwrap();
    (first, taken, t1)
}

/// Takes the operation through an uncertain attempt whose lease then ran out, a
/// takeover, a verify pass and a second create: the state in which the first holder's
/// answer may still arrive.
async fn taken_over_and_created_again(store: &dyn Store, key: &str) -> (Claim, Claim) {
    let (first, taken, t1) = claimed_then_taken_over(store, key).await;
    store
        .finish_attempt(
            &taken.lease,
            AttemptOutcome::Verify {
                failure: None,
                at: t1,
            },
            vec![],
            t1,
        )
        .await
        .unwrap();
    let second = store
        .claim_due("bitrix24", "w2", LEASE, t1)
        .await
        .unwrap()
        .unwrap();
    assert!(second.operation.verify_first);
    (first, second)
}

each_backend!(
    a_late_answer_with_another_id_opens_a_case_with_both_and_counts_both,
    |db| async move {
        let store = db.store().await;
        let (first, second) = taken_over_and_created_again(store.as_ref(), "two").await;
        let later = local_now() + chrono::TimeDelta::seconds(10);
        let done = store
            .finish_attempt(
                &second.lease,
                AttemptOutcome::Created { crm_id: "B".into() },
                vec![],
                later,
            )
            .await
            .unwrap();
        assert_eq!(done.crm_id.as_deref(), Some("B"));
        // The first holder's create answers now, with the entity it made.
        let err = store
            .finish_attempt(
                &first.lease,
                AttemptOutcome::Created { crm_id: "A".into() },
                vec![],
                later,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LeaseLost(_)), "{err}");
        let o = store.operation(&op("two")).await.unwrap().unwrap();
        assert_eq!(o.status, Status::Completed);
        assert!(o.version > done.version, "the version moved");
        let cases = store.cases_of(&op("two")).await.unwrap();
        assert_eq!(cases.len(), 1);
        assert_eq!(cases[0].reason, ReviewReason::AmbiguousMatch);
        assert_eq!(cases[0].detail["crm_ids"], json!(["B", "A"]));
        let m = store.metrics(later, LEASE).await.unwrap();
        assert_eq!(
            m.crm_entities_created, 2,
            "the CRM holds two: the metrics say two"
        );
        // No third create on top of two known ones.
        let refused = store
            .resolve(Resolve {
                case_id: cases[0].id,
                expected_version: cases[0].version,
                actor: "anna".into(),
                comment: None,
                action: HumanAction::AuthorizeRetry,
                now: later,
                bulk: None,
            })
            .await
            .unwrap_err();
        assert!(matches!(refused, StoreError::Refused(_)), "{refused}");
        // The person says which one stands; the count stays.
        let kept = store
            .resolve(Resolve {
                case_id: cases[0].id,
                expected_version: cases[0].version,
                actor: "anna".into(),
                comment: Some("A merged into B in the CRM".into()),
                action: HumanAction::ConfirmCrmResult { crm_id: "B".into() },
                now: later,
                bulk: None,
            })
            .await
            .unwrap();
        assert_eq!(kept.operation.crm_id.as_deref(), Some("B"));
        let m = store.metrics(later, LEASE).await.unwrap();
        assert_eq!(m.crm_entities_created, 2);
    }
);

each_backend!(
    a_late_answer_completes_an_operation_that_went_to_review_and_closes_its_case,
    |db| async move {
        let store = db.store().await;
        let (first, taken, t1) = claimed_then_taken_over(store.as_ref(), "rev").await;
        store
            .finish_attempt(
                &taken.lease,
                AttemptOutcome::Review {
                    reason: ReviewReason::UncertainOutcome,
                    failure: None,
                    detail: json!({}),
                },
                vec![],
                t1,
            )
            .await
            .unwrap();
        let err = store
            .finish_attempt(
                &first.lease,
                AttemptOutcome::Created {
                    crm_id: "77".into(),
                },
                vec![],
                t1,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LeaseLost(_)));
        let o = store.operation(&op("rev")).await.unwrap().unwrap();
        assert_eq!(
            (o.status, o.crm_id.as_deref()),
            (Status::Completed, Some("77"))
        );
        let cases = store.cases_of(&op("rev")).await.unwrap();
        assert_eq!(
            cases[0].resolution.as_deref(),
            Some("superseded"),
            "no case left open on a completed operation"
        );
        assert_eq!(
            store.metrics(t1, LEASE).await.unwrap().crm_entities_created,
            1
        );
    }
);

each_backend!(
    a_report_with_a_token_that_never_held_the_operation_writes_nothing,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("forged", json!({})))
            .await
            .unwrap();
        let c = store
            .claim_due("bitrix24", "w", LEASE, local_now())
            .await
            .unwrap()
            .unwrap();
        let before = store.timeline(&op("forged")).await.unwrap().len();
        let forged = Lease {
            token: "not-a-token-anyone-was-given".into(),
            ..c.lease.clone()
        };
        let err = store
            .finish_attempt(
                &forged,
                AttemptOutcome::Created { crm_id: "9".into() },
                vec![],
                local_now(),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::UnknownLease(_)), "{err}");
        let o = store.operation(&op("forged")).await.unwrap().unwrap();
        assert_eq!((o.status, o.crm_id), (Status::InProgress, None));
        assert_eq!(store.timeline(&op("forged")).await.unwrap().len(), before);
    }
);

each_backend!(
    a_report_repeated_after_its_commit_changes_nothing,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("twice", json!({})))
            .await
            .unwrap();
        let c = store
            .claim_due("bitrix24", "w", LEASE, local_now())
            .await
            .unwrap()
            .unwrap();
        let created = AttemptOutcome::Created { crm_id: "5".into() };
        let first = store
            .finish_attempt(&c.lease, created.clone(), vec![], local_now())
            .await
            .unwrap();
        let again = store
            .finish_attempt(&c.lease, created, vec![], local_now())
            .await
            .unwrap();
        assert_eq!(first.version, again.version);
        let t = store.timeline(&op("twice")).await.unwrap();
        assert_eq!(t.iter().filter(|e| e.kind == "crm_created").count(), 1);
        assert!(!t.iter().any(|e| e.kind == "late_outcome"));
    }
);

each_backend!(
    a_lease_that_ran_out_is_never_armed_for_a_call,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("arm", json!({})))
            .await
            .unwrap();
        let t0 = local_now();
        let c = store
            .claim_due("bitrix24", "w", Duration::from_secs(2), t0)
            .await
            .unwrap()
            .unwrap();
        let started = || {
            vec![NewEvent::new(
                leadgate::domain::EventKind::AttemptStarted,
                json!({}),
            )]
        };
        // In time: extended to cover the call.
        let t1 = t0 + chrono::TimeDelta::seconds(1);
        let armed = store
            .start_attempt(
                &c.lease,
                Duration::from_secs(11),
                Duration::from_secs(75),
                started(),
                t1,
            )
            .await
            .unwrap();
        assert_eq!(armed.expires_at, t1 + chrono::TimeDelta::seconds(11));
        let o = store.operation(&op("arm")).await.unwrap().unwrap();
        assert_eq!(o.lease_expires_at, Some(armed.expires_at));
        // Once the lease ran out the holder may not call, even though nobody took over.
        let late = armed.expires_at + chrono::TimeDelta::milliseconds(1);
        let err = store
            .start_attempt(
                &c.lease,
                Duration::from_secs(11),
                Duration::from_secs(75),
                started(),
                late,
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LeaseLost(_)), "{err}");
    }
);

each_backend!(
    an_uncertain_outcome_is_due_only_after_the_settle_window_and_verifies_first,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("settle", json!({})))
            .await
            .unwrap();
        let t0 = local_now();
        let c = store
            .claim_due("bitrix24", "w", LEASE, t0)
            .await
            .unwrap()
            .unwrap();
        let until = t0 + chrono::TimeDelta::seconds(75);
        store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::Verify {
                    failure: Some(Failure {
                        class: ErrorClass::Uncertain,
                        message: "timeout".into(),
                    }),
                    at: until,
                },
                vec![],
                t0,
            )
            .await
            .unwrap();
        let early = until - chrono::TimeDelta::seconds(1);
        assert!(store
            .claim_due("bitrix24", "w", LEASE, early)
            .await
            .unwrap()
            .is_none());
        let c = store
            .claim_due("bitrix24", "w", LEASE, until)
            .await
            .unwrap()
            .unwrap();
        assert!(
            c.operation.verify_first,
            "the worker looks the key up before creating"
        );
        let done = store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::Recovered { crm_id: "3".into() },
                vec![],
                until,
            )
            .await
            .unwrap();
        assert!(!done.verify_first);
    }
);

each_backend!(
    no_retry_or_review_on_top_of_a_live_attempt_or_a_purged_lead,
    |db| async move {
        let store = db.store().await;
        // A live lease: a person may not open a review case (and so not grant a retry).
        store
            .record_delivery(delivery("live", json!({"name": "x"})))
            .await
            .unwrap();
        let _c = store
            .claim_due("bitrix24", "w", LEASE, local_now())
            .await
            .unwrap()
            .unwrap();
        let err = store
            .open_review(
                &op("live"),
                ReviewReason::UncertainOutcome,
                "anna",
                json!({}),
                local_now(),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Refused(_)), "{err}");
        // A lead whose data retention removed: no retry (it would create an empty lead).
        store
            .record_delivery(delivery("gone", json!({"name": "y"})))
            .await
            .unwrap();
        let c = store
            .claim_due("bitrix24", "w", LEASE, local_now())
            .await
            .unwrap()
            .unwrap();
        let failure = Failure {
            class: ErrorClass::Validation,
            message: "bad phone".into(),
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
        let future = local_now() + chrono::TimeDelta::days(1);
        purge(store.as_ref(), future, 100).await.unwrap();
        let case_id = store
            .open_review(
                &op("gone"),
                ReviewReason::RetriesExhausted,
                "anna",
                json!({}),
                local_now(),
            )
            .await
            .unwrap();
        let case = store.case(case_id).await.unwrap().unwrap();
        let err = store
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
        assert!(err.to_string().contains("retention"), "{err}");
    }
);

/// A store whose next `finish_attempt` fails like a database hiccup: before the commit
/// (nothing written) or after it (written, but the answer lost on the way back).
struct Hiccup {
    inner: Arc<dyn Store>,
    before_commit: AtomicU32,
    after_commit: AtomicU32,
}

fn connection_reset() -> StoreError {
    StoreError::Database(DbError::new(DbFault::Io, None, "connection reset by peer"))
}

fn take(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
        .is_ok()
}

impl Clock for Hiccup {
    fn backend(&self) -> Backend {
        self.inner.backend()
    }

    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.inner.now()
    }

    fn tenant(&self) -> leadgate::domain::TenantId {
        self.inner.tenant()
    }
}

#[async_trait::async_trait]
impl Journal for Hiccup {
    async fn record_delivery(&self, delivery: NewDelivery) -> Result<DeliveryRecord> {
        self.inner.record_delivery(delivery).await
    }

    async fn record_rejected(&self, delivery: RejectedDelivery) -> Result<i64> {
        self.inner.record_rejected(delivery).await
    }

    async fn use_signature(
        &self,
        source: &str,
        signature_sha256: &str,
        operation_id: &str,
        expires_at: chrono::DateTime<chrono::Utc>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<String> {
        self.inner
            .use_signature(source, signature_sha256, operation_id, expires_at, now)
            .await
    }

    async fn quoted_before_the_draft(&self, id: &leadgate::domain::OperationId) -> Result<bool> {
        self.inner.quoted_before_the_draft(id).await
    }

    async fn use_content_key(
        &self,
        source: &str,
        content_sha256: &str,
        operation_id: &str,
        expires_at: chrono::DateTime<chrono::Utc>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<String> {
        self.inner
            .use_content_key(source, content_sha256, operation_id, expires_at, now)
            .await
    }
}

#[async_trait::async_trait]
impl WorkQueue for Hiccup {
    async fn finish_attempt(
        &self,
        lease: &Lease,
        outcome: AttemptOutcome,
        events: Vec<NewEvent>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Operation> {
        if take(&self.before_commit) {
            return Err(connection_reset());
        }
        let done = self.inner.finish_attempt(lease, outcome, events, now).await;
        if take(&self.after_commit) {
            return Err(connection_reset());
        }
        done
    }

    async fn record_step(
        &self,
        lease: &Lease,
        events: Vec<NewEvent>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner.record_step(lease, events, now).await
    }

    async fn take_contact_locks(
        &self,
        claim: &Claim,
        remember: std::time::Duration,
        wait: std::time::Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<ContactTurn> {
        self.inner
            .take_contact_locks(claim, remember, wait, now)
            .await
    }

    async fn leave_contact_locks(
        &self,
        lease: &Lease,
        how: ContactLeave,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner.leave_contact_locks(lease, how, now).await
    }

    async fn claim_due(
        &self,
        connector: &str,
        owner: &str,
        lease_for: std::time::Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<Claim>> {
        self.inner.claim_due(connector, owner, lease_for, now).await
    }

    async fn has_due(&self, connector: &str, now: chrono::DateTime<chrono::Utc>) -> Result<bool> {
        self.inner.has_due(connector, now).await
    }

    async fn claim_due_many(
        &self,
        connector: &str,
        owner: &str,
        lease_for: std::time::Duration,
        limit: usize,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<Claim>> {
        self.inner
            .claim_due_many(connector, owner, lease_for, limit, now)
            .await
    }

    async fn claim_stale(
        &self,
        connector: &str,
        owner: &str,
        lease_for: std::time::Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<Claim>> {
        self.inner
            .claim_stale(connector, owner, lease_for, now)
            .await
    }

    async fn start_attempt(
        &self,
        lease: &Lease,
        lease_for: std::time::Duration,
        settle: std::time::Duration,
        events: Vec<NewEvent>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Lease> {
        self.inner
            .start_attempt(lease, lease_for, settle, events, now)
            .await
    }

    async fn start_attempts(
        &self,
        leases: Vec<(Lease, Vec<NewEvent>)>,
        lease_for: std::time::Duration,
        settle: std::time::Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<Result<Lease>>> {
        self.inner
            .start_attempts(leases, lease_for, settle, now)
            .await
    }

    async fn connector_failed(
        &self,
        name: &str,
        config: &leadgate::domain::outage::OutageConfig,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<leadgate::domain::outage::Unreachable>> {
        self.inner.connector_failed(name, config, now).await
    }

    async fn connector_answered(
        &self,
        name: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool> {
        self.inner.connector_answered(name, now).await
    }

    async fn probe_gate(
        &self,
        name: &str,
        config: &leadgate::domain::outage::OutageConfig,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<leadgate::domain::outage::Gate> {
        self.inner.probe_gate(name, config, now).await
    }
}

#[async_trait::async_trait]
impl CrmAccess for Hiccup {
    async fn take_turn(
        &self,
        account: &str,
        pace: leadgate::domain::pacing::Pace,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<std::time::Duration> {
        self.inner.take_turn(account, pace, now).await
    }

    async fn hold_turns(
        &self,
        account: &str,
        pace: leadgate::domain::pacing::Pace,
        until: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner.hold_turns(account, pace, until).await
    }

    async fn crm_token(&self, connector: &str) -> Result<Option<CrmToken>> {
        self.inner.crm_token(connector).await
    }

    async fn save_crm_token(
        &self,
        connector: &str,
        token: &CrmToken,
        expected_version: Option<i64>,
    ) -> Result<bool> {
        self.inner
            .save_crm_token(connector, token, expected_version)
            .await
    }
}

#[async_trait::async_trait]
impl Review for Hiccup {
    async fn open_review(
        &self,
        operation_id: &OperationId,
        reason: ReviewReason,
        actor: &str,
        detail: Value,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<i64> {
        self.inner
            .open_review(operation_id, reason, actor, detail, now)
            .await
    }

    async fn resolve(&self, request: Resolve) -> Result<Resolved> {
        self.inner.resolve(request).await
    }

    async fn note(
        &self,
        id: &OperationId,
        actor: &str,
        event: NewEvent,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner.note(id, actor, event, now).await
    }

    async fn identity(&self) -> Result<Identity> {
        self.inner.identity().await
    }

    async fn ask(&self, ask: &Ask) -> Result<i64> {
        self.inner.ask(ask).await
    }

    async fn answer(&self, id: i64) -> Result<Option<Result<Answer>>> {
        self.inner.answer(id).await
    }

    async fn withdraw(&self, id: i64) -> Result<bool> {
        self.inner.withdraw(id).await
    }

    async fn perform(
        &self,
        actor: &str,
        ask: Ask,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Answer> {
        self.inner.perform(actor, ask, now).await
    }

    async fn apply_next_request(&self, now: chrono::DateTime<chrono::Utc>) -> Result<Option<i64>> {
        self.inner.apply_next_request(now).await
    }
}

#[async_trait::async_trait]
impl ClaimApi for Hiccup {
    async fn claim_external(&self, claim: ExternalClaim) -> Result<ExternalClaimOutcome> {
        self.inner.claim_external(claim).await
    }

    async fn expire_external_leases(&self, now: chrono::DateTime<chrono::Utc>) -> Result<u64> {
        self.inner.expire_external_leases(now).await
    }

    async fn take_due_redeliveries(
        &self,
        source: &str,
        actor: &str,
        now: chrono::DateTime<chrono::Utc>,
        resend_at: chrono::DateTime<chrono::Utc>,
        limit: i64,
    ) -> Result<Vec<leadgate::store::DueRedelivery>> {
        self.inner
            .take_due_redeliveries(source, actor, now, resend_at, limit)
            .await
    }
}

#[async_trait::async_trait]
impl Updates for Hiccup {
    async fn claim_update(
        &self,
        connector: &str,
        owner: &str,
        lease_for: std::time::Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<UpdateClaim>> {
        self.inner
            .claim_update(connector, owner, lease_for, now)
            .await
    }

    async fn start_update(
        &self,
        claim: &UpdateClaim,
        lease_for: std::time::Duration,
        settle: std::time::Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner.start_update(claim, lease_for, settle, now).await
    }

    async fn finish_update(
        &self,
        claim: &UpdateClaim,
        outcome: UpdateOutcome,
        events: Vec<NewEvent>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner.finish_update(claim, outcome, events, now).await
    }
}

#[async_trait::async_trait]
impl Alerts for Hiccup {
    // Team alerts
    async fn alert_turn(
        &self,
        channel: &str,
        owner: &str,
        lease_for: Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<leadgate::store::AlertTurn>> {
        self.inner.alert_turn(channel, owner, lease_for, now).await
    }

    async fn alert_arm(
        &self,
        channel: &str,
        token: &str,
        pending: Option<&leadgate::store::PendingAlert>,
        lease_for: Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner
            .alert_arm(channel, token, pending, lease_for, now)
            .await
    }

    async fn alert_done(
        &self,
        channel: &str,
        token: &str,
        outcome: leadgate::store::AlertOutcome,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner.alert_done(channel, token, outcome, now).await
    }

    async fn alert_release(&self, channel: &str, token: &str) -> Result<()> {
        self.inner.alert_release(channel, token).await
    }

    async fn alert_facts(
        &self,
        after_case: i64,
        cases_until: chrono::DateTime<chrono::Utc>,
        stale_before: chrono::DateTime<chrono::Utc>,
        review_before: chrono::DateTime<chrono::Utc>,
    ) -> Result<leadgate::store::AlertFacts> {
        self.inner
            .alert_facts(after_case, cases_until, stale_before, review_before)
            .await
    }
}

#[async_trait::async_trait]
impl Rules for Hiccup {
    async fn publish_crm_links(
        &self,
        links: &leadgate::store::CrmLinks,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner.publish_crm_links(links, now).await
    }

    async fn crm_links(&self) -> Result<Vec<leadgate::store::CrmLinks>> {
        self.inner.crm_links().await
    }

    async fn business_rules(&self) -> Result<Vec<leadgate::store::StoredRules>> {
        self.inner.business_rules().await
    }

    async fn rules_version(&self) -> Result<i64> {
        self.inner.rules_version().await
    }

    async fn rules_history(
        &self,
        source: Option<&str>,
        limit: i64,
    ) -> Result<Vec<leadgate::store::RuleChange>> {
        self.inner.rules_history(source, limit).await
    }

    async fn seed_rules(
        &self,
        seeds: &[leadgate::store::SourceRules],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<String>> {
        self.inner.seed_rules(seeds, now).await
    }
}

#[async_trait::async_trait]
impl Reads for Hiccup {
    async fn states_of(&self, ids: &[String]) -> Result<Vec<OperationState>> {
        self.inner.states_of(ids).await
    }

    async fn lookup(
        &self,
        phone: Option<&str>,
        text: Option<&str>,
        limit: i64,
    ) -> Result<Vec<LookupHit>> {
        self.inner.lookup(phone, text, limit).await
    }

    async fn operation(&self, id: &OperationId) -> Result<Option<Operation>> {
        self.inner.operation(id).await
    }

    async fn tenant_operations(&self, after: Option<&str>, limit: i64) -> Result<Vec<Operation>> {
        self.inner.tenant_operations(after, limit).await
    }

    async fn operations(&self, ids: &[OperationId]) -> Result<Vec<Operation>> {
        self.inner.operations(ids).await
    }

    async fn diagnoses(&self, limit: i64) -> Result<Vec<leadgate::store::DiagnosisSummary>> {
        self.inner.diagnoses(limit).await
    }

    async fn diagnosis(
        &self,
        id: i64,
    ) -> Result<Option<(leadgate::store::DiagnosisSummary, serde_json::Value)>> {
        self.inner.diagnosis(id).await
    }

    async fn timeline(&self, id: &OperationId) -> Result<Vec<TimelineEvent>> {
        self.inner.timeline(id).await
    }

    async fn timeline_page(
        &self,
        id: &OperationId,
        before: Option<i64>,
        limit: i64,
    ) -> Result<leadgate::store::TimelinePage> {
        self.inner.timeline_page(id, before, limit).await
    }

    async fn timeline_of_kind(
        &self,
        id: &OperationId,
        kind: &str,
        limit: i64,
    ) -> Result<Vec<TimelineEvent>> {
        self.inner.timeline_of_kind(id, kind, limit).await
    }

    async fn cases_of(&self, id: &OperationId) -> Result<Vec<ReviewCase>> {
        self.inner.cases_of(id).await
    }

    async fn case(&self, case_id: i64) -> Result<Option<ReviewCase>> {
        self.inner.case(case_id).await
    }

    async fn review_cases(&self, filter: &CaseFilter, page: Page) -> Result<Vec<ReviewCase>> {
        self.inner.review_cases(filter, page).await
    }

    async fn operations_with_status(
        &self,
        status: Status,
        page: OperationPage,
    ) -> Result<Vec<Operation>> {
        self.inner.operations_with_status(status, page).await
    }

    async fn link_candidates(&self, id: &OperationId, limit: i64) -> Result<Vec<Operation>> {
        self.inner.link_candidates(id, limit).await
    }

    async fn delivery(&self, delivery_id: i64) -> Result<Option<DeliveryView>> {
        self.inner.delivery(delivery_id).await
    }

    async fn schema_version(&self) -> Result<Option<i64>> {
        self.inner.schema_version().await
    }

    // Search

    async fn search(
        &self,
        query: &SearchQuery,
        after: Option<&SearchCursor>,
        limit: i64,
        plan: SearchPlan,
    ) -> Result<SearchPage> {
        self.inner.search(query, after, limit, plan).await
    }
}

#[async_trait::async_trait]
impl Dashboard for Hiccup {
    async fn case_counts(&self) -> Result<BTreeMap<ReviewReason, i64>> {
        self.inner.case_counts().await
    }

    async fn queue_counts(
        &self,
        lease_expired_before: chrono::DateTime<chrono::Utc>,
    ) -> Result<QueueCounts> {
        self.inner.queue_counts(lease_expired_before).await
    }

    async fn series(
        &self,
        from: chrono::DateTime<chrono::Utc>,
        to: chrono::DateTime<chrono::Utc>,
        buckets: u32,
    ) -> Result<Vec<SeriesPoint>> {
        self.inner.series(from, to, buckets).await
    }

    async fn stale_in_progress(
        &self,
        lease_expired_before: chrono::DateTime<chrono::Utc>,
        page: OperationPage,
    ) -> Result<Vec<Operation>> {
        self.inner
            .stale_in_progress(lease_expired_before, page)
            .await
    }

    async fn connector(&self, name: &str) -> Result<Option<Connector>> {
        self.inner.connector(name).await
    }

    async fn connectors(&self) -> Result<Vec<Connector>> {
        self.inner.connectors().await
    }

    async fn metrics(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        stale_after: std::time::Duration,
    ) -> Result<MetricsSnapshot> {
        self.inner.metrics(now, stale_after).await
    }
    async fn fleet_metrics(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        stale_after: std::time::Duration,
    ) -> Result<Vec<leadgate::store::TenantMetrics>> {
        self.inner.fleet_metrics(now, stale_after).await
    }
}

#[async_trait::async_trait]
impl SignIns for Hiccup {
    async fn record_sign_in(&self, attempt: &SignInAttempt) -> Result<()> {
        self.inner.record_sign_in(attempt).await
    }

    async fn sign_ins(&self, login: Option<&str>, limit: i64) -> Result<Vec<SignInAttempt>> {
        self.inner.sign_ins(login, limit).await
    }

    async fn forget_sign_ins(&self, before: chrono::DateTime<chrono::Utc>) -> Result<u64> {
        self.inner.forget_sign_ins(before).await
    }
}

#[async_trait::async_trait]
impl Upkeep for Hiccup {
    async fn beat(
        &self,
        owner: &str,
        kind: &str,
        started_at: chrono::DateTime<chrono::Utc>,
        now: chrono::DateTime<chrono::Utc>,
        spooled: leadgate::store::Spooled,
    ) -> Result<()> {
        self.inner.beat(owner, kind, started_at, now, spooled).await
    }

    async fn beats(&self) -> Result<leadgate::store::Beats> {
        self.inner.beats().await
    }

    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }

    async fn pull_mark(&self, source: &str) -> Result<Option<String>> {
        self.inner.pull_mark(source).await
    }

    async fn save_pull_mark(
        &self,
        source: &str,
        mark: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner.save_pull_mark(source, mark, now).await
    }

    async fn save_diagnosis(&self, d: &leadgate::store::NewDiagnosis) -> Result<i64> {
        self.inner.save_diagnosis(d).await
    }

    async fn compact_metrics(&self, before: chrono::DateTime<chrono::Utc>) -> Result<u64> {
        self.inner.compact_metrics(before).await
    }

    async fn pause_connector(
        &self,
        name: &str,
        reason: &str,
        actor: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner.pause_connector(name, reason, actor, now).await
    }

    async fn resume_connector(
        &self,
        name: &str,
        actor: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool> {
        self.inner.resume_connector(name, actor, now).await
    }

    async fn forget_requests(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        scope: Option<leadgate::domain::TenantId>,
    ) -> Result<u64> {
        self.inner.forget_requests(before, scope).await
    }

    async fn forget_feed_owed(&self, before: chrono::DateTime<chrono::Utc>) -> Result<u64> {
        self.inner.forget_feed_owed(before).await
    }

    async fn purge_batch(
        &self,
        finished_before: chrono::DateTime<chrono::Utc>,
        batch: i64,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<PurgeReport> {
        self.inner.purge_batch(finished_before, batch, now).await
    }

    async fn purge_tenant_batch(
        &self,
        finished_before: Option<chrono::DateTime<chrono::Utc>>,
        batch: i64,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<PurgeReport> {
        self.inner
            .purge_tenant_batch(finished_before, batch, now)
            .await
    }
}

each_backend!(
    a_database_hiccup_while_recording_the_answer_keeps_the_known_crm_id,
    |db| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let inner = db.store().await;
        let store: Arc<dyn Store> = Arc::new(Hiccup {
            inner: inner.clone(),
            before_commit: AtomicU32::new(2),
            after_commit: AtomicU32::new(1),
        });
        let worker = direct_worker(
            store,
            &fake,
            Duration::from_secs(5),
            Duration::from_secs(2),
            Duration::from_secs(3),
        );
        inner
            .record_delivery(delivery("hiccup", json!({"name": "Ivan"})))
            .await
            .unwrap();
        // Two failures before the commit, then one commit whose answer is lost.
        assert!(worker.step().await.unwrap());
        let o = inner.operation(&op("hiccup")).await.unwrap().unwrap();
        assert_eq!(o.status, Status::Completed);
        assert_eq!(
            o.crm_link.as_deref(),
            Some("created"),
            "known from the answer, not a lookup"
        );
        assert_eq!(fake.calls(CREATE), 1);
        assert_eq!(fake.calls(LIST), 0, "no lookup was needed");
        assert!(inner.cases_of(&op("hiccup")).await.unwrap().is_empty());
        let t = inner.timeline(&op("hiccup")).await.unwrap();
        assert_eq!(t.iter().filter(|e| e.kind == "crm_created").count(), 1);
        assert!(
            !t.iter().any(|e| e.kind == "late_outcome"),
            "the repeat was recognised"
        );
    }
);

/// The same hiccup from the real server: PostgreSQL aborts the transaction that records
/// the answer with a serialization failure (`40001`), once, forced by a trigger. SQLite
/// has one writer and no such abort; the wrapper test above covers both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_serialization_failure_on_the_outcome_commit_is_retried() {
    leadgate_testkit::run(leadgate_testkit::Backend::Postgres, |db| async move {
        let gw = Gateway::start(&db).await;
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&db.url)
            .await
            .unwrap();
        sqlx::raw_sql(
            "create sequence fail_once;
             create function fail_once() returns trigger language plpgsql as $$
             begin
                 if new.status = 'completed' and nextval('fail_once') = 1 then
                     raise exception 'forced by the test' using errcode = '40001';
                 end if;
                 return new;
             end $$;
             create trigger fail_once before update on operations
                 for each row execute function fail_once();",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        gw.post_json("site", &lead("serial")).await;
        let o = completed(&gw, "site:serial", Duration::from_secs(10)).await;
        assert_eq!(o["attempts"], 1);
        let fired: i64 = sqlx::query_scalar("select last_value from fail_once")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert!(
            fired >= 2,
            "the failure was forced and the commit tried again"
        );
        let op = gw.store().operation(&op("serial")).await.unwrap().unwrap();
        assert_eq!(op.crm_link.as_deref(), Some("created"));
        assert_eq!(gw.fake.calls(CREATE), 1);
        assert_eq!(
            gw.fake.calls(LIST),
            0,
            "the answer was kept, no lookup needed"
        );
        gw.stop().await;
    })
    .await;
}

each_backend!(
    a_granted_retry_waits_for_the_settle_window_of_the_last_call,
    |db| async move {
        // A worker started a create, then its process died and nobody took the operation
        // over (its connector was paused). A person opens a case and grants one retry:
        // the call may still land until the lease's end plus the settle window, so the
        // granted attempt is not due before then, and it looks the key up first.
        let store = db.store().await;
        store
            .record_delivery(delivery("grant", json!({"name": "x"})))
            .await
            .unwrap();
        let t0 = local_now();
        let c = store
            .claim_due("bitrix24", "w", Duration::from_secs(5), t0)
            .await
            .unwrap()
            .unwrap();
        let armed = store
            .start_attempt(
                &c.lease,
                Duration::from_secs(5),
                Duration::from_secs(60),
                vec![],
                t0,
            )
            .await
            .unwrap();
        let quiet = armed.expires_at + chrono::TimeDelta::seconds(60);
        let t1 = t0 + chrono::TimeDelta::seconds(10);
        let case_id = store
            .open_review(
                &op("grant"),
                ReviewReason::UncertainOutcome,
                "anna",
                json!({}),
                t1,
            )
            .await
            .unwrap();
        let case = store.case(case_id).await.unwrap().unwrap();
        let r = store
            .resolve(Resolve {
                case_id,
                expected_version: case.version,
                actor: "anna".into(),
                comment: None,
                action: HumanAction::AuthorizeRetry,
                now: t1,
                bulk: None,
            })
            .await
            .unwrap();
        assert_eq!(r.operation.next_attempt_at, Some(quiet));
        assert!(r.operation.verify_first);
        let early = quiet - chrono::TimeDelta::seconds(1);
        assert!(store
            .claim_due("bitrix24", "w", LEASE, early)
            .await
            .unwrap()
            .is_none());
        let c = store
            .claim_due("bitrix24", "w", LEASE, quiet)
            .await
            .unwrap()
            .unwrap();
        assert!(c.granted && c.operation.verify_first);
    }
);

each_backend!(
    an_id_reported_after_a_failure_under_the_same_token_is_kept,
    |db| async move {
        // An integration reports `fail` (uncertain), then learns the id and reports it
        // with the same token: the id is not dropped.
        let store = db.store().await;
        store
            .record_delivery(delivery("then", json!({})))
            .await
            .unwrap();
        let c = store
            .claim_due("bitrix24", "n8n", LEASE, local_now())
            .await
            .unwrap()
            .unwrap();
        store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::Review {
                    reason: ReviewReason::UncertainOutcome,
                    failure: None,
                    detail: json!({}),
                },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        let o = store
            .finish_attempt(
                &c.lease,
                AttemptOutcome::Created {
                    crm_id: "42".into(),
                },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        assert_eq!(
            (o.status, o.crm_id.as_deref()),
            (Status::Completed, Some("42"))
        );
        let cases = store.cases_of(&op("then")).await.unwrap();
        assert_eq!(cases[0].resolution.as_deref(), Some("superseded"));
        assert_eq!(
            store
                .metrics(local_now(), LEASE)
                .await
                .unwrap()
                .crm_entities_created,
            1
        );
    }
);

#[async_trait::async_trait]
impl leadgate::store::Feed for Hiccup {
    async fn feed_subscribe(
        &self,
        url: &str,
        secret: &leadgate::domain::Secret,
        events: &[String],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<i64> {
        self.inner.feed_subscribe(url, secret, events, now).await
    }

    async fn feed_subscribers(&self) -> Result<Vec<leadgate::store::FeedSubscriber>> {
        self.inner.feed_subscribers().await
    }

    async fn feed_remove(&self, id: i64) -> Result<bool> {
        self.inner.feed_remove(id).await
    }

    async fn feed_enable(&self, id: i64) -> Result<bool> {
        self.inner.feed_enable(id).await
    }

    async fn feed_attempts(
        &self,
        id: i64,
        limit: i64,
    ) -> Result<Vec<leadgate::store::FeedAttempt>> {
        self.inner.feed_attempts(id, limit).await
    }

    async fn feed_due(&self, now: chrono::DateTime<chrono::Utc>) -> Result<Vec<i64>> {
        self.inner.feed_due(now).await
    }

    async fn feed_turn(
        &self,
        id: i64,
        owner: &str,
        lease_for: Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<leadgate::store::FeedTurn>> {
        self.inner.feed_turn(id, owner, lease_for, now).await
    }

    async fn feed_done(
        &self,
        id: i64,
        token: &str,
        event_seq: i64,
        outcome: &leadgate::store::FeedOutcome,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner
            .feed_done(id, token, event_seq, outcome, now)
            .await
    }
}

#[async_trait::async_trait]
impl leadgate::store::Tenants for Hiccup {
    /// Another tenant's view of the store, without this one's faults.
    fn for_tenant(&self, tenant: leadgate::domain::TenantId) -> Arc<dyn Store> {
        Arc::new(Hiccup {
            inner: self.inner.for_tenant(tenant),
            before_commit: AtomicU32::new(0),
            after_commit: AtomicU32::new(0),
        })
    }

    async fn tenants(&self) -> Result<Vec<leadgate::store::Tenant>> {
        self.inner.tenants().await
    }

    async fn my_tenants(&self) -> Result<Vec<leadgate::store::TenantChoice>> {
        self.inner.my_tenants().await
    }

    async fn tenant_specs(&self) -> Result<Vec<(String, String)>> {
        self.inner.tenant_specs().await
    }

    async fn tenants_with_work(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<leadgate::store::TenantWork>> {
        self.inner.tenants_with_work(now).await
    }

    async fn apply_tenants(
        &self,
        changes: &[leadgate::store::TenantChange],
        actor: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<()> {
        self.inner.apply_tenants(changes, actor, now).await
    }

    async fn set_tenant_state(
        &self,
        slug: &str,
        state: leadgate::store::TenantState,
        reason: Option<&str>,
        actor: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool> {
        self.inner
            .set_tenant_state(slug, state, reason, actor, now)
            .await
    }
}
