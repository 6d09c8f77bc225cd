//! `make bench`: intake throughput and latency on SQLite and PostgreSQL, next to the raw
//! commit rate of the same database (one single-row insert per transaction: the physical
//! limit of a durable claim). Real HTTP on loopback, bounded concurrency, fixed duration.
//!
//! PostgreSQL: `LEADGATE_BENCH_DATABASE_URL` or `LEADGATE_TEST_DATABASE_URL` names the
//! server; a database is created for the run and dropped after. When `pgbench` is on the
//! PATH it measures the same server in the same run (`insert … on conflict do nothing`,
//! one row per transaction, 8 clients): the reference issue 15 names.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leadgate::config::RetryConfig;
use leadgate::intake::{self, sources, ClaimApi, IntakeState};
use leadgate::store::{self, Store};
use tokio::sync::Semaphore;

const OFFERED_RATE: u64 = 1000;
const FIXED_SECS: u64 = 5;
const WARMUP_SECS: u64 = 1;
const SATURATION_SECS: u64 = 5;
const CONCURRENCY: usize = 32;
const RAW_SECS: u64 = 3;
const PGBENCH_SECS: u64 = 5;
const PGBENCH_CLIENTS: usize = 8;

struct Figures {
    throughput: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: usize,
}

fn figures(mut lat: Vec<Duration>, elapsed: Duration, errors: usize) -> Figures {
    lat.sort();
    let pct = |p: f64| {
        if lat.is_empty() {
            return f64::NAN;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[i].as_secs_f64() * 1000.0
    };
    Figures {
        throughput: lat.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        errors,
    }
}

/// A lead with a phone and an e-mail of its own (every lead is normalized and matched
/// against earlier ones, as in production).
fn body(key: &str) -> String {
    let n = key
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
        % 10_000_000;
    format!(
        r#"{{"submission_id":"{key}","name":"Ivan","phone":"+7999{n:07}","email":"{key}@example.com","comment":"bench"}}"#
    )
}

/// A lead whose phone every other lead of the run shares too (a placeholder number a
/// form's visitors type, a switchboard, a bot), with an e-mail of its own.
fn shared_phone_lead(key: &str) -> Request {
    (
        "application/json",
        format!(
            r#"{{"submission_id":"{key}","name":"Ivan","phone":"+79990000000","email":"{key}@example.com","comment":"bench"}}"#
        ),
    )
}

/// What one request sends: a content type and a body.
type Request = (&'static str, String);

/// A lead under `key`.
fn lead(key: &str) -> Request {
    ("application/json", body(key))
}

/// Tilda's connection check (`test=test` as a form): authenticated, parsed and answered
/// like a delivery, but nothing is stored — the HTTP floor every delivery stands on.
fn connection_check() -> Request {
    ("application/x-www-form-urlencoded", "test=test".to_owned())
}

async fn send(client: &reqwest::Client, url: &str, (content_type, body): Request) -> bool {
    match client
        .post(url)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
    {
        Ok(r) => r.status().is_success(),
        Err(_) => false,
    }
}

/// Open loop: request i is due at start + i/rate; latency counts from when it was due,
/// so a slow server cannot hide its queueing (no coordinated omission). `secs` of it.
async fn fixed_rate(client: &reqwest::Client, url: &str, prefix: &str, secs: u64) -> Figures {
    let total = OFFERED_RATE * secs;
    let limit = Arc::new(Semaphore::new(512));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = start + Duration::from_micros(i * 1_000_000 / OFFERED_RATE);
        tokio::time::sleep_until(due.into()).await;
        let permit = Arc::clone(&limit).acquire_owned().await.unwrap();
        let (client, url, key) = (client.clone(), url.to_owned(), format!("{prefix}-{i}"));
        tasks.push(tokio::spawn(async move {
            let ok = send(&client, &url, lead(&key)).await;
            drop(permit);
            (ok, due.elapsed())
        }));
    }
    let mut lat = Vec::with_capacity(tasks.len());
    let mut errors = 0;
    for t in tasks {
        let (ok, d) = t.await.unwrap();
        if ok {
            lat.push(d)
        } else {
            errors += 1
        }
    }
    figures(lat, start.elapsed(), errors)
}

/// Closed loop: CONCURRENCY clients send back to back for `secs`. `requests` makes
/// request n of client c.
async fn saturate(
    client: &reqwest::Client,
    url: &str,
    secs: u64,
    requests: impl Fn(usize, usize) -> Request + Send + Sync + 'static,
) -> Figures {
    let keys = Arc::new(requests);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|c| {
            let (client, url, keys) = (client.clone(), url.to_owned(), Arc::clone(&keys));
            tokio::spawn(async move {
                let (mut lat, mut errors, mut n) = (Vec::new(), 0, 0);
                while Instant::now() < deadline {
                    let t = Instant::now();
                    if send(&client, &url, keys(c, n)).await {
                        lat.push(t.elapsed())
                    } else {
                        errors += 1
                    }
                    n += 1;
                }
                (lat, errors)
            })
        })
        .collect();
    let (mut lat, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (l, e) = t.await.unwrap();
        lat.extend(l);
        errors += e;
    }
    figures(lat, start.elapsed(), errors)
}

/// Single-row inserts, one per transaction, from CONCURRENCY tasks, through the same
/// connections the store writes with (SQLite: its one writer connection).
async fn raw_commit_rate(url: &str) -> f64 {
    macro_rules! run {
        ($pool:expr, $create:literal) => {{
            let pool = $pool.clone();
            sqlx::query($create).execute(&pool).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(RAW_SECS);
            let start = Instant::now();
            let tasks: Vec<_> = (0..CONCURRENCY)
                .map(|_| {
                    let pool = pool.clone();
                    tokio::spawn(async move {
                        let mut n = 0u64;
                        while Instant::now() < deadline {
                            sqlx::query("insert into bench_raw (v) values ('x')")
                                .execute(&pool)
                                .await
                                .unwrap();
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            let mut total = 0;
            for t in tasks {
                total += t.await.unwrap();
            }
            total as f64 / start.elapsed().as_secs_f64()
        }};
    }
    if url.starts_with("sqlite:") {
        let s = store::sqlite::SqliteStore::connect(url).await.unwrap();
        run!(
            s.pool(),
            "create table bench_raw (id integer primary key autoincrement, v text)"
        )
    } else {
        let s = store::postgres::PgStore::connect(url).await.unwrap();
        run!(
            s.pool(),
            "create table bench_raw (id bigserial primary key, v text)"
        )
    }
}

/// `pgbench` on the same server: one `insert … on conflict do nothing` of a random key per
/// transaction, prepared, PGBENCH_CLIENTS clients. `None` without pgbench.
async fn pgbench_rate(url: &str) -> Option<f64> {
    let s = store::postgres::PgStore::open(url).await.unwrap();
    sqlx::query("create table bench_pgbench (k bigint primary key)")
        .execute(s.pool())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("insert.sql");
    std::fs::write(
        &script,
        "\\set k random(1, 9000000000000)\n\
         insert into bench_pgbench (k) values (:k) on conflict do nothing;\n",
    )
    .unwrap();
    let out = tokio::process::Command::new("pgbench")
        .args(["-n", "-M", "prepared", "-j", "2"])
        .args(["-c", &PGBENCH_CLIENTS.to_string()])
        .args(["-T", &PGBENCH_SECS.to_string()])
        .arg("-f")
        .arg(&script)
        .arg(url)
        .output()
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let tps = text
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok());
    if tps.is_none() {
        eprintln!(
            "pgbench gave no figure: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    tps
}

async fn bench(label: &str, url: &str) {
    let store: Arc<dyn Store> = store::connect(url).await.expect("open the store");
    let source = leadgate::config::Config::parse(
        "[database]\nurl = \"sqlite::memory:\"\n[[source]]\nname = \"site\"\nkey = \"json:/submission_id\"\n\
         token = \"bench-token\"\n",
    )
    .unwrap()
    .sources;
    let state = IntakeState {
        store: Arc::clone(&store),
        api_tokens: Default::default(),
        sources: Arc::new(sources::sources(&source).unwrap()),
        max_body: 256 * 1024,
        body_timeout: Duration::from_secs(30),
        claim_api: Arc::new(ClaimApi {
            source: "api".into(),
            lease: Duration::from_secs(60),
            retry: RetryConfig::default(),
        }),
        tombstone: Duration::from_secs(400 * 86400),
        stale_after: Duration::from_secs(120),
        matching: intake::MatchingSettings {
            region: Default::default(),
            window: Duration::from_secs(14 * 86400),
            shared_after: leadgate::store::Matching::SHARED_AFTER,
        },
        rules: Default::default(),
        refusals: Default::default(),
        tenant: leadgate::domain::TenantSlug::default_tenant(),
        tenants: Default::default(),
        spool: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url_intake = format!(
        "http://{}/v1/intake/site?token=bench-token",
        listener.local_addr().unwrap()
    );
    let server =
        tokio::spawn(async move { axum::serve(listener, intake::router(state)).await.unwrap() });
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .build()
        .unwrap();

    // The first requests open the load generator's connections and the store's pool
    // (PostgreSQL: TLS, and each connection plans the intake once): not measured.
    fixed_rate(&client, &url_intake, "warm", WARMUP_SECS).await;
    let fixed = fixed_rate(&client, &url_intake, "fixed", FIXED_SECS).await;
    let sat = saturate(&client, &url_intake, SATURATION_SECS, |c, n| {
        lead(&format!("sat-{c}-{n}"))
    })
    .await;
    // Issue 32, point 9: the same load with one phone on every lead, right after the
    // distinct phones, in the same run.
    let shared = saturate(&client, &url_intake, SATURATION_SECS, |c, n| {
        shared_phone_lead(&format!("shared-{c}-{n}"))
    })
    .await;
    let dup = saturate(&client, &url_intake, 3, |c, n| {
        lead(&format!("fixed-{}", (c * 7919 + n) % 1000))
    })
    .await;
    let floor = saturate(&client, &url_intake, 3, |_, _| connection_check()).await;
    server.abort();
    let raw = raw_commit_rate(url).await;
    let pgbench = if url.starts_with("sqlite:") {
        None
    } else {
        pgbench_rate(url).await
    };

    println!("\n{label}");
    println!("  (the offered-rate figures follow {WARMUP_SECS} s at the same rate, not measured)");
    println!(
        "  {:<44} {:>10} {:>9} {:>9} {:>7}",
        "", "req/s", "p50 ms", "p99 ms", "errors"
    );
    let row = |name: &str, f: &Figures| {
        println!(
            "  {name:<44} {:>10.0} {:>9.2} {:>9.2} {:>7}",
            f.throughput, f.p50_ms, f.p99_ms, f.errors
        );
    };
    row(
        &format!("new leads at {OFFERED_RATE} req/s offered ({FIXED_SECS} s)"),
        &fixed,
    );
    row(
        &format!("new leads at saturation ({CONCURRENCY} clients)"),
        &sat,
    );
    row(
        &format!("new leads, one shared phone ({CONCURRENCY} clients)"),
        &shared,
    );
    row(&format!("duplicate replays ({CONCURRENCY} clients)"), &dup);
    row(
        &format!("HTTP floor: connection checks ({CONCURRENCY} clients)"),
        &floor,
    );
    println!(
        "  {:<44} {:>10.0}",
        "raw commit rate (1 insert / transaction)", raw
    );
    if let Some(tps) = pgbench {
        println!(
            "  {:<44} {:>10.0}",
            format!("pgbench insert … on conflict ({PGBENCH_CLIENTS} clients)"),
            tps
        );
    }
    let ratio = |name: &str, v: f64| println!("  {name:<44} {v:>10.2}");
    ratio("new leads / raw commit rate", sat.throughput / raw);
    if let Some(tps) = pgbench {
        ratio("new leads / pgbench", sat.throughput / tps);
    }
    ratio(
        "one shared phone / distinct phones",
        shared.throughput / sat.throughput,
    );
    ratio(
        "p99: one shared phone / distinct phones",
        shared.p99_ms / sat.p99_ms,
    );
    ratio("duplicates / new leads", dup.throughput / sat.throughput);
    ratio("HTTP floor / new leads", floor.throughput / sat.throughput);
}

#[tokio::main]
async fn main() {
    println!("Leadgate intake benchmark: loopback HTTP, load generator in the same process");
    println!(
        "({} cores; client and server share them)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // `LEADGATE_BENCH_ONLY=sqlite` or `=postgres`: one backend (while profiling).
    let only = std::env::var("LEADGATE_BENCH_ONLY").unwrap_or_default();
    if only != "postgres" {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("bench.db").display()
        );
        bench("SQLite (WAL, synchronous=FULL)", &sqlite).await;
    }
    if only != "sqlite" {
        leadgate_testkit::db::on_scratch_postgres("lg_bench", |url| async move {
            bench("PostgreSQL", &url).await
        })
        .await;
    }
}
