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

/// First names (each is every 40th lead: a prefix that matches many), syllables of
/// surnames and their endings: 40 × 20³ × 4 = 1,280,000 distinct names.
const FIRST_NAMES: [&str; 40] = [
    "Иван",
    "Пётр",
    "Анна",
    "Мария",
    "Алексей",
    "Елена",
    "Дмитрий",
    "Ольга",
    "Сергей",
    "Наталья",
    "Андрей",
    "Татьяна",
    "Михаил",
    "Ирина",
    "Николай",
    "Светлана",
    "Владимир",
    "Юлия",
    "Павел",
    "Екатерина",
    "Артём",
    "Ксения",
    "Роман",
    "Дарья",
    "Егор",
    "Полина",
    "Кирилл",
    "Софья",
    "Максим",
    "Вера",
    "Олег",
    "Алина",
    "Игорь",
    "Марина",
    "Денис",
    "Людмила",
    "John",
    "Emma",
    "Léa",
    "Zoë",
];
const SYLLABLES: [&str; 20] = [
    "ба", "ве", "го", "ду", "же", "за", "ки", "ло", "ма", "не", "по", "ру", "са", "те", "фу", "ха",
    "це", "ча", "ши", "ю",
];
const ENDINGS: [&str; 4] = ["ов", "ин", "ев", "ский"];

/// The lookup tables the seed joins: (k, display, search word as `domain::search` makes it).
fn name_tables() -> Vec<String> {
    let table = |name: &str, items: &[&str]| {
        let rows: Vec<String> = items
            .iter()
            .enumerate()
            .map(|(k, v)| {
                let w = leadgate::domain::search::words(v).join("");
                format!("({k}, '{v}', '{w}')")
            })
            .collect();
        [
            format!("create temp table {name} (k integer primary key, v text not null, w text not null)"),
            format!("insert into {name} (k, v, w) values {}", rows.join(", ")),
        ]
    };
    [
        table("b_first", &FIRST_NAMES),
        table("b_syl", &SYLLABLES),
        table("b_end", &ENDINGS),
    ]
    .concat()
}

/// Lead `i`'s name: first name, surname; the search words of both.
const NAME_JOINS: &str = "join b_first f on f.k = i % 40 join b_syl s1 on s1.k = (i / 40) % 20 \
     join b_syl s2 on s2.k = (i / 800) % 20 join b_syl s3 on s3.k = (i / 16000) % 20 \
     join b_end e on e.k = (i / 320000) % 4";
const SURNAME: &str = "s1.v || s2.v || s3.v || e.v";
const SURNAME_WORD: &str = "s1.w || s2.w || s3.w || e.w";

fn seed_sql(pg: bool, n: u64) -> Vec<String> {
    // One base time for every statement: an operation's name rows carry its created_at.
    let base = store::local_now().format("%Y-%m-%dT%H:%M:%S");
    let (rows, ts, phone) = if pg {
        (
            format!("select i from generate_series(1, {n}) as s(i)"),
            format!("(timestamptz '{base}+00:00' - (i || ' seconds')::interval)"),
            "'+7999' || lpad(i::text, 7, '0')",
        )
    } else {
        (
            format!("with recursive s(i) as (select 1 union all select i + 1 from s where i < {n}) select i from s"),
            format!("strftime('%Y-%m-%dT%H:%M:%f+00:00', '{base}', '-' || i || ' seconds')"),
            "printf('+7999%07d', i)",
        )
    };
    let status = "case when i % 100 = 0 then 'needs_review' when i % 250 = 1 then 'failed_terminal' else 'completed' end";
    let mut sql = name_tables();
    sql.extend([
        format!(
            "insert into operations (operation_id, source, status, payload_hash, payload, crm_id, crm_link, \
             attempts, review_reason, contact_phone, contact_email, contact_name, name_words, \
             created_at, updated_at, next_attempt_at) \
             select 'site:b' || i, case when i % 3 = 0 then 'tilda' else 'site' end, {status}, 'h' || i, \
             '{{\"name\":\"Client\",\"phone\":\"+79990000000\"}}', \
             case when i % 100 = 0 or i % 250 = 1 then null else '' || (100000 + i) end, \
             case when i % 100 = 0 or i % 250 = 1 then null else 'created' end, 1, \
             case when i % 100 = 0 then 'uncertain_outcome' end, {phone}, 'client' || i || '@example.com', \
             f.v || ' ' || {SURNAME}, ' ' || f.w || ' ' || {SURNAME_WORD} || ' ', {ts}, {ts}, {ts} \
             from ({rows}) as q {NAME_JOINS}"
        ),
        format!(
            "insert into operation_names (word, created_at, operation_id) \
             select f.w, {ts}, 'site:b' || i from ({rows}) as q {NAME_JOINS} \
             union all select {SURNAME_WORD}, {ts}, 'site:b' || i from ({rows}) as q {NAME_JOINS}"
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
    ]);
    sql
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
        let migration =
            include_str!("../crates/leadgate-store/migrations/postgres/0004_metric_counters.sql");
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
    search(&console, n).await;
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

/// The first page (50) of each kind of search query, median of 7 runs each, under the
/// plan `Store::search` chooses (`Auto`) and, for comparison, each plan forced; against a
/// reference measured in the same run (a primary-key read, `Store::operation`).
async fn search(console: &Console, n: u64) {
    use leadgate::domain::contact::Region;
    use store::{SearchPlan, SearchQuery};
    let s = console.store();
    let mid = n / 2 + 3; // completed: i % 100 and i % 250 leave it alone
    let key: leadgate::domain::OperationId = format!("site:b{mid}").parse().unwrap();
    let reference = median("reference: one operation by key", || s.operation(&key)).await;
    // Lead `i` has first name i % 40 and surname syllables (i/40)%20, (i/800)%20, (i/16000)%20.
    let sur = |i: u64| {
        let syl = |k: u64| SYLLABLES[(k % 20) as usize];
        format!(
            "{}{}{}{}",
            syl(i / 40),
            syl(i / 800),
            syl(i / 16000),
            ENDINGS[((i / 320_000) % 4) as usize]
        )
    };
    let queries: Vec<(&str, String)> = vec![
        ("key, exact", format!("site:b{mid}")),
        ("key prefix (1,111 of 1M)", format!("site:b{}", mid / 1000)),
        ("key prefix, all match", "site:b".into()),
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
            format!("иван {}", sur(40 * 7).chars().take(4).collect::<String>()),
        ),
        ("two first names, no lead has both", "иван мария".into()),
        ("text matching nothing", "zzzzzz".into()),
        ("phone matching nothing", "+7 999 999-99-99".into()),
    ];
    println!(
        "{:<34} {:>8} {:>8} {:>8} {:>6} {:>8}",
        "search (first page of 50)", "auto ms", "ranges", "walk", "hits", "× ref"
    );
    let mut worst = Duration::ZERO;
    for (what, raw) in &queries {
        let q = SearchQuery::parse(raw, Region::default()).expect(what);
        let mut hits = 0;
        let mut row = vec![];
        for plan in [SearchPlan::Auto, SearchPlan::Ranges, SearchPlan::Walk] {
            let skip_walk = plan == SearchPlan::Walk && !matches!(q, SearchQuery::Text { .. });
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
            "  {:<32} {:>8} {:>8} {:>8} {:>6} {:>8.1}",
            what,
            ms(row[0]),
            ms(row[1]),
            ms(row[2]),
            hits,
            auto.as_secs_f64() / reference.as_secs_f64()
        );
    }
    // The next page of a query that matches many.
    let q = SearchQuery::parse("иван", Region::default()).unwrap();
    let first = s.search(&q, None, 50, SearchPlan::Auto).await.unwrap();
    let next = first.next.expect("more than a page");
    let page2 = median("  first name, page 2", || {
        s.search(&q, Some(&next), 50, SearchPlan::Auto)
    })
    .await;
    worst = worst.max(page2);
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
