//! How fast the console's screens load over a large operations database (`make bench`).
//!
//! `cargo bench --bench console [-- N]`: on SQLite (a temporary file) and on PostgreSQL (a
//! database created on `LEADGATE_BENCH_DATABASE_URL` or `LEADGATE_TEST_DATABASE_URL`'s
//! server and dropped after), N operations (default 1,000,000, one per second of the last
//! N seconds) are bulk-inserted with plain SQL — a load generator, not part of the
//! console; the metric triggers count them as they would count real traffic — with a
//! delivery and three timeline events each; every 100th is in review, every 250th failed.
//! Then the console's calls are timed (median of 7): tab counts, the queue's first pages,
//! a case with its timeline, the dashboard (target: each within 250 ms).

use std::time::{Duration, Instant};

use leadgate::store;
use leadgate_console_model::{Console, QueueQuery, Range, Tab};
use sqlx::Connection;

fn seed_sql(pg: bool, n: u64) -> Vec<String> {
    let (rows, ts) = if pg {
        (
            format!("select i from generate_series(1, {n}) as s(i)"),
            "(now() - (i || ' seconds')::interval)".to_string(),
        )
    } else {
        (
            format!("with recursive s(i) as (select 1 union all select i + 1 from s where i < {n}) select i from s"),
            "strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '-' || i || ' seconds')".to_string(),
        )
    };
    let status = "case when i % 100 = 0 then 'needs_review' when i % 250 = 1 then 'failed_terminal' else 'completed' end";
    vec![
        format!(
            "insert into operations (operation_id, source, status, payload_hash, payload, crm_id, crm_link, \
             attempts, review_reason, contact_phone, created_at, updated_at, next_attempt_at) \
             select 'site:b' || i, case when i % 3 = 0 then 'tilda' else 'site' end, {status}, 'h' || i, \
             '{{\"name\":\"Client\",\"phone\":\"+79990000000\"}}', \
             case when i % 100 = 0 or i % 250 = 1 then null else '' || (100000 + i) end, \
             case when i % 100 = 0 or i % 250 = 1 then null else 'created' end, 1, \
             case when i % 100 = 0 then 'uncertain_outcome' end, '+7999' || (i % 400000), {ts}, {ts}, {ts} \
             from ({rows}) as q"
        ),
        format!(
            "insert into deliveries (source, operation_id, received_at, payload, payload_hash, outcome, transform_version) \
             select 'site', 'site:b' || i, {ts}, '{{}}', 'h' || i, 'new', 1 from ({rows}) as q"
        ),
        format!(
            "insert into timeline (operation_id, at, kind, actor, detail) \
             select 'site:b' || i, {ts}, k.kind, 'bench', '{{}}' from ({rows}) as q \
             cross join (select 'delivery' as kind union all select 'claimed' union all select 'crm_created') as k"
        ),
        format!(
            "insert into review_cases (operation_id, reason, opened_at, detail) \
             select 'site:b' || i, 'uncertain_outcome', {ts}, '{{}}' from ({rows}) as q where i % 100 = 0"
        ),
    ]
}

async fn median<F, Fut, T, E>(what: &str, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Debug,
{
    let mut times = vec![];
    for _ in 0..7 {
        let t = Instant::now();
        f().await.expect(what);
        times.push(t.elapsed());
    }
    times.sort();
    println!("{what:<34} {:>8.1} ms", times[3].as_secs_f64() * 1000.0);
    times[3]
}

/// Where migration 0004's backfill of the counters starts.
const BACKFILL: &str = "-- What a database migrated from an earlier version already holds.";

async fn run(url: &str, n: u64) {
    let pg = url.starts_with("postgres");
    // Migrates the empty database.
    drop(store::connect(url).await.expect("connect"));
    let t = Instant::now();
    if pg {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        // One statement updating one counter row a million times would build a million
        // row versions in one transaction (PostgreSQL walks them all on every update); real
        // traffic touches it once per transaction. So the load goes in with the triggers off
        // and the counters are rebuilt by the migration's own backfill, as for a database
        // upgraded to it.
        sqlx::query("set session_replication_role = replica")
            .execute(&mut c)
            .await
            .unwrap();
        for sql in seed_sql(true, n) {
            sqlx::query(&sql).execute(&mut c).await.unwrap();
        }
        sqlx::query("set session_replication_role = origin")
            .execute(&mut c)
            .await
            .unwrap();
        let migration = include_str!("../migrations/postgres/0004_metric_counters.sql");
        let backfill = migration
            .split_once(BACKFILL)
            .expect("the migration's backfill section")
            .1;
        sqlx::query("truncate metric_counters, metric_series")
            .execute(&mut c)
            .await
            .unwrap();
        sqlx::raw_sql(backfill).execute(&mut c).await.unwrap();
        sqlx::query("vacuum analyze").execute(&mut c).await.unwrap();
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        for sql in seed_sql(false, n) {
            sqlx::query(&sql).execute(&mut c).await.unwrap();
        }
        sqlx::query("analyze").execute(&mut c).await.unwrap();
    }
    let console = Console::open(url).await.expect("open");
    println!(
        "\n{} with {n} operations (seeded in {:.1?})",
        console.connection.backend,
        t.elapsed()
    );
    let case_op = format!("site:b{}", n / 200 * 100);
    let mut worst = Duration::ZERO;
    let mut timed = |d: Duration| worst = worst.max(d);
    timed(median("tab counts", || console.counts()).await);
    timed(
        median("queue: needs review, page 1", || {
            console.queue(Tab::NeedsReview, QueueQuery::default())
        })
        .await,
    );
    timed(
        median("queue: needs review, newest", || {
            console.queue(
                Tab::NeedsReview,
                QueueQuery {
                    newest_first: true,
                    ..Default::default()
                },
            )
        })
        .await,
    );
    timed(
        median("queue: failed, page 1", || {
            console.queue(Tab::FailedTerminal, QueueQuery::default())
        })
        .await,
    );
    timed(
        median("case + timeline + candidates", || {
            console.case_detail(&case_op, None, None)
        })
        .await,
    );
    for range in [Range::Day, Range::Month] {
        timed(
            median(&format!("dashboard ({range:?})"), || {
                console.dashboard(range)
            })
            .await,
        );
    }
    let s = console.store();
    median("  of which metrics", || {
        s.metrics(store::now(), Duration::from_secs(120))
    })
    .await;
    median("  of which series (24 h, 48)", || {
        s.series(store::now() - chrono::TimeDelta::days(1), store::now(), 48)
    })
    .await;
    println!(
        "{:<34} {:>8.1} ms  (target 250 ms: {})",
        "slowest screen",
        worst.as_secs_f64() * 1000.0,
        if worst <= Duration::from_millis(250) {
            "met"
        } else {
            "MISSED"
        }
    );
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; a number is N.
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    println!("Leadgate console benchmark: the console's calls over a large database");
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("console.db").display()
    );
    run(&sqlite, n).await;

    leadgate_testkit::db::on_scratch_postgres("lg_console_bench", |url| async move {
        run(&url, n).await
    })
    .await;
}
