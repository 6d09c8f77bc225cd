//! Fleet mode's running side (issue 35): the tenants `leadgate tenant apply` stored, each
//! served by this gateway beside the default tenant (leadgate.toml's `[crm]` and
//! `[[source]]`).
//!
//! A tenant runs on its own view of the store (`Tenants::for_tenant`): its operations,
//! journal, rules, connectors and contact locks are its own, and its keys carry its slug
//! (`<tenant>/<source>:<key>`). Its CRM adapter is built from its spec and is given the
//! keys without the slug, so a portal moved into the fleet keeps finding what it holds.
//! Its intake is `POST /v1/intake/{tenant}/{source}`; its worker runs `max_in_flight`
//! claim loops and a reconciler, whose steps take the fleet's `[fleet] lanes` shared by
//! weight, and which wake when the fleet's board finds the tenant has work ([`turns`]): a
//! tenant whose CRM hangs or whose backlog is long holds at most those lanes and gets its
//! share of lane-time, no more, and five hundred idle tenants' workers cost one statement
//! per poll. A tenant that has them also runs its own redelivery to its integration (one
//! pick a second at most), its pulled sources and its alert channels (each on its own
//! `poll_interval`: a statement or three a pass), started where intake is served. A
//! paused tenant's deliveries are still journaled and claimed; its worker
//! takes nothing and calls nothing while the registry says it is paused (the store's
//! picks and its check before each call read the tenant's state).
//!
//! [`Fleet::run`] follows the registry: every `[fleet] reload_every` (5 s) it reads the tenants, and a
//! tenant created, changed, paused, resumed or removed since is served as it is now (its
//! worker stopped, attempts in flight finished, and started again on the new spec); every
//! [`intake::RULES_EVERY`] it reads each tenant's business rules when their version
//! moved. A tenant whose spec cannot be opened or built keeps being served as it was, and
//! says so in the log.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::tenants::TenantSpec;
use crate::config::Config;
use crate::crm::{self, Crm};
use crate::domain::{TenantId, TenantSlug};
use crate::intake::{self, TenantStates};
use crate::store::{Store, Tenant, TenantState};
use crate::worker::{Worker, WorkerSettings};

use crate::turns::{self, Lanes};

/// How often at most a tenant's redelivery looks for due leads.
const TENANT_REDELIVERY_POLL: Duration = Duration::from_secs(1);

/// One tenant as this gateway runs it.
pub struct TenantRun {
    pub id: TenantId,
    pub slug: TenantSlug,
    /// The registry's version of it this run was built from.
    pub version: i64,
    pub spec: TenantSpec,
    /// The store's view of this tenant's rows.
    pub store: Arc<dyn Store>,
    pub crm: Arc<dyn Crm>,
    /// Its sources as intake reads them.
    pub sources: Arc<HashMap<String, intake::sources::Source>>,
    /// The business rules its intake matches by.
    pub rules: Arc<intake::LiveRules>,
    /// Its pulled sources (Bitrix24's offline queue, Telegram's `getUpdates`, a mailbox),
    /// run where intake is served.
    pub pullers: Vec<(String, crate::pull::Puller)>,
    /// Its own alert channels (`[tenant.alerts]`), watching its figures; run where intake
    /// is served, as the deployment's are.
    pub alerters: Vec<Arc<crate::alerts::Alerter>>,
}

/// A tenant's run and its worker.
struct Served {
    run: TenantRun,
    stop: watch::Sender<bool>,
    worker: JoinHandle<()>,
    /// Its claim API's redelivery loop (`[tenant.claim_api] redeliver_url`).
    redelivery: Option<JoinHandle<()>>,
    /// Its pulled sources' and alert channels' loops, once intake is served.
    pulls: Vec<JoinHandle<()>>,
}

/// A fleet dropped without [`Fleet::run`]'s end (its start failed further on, or it
/// panicked) stops its tenants' workers all the same: attempts in flight finish.
impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl Served {
    /// Stops the worker and waits for its attempts in flight.
    async fn stop(mut self) {
        let _ = self.stop.send(true);
        let _ = (&mut self.worker).await;
        if let Some(r) = self.redelivery.as_mut() {
            let _ = r.await;
        }
        for p in &mut self.pulls {
            let _ = p.await;
        }
    }

    /// Starts its pulled sources' loops, each recording through `state` (its intake), and
    /// its alert channels' loops.
    fn pull(&mut self, state: &intake::IntakeState) {
        if !self.pulls.is_empty() {
            return;
        }
        for alerter in &self.run.alerters {
            let (alerter, rx) = (Arc::clone(alerter), self.stop.subscribe());
            let what = format!("alerts:{}/{}", self.run.slug, alerter.channel.name);
            self.pulls.push(tokio::spawn(async move {
                crate::supervise::supervise(
                    &what,
                    rx.clone(),
                    crate::supervise::RESTART_DELAY,
                    move || Arc::clone(&alerter).run(rx.clone()),
                )
                .await
            }));
        }
        for (name, puller) in &self.run.pullers {
            let (puller, state, rx) = (puller.clone(), state.clone(), self.stop.subscribe());
            let what = format!("pull:{}/{name}", self.run.slug);
            self.pulls.push(tokio::spawn(async move {
                crate::supervise::supervise(
                    &what,
                    rx.clone(),
                    crate::supervise::RESTART_DELAY,
                    move || puller.clone().run(state.clone(), rx.clone()),
                )
                .await
            }));
        }
    }
}

/// The tenants this gateway serves beside the default one, kept as the registry says.
pub struct Fleet {
    store: Arc<dyn Store>,
    config: Config,
    /// Names this process on the timeline.
    owner: String,
    served: HashMap<i32, Served>,
    /// Intake's view (none in a `leadgate worker`), and the default tenant's state the
    /// tenants' are made from.
    intake: Option<(Arc<TenantStates>, intake::IntakeState)>,
    /// A tenant was served or stopped since intake was last told.
    changed: bool,
    /// The lanes the tenants' workers share, and their wake-ups.
    lanes: Arc<Lanes>,
}

impl Fleet {
    /// Reads the registry and starts a worker for every tenant not removed. No tenant, no
    /// token key needed; without the key (or with another) the start stops. A tenant whose
    /// spec cannot be served (a CRM or source the spec's checks let through and this
    /// build refuses) is left out, said in the log, and tried again at every reload.
    pub async fn start(
        store: Arc<dyn Store>,
        config: &Config,
        owner: &str,
    ) -> anyhow::Result<Fleet> {
        let mut fleet = Fleet {
            store,
            config: config.clone(),
            owner: owner.to_owned(),
            served: HashMap::new(),
            intake: None,
            changed: false,
            lanes: Lanes::new(config.fleet.lanes),
        };
        let listed = fleet.listed().await?;
        for (tenant, spec) in fleet.wanted(listed).await? {
            match fleet.build(&tenant, spec).await {
                Ok(run) => fleet.serve(run),
                Err(e) => {
                    tracing::error!(tenant = %tenant.slug, error = %format!("{e:#}"), "the tenant cannot be served; trying again at every reload")
                }
            }
        }
        Ok(fleet)
    }

    /// Serves the tenants' intake through `states`, each made from `default` (the default
    /// tenant's state).
    pub fn serve_intake(&mut self, states: Arc<TenantStates>, default: intake::IntakeState) {
        for s in self.served.values_mut() {
            let state = s.run.intake_state(&default);
            s.pull(&state);
        }
        self.intake = Some((states, default));
        self.publish();
    }

    /// Follows the registry until `shutdown`, then stops every tenant's worker (attempts in
    /// flight finish).
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let board = tokio::spawn(turns::board(
            Arc::clone(&self.store),
            Arc::clone(&self.lanes),
            self.config.worker.poll_interval,
            shutdown.clone(),
        ));
        let tick = intake::RULES_EVERY.min(self.config.fleet.reload_every);
        let mut since_reload = Duration::ZERO;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = shutdown.wait_for(|stop| *stop) => break,
            }
            since_reload += tick;
            if since_reload >= self.config.fleet.reload_every {
                since_reload = Duration::ZERO;
                if let Err(e) = self.reload().await {
                    tracing::warn!(error = %format!("{e:#}"), "reading the tenants failed; serving them as they were");
                }
                // What was served is published whatever failed, each tenant as it is.
                if self.changed {
                    self.publish();
                }
            }
            for s in self.served.values() {
                s.run.rules.follow(&*s.run.store, s.run.slug.as_str()).await;
            }
        }
        for (_, s) in self.served.drain() {
            s.stop().await;
        }
        let _ = board.await;
    }

    /// The registry's tenants.
    async fn listed(&self) -> anyhow::Result<Vec<Tenant>> {
        self.store.tenants().await.context("reading the tenants")
    }

    /// Of `listed`, the tenants served beside the default one (not removed), and their
    /// specs opened.
    async fn wanted(&self, listed: Vec<Tenant>) -> anyhow::Result<Vec<(Tenant, TenantSpec)>> {
        let listed: Vec<Tenant> = listed
            .into_iter()
            .filter(served_beside_the_default)
            .collect();
        if listed.is_empty() {
            return Ok(vec![]);
        }
        let vault = crate::tenants::vault(&self.config.fleet).map_err(anyhow::Error::msg)?;
        let opened = crate::tenants::each_spec_opened(self.store.as_ref(), &vault)
            .await
            .map_err(anyhow::Error::msg)?;
        // None opens: the token key is not the one they were sealed with (a start stops;
        // a reload keeps serving what it served).
        if let Some(Err(e)) = opened
            .values()
            .next()
            .filter(|_| opened.values().all(Result::is_err))
        {
            anyhow::bail!("no tenant's spec opens with this token key: {e}");
        }
        let mut out = vec![];
        for t in listed {
            // One tenant's spec that cannot be read holds up no other: it is left out (kept
            // as it was served, on a reload) and said in the log.
            let spec = match opened.get(&t.slug) {
                None => Err("it has no stored spec".to_owned()),
                Some(Err(e)) => Err(e.clone()),
                Some(Ok(text)) => TenantSpec::from_canonical(text),
            };
            match spec {
                Ok(spec) => out.push((t, spec)),
                Err(e) => {
                    tracing::error!(tenant = %t.slug, error = %e, "the tenant's spec cannot be read; trying again at every reload")
                }
            }
        }
        Ok(out)
    }

    /// A tenant's run: its store view, CRM adapter, sources, CRM links, seeded and read
    /// rules.
    async fn build(&self, t: &Tenant, spec: TenantSpec) -> anyhow::Result<TenantRun> {
        let id = TenantId(t.id);
        let store = self.store.for_tenant(id);
        let crm = crm::from_config(&spec.crm, Arc::clone(&store))
            .with_context(|| format!("tenant `{}`: its [tenant.crm]", t.slug))?;
        let sources = Arc::new(
            intake::sources::sources(&spec.sources)
                .map_err(|e| anyhow::anyhow!("tenant `{}`: {e}", t.slug))?,
        );
        if let Some(links) = crm::web_links(&spec.crm) {
            store
                .publish_crm_links(&links, store.now())
                .await
                .with_context(|| format!("tenant `{}`: publishing its CRM's web links", t.slug))?;
        }
        intake::seed_rules(&*store, &spec.sources, self.config.matching.window)
            .await
            .with_context(|| format!("tenant `{}`", t.slug))?;
        // Its pulled sources' credentials: `env:` names the gateway's environment. One this
        // gateway cannot read leaves that source (or channel, below) unrun here, said in
        // the log; the tenant is served all the same.
        let pullers = crate::pull::pullers_of(&spec.sources, |v| std::env::var(v).ok())
            .unwrap_or_else(|e| {
                tracing::error!(tenant = %t.slug, error = %e, "the tenant's pulled sources are not fetched by this gateway");
                vec![]
            });
        let alerters = match &spec.alerts {
            Some(alerts) => {
                let alerts_store: Arc<dyn crate::store::Alerts> = Arc::clone(&store) as _;
                crate::alerts::alerters(
                    &alerts_store,
                    alerts,
                    self.config.review.stale_after,
                    &format!("{}:{}", self.owner, t.slug),
                )
                .unwrap_or_else(|e| {
                    tracing::error!(tenant = %t.slug, error = %e, "the tenant's alert channels are not run by this gateway");
                    vec![]
                })
            }
            None => vec![],
        };
        let rules = Arc::new(intake::LiveRules::default());
        rules
            .refresh(&*store)
            .await
            .with_context(|| format!("tenant `{}`: reading its business rules", t.slug))?;
        Ok(TenantRun {
            id,
            slug: spec.slug.clone(),
            version: t.version,
            spec,
            store,
            crm,
            sources,
            rules,
            pullers,
            alerters,
        })
    }

    /// Starts `run`'s worker.
    fn serve(&mut self, run: TenantRun) {
        let worker = Worker {
            store: Arc::clone(&run.store),
            crm: Arc::clone(&run.crm),
            settings: Arc::new(run.worker_settings(&self.config)),
            owner: format!("{}:{}", self.owner, run.slug),
            turns: Some(self.lanes.join(run.id.0, run.spec.weight)),
        };
        let (stop, stopped) = watch::channel(false);
        let worker = tokio::spawn(worker.run(stopped));
        let redelivery = self.redeliverer(&run).map(|r| {
            let (r, rx) = (Arc::new(r), stop.subscribe());
            let what = format!("redelivery:{}", run.slug);
            tokio::spawn(async move {
                crate::supervise::supervise(
                    &what,
                    rx.clone(),
                    crate::supervise::RESTART_DELAY,
                    move || Arc::clone(&r).run(rx.clone()),
                )
                .await
            })
        });
        let mut served = Served {
            run,
            stop,
            worker,
            redelivery,
            pulls: vec![],
        };
        if let Some((_, default)) = &self.intake {
            served.pull(&served.run.intake_state(default));
        }
        self.served.insert(served.run.id.0, served);
        self.changed = true;
    }

    /// The tenant's redelivery to its integration's webhook, when its claim API has one
    /// (`crate::redeliver`): a claimed lead due again after a `not_sent` or `rate_limited`
    /// report is sent back there, named by its tenant's key.
    fn redeliverer(&self, run: &TenantRun) -> Option<crate::redeliver::Redeliverer> {
        let claim_api = &run.spec.claim_api;
        let url = claim_api.redeliver_url.clone()?;
        // The spec was refused without it (`config::tenants`).
        let token = run.spec.api.integration_token.clone()?;
        let settings = crate::redeliver::RedeliverSettings {
            source: claim_api.source.clone(),
            url,
            token,
            every: claim_api.redeliver_every,
            // Not latency-bound (it waits `redeliver_every` between sends): a tenant's pick
            // runs at most once a second, however many tenants have one.
            poll_interval: self.config.worker.poll_interval.max(TENANT_REDELIVERY_POLL),
            owner: format!("{}:{}", self.owner, run.slug),
        };
        match crate::redeliver::Redeliverer::new(Arc::clone(&run.store), settings) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::error!(tenant = %run.slug, error = %e, "the tenant's redelivery cannot start");
                None
            }
        }
    }

    /// Stops a tenant's worker and waits for its attempts in flight.
    async fn unserve(&mut self, id: i32) {
        if let Some(s) = self.served.remove(&id) {
            self.changed = true;
            s.stop().await;
            self.lanes.leave(id);
        }
    }

    /// Serves the registry as it is now: tenants whose version moved are built again,
    /// removed ones stopped, new ones started.
    async fn reload(&mut self) -> anyhow::Result<()> {
        let listed = self.listed().await?;
        // What the registry serves, by id and version; nothing to do when it is what runs.
        let listed_versions: HashMap<i32, i64> = listed
            .iter()
            .filter(|t| served_beside_the_default(t))
            .map(|t| (t.id, t.version))
            .collect();
        let running: HashMap<i32, i64> = self
            .served
            .iter()
            .map(|(id, s)| (*id, s.run.version))
            .collect();
        if listed_versions == running {
            return Ok(());
        }
        let wanted = self.wanted(listed).await?;
        let gone: Vec<i32> = running
            .keys()
            .filter(|id| !listed_versions.contains_key(id))
            .copied()
            .collect();
        for id in gone {
            if let Some(s) = self.served.get(&id) {
                tracing::info!(tenant = %s.run.slug, "tenant removed: no longer served");
            }
            self.unserve(id).await;
        }
        for (t, spec) in wanted {
            if running.get(&t.id) == Some(&t.version) {
                continue;
            }
            match self.build(&t, spec).await {
                Ok(run) => {
                    tracing::info!(tenant = %run.slug, version = run.version, "tenant served as the registry now says");
                    self.unserve(t.id).await;
                    self.serve(run);
                }
                Err(e) => {
                    tracing::warn!(tenant = %t.slug, error = %format!("{e:#}"), "the tenant's spec cannot be served; serving it as it was, trying again at the next reload")
                }
            }
        }
        Ok(())
    }

    /// Hands intake the tenants' states as they are served now.
    fn publish(&mut self) {
        self.changed = false;
        let Some((states, default)) = &self.intake else {
            return;
        };
        let map = self
            .served
            .values()
            .map(|s| (s.run.slug.as_str().to_owned(), s.run.intake_state(default)))
            .collect();
        states.set(map);
    }
}

/// Whether a gateway serves `t` as a fleet tenant: not the default one, not removed.
fn served_beside_the_default(t: &Tenant) -> bool {
    t.id != TenantId::DEFAULT.0 && t.state != TenantState::Removed
}

impl TenantRun {
    /// Its worker's settings: the deployment's `[worker]`, `[retry]` and `[outage]`, its
    /// own CRM's timeout and settle window, field maps and calls at once.
    pub fn worker_settings(&self, config: &Config) -> WorkerSettings {
        let lanes = usize::try_from(self.spec.max_in_flight.max(1)).unwrap_or(1);
        let mut settings = WorkerSettings::of(config, &self.spec.crm, &self.spec.sources, lanes);
        settings.look_up_first = self.spec.look_up_first;
        settings
    }

    /// Its intake: the default tenant's settings (`[server]`, `[matching]`, the refusal
    /// budget) with its own store, sources, claim API source and tokens, rules, and
    /// tombstone window.
    pub fn intake_state(&self, default: &intake::IntakeState) -> intake::IntakeState {
        let mut state = default.clone();
        state.store = Arc::clone(&self.store);
        state.sources = Arc::clone(&self.sources);
        state.claim_api = Arc::new(intake::ClaimApi {
            source: self.spec.claim_api.source.clone(),
            lease: self.spec.claim_api.lease,
            retry: default.claim_api.retry.clone(),
        });
        // Its claim API and reads open to its own tokens, and to the fleet's.
        state.api_tokens = Arc::new(intake::ApiTokens {
            integration: self.spec.api.integration_token.clone(),
            read: self.spec.api.read_token.clone(),
            fleet: Some(Arc::clone(&default.api_tokens)),
        });
        state.rules = Arc::clone(&self.rules);
        state.tombstone = self.spec.retention.tombstone.unwrap_or(default.tombstone);
        state.tenant = self.slug.clone();
        state.tenants = Arc::default();
        state
    }
}
