//! Assembles a running gateway from its configuration: the store, the CRM adapter, the
//! intake server, the worker and (with `[alerts]`) the team alerts. `leadgate
//! serve`/`worker` and the tests start it the same way.
//!
//! Besides those, a running gateway keeps a few loops of its own, each under
//! `supervise`: the redelivery of claim-API operations (`redeliver`, with
//! `[claim_api] redeliver_url`), retention, the requests loop (on PostgreSQL: applies
//! people's requests, `Review::apply_next_request`) and the rules loop (re-reads the
//! business rules when their version moved, into `intake::LiveRules`).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::crm::{self, Crm};
use crate::intake::{self, sources};
use crate::store::{self, Store};
use crate::worker::{Worker, WorkerSettings};

/// Which parts run in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Intake server, worker and reconciler (`leadgate serve`).
    Serve,
    /// Worker and reconciler only (`leadgate worker`), for scaling out.
    Worker,
}

pub struct Running {
    /// Where the intake listens (with `Mode::Serve`).
    pub addr: Option<SocketAddr>,
    /// Where the web console listens (with `Mode::Serve` and `[console]`).
    pub console_addr: Option<SocketAddr>,
    pub store: Arc<dyn Store>,
    /// The business rules intake matches by, as this gateway last read them.
    pub rules: Arc<intake::LiveRules>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Running {
    /// Stops accepting, lets attempts in flight finish, and returns when all is stopped.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        while self.tasks.join_next().await.is_some() {}
    }

    /// Runs until SIGINT or SIGTERM, then stops gracefully.
    pub async fn until_signal(self) {
        shutdown_signal().await;
        tracing::info!("shutting down: finishing attempts in flight");
        self.stop().await;
    }
}

pub async fn start(config: &Config, mode: Mode) -> anyhow::Result<Running> {
    let store = store::connect(config.database.url.expose())
        .await
        .context("opening the operations database")?;
    let crm_config = config
        .crm
        .as_ref()
        .context("the configuration has no [crm] section: the worker needs a CRM to talk to")?;
    let crm: Arc<dyn Crm> = crm::from_config(crm_config, Arc::clone(&store))?;
    // Where the consoles open this CRM: its public pages, published for every console.
    if let Some(links) = crm::web_links(crm_config) {
        store
            .publish_crm_links(&links, store.now())
            .await
            .context("publishing the CRM's web links")?;
    }
    // The business rules: a source the database has none for gets the TOML's; the
    // database decides from then on, and every gateway reads it live.
    intake::seed_rules(&*store, &config.sources, config.matching.window).await?;
    // Fleet mode: the tenants stored beside the default one (none: none), each with a
    // worker of its own, kept as the registry says.
    let worker_owner = format!("worker:{}:{}", hostname(), std::process::id());
    let mut fleet = crate::fleet::Fleet::start(Arc::clone(&store), config, &worker_owner).await?;
    let rules = Arc::new(intake::LiveRules::default());
    let live_rules = Arc::clone(&rules);
    rules
        .refresh(&*store)
        .await
        .context("reading the business rules")?;
    let (shutdown, shutdown_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();

    let worker = Worker {
        store: Arc::clone(&store),
        crm,
        settings: Arc::new(WorkerSettings::of(
            config,
            crm_config,
            &config.sources,
            config.worker.concurrency,
        )),
        owner: worker_owner,
        turns: None,
    };
    let owner = worker.owner.clone();
    tasks.spawn(worker.run(shutdown_rx.clone()));
    // Consoles say before a click when no gateway runs (issue 37, point 5).
    let kind = if mode == Mode::Serve {
        "serve"
    } else {
        "worker"
    };
    let (beat_store, beat_owner) = (
        Arc::clone(&store),
        format!("{kind}:{}:{}", hostname(), std::process::id()),
    );
    // A gateway's spool, opened before it beats: its beat says what the spool holds.
    let spooling = match mode {
        Mode::Serve => spooling(&config.spool)?,
        _ => None,
    };
    let (rx, beat_spool) = (shutdown_rx.clone(), spooling.clone());
    tasks.spawn(async move { heartbeat_loop(beat_store, beat_owner, kind, beat_spool, rx).await });
    if store.backend().is_shared() {
        // Consoles with personal logins ask; any running gateway applies.
        let requests_store: Arc<dyn store::Review> = Arc::clone(&store) as _;
        let rx = shutdown_rx.clone();
        tasks.spawn(crate::supervise::supervise(
            "requests",
            shutdown_rx.clone(),
            crate::supervise::RESTART_DELAY,
            move || requests_loop(Arc::clone(&requests_store), rx.clone()),
        ));
    }
    if let Some(url) = &config.claim_api.redeliver_url {
        let token = config.api.integration_token.clone().context(
            "[claim_api] redeliver_url is set but there is no [api] integration_token \
             (or LEADGATE_INTEGRATION_TOKEN): the integration could not claim what it is sent",
        )?;
        let redeliverer = Arc::new(crate::redeliver::Redeliverer::new(
            Arc::clone(&store),
            crate::redeliver::RedeliverSettings {
                source: config.claim_api.source.clone(),
                url: url.clone(),
                token,
                every: config.claim_api.redeliver_every,
                poll_interval: config.worker.poll_interval,
                owner,
            },
        )?);
        let rx = shutdown_rx.clone();
        tasks.spawn(crate::supervise::supervise(
            "redelivery",
            shutdown_rx.clone(),
            crate::supervise::RESTART_DELAY,
            move || Arc::clone(&redeliverer).run(rx.clone()),
        ));
    }

    let mut addr = None;
    let mut console_addr = None;
    if mode == Mode::Serve {
        for s in &config.sources {
            if s.auth == Some(crate::config::SourceAuth::None) {
                tracing::warn!(
                    source = %s.name,
                    "source has auth = \"none\": anyone who can reach the intake port may deliver to it"
                );
            }
        }
        if config.api.integration_token.is_none() && config.api.read_token.is_none() {
            tracing::info!(
                "no [api] tokens: the claim API, operation reads and /metrics answer 401"
            );
        }
        let state = intake::IntakeState {
            store: Arc::clone(&store),
            api_tokens: Arc::new(intake::ApiTokens {
                integration: config.api.integration_token.clone(),
                read: config.api.read_token.clone(),
                fleet: None,
            }),
            sources: Arc::new(sources::sources(&config.sources).map_err(anyhow::Error::msg)?),
            max_body: usize::try_from(config.server.max_body.as_u64()).unwrap_or(usize::MAX),
            body_timeout: config.server.body_timeout,
            claim_api: Arc::new(intake::ClaimApi {
                source: config.claim_api.source.clone(),
                lease: config.claim_api.lease,
                retry: config.retry.clone(),
            }),
            tombstone: config.retention.tombstone,
            stale_after: config.review.stale_after,
            matching: intake::MatchingSettings {
                region: config
                    .matching
                    .default_region
                    .parse()
                    .map_err(anyhow::Error::msg)?,
                window: config.matching.window,
                shared_after: config.matching.shared_after,
            },
            rules: Arc::clone(&rules),
            refusals: Arc::new(intake::refusals::Refusals::default()),
            tenant: crate::domain::TenantSlug::default_tenant(),
            tenants: Arc::default(),
            spool: spooling,
        };
        fleet.serve_intake(Arc::clone(&state.tenants), state.clone());
        if state.spool.is_some() {
            let (state, rx) = (state.clone(), shutdown_rx.clone());
            tasks.spawn(crate::supervise::supervise(
                "spool",
                shutdown_rx.clone(),
                crate::supervise::RESTART_DELAY,
                move || intake::drain_spool(state.clone(), rx.clone()),
            ));
        }
        let (refusals, rx) = (Arc::clone(&state.refusals), shutdown_rx.clone());
        tasks.spawn(async move { tidy_refusals(refusals, rx).await });
        // Pull sources: refused here, before anything listens, when one lacks credentials.
        let pullers =
            crate::pull::pullers(config, |v| std::env::var(v).ok()).map_err(anyhow::Error::msg)?;
        for (name, puller) in pullers {
            let (state, rx) = (state.clone(), shutdown_rx.clone());
            tasks.spawn(async move {
                crate::supervise::supervise(
                    &format!("pull:{name}"),
                    rx.clone(),
                    crate::supervise::RESTART_DELAY,
                    move || puller.clone().run(state.clone(), rx.clone()),
                )
                .await
            });
        }
        let limits = intake::listen::Limits {
            max_connections: config.server.max_connections,
            header_timeout: config.server.header_timeout,
        };
        if let Some(console) = &config.console {
            // Refused here, before anything listens, when it cannot sign anyone in.
            let web = crate::console_web::Web::new(
                config.database.url.expose(),
                console,
                Arc::clone(&store) as _,
                state.matching.region,
                config.review.stale_after,
                shutdown_rx.clone(),
            )
            .await
            .map_err(anyhow::Error::msg)?;
            let web = Arc::new(web);
            let tls = crate::console_web::tls_acceptor(console).map_err(anyhow::Error::msg)?;
            let scheme = if tls.is_some() { "https" } else { "http" };
            let listener = tokio::net::TcpListener::bind(&console.listen)
                .await
                .with_context(|| format!("listening on {} (the console)", console.listen))?;
            let bound = listener.local_addr()?;
            console_addr = Some(bound);
            tasks.spawn(intake::listen::serve_tls(
                listener,
                crate::console_web::router(Arc::clone(&web)),
                limits,
                tls,
                shutdown_rx.clone(),
            ));
            tasks.spawn(crate::console_web::sweep(
                Arc::clone(&web),
                shutdown_rx.clone(),
            ));
            tasks.spawn(crate::console_web::relay_changes(web, shutdown_rx.clone()));
            tracing::info!(console = %format!("{scheme}://{bound}/"), "the console is served to browsers");
        }
        let listener = tokio::net::TcpListener::bind(&config.server.listen)
            .await
            .with_context(|| format!("listening on {}", config.server.listen))?;
        let bound = listener.local_addr()?;
        addr = Some(bound);
        tasks.spawn(intake::listen::serve(
            listener,
            intake::router(state),
            limits,
            shutdown_rx.clone(),
        ));
        let (rules_store, rx) = (Arc::clone(&store), shutdown_rx.clone());
        tasks.spawn(crate::supervise::supervise(
            "rules",
            shutdown_rx.clone(),
            crate::supervise::RESTART_DELAY,
            move || rules_loop(Arc::clone(&rules_store), Arc::clone(&rules), rx.clone()),
        ));
        let (retention_store, full, every, rx) = (
            Arc::clone(&store),
            config.retention.full,
            config.retention.purge_every,
            shutdown_rx.clone(),
        );
        tasks.spawn(crate::supervise::supervise(
            "retention",
            shutdown_rx.clone(),
            crate::supervise::RESTART_DELAY,
            move || retention_loop(Arc::clone(&retention_store), full, every, rx.clone()),
        ));
        if let Some(alerts) = &config.alerts {
            let owner = format!("serve:{}:{}", hostname(), std::process::id());
            let alerts_store: Arc<dyn store::Alerts> = Arc::clone(&store) as _;
            let alerters =
                crate::alerts::alerters(&alerts_store, alerts, config.review.stale_after, &owner)
                    .map_err(anyhow::Error::msg)?;
            for alerter in alerters {
                let rx = shutdown_rx.clone();
                tasks.spawn(crate::supervise::supervise(
                    "alerts",
                    shutdown_rx.clone(),
                    crate::supervise::RESTART_DELAY,
                    move || Arc::clone(&alerter).run(rx.clone()),
                ));
            }
        }
        let feed_store: Arc<dyn store::Feed> = Arc::clone(&store) as _;
        let feeder = Arc::new(
            crate::feed::Feeder::new(
                feed_store,
                &config.feed,
                &format!("serve:{}:{}", hostname(), std::process::id()),
            )
            .map_err(anyhow::Error::msg)?,
        );
        let rx = shutdown_rx.clone();
        tasks.spawn(crate::supervise::supervise(
            "feed",
            shutdown_rx.clone(),
            crate::supervise::RESTART_DELAY,
            move || Arc::clone(&feeder).run(rx.clone()),
        ));
        tracing::info!(listen = %bound, database = %store.backend(), "leadgate is serving");
    } else {
        tracing::info!(database = %store.backend(), "leadgate worker is running");
    }
    // Tenants' workers stop with the fleet: attempts in flight finish.
    tasks.spawn(fleet.run(shutdown_rx.clone()));
    Ok(Running {
        addr,
        console_addr,
        store,
        rules: live_rules,
        shutdown,
        tasks,
    })
}

/// Keeps intake's business rules current: one cheap read of the history's row count per
/// round, the rules read again only when it moved. (A tenant's are its `fleet::Fleet`'s.)
async fn rules_loop(
    store: Arc<dyn Store>,
    rules: Arc<intake::LiveRules>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(intake::RULES_EVERY) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        rules
            .follow(&*store, crate::domain::TenantSlug::DEFAULT)
            .await;
    }
}

/// How often a running gateway or worker says it is alive; a console counts it gone
/// after [`leadgate_console_model::GATEWAY_SILENT_AFTER`].
pub const BEAT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Beats in `gateway_heartbeats` until shutdown; a failed beat is logged once per run of
/// failures (the database may be away for a while).
async fn heartbeat_loop(
    store: Arc<dyn Store>,
    owner: String,
    kind: &'static str,
    spool: Option<Arc<intake::Spooling>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let started = store.now();
    let mut failing = false;
    loop {
        let spooled = spool.as_ref().map_or_else(store::Spooled::default, |s| {
            let stats = s.spool.stats();
            store::Spooled {
                records: i64::try_from(stats.records).unwrap_or(i64::MAX),
                oldest: stats.oldest,
            }
        });
        match store
            .beat(&owner, kind, started, store.now(), spooled)
            .await
        {
            Ok(()) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "the heartbeat could not be written; consoles will say no gateway runs");
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(BEAT_EVERY) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// Each minute: forgets idle addresses of the refusal budget and logs what it only
/// counted (`intake::refusals`).
async fn tidy_refusals(
    refusals: Arc<intake::refusals::Refusals>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => refusals.tidy(),
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// How often a gateway looks for people's requests (a console waits about this long
/// for an action's answer).
pub const REQUESTS_POLL: std::time::Duration = std::time::Duration::from_millis(150);

/// Applies the requests of people's consoles (PostgreSQL personal logins), oldest first.
async fn requests_loop(store: Arc<dyn store::Review>, mut shutdown: watch::Receiver<bool>) {
    loop {
        match store.apply_next_request(store.now()).await {
            Ok(Some(id)) => {
                tracing::debug!(request = id, "applied a person's request");
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "applying a person's request failed; trying again")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(REQUESTS_POLL) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// Scrubs finished operations older than `full` (a tenant's with a window of its own:
/// older than that), every `every`, and compacts the dashboard's past time slots.
async fn retention_loop(
    store: Arc<dyn Store>,
    full: std::time::Duration,
    every: std::time::Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let cutoff = store::before(store.now(), full);
        match store::purge(store.as_ref(), cutoff, PURGE_BATCH).await {
            Ok(r) if !r.is_empty() => tracing::info!(
                operations = r.operations,
                deliveries = r.deliveries,
                sign_ins = r.sign_ins,
                requests = r.requests,
                feed_owed = r.feed_owed,
                "retention purge"
            ),
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "retention purge failed"),
        }
        match purge_own_windows(store.as_ref()).await {
            Ok(r) if r.operations + r.deliveries + r.contact_locks > 0 => tracing::info!(
                operations = r.operations,
                deliveries = r.deliveries,
                "retention purge at tenants' own windows"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, "retention purge of a tenant's own window failed")
            }
        }
        // Past dashboard slots no longer change: one row per figure instead of a shard each.
        let settled = store::before(store.now(), std::time::Duration::from_secs(600));
        if let Err(e) = store.compact_metrics(settled).await {
            tracing::error!(error = %e, "compacting metrics failed");
        }
    }
}

/// Scrubs each tenant with a retention window of its own (`[tenant.retention] full`) at
/// it: what the deployment's scrub (`store::purge`) passes over. What it scrubbed, in all.
/// One tenant's failure is logged and the others are still scrubbed; the first failure
/// is returned once every tenant had its turn.
pub async fn purge_own_windows(store: &dyn Store) -> store::Result<store::PurgeReport> {
    let mut total = store::PurgeReport::default();
    let mut failed = None;
    for t in store.tenants().await? {
        let Some(secs) = t.retention_full_secs else {
            continue;
        };
        let window = std::time::Duration::from_secs(u64::try_from(secs).unwrap_or(0));
        let tenant = store.for_tenant(crate::domain::TenantId(t.id));
        let cutoff = store::before(store.now(), window);
        match store::purge_tenant(tenant.as_ref(), Some(cutoff), PURGE_BATCH).await {
            Ok(r) => {
                total.operations += r.operations;
                total.deliveries += r.deliveries;
                total.contact_locks += r.contact_locks;
                total.requests += r.requests;
            }
            Err(e) => {
                tracing::error!(tenant = %t.slug, error = %e, "retention purge at the tenant's own window failed");
                failed.get_or_insert(e);
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(total),
    }
}

/// Operations scrubbed per transaction: small enough never to hold the writer for long.
pub const PURGE_BATCH: i64 = 200;

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// The gateway's spool (`[spool]`), opened (a record found torn in it is journaled by the
/// drain).
fn spooling(config: &crate::config::SpoolConfig) -> anyhow::Result<Option<Arc<intake::Spooling>>> {
    let state_directory = std::env::var("STATE_DIRECTORY").ok();
    let Some(dir) = config.directory(state_directory.as_deref()) else {
        return Ok(None);
    };
    let limits = crate::spool::Limits {
        max_bytes: config.max_size.as_u64(),
        max_age: config.max_age,
    };
    let (spool, torn) = crate::spool::Spool::open(&dir, limits).map_err(anyhow::Error::msg)?;
    tracing::info!(dir = %dir.display(), "intake spool");
    if let Some(torn) = &torn {
        tracing::warn!(offset = torn.offset, bytes = torn.bytes, kept_in = %torn.kept_in.display(), "the spool's last record was torn by a crash (never answered): moved aside");
    }
    let spooling = intake::Spooling {
        spool: Arc::new(spool),
        patience: config.patience,
        torn: std::sync::Mutex::new(torn),
    };
    Ok(Some(Arc::new(spooling)))
}
