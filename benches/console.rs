//! How fast the console's screens load over a large operations database (`make bench`).
//!
//! `cargo bench --bench console [-- N]`: on SQLite (a temporary file) and on PostgreSQL (a
//! database created on `LEADGATE_BENCH_DATABASE_URL` or `LEADGATE_TEST_DATABASE_URL`'s
//! server and dropped after), N operations (default 1,000,000, one per second of the last
//! N seconds) are bulk-inserted with plain SQL — a load generator, not part of the
//! console; the metric triggers count them as they would count real traffic — with a
//! delivery and three timeline events each; every 100th is in review, every 250th failed
//! (the loader is `benches/support/load.rs`, shared with `benches/web_console.rs`).
//! Then the console's calls are timed (median of 7): tab counts, the queue's first pages,
//! a case with its timeline, the dashboard (target: each within 250 ms).

#[path = "support/load.rs"]
#[allow(dead_code)] // each bench uses its part
mod load;

use std::time::{Duration, Instant};

use leadgate::store;
use leadgate_console_model::{Console, QueueQuery, Range, Tab};

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

/// The console's screens and searches over `n` operations in a fleet of `tenants`: as
/// the default tenant's console and, in a fleet, as tenant `t1`'s (`Console::with_tenant`).
async fn run(url: &str, n: u64, tenants: u64, keep: bool) {
    let seeded = if keep && loaded(url).await {
        None
    } else {
        Some(load::load_fleet(url, n, tenants).await)
    };
    let console = Console::open(url).await.expect("open");
    println!(
        "\n{} with {n} operations in {tenants} tenant(s) ({})",
        console.connection.backend,
        seeded.map_or("loaded before".into(), |d| format!("seeded in {d:.1?}"))
    );
    let mut views = vec![(
        0,
        console.with_tenant("default").expect("the default tenant"),
    )];
    if tenants > 1 {
        views.push((1, console.with_tenant("t1").expect("tenant t1")));
    }
    for (tenant, console) in views {
        let find = |from: u64, ok: &dyn Fn(u64) -> bool| {
            (from..n)
                .find(|&i| load::tenant_of(i, tenants) == tenant && ok(i))
                .expect("a lead")
        };
        println!(
            "-- tenant {} ({} of the operations)",
            console.connection.tenant,
            if tenant == 0 { "half" } else { "its share" }
        );
        let case_op = load::key(find(n / 2, &|i| i % 100 == 0), tenants);
        let mut worst = screens(&console, &case_op).await;
        let mid = find(n / 2 + 3, &|i| i % 100 != 0 && i % 250 != 1);
        let ivan = find(mid, &|i| i % 40 == 0);
        worst = worst.max(search(&console, mid, ivan, tenants).await);
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
}

/// Whether the database at `url` already holds the benchmark's operations (migrated
/// to this build's schema first).
async fn loaded(url: &str) -> bool {
    let store = store::connect(url).await.expect("connect");
    let any: leadgate::domain::OperationId = "site:b1".parse().unwrap();
    matches!(store.operation(&any).await, Ok(Some(_)))
}

/// The console's screens (each the median of 7), the slowest of them.
async fn screens(console: &Console, case_op: &str) -> Duration {
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
            console.case_detail(case_op, None, None)
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
        s.metrics(store::local_now(), Duration::from_secs(120))
    })
    .await;
    median("  of which series (24 h, 48)", || {
        s.series(
            store::local_now() - chrono::TimeDelta::days(1),
            store::local_now(),
            48,
        )
    })
    .await;
    worst
}

/// The first page (50) of each kind of search query, median of 7 runs each, under the
/// plan `Store::search` chooses (`Auto`) and, for comparison, each plan forced; against a
/// reference measured in the same run (a primary-key read, `Store::operation`).
/// `mid` is a completed lead of the console's tenant, `ivan` one named Иван.
async fn search(console: &Console, mid: u64, ivan: u64, tenants: u64) -> Duration {
    use leadgate::domain::contact::Region;
    use store::{SearchPlan, SearchQuery};
    let s = console.store();
    let mid_key = load::key(mid, tenants);
    let key: leadgate::domain::OperationId = mid_key.parse().unwrap();
    let reference = median("reference: one operation by key", || s.operation(&key)).await;
    let sur = load::surname;
    let queries: Vec<(&str, String)> = vec![
        ("key, exact", mid_key.clone()),
        (
            "key prefix (a thousand)",
            mid_key[..mid_key.len() - 3].into(),
        ),
        (
            "key prefix, all match",
            mid_key[..mid_key.find("site:b").unwrap() + 6].into(),
        ),
        (
            "phone, another format",
            format!(
                "8 (999) {:03}-{:02}-{:02}",
                mid / 10_000 % 1000,
                mid / 100 % 100,
                mid % 100
            ),
        ),
        ("e-mail, upper case", format!("Client{mid}@Example.COM")),
        ("crm_id", format!("{}", 100_000 + mid)),
        ("surname, whole (~31)", sur(mid)),
        (
            "surname prefix (~1 in 400)",
            sur(mid).chars().take(4).collect(),
        ),
        ("first name (1 in 40)", "иван".into()),
        ("first-name prefix, many", "м".into()),
        (
            "first name + surname prefix",
            format!("иван {}", sur(ivan).chars().take(4).collect::<String>()),
        ),
        ("two first names, no lead has both", "иван мария".into()),
        ("text matching nothing", "zzzzzz".into()),
        ("phone matching nothing", "+7 999 999-99-99".into()),
    ];
    println!(
        "{:<34} {:>8} {:>8} {:>8} {:>8} {:>6} {:>8}",
        "search (first page of 50)", "auto ms", "ranges", "pairs", "walk", "hits", "× ref"
    );
    let mut worst = Duration::ZERO;
    for (what, raw) in &queries {
        let q = SearchQuery::parse(raw, Region::default()).expect(what);
        let mut hits = 0;
        let mut row = vec![];
        for plan in [
            SearchPlan::Auto,
            SearchPlan::Ranges,
            SearchPlan::Pairs,
            SearchPlan::Walk,
        ] {
            let skip_walk = matches!(plan, SearchPlan::Walk | SearchPlan::Pairs)
                && !matches!(q, SearchQuery::Text { .. });
            if skip_walk {
                row.push(None);
                continue;
            }
            let mut times = vec![];
            for _ in 0..7 {
                let t = Instant::now();
                let page = s.search(&q, None, 50, plan).await.expect(what);
                times.push(t.elapsed());
                hits = page.hits.len();
            }
            times.sort();
            row.push(Some(times[3]));
        }
        let ms = |d: Option<Duration>| {
            d.map_or("-".to_string(), |d| {
                format!("{:.1}", d.as_secs_f64() * 1000.0)
            })
        };
        let auto = row[0].unwrap();
        worst = worst.max(auto);
        println!(
            "  {:<32} {:>8} {:>8} {:>8} {:>8} {:>6} {:>8.1}",
            what,
            ms(row[0]),
            ms(row[1]),
            ms(row[2]),
            ms(row[3]),
            hits,
            auto.as_secs_f64() / reference.as_secs_f64()
        );
    }
    // The next page of a query that matches many.
    let q = SearchQuery::parse("иван", Region::default()).unwrap();
    let first = s.search(&q, None, 50, SearchPlan::Auto).await.unwrap();
    if let Some(next) = first.next {
        let page2 = median("  first name, page 2", || {
            s.search(&q, Some(&next), 50, SearchPlan::Auto)
        })
        .await;
        worst = worst.max(page2);
    }
    println!(
        "{:<34} {:>8.1} ms  (target 100 ms: {})",
        "slowest search (auto)",
        worst.as_secs_f64() * 1000.0,
        if worst <= Duration::from_millis(100) {
            "met"
        } else {
            "MISSED"
        }
    );
    worst
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; a number is N.
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    // A fleet: the default tenant holds half the operations, tenants t1… the rest.
    let tenants: u64 = std::env::var("LEADGATE_BENCH_TENANTS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1)
        .max(1);
    // A directory to keep the databases in (SQLite's file; PostgreSQL's database is kept
    // too), loaded once and read again by the next run with the same N and tenants.
    let keep = std::env::var("LEADGATE_BENCH_KEEP").ok();
    let only = std::env::var("LEADGATE_BENCH_ONLY").unwrap_or_default();
    println!("Leadgate console benchmark: the console's calls over a large database");
    let dir = tempfile::tempdir().unwrap();
    let name = format!("lg_console_{n}_{tenants}");
    if only != "postgres" {
        let file = match &keep {
            Some(k) => std::path::Path::new(k).join(format!("{name}.db")),
            None => dir.path().join("console.db"),
        };
        let sqlite = format!("sqlite://{}?mode=rwc", file.display());
        run(&sqlite, n, tenants, keep.is_some()).await;
    }
    if only == "sqlite" {
        return;
    }
    if keep.is_some() {
        let url = leadgate_testkit::db::kept_postgres(&name).await;
        run(&url, n, tenants, true).await;
    } else {
        leadgate_testkit::db::on_scratch_postgres("lg_console_bench", |url| async move {
            run(&url, n, tenants, false).await
        })
        .await;
    }
}
