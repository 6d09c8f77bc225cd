//! PostgreSQL's one-statement intake (`leadgate_record_delivery`, migration 0008) against
//! the store's steps (`store::ops::intake`, what SQLite runs): the same deliveries, in the
//! same order, with the same clock, into two fresh databases — one through each path —
//! must leave the same rows in operations, deliveries, the timeline and review_cases
//! (ids and event texts included), the same metric figures, and the same answers. The
//! cases the function takes (new keys whose contact matches nothing, duplicates) must
//! be taken by it; every other case must come back to the steps having written nothing
//! (the ids of both databases would drift apart otherwise).

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use sqlx::{Connection, PgConnection};

use leadgate::domain::{MatchRule, OperationId, ReviewReason, Status};
use leadgate::store::postgres::{IntakePath, PgStore};
use leadgate::store::*;

use leadgate_testkit::db::{run, Backend, TestDb};
use leadgate_testkit::seed::delivery;

use IntakePath::{OneStatement, Steps};

/// One step of the scenario: a delivery, or a change both databases get by hand.
enum Step {
    /// The delivery, and the path that must record it when `OneStatement` is tried.
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
        deliver(lead("a", 1), OneStatement),
        deliver(lead("a", 1), OneStatement),
        deliver(
            matching(lead("b", 1), Create, Some(P1), Some(E1)),
            OneStatement,
        ),
        deliver(odd.clone(), OneStatement),
        deliver(odd, OneStatement),
        // conflicts: on a received operation, again on the same one, on a completed one
        deliver(lead("b", 2), Steps),
        deliver(lead("b", 3), Steps),
        deliver(lead("b", 1), OneStatement),
        Complete("a"),
        deliver(lead("a", 1), OneStatement),
        deliver(lead("a", 2), Steps),
        // a late delivery: a new key goes to review; a known key is a duplicate
        deliver(late(lead("late", 1)), Steps),
        deliver(late(lead("late", 1)), Steps),
        deliver(late(lead("a", 1)), Steps),
        // contact matches, each rule
        deliver(matching(lead("c", 1), Create, Some(P1), None), Steps),
        // link, but nothing to link to yet: review
        deliver(matching(lead("e", 1), Link, None, Some(E1)), Steps),
        deliver(
            matching(lead("p2", 1), Review, Some(P2), None),
            OneStatement,
        ),
        Complete("p2"),
        // link to the newest match with a CRM id
        deliver(matching(lead("d", 1), Link, Some(P2), Some(E1)), Steps),
        deliver(matching(lead("f", 1), Review, Some(P1), Some(E1)), Steps),
        // matching without contact data; a contact nobody shares
        deliver(matching(lead("g", 1), Review, None, None), OneStatement),
        deliver(
            matching(lead("h", 1), Link, Some("+79990000003"), None),
            OneStatement,
        ),
        // repeats of operations the steps made: duplicates again
        deliver(
            matching(lead("f", 1), Review, Some(P1), Some(E1)),
            OneStatement,
        ),
        deliver(
            matching(lead("d", 1), Link, Some(P2), Some(E1)),
            OneStatement,
        ),
        deliver(lead("late", 1), OneStatement),
        // a conflict on an operation in review
        deliver(lead("f", 2), Steps),
    ]
}

/// Plays the scenario on `store`, trying `path` for every delivery; the answers, each
/// with the path that recorded it.
async fn play(
    store: &PgStore,
    db: &TestDb,
    path: IntakePath,
    t0: DateTime<Utc>,
) -> Vec<(DeliveryRecord, IntakePath)> {
    let mut answers = vec![];
    for (i, step) in scenario().into_iter().enumerate() {
        match step {
            Step::Deliver(mut d, _) => {
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
            Step::Complete(key) => {
                let mut c = PgConnection::connect(&db.url).await.unwrap();
                sqlx::query(
                    "update operations set status = 'completed', crm_id = $1, \
                     crm_link = 'created', version = version + 1 where operation_id = $2",
                )
                .bind(format!("crm-{key}"))
                .bind(OperationId::new("site", key).unwrap().as_str())
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
            "metric_counters",
            "select metric || '/' || label || '/' || label2 || ' = ' || sum(value) \
             from metric_counters group by metric, label, label2 order by 1",
        ),
        (
            "metric_series",
            "select slot || '/' || metric || '/' || label || ' = ' || sum(value) \
             from metric_series group by slot, metric, label order by 1",
        ),
    ] {
        let rows: Vec<String> = sqlx::query_scalar(sql).fetch_all(&mut c).await.unwrap();
        out.push((table, rows));
    }
    out
}

/// PostgreSQL only: SQLite has the steps only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_one_statement_intake_writes_what_the_steps_write() {
    let t0 = now() - TimeDelta::hours(1);
    run(Backend::Postgres, |steps_db| async move {
        run(Backend::Postgres, |one_db| async move {
            let steps = PgStore::connect(&steps_db.url).await.unwrap();
            let one = PgStore::connect(&one_db.url).await.unwrap();
            let by_steps = play(&steps, &steps_db, Steps, t0).await;
            let by_one = play(&one, &one_db, OneStatement, t0).await;

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

            let (a, b) = (dump(&steps_db).await, dump(&one_db).await);
            for ((table, rows_steps), (_, rows_one)) in a.iter().zip(&b) {
                assert!(!rows_steps.is_empty(), "{table} is empty");
                assert_eq!(rows_one, rows_steps, "{table}");
            }
            let kinds: Vec<String> =
                sqlx::query_scalar("select distinct kind from timeline order by 1")
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
        })
        .await
    })
    .await
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

/// Migration 0015: `leadgate_record_delivery` counts its own rows and the insert triggers
/// skip them while it does. The skip must end with the function's statement: a row
/// written afterwards in the same transaction (by hand, as a tool would) is counted by the
/// triggers, and one written by the function is counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_after_the_function_in_its_transaction_are_counted() {
    run(Backend::Postgres, |db| async move {
        PgStore::connect(&db.url).await.unwrap();
        let mut c = PgConnection::connect(&db.url).await.unwrap();
        let call = |key: &'static str| {
            sqlx::query_scalar::<_, String>(
                "select r_outcome from leadgate_record_delivery($1, 'site', 'application/json', \
                 '\\x7b7d'::bytea, '{}', 'h', 1, null, null, null, now(), null, '{}', null, '{}')",
            )
            .bind(key)
        };
        let mut tx = c.begin().await.unwrap();
        assert_eq!(call("site:a").fetch_one(&mut *tx).await.unwrap(), "new");
        assert_eq!(call("site:a").fetch_one(&mut *tx).await.unwrap(), "duplicate");
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
        assert_eq!(call("site:b").fetch_one(&mut *tx).await.unwrap(), "duplicate");
        tx.commit().await.unwrap();

        let (counted, kept) = figures(&mut c).await;
        assert_eq!(
            counted,
            [
                "deliveries/site/duplicate = 3",
                "deliveries/site/new = 2",
                "deliveries/site/rejected = 1",
                "operations/received = 2",
                "series/deliveries = 5",
                "series/duplicates = 3",
                "series/new_operations = 2",
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
