//! Interleavings of concurrent store calls that the rest of the suite never forces
//! (issue 11), and the rules that keep review cases and retention whole.
//!
//! A race that needs two writers at once is forced on PostgreSQL: a *gate* (an advisory
//! lock held by the test's own connection) stops one transaction at a chosen statement
//! through a trigger created in the test's database, the other call runs, then the gate
//! opens. SQLite has one writer: every store call is one `BEGIN IMMEDIATE` transaction
//! holding the database's write lock from its first statement, so nothing can commit in
//! between; those races are impossible there and the forced tests run on PostgreSQL
//! only. Rules that hold without a race run on both backends.

use std::future::Future;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};

use leadgate::domain::{ErrorClass, MatchRule, OperationId, ReviewReason, Status};
use leadgate::store::{self, *};

use leadgate_testkit::each_backend;
use leadgate_testkit::seed::delivery;
use leadgate_testkit::{run, Backend, TestDb};

const LEASE: Duration = Duration::from_secs(30);
const CRM: &str = "bitrix24";

fn op(key: &str) -> OperationId {
    OperationId::new("site", key).unwrap()
}

fn ext(key: &str) -> OperationId {
    OperationId::new("n8n", key).unwrap()
}

fn n8n_delivery(key: &str, payload: Value) -> NewDelivery {
    let mut d = delivery(key, payload);
    d.operation_id = ext(key);
    d.source = "n8n".into();
    d
}

async fn claim_ext(
    store: &dyn Store,
    key: &str,
    payload: Value,
    lease_for: Duration,
) -> ExternalClaimOutcome {
    store
        .claim_external(ExternalClaim {
            delivery: n8n_delivery(key, payload),
            owner: "claim_api".into(),
            lease_for,
            connector: "n8n".into(),
        })
        .await
        .unwrap()
}

async fn claimed_ext(store: &dyn Store, key: &str, lease_for: Duration) -> Lease {
    match claim_ext(store, key, json!({"k": key}), lease_for).await {
        ExternalClaimOutcome::Claimed { lease, .. } => lease,
        other => panic!("{key}: {other:?}"),
    }
}

/// A report through the claim API's eyes: only the token is known.
fn reported(id: &OperationId, token: &str) -> Lease {
    Lease {
        operation_id: id.clone(),
        token: token.into(),
        owner: "claim_api".into(),
        expires_at: local_now(),
    }
}

async fn complete(store: &dyn Store, key: &str) {
    store
        .record_delivery(delivery(key, json!({"k": key})))
        .await
        .unwrap();
    let c = store
        .claim_due(CRM, "w", LEASE, local_now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.operation.operation_id, op(key));
    store
        .finish_attempt(
            &c.lease,
            AttemptOutcome::Created {
                crm_id: format!("crm-{key}"),
            },
            vec![],
            local_now(),
        )
        .await
        .unwrap();
}

async fn decide(store: &dyn Store, case_id: i64, action: HumanAction) -> Result<Resolved> {
    let case = store.case(case_id).await.unwrap().unwrap();
    store
        .resolve(Resolve {
            case_id,
            expected_version: case.version,
            actor: "anna".into(),
            // A reject needs its reason (rules::needs_comment).
            comment: Some("checked by anna".into()),
            action,
            now: local_now(),
            bulk: None,
        })
        .await
}

fn open_cases(cases: &[ReviewCase]) -> Vec<&ReviewCase> {
    cases.iter().filter(|c| c.resolved_at.is_none()).collect()
}

fn kinds(timeline: &[TimelineEvent]) -> Vec<&str> {
    timeline.iter().map(|e| e.kind.as_str()).collect()
}

fn a_day_ahead() -> chrono::DateTime<chrono::Utc> {
    local_now() + chrono::TimeDelta::days(1)
}

/// Runs `sql` on a connection of the test's own and returns the one integer it selects.
async fn raw_count(db: &TestDb, sql: &str) -> i64 {
    match db.backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap()
        }
        Backend::Postgres => {
            let mut c = PgConnection::connect(&db.url).await.unwrap();
            sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap()
        }
    }
}

async fn postgres_only<F, Fut>(test: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()>,
{
    run(Backend::Postgres, test).await
}

/// A connection that watches the test database's lock waits.
pub(crate) struct Monitor(PgConnection);

impl Monitor {
    pub(crate) async fn new(db: &TestDb) -> Monitor {
        Monitor(PgConnection::connect(&db.url).await.unwrap())
    }

    async fn exec(&mut self, sql: &str) {
        sqlx::query(sql).execute(&mut self.0).await.unwrap();
    }

    /// Backends of this database waiting for a lock (a row, a transaction, an advisory
    /// lock).
    pub(crate) async fn lock_waiters(&mut self) -> i64 {
        sqlx::query_scalar(
            "select count(*) from pg_stat_activity where datname = current_database() \
             and wait_event_type = 'Lock'",
        )
        .fetch_one(&mut self.0)
        .await
        .unwrap()
    }

    /// Waits until `task` is finished or one more backend than `before` waits for a
    /// lock: after the fix a call may not block at all where the old code would have.
    pub(crate) async fn blocked_or_done<T>(
        &mut self,
        task: &tokio::task::JoinHandle<T>,
        before: i64,
    ) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !task.is_finished() && self.lock_waiters().await <= before {
            assert!(
                tokio::time::Instant::now() < deadline,
                "neither blocked nor done"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// An advisory lock held by the test: a trigger `execute function lg_test_gate('<key>')`
/// waits at it until the gate opens.
struct Gate {
    monitor: Monitor,
    key: i64,
}

impl Gate {
    async fn close(db: &TestDb, key: i64) -> Gate {
        let mut monitor = Monitor::new(db).await;
        monitor
            .exec(
                "create or replace function lg_test_gate() returns trigger language plpgsql as $$ \
                 begin perform pg_advisory_xact_lock_shared(tg_argv[0]::bigint); return new; end $$",
            )
            .await;
        sqlx::query("select pg_advisory_lock($1)")
            .bind(key)
            .execute(&mut monitor.0)
            .await
            .unwrap();
        Gate { monitor, key }
    }

    async fn exec(&mut self, sql: &str) {
        self.monitor.exec(sql).await
    }

    /// Waits until a transaction stands at the gate.
    async fn reached(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let n: i64 = sqlx::query_scalar(
                "select count(*) from pg_locks where locktype = 'advisory' and not granted \
                 and objid::bigint = $1 and database = (select oid from pg_database \
                 where datname = current_database())",
            )
            .bind(self.key)
            .fetch_one(&mut self.monitor.0)
            .await
            .unwrap();
            if n > 0 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "nobody reached the gate"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn open(mut self) {
        sqlx::query("select pg_advisory_unlock($1)")
            .bind(self.key)
            .execute(&mut self.monitor.0)
            .await
            .unwrap();
    }
}

// ---- 1. Retention against a conflict that arrives during the batch ----------------

/// PostgreSQL only: on SQLite the purge batch is one `BEGIN IMMEDIATE` transaction, so no
/// delivery can commit between its pick and its scrub.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purge_leaves_an_operation_whose_case_opened_during_the_batch() {
    postgres_only(|db| async move {
        let store = db.store().await;
        complete(&*store, "a").await;
        complete(&*store, "b").await;
        // The batch picks a and b; it stops while scrubbing a.
        let mut gate = Gate::close(&db, 11).await;
        gate.exec(
            "create trigger gate before update of purged_at on operations for each row \
             when (old.operation_id = 'site:a') execute function lg_test_gate('11')",
        )
        .await;
        let purge = tokio::spawn({
            let store = store.clone();
            async move { store::purge(store.as_ref(), a_day_ahead(), 10).await }
        });
        gate.reached().await;
        // Meanwhile a conflicting delivery for b opens a payload-conflict case.
        let before = gate.monitor.lock_waiters().await;
        let changed = json!({"k": "b", "phone": "+79990000000"});
        let conflict = tokio::spawn({
            let store = store.clone();
            let d = delivery("b", changed.clone());
            async move { store.record_delivery(d).await }
        });
        gate.monitor.blocked_or_done(&conflict, before).await;
        gate.open().await;
        purge.await.unwrap().unwrap();
        let record = conflict.await.unwrap().unwrap();
        let DeliveryOutcome::Conflict { case_id, .. } = record.outcome else {
            panic!("{:?}", record.outcome)
        };
        let kept = store.delivery(record.delivery_id).await.unwrap().unwrap();
        assert_eq!(
            kept.payload,
            Some(changed.clone()),
            "the purge scrubbed the delivery of an open payload-conflict case"
        );
        let accepted = decide(&*store, case_id, HumanAction::AcceptAsNew)
            .await
            .expect("accept as new still has the new data");
        let new_op = store
            .operation(&accepted.new_operation.unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(new_op.payload, Some(changed));
    })
    .await
}

// ---- 2. Expiring claim-API leases ---------------------------------------------------

/// PostgreSQL only (SQLite: the expiry batch is one writer transaction).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expiry_does_not_open_a_case_on_an_operation_completed_meanwhile() {
    postgres_only(|db| async move {
        let store = db.store().await;
        let _a = claimed_ext(&*store, "a", Duration::from_millis(1)).await;
        let b = claimed_ext(&*store, "b", Duration::from_millis(1)).await;
        // Both leases ran out; the expiry stops while opening a's case.
        let mut gate = Gate::close(&db, 21).await;
        gate.exec(
            "create trigger gate before insert on review_cases for each row \
             when (new.operation_id = 'n8n:a') execute function lg_test_gate('21')",
        )
        .await;
        let expiry = tokio::spawn({
            let store = store.clone();
            async move {
                let later = local_now() + chrono::TimeDelta::seconds(1);
                store.expire_external_leases(later).await
            }
        });
        gate.reached().await;
        // The late `complete` for b lands in between (its token still holds).
        let done = store
            .finish_attempt(
                &b,
                AttemptOutcome::Created {
                    crm_id: "77".into(),
                },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        assert_eq!(done.status, Status::Completed);
        gate.open().await;
        expiry.await.unwrap().unwrap();
        let b_op = store.operation(&ext("b")).await.unwrap().unwrap();
        assert_eq!(b_op.status, Status::Completed);
        let cases = store.cases_of(&ext("b")).await.unwrap();
        assert!(
            open_cases(&cases).is_empty(),
            "a completed operation got an open case: {cases:?}"
        );
        assert_eq!(store.cases_of(&ext("a")).await.unwrap().len(), 1);
    })
    .await
}

/// PostgreSQL only: two processes' expiry loops (SQLite serialises them whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_expiry_loops_open_one_case() {
    postgres_only(|db| async move {
        let first = db.store().await;
        let second = db.store().await; // another process: a pool of its own
        claimed_ext(&*first, "a", Duration::from_millis(1)).await;
        let mut gate = Gate::close(&db, 22).await;
        gate.exec(
            "create trigger gate before insert on review_cases for each row \
             when (new.operation_id = 'n8n:a') execute function lg_test_gate('22')",
        )
        .await;
        let later = local_now() + chrono::TimeDelta::seconds(1);
        let one = tokio::spawn({
            let store = first.clone();
            async move { store.expire_external_leases(later).await }
        });
        gate.reached().await;
        let before = gate.monitor.lock_waiters().await;
        let two = tokio::spawn({
            let store = second.clone();
            async move { store.expire_external_leases(later).await }
        });
        gate.monitor.blocked_or_done(&two, before).await;
        gate.open().await;
        let n = one.await.unwrap().unwrap() + two.await.unwrap().unwrap();
        assert_eq!(n, 1, "one lease ran out, one expiry");
        let cases = first.cases_of(&ext("a")).await.unwrap();
        assert_eq!(cases.len(), 1, "{cases:?}");
        let timeline = first.timeline(&ext("a")).await.unwrap();
        let opened = kinds(&timeline)
            .iter()
            .filter(|k| k.starts_with("review_"))
            .count();
        assert_eq!(opened, 1, "{:?}", kinds(&timeline));
    })
    .await
}

// ---- 3. At most one open non-conflict case per operation ----------------------------

each_backend!(
    an_uncertain_report_after_the_lease_expired_joins_the_open_case,
    |db| async move {
        let store = db.store().await;
        let lease = claimed_ext(&*store, "x", Duration::from_millis(1)).await;
        let later = local_now() + chrono::TimeDelta::seconds(1);
        assert_eq!(store.expire_external_leases(later).await.unwrap(), 1);
        // n8n reports `fail` / uncertain under the token it still holds.
        let o = store
            .finish_attempt(
                &lease,
                AttemptOutcome::Review {
                    reason: ReviewReason::UncertainOutcome,
                    failure: Some(Failure {
                        class: ErrorClass::Uncertain,
                        message: "timeout".into(),
                    }),
                    detail: json!({"reported_by": "claim_api"}),
                },
                vec![],
                later,
            )
            .await
            .unwrap();
        assert_eq!(o.status, Status::NeedsReview);
        let cases = store.cases_of(&ext("x")).await.unwrap();
        assert_eq!(cases.len(), 1, "a second open case: {cases:?}");
        let timeline = store.timeline(&ext("x")).await.unwrap();
        assert!(
            kinds(&timeline).contains(&"review_noted"),
            "{:?}",
            kinds(&timeline)
        );
        let done = decide(
            &*store,
            cases[0].id,
            HumanAction::ConfirmCrmResult {
                crm_id: "501".into(),
            },
        )
        .await
        .unwrap();
        assert_eq!(done.operation.status, Status::Completed);
        assert!(open_cases(&store.cases_of(&ext("x")).await.unwrap()).is_empty());
    }
);

each_backend!(
    settling_an_operation_supersedes_its_other_open_case,
    |db| async move {
        let store = db.store().await;
        claimed_ext(&*store, "y", Duration::from_millis(1)).await;
        let later = local_now() + chrono::TimeDelta::seconds(1);
        assert_eq!(store.expire_external_leases(later).await.unwrap(), 1);
        // A changed payload under the same key: a payload conflict besides.
        let conflict = claim_ext(&*store, "y", json!({"k": "changed"}), LEASE).await;
        assert_eq!(conflict, ExternalClaimOutcome::Conflict);
        let cases = store.cases_of(&ext("y")).await.unwrap();
        let [uncertain, conflict] = &cases[..] else {
            panic!("{cases:?}")
        };
        assert_eq!(uncertain.reason, ReviewReason::UncertainOutcome);
        assert_eq!(conflict.reason, ReviewReason::PayloadConflict);
        // The person found the lead in the CRM and says so on the conflict case.
        let done = decide(
            &*store,
            conflict.id,
            HumanAction::ConfirmCrmResult {
                crm_id: "601".into(),
            },
        )
        .await
        .unwrap();
        assert_eq!(done.operation.status, Status::Completed);
        let after = store.case(uncertain.id).await.unwrap().unwrap();
        assert_eq!(
            (after.resolution.as_deref(), after.resolved_by.as_deref()),
            (Some("superseded"), Some("anna")),
            "the uncertain case is stranded open: {after:?}"
        );
        let timeline = store.timeline(&ext("y")).await.unwrap();
        let superseded = timeline
            .iter()
            .find(|e| e.kind == "review_superseded")
            .expect("the timeline says which case superseded it");
        assert_eq!(superseded.detail["case_id"], uncertain.id);
        assert_eq!(superseded.detail["by_case"], conflict.id);
        assert!(open_cases(&store.cases_of(&ext("y")).await.unwrap()).is_empty());
    }
);

// ---- 4. Metric counters and intake retries -----------------------------------------

/// PostgreSQL only (SQLite keeps one shard and one writer). Two connections stepped by
/// hand in the store's statement order: a conflict on a `received` operation and a new
/// intake. Before migration 0006 both wrote the same counter shard (pid % 16) and locked
/// its rows in opposite orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_conflict_and_a_new_intake_do_not_deadlock_on_the_counters() {
    postgres_only(|db| async move {
        let store = db.store().await;
        store
            .record_delivery(delivery("x", json!({"v": 1})))
            .await
            .unwrap();
        // Two connections that shared a shard under the old scheme.
        let mut pool = vec![];
        let (mut a, mut b) = loop {
            let mut c = PgConnection::connect(&db.url).await.unwrap();
            let pid: i32 = sqlx::query_scalar("select pg_backend_pid()")
                .fetch_one(&mut c)
                .await
                .unwrap();
            if let Some(i) = pool.iter().position(|(p, _)| p % 16 == pid % 16) {
                break (pool.remove(i).1, c);
            }
            pool.push((pid, c));
        };
        let mut monitor = Monitor::new(&db).await;
        sqlx::query("begin").execute(&mut a).await.unwrap();
        sqlx::query(
            "insert into deliveries (source, operation_id, received_at, payload_hash, outcome, \
             transform_version) values ('site', 'site:x', now(), 'h2', 'conflict', 1)",
        )
        .execute(&mut a)
        .await
        .unwrap();
        sqlx::query("begin").execute(&mut b).await.unwrap();
        sqlx::query(
            "insert into operations (operation_id, source, status, payload_hash, \
             next_attempt_at, created_at, updated_at) \
             values ('site:y', 'site', 'received', 'h', now(), now(), now())",
        )
        .execute(&mut b)
        .await
        .unwrap();
        let before = monitor.lock_waiters().await;
        let new_intake = tokio::spawn(async move {
            sqlx::query(
                "insert into deliveries (source, operation_id, received_at, payload_hash, \
                 outcome, transform_version) values ('site', 'site:y', now(), 'h', 'new', 1)",
            )
            .execute(&mut b)
            .await?;
            sqlx::query("commit").execute(&mut b).await.map(|_| ())
        });
        monitor.blocked_or_done(&new_intake, before).await;
        let conflict = tokio::spawn(async move {
            sqlx::query(
                "update operations set status = 'needs_review' where operation_id = 'site:x'",
            )
            .execute(&mut a)
            .await?;
            sqlx::query("commit").execute(&mut a).await.map(|_| ())
        });
        let (n, c) = tokio::time::timeout(Duration::from_secs(20), async {
            (new_intake.await.unwrap(), conflict.await.unwrap())
        })
        .await
        .expect("both transactions finish");
        n.expect("the new intake commits");
        c.expect("the conflict commits");
        let m = store.metrics(local_now(), LEASE).await.unwrap();
        assert_eq!(m.operations_by_status.get("received"), Some(&1));
        assert_eq!(m.operations_by_status.get("needs_review"), Some(&1));
    })
    .await
}

each_backend!(
    concurrent_conflicts_and_new_intakes_all_commit,
    |db| async move {
        // Two processes (a pool each), senders posting new leads, changed payloads under
        // keys still `received`, and plain repeats, all at once.
        let stores = [db.store().await, db.store().await];
        for i in 0..20 {
            stores[0]
                .record_delivery(delivery(&format!("r{i}"), json!({"v": 0})))
                .await
                .unwrap();
        }
        let mut tasks = vec![];
        for t in 0..16 {
            let store = stores[t % 2].clone();
            tasks.push(tokio::spawn(async move {
                let mut failed = vec![];
                for i in 0..24 {
                    let d = match i % 3 {
                        0 => delivery(&format!("n{t}-{i}"), json!({"v": 1})),
                        1 => delivery(&format!("r{}", (t + i) % 20), json!({"v": t * 100 + i})),
                        _ => delivery(&format!("r{}", (t * 7 + i) % 20), json!({"v": 0})),
                    };
                    if let Err(e) = store.record_delivery(d).await {
                        failed.push(e.to_string());
                    }
                }
                failed
            }));
        }
        let mut failed = vec![];
        for t in tasks {
            failed.extend(t.await.unwrap());
        }
        assert!(failed.is_empty(), "{} failed: {failed:?}", failed.len());
        let m = stores[0].metrics(local_now(), LEASE).await.unwrap();
        assert_eq!(m.unique_operations, 20 + 16 * 8);
    }
);

/// PostgreSQL only: SQLite's writer never reports a deadlock or a serialization failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_intake_aborted_by_a_deadlock_is_retried() {
    postgres_only(|db| async move {
        let store = db.store().await;
        let mut m = Monitor::new(&db).await;
        // The first intake transaction is aborted as PostgreSQL aborts a deadlock victim
        // (40P01), the first claim as a serialization failure (40001).
        for (seq, code, when) in [
            ("lg_fail_d", "40P01", "new.source = 'site'"),
            ("lg_fail_s", "40001", "new.source = 'n8n'"),
        ] {
            m.exec(&format!("create sequence {seq}")).await;
            m.exec(&format!(
                "create function {seq}() returns trigger language plpgsql as $$ begin \
                 if nextval('{seq}') = 1 then raise exception 'forced' using errcode = '{code}'; \
                 end if; return new; end $$"
            ))
            .await;
            m.exec(&format!(
                "create trigger {seq} before insert on deliveries for each row \
                 when ({when}) execute function {seq}()"
            ))
            .await;
        }
        let record = store
            .record_delivery(delivery("r", json!({"v": 1})))
            .await
            .expect("retried after the deadlock");
        assert!(matches!(record.outcome, DeliveryOutcome::New { .. }));
        assert_eq!(
            kinds(&store.timeline(&op("r")).await.unwrap()),
            ["delivery"]
        );
        let claimed = store
            .claim_external(ExternalClaim {
                delivery: n8n_delivery("c", json!({})),
                owner: "claim_api".into(),
                lease_for: LEASE,
                connector: "n8n".into(),
            })
            .await
            .expect("retried after the serialization failure");
        assert!(matches!(claimed, ExternalClaimOutcome::Claimed { .. }));
    })
    .await
}

// ---- 5. Deliveries that arrive after a purge ----------------------------------------

each_backend!(
    deliveries_after_a_purge_are_scrubbed_by_a_later_purge,
    |db| async move {
        let store = db.store().await;
        complete(&*store, "a").await;
        let r = store::purge(
            store.as_ref(),
            local_now() + chrono::TimeDelta::seconds(1),
            10,
        )
        .await
        .unwrap();
        assert_eq!(r.operations, 1);
        let kept = "select count(*) from deliveries where operation_id = 'site:a' \
                    and (raw_body is not null or payload is not null)";
        assert_eq!(raw_count(&db, kept).await, 0);
        // A late repeat is journaled with its body...
        let t0 = local_now();
        let dup = store
            .record_delivery(delivery("a", json!({"k": "a"})))
            .await
            .unwrap();
        assert!(matches!(dup.outcome, DeliveryOutcome::Duplicate { .. }));
        // ...kept within its own retention period...
        store::purge(store.as_ref(), t0, 10).await.unwrap();
        assert_eq!(raw_count(&db, kept).await, 1);
        // ...and scrubbed past it, though its operation was purged long before.
        let r = store::purge(store.as_ref(), a_day_ahead(), 10)
            .await
            .unwrap();
        assert_eq!((r.operations, r.deliveries), (0, 1));
        assert_eq!(
            raw_count(&db, kept).await,
            0,
            "the late repeat outlived retention"
        );
        // A late conflict waits for its case (a person may accept it as new), then goes.
        let conflict = store
            .record_delivery(delivery("a", json!({"k": "a", "name": "Ivan"})))
            .await
            .unwrap();
        let DeliveryOutcome::Conflict { case_id, .. } = conflict.outcome else {
            panic!("{:?}", conflict.outcome)
        };
        store::purge(store.as_ref(), a_day_ahead(), 10)
            .await
            .unwrap();
        assert_eq!(raw_count(&db, kept).await, 1);
        let d = store.delivery(conflict.delivery_id).await.unwrap().unwrap();
        assert!(d.payload.is_some(), "an open case keeps its delivery");
        decide(&*store, case_id, HumanAction::KeepOriginal)
            .await
            .unwrap();
        store::purge(store.as_ref(), a_day_ahead(), 10)
            .await
            .unwrap();
        assert_eq!(raw_count(&db, kept).await, 0);
    }
);

// ---- 6. Claim-API edges ------------------------------------------------------------

each_backend!(
    accepting_a_claim_api_conflict_as_new_keeps_it_external,
    |db| async move {
        let store = db.store().await;
        let lease = claimed_ext(&*store, "k", LEASE).await;
        store
            .finish_attempt(
                &lease,
                AttemptOutcome::Created { crm_id: "1".into() },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        let changed = json!({"k": "other"});
        assert_eq!(
            claim_ext(&*store, "k", changed.clone(), LEASE).await,
            ExternalClaimOutcome::Conflict
        );
        let case = store.cases_of(&ext("k")).await.unwrap().remove(0);
        let accepted = decide(&*store, case.id, HumanAction::AcceptAsNew)
            .await
            .unwrap();
        let new_id = accepted.new_operation.unwrap();
        // The gateway's worker must not send it to its own CRM...
        let taken = store.claim_due(CRM, "w", LEASE, local_now()).await.unwrap();
        assert!(
            taken.is_none(),
            "the worker took an external operation: {taken:?}"
        );
        // ...the integration claims it under its key.
        let claimed = store
            .claim_external(ExternalClaim {
                delivery: NewDelivery {
                    operation_id: new_id.clone(),
                    ..n8n_delivery("placeholder", changed)
                },
                owner: "claim_api".into(),
                lease_for: LEASE,
                connector: "n8n".into(),
            })
            .await
            .unwrap();
        assert!(
            matches!(claimed, ExternalClaimOutcome::Claimed { .. }),
            "{claimed:?}"
        );
    }
);

each_backend!(
    accepted_as_new_keys_are_bounded_and_never_a_real_key,
    |db| async move {
        let store = db.store().await;
        // An original key near the length limit.
        let long = "x".repeat(OperationId::MAX_LEN - "site:".len());
        store
            .record_delivery(delivery(&long, json!({"v": 1})))
            .await
            .unwrap();
        let DeliveryOutcome::Conflict { case_id, .. } = store
            .record_delivery(delivery(&long, json!({"v": 2})))
            .await
            .unwrap()
            .outcome
        else {
            panic!()
        };
        let accepted = decide(&*store, case_id, HumanAction::AcceptAsNew)
            .await
            .expect("a long key can be accepted as new");
        let new_id = accepted.new_operation.unwrap();
        assert!(new_id.as_str().len() <= OperationId::MAX_LEN);
        // A real key shaped like the old derived one (`<key>#<delivery id>`) is taken.
        store
            .record_delivery(delivery("n", json!({"v": 1})))
            .await
            .unwrap();
        let conflict = store
            .record_delivery(delivery("n", json!({"v": 2})))
            .await
            .unwrap();
        let DeliveryOutcome::Conflict { case_id, .. } = conflict.outcome else {
            panic!()
        };
        let squatter = format!("n#{}", conflict.delivery_id);
        store
            .record_delivery(delivery(&squatter, json!({"v": 3})))
            .await
            .unwrap();
        let accepted = decide(&*store, case_id, HumanAction::AcceptAsNew)
            .await
            .expect("a real key does not block accept as new");
        let new_id = accepted.new_operation.unwrap();
        assert_ne!(new_id, op(&squatter));
        let new_op = store.operation(&new_id).await.unwrap().unwrap();
        assert_eq!(new_op.payload, Some(json!({"v": 2})));
        // And a source can never send a key that lands on a derived one.
        let real = OperationId::new("site", new_id.as_str().strip_prefix("site:").unwrap());
        assert!(real.is_err(), "{real:?}");
    }
);

each_backend!(
    a_report_with_a_token_never_issued_writes_nothing,
    |db| async move {
        let store = db.store().await;
        let lease = claimed_ext(&*store, "t", Duration::from_millis(1)).await;
        let before = store.timeline(&ext("t")).await.unwrap().len();
        let forged = store
            .finish_attempt(
                &reported(&ext("t"), "forged"),
                AttemptOutcome::Created {
                    crm_id: "666".into(),
                },
                vec![NewEvent::new(
                    leadgate::domain::EventKind::CrmRequest,
                    json!({"forged": true}),
                )],
                local_now(),
            )
            .await;
        assert!(
            matches!(forged, Err(StoreError::UnknownLease(_))),
            "{forged:?}"
        );
        let timeline = store.timeline(&ext("t")).await.unwrap();
        assert_eq!(
            timeline.len(),
            before,
            "a forged report was written: {:?}",
            kinds(&timeline)
        );
        // A token that did hold the operation is still heard (a late answer): the lease
        // runs out, a person grants a retry, the retry is claimed, the first run reports.
        let later = local_now() + chrono::TimeDelta::seconds(1);
        assert_eq!(store.expire_external_leases(later).await.unwrap(), 1);
        let case = store.cases_of(&ext("t")).await.unwrap().remove(0);
        decide(&*store, case.id, HumanAction::AuthorizeRetry)
            .await
            .unwrap();
        let again = claimed_ext(&*store, "t", LEASE).await;
        assert_ne!(again.token, lease.token);
        let late = store
            .finish_attempt(
                &reported(&ext("t"), &lease.token),
                AttemptOutcome::Created {
                    crm_id: "700".into(),
                },
                vec![],
                local_now(),
            )
            .await;
        assert!(matches!(late, Err(StoreError::LeaseLost(_))), "{late:?}");
        let t = store.operation(&ext("t")).await.unwrap().unwrap();
        assert_eq!(t.crm_id.as_deref(), Some("700"), "the late answer was kept");
    }
);

// ---- 7. Isolation, matching, reject while in flight -------------------------------

/// PostgreSQL only: isolation levels are PostgreSQL's (SQLite transactions are
/// serializable).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repeatable_read_server_default_does_not_fail_writers() {
    postgres_only(|db| async move {
        let mut m = Monitor::new(&db).await;
        let name: String = sqlx::query_scalar("select current_database()")
            .fetch_one(&mut m.0)
            .await
            .unwrap();
        m.exec(&format!(
            "alter database {name} set default_transaction_isolation = 'repeatable read'"
        ))
        .await;
        let store = db.store().await; // connections opened after the change
        m.exec("create table lg_isolation (level text)").await;
        m.exec(
            "create function lg_isolation() returns trigger language plpgsql as $$ begin \
             insert into lg_isolation values (current_setting('transaction_isolation')); \
             return new; end $$",
        )
        .await;
        m.exec(
            "create trigger lg_isolation after insert on deliveries for each row \
             execute function lg_isolation()",
        )
        .await;
        store
            .record_delivery(delivery("x", json!({"v": 1})))
            .await
            .unwrap();
        let levels: Vec<String> = sqlx::query_scalar("select level from lg_isolation")
            .fetch_all(&mut m.0)
            .await
            .unwrap();
        assert_eq!(levels, ["read committed"]);
        // Another writer changes the row while the store waits for its lock: under
        // REPEATABLE READ the store's transaction would fail with 40001.
        let mut other = PgConnection::connect(&db.url).await.unwrap();
        sqlx::query("begin").execute(&mut other).await.unwrap();
        sqlx::query("update operations set updated_at = updated_at where operation_id = 'site:x'")
            .execute(&mut other)
            .await
            .unwrap();
        let before = m.lock_waiters().await;
        let review = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .open_review(
                        &op("x"),
                        ReviewReason::UncertainOutcome,
                        "anna",
                        json!({}),
                        local_now(),
                    )
                    .await
            }
        });
        m.blocked_or_done(&review, before).await;
        sqlx::query("commit").execute(&mut other).await.unwrap();
        review.await.unwrap().expect("the review opens");
    })
    .await
}

fn with_phone(key: &str, phone: &str) -> NewDelivery {
    let mut d = delivery(key, json!({"k": key, "phone": phone}));
    d.contact.phone = Some(phone.into());
    d.matching = Some(Matching {
        rule: MatchRule::Review,
        since: local_now() - chrono::TimeDelta::days(1),
        same_channel: vec![],
        shared_after: Matching::SHARED_AFTER,
    });
    d
}

/// PostgreSQL only: SQLite's single writer already serialises the two intakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lead_matches_one_whose_intake_is_still_committing() {
    postgres_only(|db| async move {
        let store = db.store().await;
        // The first lead's transaction stops at its commit.
        let mut gate = Gate::close(&db, 71).await;
        gate.exec(
            "create constraint trigger gate after insert on operations \
             deferrable initially deferred for each row \
             when (new.operation_id = 'site:a') execute function lg_test_gate('71')",
        )
        .await;
        let first = tokio::spawn({
            let store = store.clone();
            async move { store.record_delivery(with_phone("a", "+79990001122")).await }
        });
        gate.reached().await;
        let before = gate.monitor.lock_waiters().await;
        let second = tokio::spawn({
            let store = store.clone();
            async move { store.record_delivery(with_phone("b", "+79990001122")).await }
        });
        gate.monitor.blocked_or_done(&second, before).await;
        gate.open().await;
        let a = first.await.unwrap().unwrap();
        let b = second.await.unwrap().unwrap();
        assert_eq!(a.outcome.status(), Status::Received);
        assert_eq!(
            b.outcome.status(),
            Status::NeedsReview,
            "the second lead did not see the first (SQLite would have)"
        );
        let cases = store.cases_of(&op("b")).await.unwrap();
        assert_eq!(cases[0].reason, ReviewReason::CrossChannelMatch);
    })
    .await
}

each_backend!(
    concurrent_leads_sharing_a_phone_match_once,
    |db| async move {
        let store = db.store().await;
        let mut pairs = vec![];
        for i in 0..8 {
            let phone = format!("+7999000{i:04}");
            let (a, b) = (
                with_phone(&format!("a{i}"), &phone),
                with_phone(&format!("b{i}"), &phone),
            );
            let (s1, s2) = (store.clone(), store.clone());
            pairs.push(tokio::spawn(async move {
                let (a, b) = tokio::join!(s1.record_delivery(a), s2.record_delivery(b));
                [a.unwrap().outcome.status(), b.unwrap().outcome.status()]
            }));
        }
        for p in pairs {
            let mut statuses = p.await.unwrap();
            statuses.sort_by_key(|s| s.as_str());
            assert_eq!(statuses, [Status::NeedsReview, Status::Received]);
        }
    }
);

each_backend!(reject_waits_for_an_attempt_in_flight, |db| async move {
    let store = db.store().await;
    store
        .record_delivery(delivery("f", json!({"v": 1})))
        .await
        .unwrap();
    let c = store
        .claim_due(CRM, "w", LEASE, local_now())
        .await
        .unwrap()
        .unwrap();
    let DeliveryOutcome::Conflict { case_id, .. } = store
        .record_delivery(delivery("f", json!({"v": 2})))
        .await
        .unwrap()
        .outcome
    else {
        panic!()
    };
    let refused = decide(&*store, case_id, HumanAction::Reject).await;
    assert!(
        matches!(refused, Err(StoreError::AttemptInFlight(_, until)) if until == c.lease.expires_at),
        "rejected while the CRM call is in flight: {refused:?}"
    );
    let o = store
        .finish_attempt(
            &c.lease,
            AttemptOutcome::Created {
                crm_id: "crm-f".into(),
            },
            vec![],
            local_now(),
        )
        .await
        .unwrap();
    assert_eq!(o.status, Status::NeedsReview);
    let kept = decide(&*store, case_id, HumanAction::KeepOriginal)
        .await
        .unwrap();
    assert_eq!(kept.operation.status, Status::Completed);

    // A claim-API lease that ran out: rejecting is allowed and drops the lease, so a
    // report that comes after it is a late answer (the CRM has the lead: completed),
    // never a failed operation holding a crm_id.
    let lease = claimed_ext(&*store, "g", Duration::from_millis(1)).await;
    let later = local_now() + chrono::TimeDelta::seconds(1);
    assert_eq!(store.expire_external_leases(later).await.unwrap(), 1);
    let case = store.cases_of(&ext("g")).await.unwrap().remove(0);
    let rejected = decide(&*store, case.id, HumanAction::Reject).await.unwrap();
    assert_eq!(rejected.operation.status, Status::FailedTerminal);
    let late = store
        .finish_attempt(
            &lease,
            AttemptOutcome::Created {
                crm_id: "crm-g".into(),
            },
            vec![],
            local_now(),
        )
        .await;
    assert!(matches!(late, Err(StoreError::LeaseLost(_))), "{late:?}");
    let g = store.operation(&ext("g")).await.unwrap().unwrap();
    assert_eq!(
        (g.status, g.crm_id.as_deref()),
        (Status::Completed, Some("crm-g"))
    );
});

// ---- Redeliveries of claim-API operations ------------------------------------------

/// An integration's lead the CRM turned away for the moment: `received`, due at `at`.
async fn turned_away(store: &dyn Store, key: &str, at: chrono::DateTime<chrono::Utc>) {
    let lease = claimed_ext(store, key, Duration::from_secs(30)).await;
    let failure = Failure {
        class: ErrorClass::RateLimited,
        message: "429".into(),
    };
    let outcome = AttemptOutcome::Retry {
        failure: Some(failure),
        at,
    };
    let op = store
        .finish_attempt(&lease, outcome, vec![], local_now())
        .await
        .unwrap();
    assert_eq!(op.status, Status::Received);
}

fn redelivered(timeline: &[TimelineEvent]) -> usize {
    kinds(timeline)
        .iter()
        .filter(|k| **k == "redelivered")
        .count()
}

each_backend!(
    a_due_redelivery_is_taken_once_per_due_time_until_it_is_resent,
    |db| async move {
        let first = db.store().await;
        let second = db.store().await; // another process
        let t0 = local_now();
        turned_away(&*first, "r", t0).await;
        let resend = t0 + chrono::TimeDelta::seconds(60);
        let take = |s: std::sync::Arc<dyn Store>, at| async move {
            s.take_due_redeliveries(
                "n8n",
                "worker:test",
                at,
                at + chrono::TimeDelta::seconds(60),
                10,
            )
            .await
            .unwrap()
        };
        let a = take(first.clone(), t0).await;
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].operation_id.as_str(), a[0].sent), ("n8n:r", 1));
        assert_eq!(a[0].payload, json!({"k": "r"}).to_string());
        // The same due time: nobody sends it again, in this process or another.
        assert!(take(second.clone(), t0).await.is_empty());
        assert!(take(first.clone(), resend - chrono::TimeDelta::seconds(1))
            .await
            .is_empty());
        // Never claimed by the time its resend time came: sent again, counted.
        let b = take(second.clone(), resend).await;
        assert_eq!(b.iter().map(|r| r.sent).collect::<Vec<_>>(), [2]);
        // Claimed and turned away again: due again at once, whatever the resend time.
        let lease = match claim_ext(&*first, "r", json!({"k": "r"}), Duration::from_secs(30)).await
        {
            ExternalClaimOutcome::Claimed { lease, .. } => lease,
            other => panic!("{other:?}"),
        };
        let again = resend + chrono::TimeDelta::seconds(1);
        first
            .finish_attempt(
                &lease,
                AttemptOutcome::Retry {
                    failure: None,
                    at: again,
                },
                vec![],
                local_now(),
            )
            .await
            .unwrap();
        assert_eq!(take(first.clone(), again).await.len(), 1);
        // A paused connector gets nothing sent back.
        turned_away(&*first, "p", t0).await;
        first
            .pause_connector("n8n", "401", "test", local_now())
            .await
            .unwrap();
        assert!(take(first.clone(), again + chrono::TimeDelta::seconds(600))
            .await
            .is_empty());
        let timeline = first.timeline(&ext("r")).await.unwrap();
        assert_eq!(redelivered(&timeline), 3, "{:?}", kinds(&timeline));
    }
);

/// PostgreSQL only: two processes take due redeliveries at the same moment, the first
/// held inside its transaction (SQLite's one writer serialises them whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_redelivery_loops_send_a_lead_back_once() {
    postgres_only(|db| async move {
        let first = db.store().await;
        let second = db.store().await;
        let t0 = local_now();
        turned_away(&*first, "a", t0).await;
        let mut gate = Gate::close(&db, 23).await;
        gate.exec(
            "create trigger gate before insert on timeline for each row \
             when (new.kind = 'redelivered') execute function lg_test_gate('23')",
        )
        .await;
        let resend = t0 + chrono::TimeDelta::seconds(60);
        let one = tokio::spawn({
            let store = first.clone();
            async move {
                store
                    .take_due_redeliveries("n8n", "one", t0, resend, 10)
                    .await
            }
        });
        gate.reached().await;
        // The first holds the operation's row and has marked it: the second skips it.
        let two = second
            .take_due_redeliveries("n8n", "two", t0, resend, 10)
            .await
            .unwrap();
        assert!(two.is_empty(), "{two:?}");
        gate.open().await;
        let one = one.await.unwrap().unwrap();
        assert_eq!(one.len(), 1);
        // And once the first committed, its mark holds for the same due time.
        assert!(second
            .take_due_redeliveries("n8n", "two", t0, resend, 10)
            .await
            .unwrap()
            .is_empty());
        let timeline = first.timeline(&ext("a")).await.unwrap();
        assert_eq!(redelivered(&timeline), 1, "{:?}", kinds(&timeline));
    })
    .await
}

#[tokio::test]
async fn a_worker_skips_an_update_another_worker_is_taking_and_takes_it_once_free() {
    postgres_only(|db| async move {
        let store = db.store().await;
        complete(&*store, "upd").await;
        let DeliveryOutcome::Conflict { case_id, .. } = store
            .record_delivery(delivery("upd", json!({"k": "changed"})))
            .await
            .unwrap()
            .outcome
        else {
            panic!("a conflict")
        };
        decide(&*store, case_id, HumanAction::UpdateCrm)
            .await
            .unwrap();
        // Another worker's claim holds the row (its transaction has not committed).
        let mut other = PgConnection::connect(&db.url).await.unwrap();
        sqlx::query("begin").execute(&mut other).await.unwrap();
        sqlx::query("select id from crm_updates for update")
            .execute(&mut other)
            .await
            .unwrap();
        let skipped = tokio::time::timeout(
            Duration::from_secs(5),
            store.claim_update(CRM, "w2", LEASE, local_now()),
        )
        .await
        .expect("skipped, not waited for")
        .unwrap();
        assert!(skipped.is_none(), "the held row is not taken twice");
        sqlx::query("commit").execute(&mut other).await.unwrap();
        let taken = store
            .claim_update(CRM, "w2", LEASE, local_now())
            .await
            .unwrap();
        assert_eq!(taken.unwrap().attempts, 1);
        // And once taken, nobody else gets it while the lease is live.
        assert!(store
            .claim_update(CRM, "w3", LEASE, local_now())
            .await
            .unwrap()
            .is_none());
    })
    .await
}
