//! The fleet's compressed day, bounded so `make test` runs it (`make fleet-chaos` runs a
//! long one): two `leadgate serve` processes serve one fleet — the default tenant and
//! tenants on fake Bitrix24 portals and fake amoCRM accounts, each a CRM of its own that
//! keeps its documented request limit (Bitrix24: 2 a second, 50 at once; amoCRM: 7 a
//! second) and misbehaves as the chaos run's do (Bitrix24: hangs after creating, 503,
//! 500 after creating, late creates, lagging lists; amoCRM: slow creates and a search a
//! second behind). Leads go to every tenant at random, 30 % of them twice; a random
//! gateway is killed with SIGKILL every couple of seconds; PostgreSQL crashes once.
//!
//! Then, per tenant: no key has two entities in its CRM, nor an entity in another's;
//! every Bitrix24 lead (and the default tenant's) is completed, and `/metrics` counts for
//! the tenant exactly what its CRM holds; every amoCRM lead is completed with its lead in
//! the CRM or with a person (a kill between recording an attempt and sending it cannot be
//! told from a create the lagging search does not show yet).
//!
//! Sizes: `LEADGATE_FLEET_CHAOS_TENANTS` (default 4, half each CRM),
//! `LEADGATE_FLEET_CHAOS_LEADS` (240) and `LEADGATE_FLEET_CHAOS_SECONDS` (25); the leads
//! are sent at an even pace by up to `LEADGATE_FLEET_CHAOS_SENDERS` (1) requests at once;
//! `LEADGATE_FLEET_CHAOS_KILLS` spreads that many kills evenly over the traffic instead of
//! one every couple of seconds.

use std::collections::BTreeSet;

use futures::StreamExt;

use leadgate::crm::vault::Vault;
use leadgate::domain::TenantId;
use leadgate::store::Store;
use leadgate_fakes::bitrix24::RequestLimit;

use super::*;

/// The token key the gateways read (`[fleet] token_key_file`).
const KEY: [u8; 32] = [5; 32];

/// One tenant's CRM.
enum Portal {
    Bitrix(FakeBitrix24),
    Amo(FakeAmoCrm),
}

impl Portal {
    /// The operation keys its entities carry, one per entity.
    fn keys(&self) -> Vec<String> {
        match self {
            Portal::Bitrix(f) => f
                .entities()
                .iter()
                .map(|e| {
                    e.fields["ORIGIN_ID"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect(),
            Portal::Amo(f) => f.leads().iter().flat_map(amo_keys).collect(),
        }
    }

    /// Its `[tenant.crm]`.
    fn crm_toml(&self) -> String {
        match self {
            Portal::Bitrix(f) => format!(
                "kind = \"bitrix24\"\nwebhook_url = \"{}\"\ntimeout = \"1s\"\nsettle = \"4s\"\n",
                f.webhook_url()
            ),
            Portal::Amo(f) => format!(
                "kind = \"amocrm\"\nbase_url = \"{}\"\ntoken = \"{}\"\noperation_field_id = {}\n\
                 timeout = \"1s\"\nsettle = \"2s\"\n",
                f.base_url(),
                f.token(),
                leadgate_fakes::amocrm::FIELD_ID
            ),
        }
    }
}

async fn bitrix_portal() -> Portal {
    let f = FakeBitrix24::spawn_with("127.0.0.1:0".parse().unwrap(), chaotic_portal())
        .await
        .unwrap();
    f.set_request_limit(Some(RequestLimit::CLOUD));
    Portal::Bitrix(f)
}

async fn amo_portal() -> Portal {
    let f = FakeAmoCrm::spawn_with(
        "127.0.0.1:0".parse().unwrap(),
        leadgate_fakes::amocrm::FakeConfig {
            settings: leadgate_fakes::amocrm::Settings {
                search_lag_ms: 1000,
                request_limit_per_second: Some(7.0),
                ..Default::default()
            },
            always: vec![(
                leadgate_fakes::amocrm::CREATE.into(),
                leadgate_fakes::amocrm::Fault::LatencyMs { ms: 250 },
            )],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    Portal::Amo(f)
}

#[derive(Debug, Default)]
struct FleetFigures {
    tenants: usize,
    leads: usize,
    deliveries: u64,
    refused_or_failed: u64,
    spooled: u64,
    kills: u64,
    db_restarts: u64,
    sending_seconds: f64,
    settling_seconds: f64,
    bitrix_entities: usize,
    amo_leads_in_crm: usize,
    amo_with_a_person: usize,
    seconds: f64,
}

async fn fleet_chaos(db_url: &str, pg: Option<&PgCluster>) -> FleetFigures {
    let started = Instant::now();
    let n = (env_or("LEADGATE_FLEET_CHAOS_TENANTS", 4) as usize).max(2);
    let leads = env_or("LEADGATE_FLEET_CHAOS_LEADS", 240) as usize;
    let traffic = Duration::from_secs(env_or("LEADGATE_FLEET_CHAOS_SECONDS", 25));

    // The tenants: even ones on Bitrix24, odd ones on amoCRM; and the default tenant.
    let mut portals = Vec::with_capacity(n);
    let mut file = String::new();
    for i in 0..n {
        let portal = if i % 2 == 0 {
            bitrix_portal().await
        } else {
            amo_portal().await
        };
        file += &format!(
            "[[tenant]]\nslug = \"t{i}\"\nname = \"Tenant {i}\"\n[tenant.crm]\n{}\
             [[tenant.source]]\nname = \"site\"\nkey = \"json:/submission_id\"\n\
             token = \"t{i}-token\"\n",
            portal.crm_toml()
        );
        portals.push(portal);
    }
    let store = leadgate::store::connect(db_url).await.unwrap();
    let wanted = leadgate::config::tenants::parse_toml(&file, None).unwrap();
    leadgate::tenants::apply(
        &*store,
        &Vault::new(KEY),
        &wanted,
        false,
        false,
        None,
        "chaos",
    )
    .await
    .unwrap();
    let default_fake = FakeBitrix24::spawn_with("127.0.0.1:0".parse().unwrap(), chaotic_portal())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("token.key");
    std::fs::write(&key_file, hex::encode(KEY)).unwrap();
    let mut gateways = two_gateways(dir.path(), |name, port| {
        let path = config(dir.path(), name, db_url, &default_fake.webhook_url(), port);
        let mut toml = std::fs::read_to_string(&path).unwrap();
        toml += &format!(
            "[fleet]\ntoken_key_file = {:?}\n",
            key_file.display().to_string()
        );
        std::fs::write(&path, toml).unwrap();
        path
    })
    .await;
    let bases: Vec<String> = gateways.iter().map(Gateway::base).collect();
    let http = reqwest::Client::new();
    // Served once a gateway has read the registry: every tenant's intake answers.
    for i in 0..n {
        for base in &bases {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let res = http
                    .post(format!("{base}/v1/intake/t{i}/site"))
                    .header("x-leadgate-token", "not-the-token")
                    .json(&json!({"submission_id": "probe"}))
                    .send()
                    .await
                    .unwrap();
                // Its source exists (refused for the token, not unknown).
                if res.status() != reqwest::StatusCode::NOT_FOUND {
                    break;
                }
                assert!(Instant::now() < deadline, "t{i} is not served at {base}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    let mut figures = FleetFigures {
        tenants: n,
        leads,
        ..FleetFigures::default()
    };
    // Each lead's tenant (`None`: the default one) and key; sent open-loop at an even pace by
    // up to `senders` requests at once, while the gateways are killed beside them.
    let senders = env_or("LEADGATE_FLEET_CHAOS_SENDERS", 1).max(1) as usize;
    let kills = std::env::var("LEADGATE_FLEET_CHAOS_KILLS").ok().map(|v| {
        v.parse::<u64>()
            .expect("LEADGATE_FLEET_CHAOS_KILLS is a number")
    });
    let pace = traffic / leads.max(1) as u32;
    let sending_started = tokio::time::Instant::now();
    let progress = std::sync::atomic::AtomicUsize::new(0);
    let send = futures::stream::iter(0..leads)
        .map(|i| {
            let (http, bases, progress) = (&http, &bases, &progress);
            async move {
                tokio::time::sleep_until(sending_started + pace * i as u32).await;
                let tenant = rand::rng().random_range(0..=n);
                let tenant = (tenant < n).then_some(tenant);
                let key = format!("fc-{i}");
                let (path, token) = match tenant {
                    Some(t) => (format!("t{t}/site"), format!("t{t}-token")),
                    None => ("site".to_owned(), TOKEN.to_owned()),
                };
                let mut delivered = Figures::default();
                let twice = rand::rng().random_bool(0.3);
                for _ in 0..1 + usize::from(twice) {
                    assert!(
                        deliver_to(http, bases, &path, &token, &key, &mut delivered).await,
                        "{path} {key} was never accepted"
                    );
                }
                progress.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (tenant, key, delivered)
            }
        })
        .buffer_unordered(senders)
        .collect::<Vec<_>>();
    // Kills: every 1.5–3.5 s, or `LEADGATE_FLEET_CHAOS_KILLS` of them spread evenly over the
    // traffic; PostgreSQL crashes once half the leads are in.
    let chaos = async {
        let every = kills.map(|k| traffic / (k as u32 + 1));
        let mut next_kill = Instant::now() + every.unwrap_or(Duration::from_secs(2));
        let mut crashed = false;
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let done = progress.load(std::sync::atomic::Ordering::Relaxed);
            if done >= leads {
                break;
            }
            if Instant::now() >= next_kill && kills.is_none_or(|k| figures.kills < k) {
                let victim = rand::rng().random_range(0..gateways.len());
                gateways[victim].kill();
                figures.kills += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
                gateways[victim].spawn();
                next_kill = Instant::now()
                    + every.unwrap_or_else(|| {
                        Duration::from_millis(rand::rng().random_range(1500..3500))
                    });
            }
            if !crashed && done >= leads / 2 {
                crashed = true;
                if let Some(pg) = pg {
                    pg.crash_restart();
                    figures.db_restarts += 1;
                }
            }
        }
    };
    let (results, ()) = tokio::join!(send, chaos);
    let mut delivered = Figures::default();
    let mut sent: Vec<(Option<usize>, String)> = Vec::with_capacity(leads);
    for (tenant, key, d) in results {
        delivered.deliveries += d.deliveries;
        delivered.refused_or_failed += d.refused_or_failed;
        delivered.spooled += d.spooled;
        sent.push((tenant, key));
    }
    figures.sending_seconds = sending_started.elapsed().as_secs_f64();
    figures.deliveries = delivered.deliveries;
    figures.refused_or_failed = delivered.refused_or_failed;
    figures.spooled = delivered.spooled;
    for g in &mut gateways {
        if g.process.is_none() {
            g.spawn();
        }
    }
    for g in &gateways {
        g.wait_up().await;
    }

    // Every lead settles: completed, or (amoCRM) with a person.
    let registry = store.tenants().await.unwrap();
    let views: Vec<std::sync::Arc<dyn Store>> = (0..n)
        .map(|t| {
            let slug = format!("t{t}");
            let id = registry.iter().find(|r| r.slug == slug).unwrap().id;
            store.for_tenant(TenantId(id))
        })
        .collect();
    let view = |t: Option<usize>| -> std::sync::Arc<dyn Store> {
        match t {
            Some(t) => views[t].clone(),
            None => store.clone(),
        }
    };
    let operation_id = |t: Option<usize>, key: &str| -> leadgate::domain::OperationId {
        match t {
            Some(t) => format!("t{t}/site:{key}"),
            None => format!("site:{key}"),
        }
        .parse()
        .unwrap()
    };
    // A backlog may outlast the traffic: the bound is on progress, 240 s without a lead
    // settling.
    let settling = Instant::now();
    let mut deadline = Instant::now() + Duration::from_secs(240);
    for (t, key) in &sent {
        let id = operation_id(*t, key);
        loop {
            let op = view(*t).operation(&id).await.unwrap().unwrap();
            let settled = match op.status.as_str() {
                "completed" => true,
                "needs_review" => matches!(t.map(|t| &portals[t]), Some(Portal::Amo(_))),
                _ => false,
            };
            if settled {
                deadline = Instant::now() + Duration::from_secs(240);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{id} never settled: {:?}",
                op.status
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    figures.settling_seconds = settling.elapsed().as_secs_f64();

    // Each CRM: one entity per key, and only its own tenant's keys.
    let sent_by: BTreeMap<Option<usize>, BTreeSet<String>> =
        sent.iter().fold(BTreeMap::new(), |mut m, (t, key)| {
            m.entry(*t).or_default().insert(key.clone());
            m
        });
    let metrics = http
        .get(format!("{}/metrics", bases[0]))
        .bearer_auth(READ)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let created_for = |slug: &str| -> i64 {
        let prefix = format!("leadgate_crm_entities_created_total{{tenant=\"{slug}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    let crms: Vec<(Option<usize>, Vec<String>)> =
        std::iter::once((None, { Portal::Bitrix(default_fake).keys() }))
            .chain(portals.iter().enumerate().map(|(t, p)| (Some(t), p.keys())))
            .collect();
    for (t, keys) in &crms {
        let mine = sent_by.get(t).cloned().unwrap_or_default();
        let mut seen = BTreeMap::<&str, usize>::new();
        for k in keys {
            *seen.entry(k.as_str()).or_default() += 1;
        }
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "tenant {t:?}: keys created twice: {twice:?}"
        );
        // The CRM is given the key without the tenant: `site:<key>`.
        for k in seen.keys() {
            let key = k.strip_prefix("site:").unwrap_or(k);
            assert!(
                mine.contains(key),
                "tenant {t:?}'s CRM holds {k}, not its lead"
            );
        }
        let slug = t.map_or("default".to_owned(), |t| format!("t{t}"));
        let is_amo = matches!(t.map(|t| &portals[t]), Some(Portal::Amo(_)));
        let store = view(*t);
        for key in &mine {
            let id = operation_id(*t, key);
            let op = store.operation(&id).await.unwrap().unwrap();
            let in_crm = seen.contains_key(format!("site:{key}").as_str());
            if op.status.as_str() == "completed" {
                assert!(in_crm, "{id} completed without its entity in the CRM");
            } else {
                figures.amo_with_a_person += 1;
            }
        }
        if is_amo {
            figures.amo_leads_in_crm += seen.len();
        } else {
            assert_eq!(seen.len(), mine.len(), "{slug}: every lead in its CRM once");
            assert_eq!(
                created_for(&slug),
                seen.len() as i64,
                "{slug}: /metrics counts what its CRM holds"
            );
            figures.bitrix_entities += seen.len();
        }
    }
    figures.seconds = started.elapsed().as_secs_f64();
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "fleet chaos ({}): {} tenants and the default one, {} leads in {:.0} s; {figures:?}",
        store.backend(),
        figures.tenants,
        figures.leads,
        figures.seconds
    );
    figures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_fleet_of_chaotic_crms_two_gateways_and_kill_9_make_one_entity_per_lead() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("fleet.db").display()
    );
    fleet_chaos(&url, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_fleet_of_chaotic_crms_two_gateways_kill_9_and_a_crash_make_one_entity_per_lead()
{
    let _one = ONE_AT_A_TIME.lock().await;
    let pg = PgCluster::start();
    let admin = pg.url("postgres");
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
        .await
        .unwrap();
    sqlx::query("create database fleet")
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    fleet_chaos(&pg.url("fleet"), Some(&pg)).await;
}
