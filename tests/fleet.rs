//! The fleet's noisy neighbours, bounded so `make test` runs it (`make fleet` runs 500
//! tenants): one gateway serves many tenants, each on a fake Bitrix24 of its own that
//! enforces the documented limit (2 requests/s, 50 at once). First every quiet tenant
//! gets its leads alone (the baseline); then tenant `dead`'s portal stops answering (it
//! takes connections and never says a byte) with a backlog of leads, tenant `flood`
//! sends leads as fast as a busy form does, and the quiet tenants get the same number of
//! leads again. Printed per backend: each round's delay from intake to the CRM's entity
//! (p50, p95; goal for the loaded round: p95 within 2× the baseline of the same run),
//! what the flood got done meanwhile, and the process's resident memory.
//!
//! Checked whatever the machine's speed: every quiet lead reaches its own portal once,
//! the flood's leads are never created twice, and the dead portal's leads are none of
//! them completed. The delays are figures, not assertions (a busy machine moves them).
//!
//! Onboarding: `leadgate tenant apply` (the binary, as an integrator runs it) takes a CSV
//! of tenants, half on Bitrix24 and half on amoCRM, over a defaults file; applying the same
//! file again changes nothing. Printed: the time of each (goal: 500 tenants within 60 s).
//!
//! Sizes come from the environment: `LEADGATE_FLEET_TENANTS` (quiet tenants, default 20),
//! `LEADGATE_FLEET_LEADS` (leads per quiet tenant and round, 2), `LEADGATE_FLEET_BACKLOG`
//! (the dead tenant's backlog, 200), `LEADGATE_FLEET_FLOOD` (the flood's leads a second,
//! 50), `LEADGATE_FLEET_ONBOARD` (the CSV's tenants, 50).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use leadgate::crm::vault::Vault;
use leadgate::domain::Status;
use leadgate::store::Store;
use leadgate_fakes::bitrix24::{FakeBitrix24, RequestLimit};
use leadgate_fakes::black_hole::BlackHole;
use leadgate_testkit::gateway::{Gateway, CREATE};
use leadgate_testkit::{run, Backend, TestDb};
use serde_json::json;

/// The token key `[fleet] token_key_file` names.
const KEY: [u8; 32] = [7; 32];

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Sizes {
    tenants: u64,
    leads: u64,
    backlog: u64,
    flood: u64,
}

impl Sizes {
    fn from_env() -> Sizes {
        Sizes {
            tenants: env_or("LEADGATE_FLEET_TENANTS", 20).max(1),
            leads: env_or("LEADGATE_FLEET_LEADS", 2).max(1),
            backlog: env_or("LEADGATE_FLEET_BACKLOG", 200),
            flood: env_or("LEADGATE_FLEET_FLOOD", 50).max(1),
        }
    }
}

/// A fake Bitrix24 enforcing the documented limit: 2 requests a second, 50 at once.
async fn portal() -> FakeBitrix24 {
    let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    fake.set_request_limit(Some(RequestLimit::CLOUD));
    fake
}

/// A tenant of the tenants file: its slug, CRM webhook and `[tenant]` lines.
fn tenant(slug: &str, url: &str, lines: &str) -> String {
    format!(
        r#"
[[tenant]]
slug = "{slug}"
name = "{slug} portal"
{lines}
[tenant.crm]
kind = "bitrix24"
webhook_url = "{url}"
timeout = "2s"
settle = "1s"
[[tenant.source]]
name = "site"
key = "json:/submission_id"
token = "{slug}-token"
[tenant.api]
read_token = "{slug}-read"
"#
    )
}

/// Posts lead `key` to `slug`'s `site` source, each lead with a phone of its own (people
/// differ); panics unless it is taken.
async fn post(http: &reqwest::Client, base: &str, slug: &str, key: &str) {
    static PHONES: AtomicU64 = AtomicU64::new(0);
    let phone = format!("+7999{:07}", PHONES.fetch_add(1, Ordering::Relaxed));
    let res = http
        .post(format!("{base}/v1/intake/{slug}/site?token={slug}-token"))
        .json(&json!({"submission_id": key, "name": "Ivan", "phone": phone}))
        .send()
        .await
        .unwrap();
    let status = res.status();
    assert_eq!(status, 202, "{slug}/{key}: {}", res.text().await.unwrap());
}

/// Every quiet tenant's leads of `round`, a lead each a second: the ids, and each
/// intake's seconds (the machine's load, as the sender sees it: the reference).
async fn post_round(
    gw: &Gateway,
    quiet: &[String],
    leads: u64,
    round: &str,
) -> (Vec<String>, Vec<f64>) {
    let (mut ids, mut intake) = (vec![], vec![]);
    for n in 0..leads {
        for slug in quiet {
            let key = format!("{round}-{n}");
            let sent = Instant::now();
            post(&gw.http, &gw.base, slug, &key).await;
            intake.push(sent.elapsed().as_secs_f64());
            ids.push(format!("{slug}/site:{key}"));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    (ids, intake)
}

/// Waits until every one of `ids` is completed; each one's seconds from intake to the
/// CRM's entity (the operation's creation to its completion, both the database's clock).
async fn delays(store: &dyn Store, ids: &[String]) -> Vec<f64> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        loop {
            let op = store.operation(&id.parse().unwrap()).await.unwrap();
            if let Some(op) = op.filter(|op| op.status == Status::Completed) {
                out.push((op.updated_at - op.created_at).num_milliseconds() as f64 / 1000.0);
                break;
            }
            assert!(Instant::now() < deadline, "{id} was never completed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    out
}

fn quantile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}

/// The process's resident memory, in MiB (Linux).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// How many `kind` entities `crm` holds, and whether an origin key is there twice.
fn origins(crm: &FakeBitrix24, kind: &str) -> (usize, bool) {
    let mut keys: Vec<String> = crm
        .entities()
        .iter()
        .filter(|e| e.kind == kind)
        .map(|e| {
            e.fields["ORIGIN_ID"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let made = keys.len();
    keys.sort();
    keys.dedup();
    (made, keys.len() != made)
}

async fn noisy_neighbours(db: TestDb) {
    let sizes = Sizes::from_env();
    let backend = db.backend;
    let quiet: Vec<String> = (0..sizes.tenants).map(|i| format!("t{i:03}")).collect();
    let mut portals = Vec::with_capacity(quiet.len());
    let mut file = String::new();
    for slug in &quiet {
        let crm = portal().await;
        file += &tenant(slug, &crm.webhook_url(), "");
        portals.push(crm);
    }
    let dead = BlackHole::spawn().await.unwrap();
    let dead_url = dead.webhook_url();
    let flood_crm = portal().await;
    file += &tenant("dead", &dead_url, "max_in_flight = 2");
    file += &tenant("flood", &flood_crm.webhook_url(), "max_in_flight = 4");
    let applying = Instant::now();
    let wanted = leadgate::config::tenants::parse_toml(&file, None).unwrap();
    leadgate::tenants::apply(
        &*db.store().await,
        &Vault::new(KEY),
        &wanted,
        false,
        false,
        None,
        "fleet test",
    )
    .await
    .unwrap();
    let applied = applying.elapsed();

    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("token.key");
    std::fs::write(&key_file, hex::encode(KEY)).unwrap();
    let extra = format!(
        "[fleet]\ntoken_key_file = {:?}\n",
        key_file.display().to_string()
    );
    let gw = Gateway::start_extended(&db, &extra).await;
    let store = gw.store();
    // Served once the gateway has read the registry: its figures answer its read token.
    let deadline = Instant::now() + Duration::from_secs(60);
    for slug in quiet
        .iter()
        .chain(["dead".to_owned(), "flood".to_owned()].iter())
    {
        loop {
            let res = gw
                .http
                .get(format!("{}/v1/tenants/{slug}/metrics", gw.base))
                .bearer_auth(format!("{slug}-read"))
                .send()
                .await
                .unwrap();
            if res.status() == 200 {
                break;
            }
            let status = res.status();
            assert!(
                Instant::now() < deadline,
                "{slug} is never served: {status} {}",
                res.text().await.unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // The baseline: the quiet tenants alone.
    let (ids, base_intake) = post_round(&gw, &quiet, sizes.leads, "base").await;
    let base = delays(&*store, &ids).await;

    // The dead portal's backlog, then the flood, then the same round again.
    let started = Instant::now();
    futures::stream::iter(0..sizes.backlog)
        .for_each_concurrent(8, |n| {
            let (http, base) = (gw.http.clone(), gw.base.clone());
            async move { post(&http, &base, "dead", &format!("d{n}")).await }
        })
        .await;
    let backlog_posted = started.elapsed();
    let flooding = {
        let (http, base, rate) = (gw.http.clone(), gw.base.clone(), sizes.flood);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1) / rate as u32);
            let mut n = 0u64;
            loop {
                tick.tick().await;
                post(&http, &base, "flood", &format!("f{n}")).await;
                n += 1;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (ids, loaded_intake) = post_round(&gw, &quiet, sizes.leads, "loaded").await;
    let loaded = delays(&*store, &ids).await;
    flooding.abort();
    let flood_calls = flood_crm.calls(CREATE);

    let rss = rss_mib();
    gw.stop().await;
    drop(dead);

    // Every quiet lead reached its own portal, once.
    for (slug, crm) in quiet.iter().zip(&portals) {
        let (made, twice) = origins(crm, "lead");
        assert!(!twice, "{slug}: a lead was created twice");
        assert_eq!(
            made as u64,
            2 * sizes.leads,
            "{slug}'s portal holds its leads"
        );
    }
    let (flood_made, twice) = origins(&flood_crm, "lead");
    assert!(!twice, "a flood lead was created twice");
    let dead_id = store
        .tenants()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.slug == "dead")
        .unwrap()
        .id;
    let dead_store = store.for_tenant(leadgate::domain::TenantId(dead_id));
    for n in 0..sizes.backlog.min(50) {
        let op = dead_store
            .operation(&format!("dead/site:d{n}").parse().unwrap())
            .await
            .unwrap()
            .expect("every lead of the backlog was journaled");
        assert_ne!(op.status, Status::Completed, "{op:?}");
    }

    let (b50, b95) = (quantile(&base, 0.5), quantile(&base, 0.95));
    let (l50, l95) = (quantile(&loaded, 0.5), quantile(&loaded, 0.95));
    let ms = |v: &[f64], q: f64| quantile(v, q) * 1000.0;
    println!(
        "\nfleet, {backend:?}: {} quiet tenants x {} leads a round, lanes 32; tenants applied in {:.1} s\n\
         | round | p50 intake→CRM | p95 intake→CRM | intake's own answer p50 / p95 |\n\
         |---|---|---|---|\n\
         | baseline (quiet tenants alone) | {:.0} ms | {:.0} ms | {:.1} / {:.1} ms |\n\
         | dead portal with {} leads queued + flood at {}/s | {:.0} ms | {:.0} ms | {:.1} / {:.1} ms |\n\
         p95 loaded / baseline: {:.2} (goal ≤ 2); intake's p95 loaded / baseline: {:.2}; the \
         flood's portal took {flood_calls} create calls ({flood_made} leads) meanwhile; the \
         backlog took {:.1} s to post; resident memory of the process (gateway, {} fake \
         portals, this test): {rss:.0} MiB",
        sizes.tenants,
        sizes.leads,
        applied.as_secs_f64(),
        b50 * 1000.0,
        b95 * 1000.0,
        ms(&base_intake, 0.5),
        ms(&base_intake, 0.95),
        sizes.backlog,
        sizes.flood,
        l50 * 1000.0,
        l95 * 1000.0,
        ms(&loaded_intake, 0.5),
        ms(&loaded_intake, 0.95),
        l95 / b95,
        quantile(&loaded_intake, 0.95) / quantile(&base_intake, 0.95),
        backlog_posted.as_secs_f64(),
        sizes.tenants + 1,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn noisy_neighbours_sqlite() {
    run(Backend::Sqlite, noisy_neighbours).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn noisy_neighbours_postgres() {
    run(Backend::Postgres, noisy_neighbours).await;
}

/// `leadgate tenant apply` as a process; its summary.
fn tenant_apply(args: &[&str]) -> (Duration, String) {
    let started = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leadgate"))
        .args(["tenant", "apply"])
        .args(args)
        .output()
        .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tenant apply: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (took, stdout)
}

async fn onboarding(db: TestDb) {
    let n = env_or("LEADGATE_FLEET_ONBOARD", 50).max(2);
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("token.key");
    std::fs::write(&key_file, hex::encode(KEY)).unwrap();
    let config = dir.path().join("leadgate.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = {:?}\n[fleet]\ntoken_key_file = {:?}\n",
            db.url,
            key_file.display().to_string()
        ),
    )
    .unwrap();
    let defaults = dir.path().join("defaults.toml");
    std::fs::write(
        &defaults,
        "[tenant]\nmax_in_flight = 2\n[[tenant.source]]\nname = \"site\"\nkey = \"json:/submission_id\"\n",
    )
    .unwrap();
    // Half on Bitrix24 (an inbound webhook each), half on amoCRM (an account, a token and
    // the key's custom field each).
    let mut csv = String::from(
        "slug,name,crm.kind,crm.webhook_url,crm.base_url,crm.token,crm.operation_field_id,\
         source.site.token,api.integration_token,api.read_token\n",
    );
    for i in 0..n {
        let slug = format!("client-{i:04}");
        let crm = if i % 2 == 0 {
            format!("bitrix24,https://{slug}.bitrix24.ru/rest/1/{slug}-hook/,,,")
        } else {
            format!(
                "amocrm,,https://{slug}.amocrm.ru,{slug}-amo-token,{}",
                1000 + i
            )
        };
        csv += &format!("{slug},Client {i} LLC,{crm},{slug}-site,{slug}-integration,{slug}-read\n");
    }
    let file = dir.path().join("tenants.csv");
    std::fs::write(&file, csv).unwrap();
    let args = [
        file.to_str().unwrap(),
        "--defaults",
        defaults.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ];
    // The schema first, as a deployment's first gateway makes it.
    let store = db.store().await;

    let (first, summary) = tenant_apply(&args);
    assert!(summary.contains("unchanged: 0"), "{summary}");
    let created = summary
        .lines()
        .find_map(|l| l.strip_prefix("created: "))
        .unwrap();
    assert_eq!(created.split(", ").count() as u64, n, "{summary}");
    let registry = store.tenants().await.unwrap();
    assert_eq!(
        registry.len() as u64,
        n + 1,
        "the default tenant and the file's"
    );
    assert!(registry
        .iter()
        .all(|t| t.state == leadgate::store::TenantState::Active));

    let (again, summary) = tenant_apply(&args);
    assert!(
        summary.contains("created: none\nchanged: none\nresumed: none"),
        "{summary}"
    );
    assert!(summary.contains(&format!("unchanged: {n}")), "{summary}");
    assert_eq!(
        store.tenants().await.unwrap(),
        registry,
        "re-applying changed nothing"
    );
    println!(
        "onboarding {:?}: {n} tenants (half Bitrix24, half amoCRM) from one CSV in {:.2} s; \
         the same file again in {:.2} s, nothing changed",
        db.backend,
        first.as_secs_f64(),
        again.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn onboarding_sqlite() {
    run(Backend::Sqlite, onboarding).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn onboarding_postgres() {
    run(Backend::Postgres, onboarding).await;
}
