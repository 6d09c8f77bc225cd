//! How fast the console's screens load over a large operations database.
//!
//! `cargo run --release -p leadgate-console --example console_bench -- URL [N]`
//! URL: `sqlite:///tmp/bench.db?mode=rwc` or a PostgreSQL database URL (its tables are
//! filled: use a scratch database). N operations (default 1,000,000) are bulk-inserted with
//! plain SQL — this is a load generator, not part of the console — with a delivery and three
//! timeline events each; every 100th is in review, every 250th failed. Then the console's
//! calls are timed (median of 7): tab counts, the queue's first page, a case with its
//! timeline, the dashboard.

use std::time::{Duration, Instant};

use leadgate::console_api::{Console, QueueQuery, Range, Tab};
use leadgate::store;
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
    println!("{what:<28} {:>8.1} ms", times[3].as_secs_f64() * 1000.0);
    times[3]
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args.next().expect("usage: console_bench URL [N]");
    let n: u64 = args
        .next()
        .map(|s| s.parse().expect("N"))
        .unwrap_or(1_000_000);
    let pg = url.starts_with("postgres");
    let store = store::connect(&url).await.expect("connect");
    let existing = store
        .metrics(store::now(), Duration::from_secs(120))
        .await
        .unwrap()
        .unique_operations;
    if existing == 0 {
        let t = Instant::now();
        if pg {
            let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
            for sql in seed_sql(true, n) {
                sqlx::query(&sql).execute(&mut c).await.unwrap();
            }
            sqlx::query("analyze").execute(&mut c).await.unwrap();
        } else {
            let mut c = sqlx::SqliteConnection::connect(&url).await.unwrap();
            for sql in seed_sql(false, n) {
                sqlx::query(&sql).execute(&mut c).await.unwrap();
            }
            sqlx::query("analyze").execute(&mut c).await.unwrap();
        }
        println!("seeded {n} operations in {:.1?}", t.elapsed());
    }
    drop(store);
    let console = Console::open(&url).await.expect("open");
    println!("{} with {n} operations", console.connection.backend);
    let case_op = format!("site:b{}", n / 200 * 100);
    median("tab counts", || console.counts()).await;
    median("queue: first page (50)", || {
        console.queue(Tab::NeedsReview, QueueQuery::default())
    })
    .await;
    median("queue: failed, first page", || {
        console.queue(Tab::FailedTerminal, QueueQuery::default())
    })
    .await;
    median("case + timeline + candidates", || {
        console.case_detail(&case_op, None, None)
    })
    .await;
    median("dashboard (24 h)", || console.dashboard(Range::Day)).await;
    let s = console.store();
    median("  of which metrics", || {
        s.metrics(store::now(), Duration::from_secs(120))
    })
    .await;
    median("  of which series (48)", || {
        s.series(store::now() - chrono::TimeDelta::days(1), store::now(), 48)
    })
    .await;
}
