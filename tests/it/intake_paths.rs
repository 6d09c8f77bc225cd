//! PostgreSQL's grouped intake (`leadgate_record_deliveries`, migration 0022) against the
//! store's steps (`store::journal::ops`, what SQLite runs): the same deliveries, in the
//! same order, with the same clock, into two fresh databases — one through each path —
//! must leave the same rows in operations, deliveries, the timeline and review_cases
//! (ids and event texts included), the same metric figures, and the same answers. The
//! cases the function takes (new keys whose contact matches nothing, duplicates) must
//! be taken by it; every other case must come back to the steps having written nothing
//! (the ids of both databases would drift apart otherwise). A group of many deliveries
//! must write what the steps write when they take the group's deliveries in the order
//! the function promises: the ones it took, in order, then the ones it left, in order.
//! Then the lock orders, forced (the intake queue's patience: `insiders.rs`).

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use sqlx::{Connection, PgConnection};

use leadgate::domain::{MatchRule, OperationId, ReviewReason, Status, TenantId, TenantSlug};
use leadgate::store::postgres::{IntakePath, PgStore};
use leadgate::store::*;

use leadgate_testkit::db::{run, Backend, TestDb};
use leadgate_testkit::seed::delivery;

use crate::races::Monitor;

use IntakePath::{Grouped, Steps};

/// One step of the scenario: a delivery, or a change both databases get by hand.
enum Step {
    /// The delivery, and the path that must record it when `Grouped` is tried.
    Deliver(Box<NewDelivery>, IntakePath),
    /// The operation got a CRM id (as the worker would leave it).
    Complete(&'static str),
}

fn at(t0: DateTime<Utc>, i: usize) -> DateTime<Utc> {
    t0 + TimeDelta::seconds(i as i64)
}

fn lead(key: &str, v: i64) -> NewDelivery {
    let mut d = delivery(key, json!({"k": key, "v": v, "name": "Иван \"Ваня\""}));
    // As the gateway maps it: a name for display and search (migration 0012).
    d.contact.name = Some(format!("Иван Пётр {key}"));
    d
}

fn matching(
    mut d: NewDelivery,
    rule: MatchRule,
    phone: Option<&str>,
    email: Option<&str>,
) -> NewDelivery {
    d.contact = ContactKeys {
        phone: phone.map(Into::into),
        email: email.map(Into::into),
        name: d.contact.name.take(),
    };
    d.matching = Some(Matching {
        rule,
        since: d.received_at - TimeDelta::days(14),
        same_channel: vec![],
        shared_after: Matching::SHARED_AFTER,
    });
    d
}

fn late(mut d: NewDelivery) -> NewDelivery {
    d.review = Some(ReviewReason::LateDuplicate);
    d.event_time = Some(d.received_at - TimeDelta::days(500));
    d
}

fn deliver(d: NewDelivery, path: IntakePath) -> Step {
    Step::Deliver(Box::new(d), path)
}

fn scenario() -> Vec<Step> {
    use MatchRule::{Create, Link, Review};
    use Step::Complete;
    const P1: &str = "+79990000001";
    const P2: &str = "+79990000002";
    const E1: &str = "ivan@example.com";
    let mut odd = lead("bytes", 1);
    odd.content_type = None;
    odd.raw_body = vec![0xff, 0xfe, 0x00, b'x'];
    odd.event_time = Some(odd.received_at - TimeDelta::hours(1));
    vec![
        deliver(lead("a", 1), Grouped),
        deliver(lead("a", 1), Grouped),
        deliver(matching(lead("b", 1), Create, Some(P1), Some(E1)), Grouped),
        deliver(odd.clone(), Grouped),
        deliver(odd, Grouped),
        // conflicts: on a received operation, again on the same one, on a completed one
        deliver(lead("b", 2), Steps),
        deliver(lead("b", 3), Steps),
        deliver(lead("b", 1), Grouped),
        Complete("a"),
        deliver(lead("a", 1), Grouped),
        deliver(lead("a", 2), Steps),
        // a late delivery: a new key goes to review; a known key is a duplicate
        deliver(late(lead("late", 1)), Steps),
        deliver(late(lead("late", 1)), Steps),
        deliver(late(lead("a", 1)), Steps),
        // contact matches, each rule
        deliver(matching(lead("c", 1), Create, Some(P1), None), Steps),
        // link, but nothing to link to yet: review
        deliver(matching(lead("e", 1), Link, None, Some(E1)), Steps),
        deliver(matching(lead("p2", 1), Review, Some(P2), None), Grouped),
        Complete("p2"),
        // link to the newest match with a CRM id
        deliver(matching(lead("d", 1), Link, Some(P2), Some(E1)), Steps),
        deliver(matching(lead("f", 1), Review, Some(P1), Some(E1)), Steps),
        // matching without contact data; a contact nobody shares
        deliver(matching(lead("g", 1), Review, None, None), Grouped),
        deliver(
            matching(lead("h", 1), Link, Some("+79990000003"), None),
            Grouped,
        ),
        // repeats of operations the steps made: duplicates again
        deliver(matching(lead("f", 1), Review, Some(P1), Some(E1)), Grouped),
        deliver(matching(lead("d", 1), Link, Some(P2), Some(E1)), Grouped),
        deliver(lead("late", 1), Grouped),
        // a conflict on an operation in review
        deliver(lead("f", 2), Steps),
    ]
}

/// Plays the scenario on `store`, trying `path` for every delivery; the answers, each
/// with the path that recorded it. With `tenant` (a slug, `store` that tenant's), its keys
/// are that tenant's.
async fn play(
    store: &PgStore,
    db: &TestDb,
    path: IntakePath,
    t0: DateTime<Utc>,
    tenant: Option<&str>,
) -> Vec<(DeliveryRecord, IntakePath)> {
    let key = |local: &str| match tenant {
        Some(t) => OperationId::new_in(&TenantSlug::new(t).unwrap(), "site", local).unwrap(),
        None => OperationId::new("site", local).unwrap(),
    };
    let mut answers = vec![];
    for (i, step) in scenario().into_iter().enumerate() {
        match step {
            Step::Deliver(mut d, _) => {
                d.operation_id = key(d.operation_id.local_part().trim_start_matches("site:"));
                // The same clock in both runs: step i happens at t0 + i seconds.
                let shift = at(t0, i) - d.received_at;
                d.received_at += shift;
                if let Some(m) = &mut d.matching {
                    m.since += shift;
                }
                if let Some(t) = &mut d.event_time {
                    *t += shift;
                }
                answers.push(store.record_delivery_by(*d, path).await.unwrap());
            }
            Step::Complete(local) => {
                let mut c = PgConnection::connect(&db.url).await.unwrap();
                sqlx::query(
                    "update operations set status = 'completed', crm_id = $1, \
                     crm_link = 'created', version = version + 1 where operation_id = $2",
                )
                .bind(format!("crm-{local}"))
                .bind(key(local).as_str())
                .execute(&mut c)
                .await
                .unwrap();
            }
        }
    }
    answers
}

/// Every row the intake writes, as text, in a stable order; the metric figures summed
/// over their per-session shards.
async fn dump(db: &TestDb) -> Vec<(&'static str, Vec<String>)> {
    let mut c = PgConnection::connect(&db.url).await.unwrap();
    let mut out = vec![];
    for (table, sql) in [
        (
            "operations",
            "select row_to_json(t)::text from operations t order by operation_id",
        ),
        (
            "deliveries",
            "select row_to_json(t)::text from deliveries t order by id",
        ),
        (
            "timeline",
            "select row_to_json(t)::text from timeline t order by id",
        ),
        (
            "review_cases",
            "select row_to_json(t)::text from review_cases t order by id",
        ),
        (
            "operation_names",
            "select row_to_json(t)::text from operation_names t order by word, created_at, operation_id",
        ),
        (
            "operation_name_pairs",
            "select row_to_json(t)::text from operation_name_pairs t \
             order by word, other, created_at, operation_id",
        ),
        (
            "metric_counters",
            "select tenant_id || '/' || metric || '/' || label || '/' || label2 || ' = ' || sum(value) \
             from metric_counters group by tenant_id, metric, label, label2 order by 1",
        ),
        (
            "metric_series",
            "select tenant_id || '/' || slot || '/' || metric || '/' || label || ' = ' || sum(value) \
             from metric_series group by tenant_id, slot, metric, label order by 1",
        ),
    ] {
        let rows: Vec<String> = sqlx::query_scalar(sql).fetch_all(&mut c).await.unwrap();
        out.push((table, rows));
    }
    out
}

/// PostgreSQL only: SQLite has the steps only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_grouped_intake_writes_what_the_steps_write_one_delivery_at_a_time() {
    let t0 = local_now() - TimeDelta::hours(1);
    run(Backend::Postgres, |steps_db| async move {
        run(Backend::Postgres, |one_db| async move {
            let steps = PgStore::connect(&steps_db.url).await.unwrap();
            let one = PgStore::connect(&one_db.url).await.unwrap();
            let by_steps = play(&steps, &steps_db, Steps, t0, None).await;
            let by_one = play(&one, &one_db, Grouped, t0, None).await;
            compare(by_steps, by_one, &steps_db, &one_db).await;
        })
        .await
    })
    .await
}

/// The same in a tenant's intake, after the default tenant had the same keys, phones and
/// e-mails: the function matches and counts contacts within the tenant, as the steps do,
/// and writes each row as the tenant's (fleet mode, migration 0037).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_grouped_intake_writes_what_the_steps_write_in_a_tenant() {
    let t0 = local_now() - TimeDelta::hours(1);
    run(Backend::Postgres, |steps_db| async move {
        run(Backend::Postgres, |one_db| async move {
            let steps = PgStore::connect(&steps_db.url).await.unwrap();
            let one = PgStore::connect(&one_db.url).await.unwrap();
            play(&steps, &steps_db, Steps, t0, None).await;
            play(&one, &one_db, Steps, t0, None).await;
            let acme = TenantId(1);
            let by_steps = play(&steps.as_tenant(acme), &steps_db, Steps, t0, Some("acme")).await;
            let by_one = play(&one.as_tenant(acme), &one_db, Grouped, t0, Some("acme")).await;
            compare(by_steps, by_one, &steps_db, &one_db).await;
            let mut c = PgConnection::connect(&one_db.url).await.unwrap();
            for table in [
                "operations",
                "deliveries",
                "timeline",
                "review_cases",
                "operation_names",
                "operation_name_pairs",
            ] {
                let mixed: i64 = sqlx::query_scalar(&format!(
                    "select count(*) from {table} where (operation_id like 'acme/%') <> (tenant_id = 1)"
                ))
                .fetch_one(&mut c)
                .await
                .unwrap();
                assert_eq!(mixed, 0, "{table}: a row whose key and tenant disagree");
            }
        })
        .await
    })
    .await
}

/// The two runs of the scenario: the paths that recorded each delivery, the answers and
/// every row written are as the scenario expects and the same.
async fn compare(
    by_steps: Vec<(DeliveryRecord, IntakePath)>,
    by_one: Vec<(DeliveryRecord, IntakePath)>,
    steps_db: &TestDb,
    one_db: &TestDb,
) {
    let expected: Vec<IntakePath> = scenario()
        .into_iter()
        .filter_map(|s| match s {
            Step::Deliver(_, p) => Some(p),
            Step::Complete(_) => None,
        })
        .collect();
    let taken: Vec<IntakePath> = by_one.iter().map(|(_, p)| *p).collect();
    assert_eq!(taken, expected, "which path recorded each delivery");
    assert!(by_steps.iter().all(|(_, p)| *p == Steps));
    let answers = |v: &[(DeliveryRecord, IntakePath)]| -> Vec<DeliveryRecord> {
        v.iter().map(|(r, _)| r.clone()).collect()
    };
    assert_eq!(answers(&by_one), answers(&by_steps));

    // The scenario reached every outcome it is meant to.
    let outcomes: Vec<&str> = by_steps.iter().map(|(r, _)| r.outcome.name()).collect();
    for name in ["new", "duplicate", "conflict"] {
        assert!(outcomes.contains(&name), "{name}: {outcomes:?}");
    }
    let statuses: Vec<Status> = by_steps.iter().map(|(r, _)| r.outcome.status()).collect();
    for s in [Status::Received, Status::NeedsReview, Status::Completed] {
        assert!(statuses.contains(&s), "{s:?}: {statuses:?}");
    }

    let (a, b) = (dump(steps_db).await, dump(one_db).await);
    for ((table, rows_steps), (_, rows_one)) in a.iter().zip(&b) {
        assert!(!rows_steps.is_empty(), "{table} is empty");
        assert_eq!(rows_one, rows_steps, "{table}");
    }
    let kinds: Vec<String> = sqlx::query_scalar("select distinct kind from timeline order by 1")
        .fetch_all(&mut PgConnection::connect(&one_db.url).await.unwrap())
        .await
        .unwrap();
    for kind in [
        "contact_match",
        "delivery",
        "linked",
        "review_opened",
        "status_changed",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind}: {kinds:?}");
    }
}

/// The figures of every row, counted from the rows themselves, next to the counters the
/// database keeps (summed over their shards): what the two must agree on.
async fn figures(c: &mut PgConnection) -> (Vec<String>, Vec<String>) {
    let counted: Vec<String> = sqlx::query_scalar(
        "select * from ( \
           select 'deliveries/' || source || '/' || outcome || ' = ' || count(*) \
             from deliveries group by source, outcome \
           union all select 'operations/' || status || ' = ' || count(*) \
             from operations group by status \
           union all select 'series/deliveries = ' || count(*) \
             from deliveries where outcome <> 'rejected' \
           union all select 'series/' || case outcome when 'new' then 'new_operations' \
                                          else 'duplicates' end || ' = ' || count(*) \
             from deliveries where outcome in ('new', 'duplicate') group by outcome) f \
         order by 1",
    )
    .fetch_all(&mut *c)
    .await
    .unwrap();
    let kept: Vec<String> = sqlx::query_scalar(
        "select * from ( \
           select metric || '/' || label || case when metric = 'deliveries' \
                  then '/' || label2 else '' end || ' = ' || sum(value) \
             from metric_counters where metric in ('deliveries', 'operations') \
             group by metric, label, label2 having sum(value) <> 0 \
           union all select 'series/' || metric || ' = ' || sum(value) from metric_series \
             where metric in ('deliveries', 'new_operations', 'duplicates') group by metric) f \
         order by 1",
    )
    .fetch_all(&mut *c)
    .await
    .unwrap();
    (counted, kept)
}

/// Migrations 0015 and 0022: `leadgate_record_deliveries` counts its own rows and the
/// insert triggers skip them while it does. The skip must end with the function's
/// statement: a row written afterwards in the same transaction (by hand, as a tool would)
/// is counted by the triggers, and one written by the function is counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_after_the_function_in_its_transaction_are_counted() {
    run(Backend::Postgres, |db| async move {
        PgStore::connect(&db.url).await.unwrap();
        let mut c = PgConnection::connect(&db.url).await.unwrap();
        // A group of `keys`, each with the same body: the outcomes, in order.
        let call = |keys: &'static [&'static str]| {
            let n = keys.len();
            sqlx::query_scalar::<_, String>(
                "select r_outcome from leadgate_record_deliveries($1, $2, $3, $4, $5, $6, $7, \
                 $8, $9, $10, $11, $12, '{}', $13, $13, '{}', '{}') order by r_row",
            )
            .bind(keys.to_vec())
            .bind(vec!["site"; n])
            .bind(vec!["application/json"; n])
            .bind(vec![b"{}".to_vec(); n])
            .bind(vec!["{}"; n])
            .bind(vec!["h"; n])
            .bind(vec![1i32; n])
            .bind(vec![None::<String>; n])
            .bind(vec![None::<String>; n])
            .bind(vec![None::<DateTime<Utc>>; n])
            .bind(vec![local_now(); n])
            .bind(vec![None::<DateTime<Utc>>; n])
            .bind(vec![None::<String>; n])
        };
        let mut tx = c.begin().await.unwrap();
        assert_eq!(
            call(&["site:a", "site:a"]).fetch_all(&mut *tx).await.unwrap(),
            ["new", "steps"],
            "a key new to the database, twice in one group: the second goes to the steps"
        );
        assert_eq!(
            call(&["site:a"]).fetch_all(&mut *tx).await.unwrap(),
            ["duplicate"]
        );
        sqlx::query(
            "insert into operations (operation_id, source, status, payload_hash, created_at, \
             updated_at) values ('site:b', 'site', 'received', 'h', now(), now())",
        )
        .execute(&mut *tx)
        .await
        .unwrap();
        sqlx::query(
            "insert into deliveries (source, operation_id, received_at, outcome, \
             transform_version, payload_hash) values \
             ('site', 'site:b', now(), 'new', 1, 'h'), ('site', 'site:a', now(), 'duplicate', 1, 'h'), \
             ('site', null, now(), 'rejected', 1, null)",
        )
        .execute(&mut *tx)
        .await
        .unwrap();
        assert_eq!(
            call(&["site:b", "site:a", "site:c"])
                .fetch_all(&mut *tx)
                .await
                .unwrap(),
            ["duplicate", "duplicate", "new"]
        );
        tx.commit().await.unwrap();

        let (counted, kept) = figures(&mut c).await;
        assert_eq!(
            counted,
            [
                "deliveries/site/duplicate = 4",
                "deliveries/site/new = 3",
                "deliveries/site/rejected = 1",
                "operations/received = 3",
                "series/deliveries = 7",
                "series/duplicates = 4",
                "series/new_operations = 3",
            ]
        );
        assert_eq!(kept, counted);
        let setting: Option<String> =
            sqlx::query_scalar("select current_setting('leadgate.counted', true)")
                .fetch_one(&mut c)
                .await
                .unwrap();
        assert!(setting.as_deref().unwrap_or("").is_empty(), "{setting:?}");
    })
    .await
}

/// A group of deliveries as the intake writer hands it to `PgStore::record_group`, with
/// the path that must record each; around it, deliveries recorded before the group.
fn group_scenario() -> (Vec<NewDelivery>, Vec<(NewDelivery, IntakePath)>) {
    use MatchRule::{Create, Review};
    const P1: &str = "+79990000001";
    const P2: &str = "+79990000002";
    const E1: &str = "ivan@example.com";
    let before = vec![
        lead("done", 1),
        matching(lead("old", 1), Create, Some(P1), None),
    ];
    let group = vec![
        (lead("n1", 1), Grouped),
        // a duplicate of a completed operation: its CRM id comes back
        (lead("done", 1), Grouped),
        // a conflict on a known key
        (lead("done", 2), Steps),
        // the group's own new key again: a duplicate, once the group committed
        (lead("n1", 1), Steps),
        (lead("n2", 1), Grouped),
        // the group's new key with another body: a conflict
        (lead("n2", 2), Steps),
        // a phone an earlier operation has
        (matching(lead("m1", 1), Review, Some(P1), None), Steps),
        // a contact nobody has yet...
        (matching(lead("m2", 1), Review, Some(P2), Some(E1)), Grouped),
        // ...and its e-mail again, in the same group
        (matching(lead("m3", 1), Review, None, Some(E1)), Steps),
        (late(lead("late", 1)), Steps),
        // a known key twice in one group: two duplicates
        (lead("old", 1), Grouped),
        (lead("old", 1), Grouped),
        (
            matching(lead("m4", 1), Create, Some("+79990000004"), None),
            Grouped,
        ),
    ];
    (before, group)
}

/// Moves a delivery to `at` (its matching window and event time with it).
fn moved(mut d: NewDelivery, at: DateTime<Utc>) -> NewDelivery {
    let shift = at - d.received_at;
    d.received_at += shift;
    if let Some(m) = &mut d.matching {
        m.since += shift;
    }
    if let Some(t) = &mut d.event_time {
        *t += shift;
    }
    d
}

/// Records the deliveries before the group one by one and completes `done`.
async fn before_the_group(store: &PgStore, db: &TestDb, t0: DateTime<Utc>) {
    let (before, _) = group_scenario();
    for (i, d) in before.into_iter().enumerate() {
        store
            .record_delivery_by(moved(d, at(t0, i)), Steps)
            .await
            .unwrap();
    }
    let mut c = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query(
        "update operations set status = 'completed', crm_id = 'crm-done', \
         crm_link = 'created', version = version + 1 where operation_id = 'site:done'",
    )
    .execute(&mut c)
    .await
    .unwrap();
}

/// PostgreSQL only: SQLite's group runs the steps for every delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_writes_what_the_steps_write_taking_what_it_took_first() {
    let t0 = local_now() - TimeDelta::hours(1);
    run(Backend::Postgres, |steps_db| async move {
        run(Backend::Postgres, |group_db| async move {
            let steps = PgStore::connect(&steps_db.url).await.unwrap();
            let grouped = PgStore::connect(&group_db.url).await.unwrap();
            before_the_group(&steps, &steps_db, t0).await;
            before_the_group(&grouped, &group_db, t0).await;
            let (_, group) = group_scenario();
            let group: Vec<(NewDelivery, IntakePath)> = group
                .into_iter()
                .enumerate()
                .map(|(i, (d, p))| (moved(d, at(t0, 10 + i)), p))
                .collect();

            let deliveries: Vec<NewDelivery> = group.iter().map(|(d, _)| d.clone()).collect();
            let by_group: Vec<(DeliveryRecord, IntakePath)> = grouped
                .record_group(&deliveries)
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect();
            let expected: Vec<IntakePath> = group.iter().map(|(_, p)| *p).collect();
            let taken: Vec<IntakePath> = by_group.iter().map(|(_, p)| *p).collect();
            assert_eq!(taken, expected, "which path recorded each delivery");

            // The promised order: what the group took, in order; then what it left.
            let mut order: Vec<usize> = (0..group.len())
                .filter(|&i| expected[i] == Grouped)
                .collect();
            order.extend((0..group.len()).filter(|&i| expected[i] == Steps));
            let mut by_steps: Vec<Option<DeliveryRecord>> = vec![None; group.len()];
            for i in order {
                let (r, _) = steps
                    .record_delivery_by(group[i].0.clone(), Steps)
                    .await
                    .unwrap();
                by_steps[i] = Some(r);
            }
            let by_steps: Vec<DeliveryRecord> = by_steps.into_iter().map(Option::unwrap).collect();
            let by_group: Vec<DeliveryRecord> = by_group.into_iter().map(|(r, _)| r).collect();
            assert_eq!(by_group, by_steps);

            let outcomes: Vec<&str> = by_group.iter().map(|r| r.outcome.name()).collect();
            for name in ["new", "duplicate", "conflict"] {
                assert!(outcomes.contains(&name), "{name}: {outcomes:?}");
            }
            assert!(
                by_group.iter().any(|r| matches!(&r.outcome,
                    DeliveryOutcome::Duplicate { crm_id: Some(id), .. } if id == "crm-done")),
                "a duplicate of a completed operation answers its CRM id: {by_group:?}"
            );

            let (a, b) = (dump(&steps_db).await, dump(&group_db).await);
            for ((table, rows_steps), (_, rows_group)) in a.iter().zip(&b) {
                assert!(!rows_steps.is_empty(), "{table} is empty");
                assert_eq!(rows_group, rows_steps, "{table}");
            }
            let mut c = PgConnection::connect(&group_db.url).await.unwrap();
            let (counted, kept) = figures(&mut c).await;
            assert_eq!(kept, counted);
        })
        .await
    })
    .await
}

/// One call of `leadgate_record_deliveries` over (key, phone) pairs, every delivery
/// matched by its phone (its intake slot: the phone's number), on `c`; the outcomes.
async fn call_group(c: &mut PgConnection, group: &[(String, i64)]) -> sqlx::Result<Vec<String>> {
    let n = group.len();
    let phones: Vec<String> = group.iter().map(|(_, p)| format!("+7999{p:07}")).collect();
    let slots: Vec<Option<i64>> = group.iter().map(|(_, p)| Some(*p % 65536)).collect();
    sqlx::query_scalar(
        "select r_outcome from leadgate_record_deliveries($1, $2, $3, $4, $5, $6, $7, \
         $8, $9, $10, $11, $12, $13, $14, $15, $16, $16, '{}', '{}') order by r_row",
    )
    .bind(group.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>())
    .bind(vec!["site"; n])
    .bind(vec!["application/json"; n])
    .bind(vec![b"{}".to_vec(); n])
    .bind(vec!["{}"; n])
    .bind(vec!["h"; n])
    .bind(vec![1i32; n])
    .bind(phones)
    .bind(vec![None::<String>; n])
    .bind(vec![None::<DateTime<Utc>>; n])
    .bind(vec![local_now(); n])
    .bind(vec![Some(local_now() - TimeDelta::days(1)); n])
    .bind(slots)
    .bind(vec![None::<i64>; n])
    .bind(Some(20i32))
    .bind(vec![None::<String>; n])
    .fetch_all(c)
    .await
}

/// A key that another transaction is inserting (a concurrent intake, not yet committed):
/// the group waits for it, then leaves that delivery to the steps, which find the key
/// known — one operation, and the delivery a duplicate. The interleaving is forced: the
/// other transaction stays open until the group's backend is seen waiting on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_another_transaction_is_inserting_is_waited_for_and_left_to_the_steps() {
    run(Backend::Postgres, |db| async move {
        let store = std::sync::Arc::new(PgStore::connect(&db.url).await.unwrap());
        let k = lead("k", 1);
        let mut holder = PgConnection::connect(&db.url).await.unwrap();
        let mut tx = holder.begin().await.unwrap();
        sqlx::query(
            "insert into operations (operation_id, source, status, payload_hash, created_at, \
             updated_at) values ($1, 'site', 'received', $2, now(), now())",
        )
        .bind(k.operation_id.as_str())
        .bind(k.payload_hash.as_str())
        .execute(&mut *tx)
        .await
        .unwrap();

        let mut watch = Monitor::new(&db).await;
        let (store2, k2) = (store.clone(), k.clone());
        let group = started_and_waiting(&mut watch, "the group", async move {
            store2.record_group(&[lead("other", 1), k2]).await
        })
        .await;
        tx.commit().await.unwrap();

        let answers: Vec<(DeliveryRecord, IntakePath)> = group
            .await
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(answers[0].1, Grouped);
        assert!(matches!(answers[0].0.outcome, DeliveryOutcome::New { .. }));
        assert_eq!(answers[1].1, Steps, "{answers:?}");
        assert!(
            matches!(answers[1].0.outcome, DeliveryOutcome::Duplicate { .. }),
            "{answers:?}"
        );
        let (ops, deliveries): (i64, i64) = sqlx::query_as(
            "select (select count(*) from operations where operation_id = $1), \
                    (select count(*) from deliveries where operation_id = $1)",
        )
        .bind(k.operation_id.as_str())
        .fetch_one(&mut holder)
        .await
        .unwrap();
        assert_eq!((ops, deliveries), (1, 1));
    })
    .await
}

/// Groups with the same keys and phones in different orders, on four connections at
/// once, straight to the function (no retry in between): none may be aborted as a
/// deadlock victim, because every group takes its row locks, contact slots and new keys
/// in one order. Each key ends as one operation, journaled as new once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_groups_over_the_same_keys_never_deadlock() {
    run(Backend::Postgres, |db| async move {
        PgStore::connect(&db.url).await.unwrap();
        const KEYS: u64 = 20;
        let tasks: Vec<_> = (0..4u64)
            .map(|t| {
                let url = db.url.clone();
                tokio::spawn(async move {
                    let mut c = PgConnection::connect(&url).await.unwrap();
                    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (t + 1);
                    let mut next = move || {
                        seed = seed
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1_442_695_040_888_963_407);
                        seed >> 33
                    };
                    let mut outcomes = vec![];
                    for _ in 0..30 {
                        let group: Vec<(String, i64)> = (0..12)
                            .map(|_| {
                                let k = next() % KEYS;
                                (format!("site:k{k}"), (k % 6) as i64)
                            })
                            .collect();
                        let got = call_group(&mut c, &group)
                            .await
                            .unwrap_or_else(|e| panic!("a group failed: {e}"));
                        outcomes.extend(got);
                    }
                    outcomes
                })
            })
            .collect();
        let mut outcomes = vec![];
        for t in tasks {
            outcomes.extend(t.await.unwrap());
        }
        assert_eq!(outcomes.len(), 4 * 30 * 12);
        let new = outcomes.iter().filter(|o| *o == "new").count();
        let mut c = PgConnection::connect(&db.url).await.unwrap();
        let (ops, journaled_new): (i64, i64) = sqlx::query_as(
            "select (select count(*) from operations), \
                    (select count(*) from deliveries where outcome = 'new')",
        )
        .fetch_one(&mut c)
        .await
        .unwrap();
        assert_eq!(ops as usize, new, "one operation per `new` answer");
        assert_eq!(journaled_new, ops);
        assert!(ops > 0 && ops <= KEYS as i64);
        assert!(outcomes.iter().any(|o| o == "duplicate"));
        let (counted, kept) = figures(&mut c).await;
        assert_eq!(kept, counted);
    })
    .await
}

/// A delivery the database refuses (here: a constraint the test adds) must not take the
/// others of its group down with it: the group is sent again one delivery at a time,
/// and only the refused one fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_the_database_refuses_fails_alone_and_its_group_is_recorded() {
    run(Backend::Postgres, |db| async move {
        let store = PgStore::connect(&db.url).await.unwrap();
        let mut c = PgConnection::connect(&db.url).await.unwrap();
        sqlx::query(
            "alter table operations add constraint test_refuses check (operation_id <> 'site:bad')",
        )
        .execute(&mut c)
        .await
        .unwrap();
        let answers = store
            .record_group(&[
                lead("good1", 1),
                lead("bad", 1),
                lead("good2", 1),
                lead("good1", 1),
            ])
            .await;
        assert!(
            matches!(
                answers[0],
                Ok((
                    DeliveryRecord {
                        outcome: DeliveryOutcome::New { .. },
                        ..
                    },
                    Grouped
                ))
            ),
            "{answers:?}"
        );
        let refused = answers[1].as_ref().unwrap_err().to_string();
        assert!(refused.contains("test_refuses"), "{refused}");
        assert!(
            matches!(
                answers[2],
                Ok((
                    DeliveryRecord {
                        outcome: DeliveryOutcome::New { .. },
                        ..
                    },
                    Grouped
                ))
            ),
            "{answers:?}"
        );
        assert!(
            matches!(
                answers[3],
                Ok((
                    DeliveryRecord {
                        outcome: DeliveryOutcome::Duplicate { .. },
                        ..
                    },
                    _
                ))
            ),
            "{answers:?}"
        );
        assert_eq!(operation_ids(&mut c).await, ["site:good1", "site:good2"]);
        let (counted, kept) = figures(&mut c).await;
        assert_eq!(kept, counted);
    })
    .await
}

/// Whatever the database cannot take of one delivery — not only a refused value (class 22
/// or 23): an index row over its size limit (54000, a 12 KB e-mail a visitor typed), a
/// failure of Leadgate's own (XX000) — the others of its group are recorded, and that one
/// hears its own error, of its own kind: the sender of the long e-mail is told it will be
/// refused again (422), the broken one is not told to retry for ever, and nobody else is
/// told anything but their lead's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_delivery_the_database_cannot_take_leaves_its_group_recorded() {
    run(Backend::Postgres, |db| async move {
        let store = PgStore::connect(&db.url).await.unwrap();
        let mut c = PgConnection::connect(&db.url).await.unwrap();
        sqlx::raw_sql(
            "create function test_breaks() returns trigger language plpgsql as $$ \
             begin if new.operation_id = 'site:broken' then \
               raise exception 'broken' using errcode = 'XX000'; end if; return new; end $$; \
             create trigger test_breaks before insert on operations \
               for each row execute function test_breaks();",
        )
        .execute(&mut c)
        .await
        .unwrap();
        // random hex: no compression brings it under the index row's limit
        let huge: String = (0..400)
            .map(|_| uuid::Uuid::new_v4().simple().to_string())
            .collect();
        let email = format!("{huge}@example.com");
        let answers = store
            .record_group(&[
                lead("good1", 1),
                matching(lead("long", 1), MatchRule::Review, None, Some(&email)),
                lead("broken", 1),
                lead("good2", 1),
            ])
            .await;
        for i in [0, 3] {
            assert!(
                matches!(
                    answers[i],
                    Ok((
                        DeliveryRecord {
                            outcome: DeliveryOutcome::New { .. },
                            ..
                        },
                        _
                    ))
                ),
                "{answers:?}"
            );
        }
        let long = answers[1].as_ref().unwrap_err();
        assert_eq!(
            (long.kind(), long.db_code()),
            (ErrorKind::Refused, Some("54000")),
            "{long}"
        );
        let broken = answers[2].as_ref().unwrap_err();
        assert_eq!(
            (broken.kind(), broken.db_code()),
            (ErrorKind::Internal, Some("XX000")),
            "{broken}"
        );
        assert_eq!(operation_ids(&mut c).await, ["site:good1", "site:good2"]);
    })
    .await
}

/// Every operation's key, in order.
async fn operation_ids(c: &mut PgConnection) -> Vec<String> {
    sqlx::query_scalar("select operation_id from operations order by 1")
        .fetch_all(c)
        .await
        .unwrap()
}

/// Seconds a test waits for what must not take long.
const PROMPTLY: std::time::Duration = std::time::Duration::from_secs(5);

/// Opens a transaction on a connection of its own that holds `keys`' operations, as a
/// worker settling them or retention would: `locked` ones with `for update`, the others
/// changed and not committed yet.
async fn hold_operations(
    db: &TestDb,
    locked: &[&str],
    changed: &[&str],
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    for (keys, sql) in [
        (
            locked,
            "select 1 from operations where operation_id = $1 for update",
        ),
        (
            changed,
            "update operations set updated_at = updated_at where operation_id = $1",
        ),
    ] {
        for key in keys {
            sqlx::query(sql)
                .bind(OperationId::new("site", key).unwrap().as_str())
                .execute(&mut *tx)
                .await
                .unwrap();
        }
    }
    tx
}

/// A duplicate of an operation another transaction holds waits for that row alone: the
/// group it came in does not. Forced: three such duplicates (one of a locked operation,
/// two of changed ones, enough to hold both writers if a group waited on any of them) are
/// sent one after the other, each seen waiting before the next; a new lead sent then must
/// still be recorded while the operations are held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_operation_holds_up_its_own_duplicate_and_no_other_delivery() {
    const HELD: [&str; 3] = ["locked", "changed1", "changed2"];
    run(Backend::Postgres, |db| async move {
        let store: std::sync::Arc<dyn Store> =
            std::sync::Arc::new(PgStore::connect(&db.url).await.unwrap());
        for key in HELD {
            store.record_delivery(lead(key, 1)).await.unwrap();
        }
        let held = hold_operations(&db, &HELD[..1], &HELD[1..]).await;
        let mut watch = Monitor::new(&db).await;
        let mut waiting = vec![];
        for key in HELD {
            let store = store.clone();
            let duplicate = async move { store.record_delivery(lead(key, 1)).await };
            waiting.push(started_and_waiting(&mut watch, key, duplicate).await);
        }
        let fresh = tokio::time::timeout(PROMPTLY, store.record_delivery(lead("fresh", 1)))
            .await
            .expect("a new lead is recorded while three duplicates wait on their rows")
            .unwrap();
        assert!(matches!(fresh.outcome, DeliveryOutcome::New { .. }));
        held.commit().await.unwrap();
        for task in waiting {
            let record = task.await.unwrap().unwrap();
            assert!(
                matches!(record.outcome, DeliveryOutcome::Duplicate { .. }),
                "{record:?}"
            );
        }
        let mut c = PgConnection::connect(&db.url).await.unwrap();
        let (counted, kept) = figures(&mut c).await;
        assert_eq!(kept, counted);
        assert!(
            counted.contains(&"deliveries/site/duplicate = 3".to_string()),
            "{counted:?}"
        );
    })
    .await
}

/// A group takes its contacts' locks before it locks a known operation, as the steps do:
/// otherwise a group holding an operation and waiting for a phone, and the steps holding
/// that phone and waiting for the operation (a conflict of the same lead), deadlock.
/// Forced: another transaction holds the phone's lock while a group with a duplicate of an
/// operation under that phone starts; while the group waits, the operation must still be
/// free.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_locks_its_contacts_before_a_known_operation_as_the_steps_do() {
    const PHONE: &str = "+79990000007";
    run(Backend::Postgres, |db| async move {
        let store = std::sync::Arc::new(PgStore::connect(&db.url).await.unwrap());
        let d = matching(lead("x", 1), MatchRule::Review, Some(PHONE), None);
        store.record_delivery_by(d.clone(), Grouped).await.unwrap();
        let mut other = holding_phone(&db, PHONE).await;
        let mut watch = Monitor::new(&db).await;
        let (store2, d2) = (store.clone(), d.clone());
        let group = started_and_waiting(&mut watch, "the group", async move {
            store2.record_group(&[d2]).await
        })
        .await;
        sqlx::query("select 1 from operations where operation_id = $1 for update nowait")
            .bind(d.operation_id.as_str())
            .execute(&mut *other)
            .await
            .expect("the group locked the operation before the contact");
        other.commit().await.unwrap();
        let answers = group.await.unwrap();
        let (record, path) = answers[0].as_ref().unwrap();
        assert_eq!(*path, Grouped);
        assert!(
            matches!(record.outcome, DeliveryOutcome::Duplicate { .. }),
            "{record:?}"
        );
    })
    .await
}

/// A transaction on a connection of its own holding `phone`'s intake slot (migration
/// 0024: the row of `intake_contact_slots` numbered by the low 16 bits of the first 8
/// bytes of the SHA-256 of "leadgate contact phone:<value>"), as a concurrent intake of
/// that phone would.
async fn holding_phone(db: &TestDb, phone: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let locked: i64 = sqlx::query_scalar(
        "select count(*) from (select 1 from intake_contact_slots where slot = \
         ((('x' || substr(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint) \
         & 65535)::integer for update) s",
    )
    .bind(format!("leadgate contact phone:{phone}"))
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    assert_eq!(locked, 1, "the phone's slot");
    tx
}

/// Runs `work` in a task and returns once it waits for a lock (one more waiter in the
/// database than before): `what` must not have finished by then.
async fn started_and_waiting<T: Send + 'static>(
    watch: &mut Monitor,
    what: &str,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    let before = watch.lock_waiters().await;
    let task = tokio::spawn(work);
    watch.blocked_or_done(&task, before).await;
    assert!(!task.is_finished(), "{what} waits for a lock");
    task
}

/// The steps take a delivery's contact locks before they claim its key, as a group does,
/// so the two never wait for each other crosswise. Forced: another transaction holds the
/// phone's intake slot (as a group does before inserting its new keys) while the steps
/// start; the steps must wait for it without having claimed the key, so that the other
/// transaction can insert that key without waiting (the old order — claim, then lock —
/// deadlocked here).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_steps_lock_a_contact_before_claiming_its_key_as_a_group_does() {
    const PHONE: &str = "+79990000009";
    run(Backend::Postgres, |db| async move {
        let store = std::sync::Arc::new(PgStore::connect(&db.url).await.unwrap());
        let d = matching(lead("s", 1), MatchRule::Review, Some(PHONE), None);
        let mut group = holding_phone(&db, PHONE).await;
        let mut watch = Monitor::new(&db).await;
        let (store2, d2) = (store.clone(), d.clone());
        let steps = started_and_waiting(&mut watch, "the steps", async move {
            store2.record_delivery_by(d2, Steps).await
        })
        .await;
        let claimed: bool = sqlx::query_scalar(
            "select exists (select 1 from pg_locks l join pg_stat_activity a using (pid) \
             where a.wait_event_type = 'Lock' and a.datname = current_database() \
             and l.relation = 'operations'::regclass and l.mode = 'RowExclusiveLock')",
        )
        .fetch_one(&mut *group)
        .await
        .unwrap();
        assert!(
            !claimed,
            "the steps wrote to operations before taking the contact's lock"
        );
        sqlx::query("set local lock_timeout = '3s'")
            .execute(&mut *group)
            .await
            .unwrap();
        sqlx::query(
            "insert into operations (operation_id, source, status, payload_hash, created_at, \
             updated_at) values ($1, 'site', 'received', $2, now(), now())",
        )
        .bind(d.operation_id.as_str())
        .bind(d.payload_hash.as_str())
        .execute(&mut *group)
        .await
        .expect("the steps had not claimed the key while they waited for the contact");
        group.commit().await.unwrap();
        let (record, path) = steps.await.unwrap().unwrap();
        assert_eq!(path, Steps);
        assert!(
            matches!(record.outcome, DeliveryOutcome::Duplicate { .. }),
            "{record:?}"
        );
    })
    .await
}
