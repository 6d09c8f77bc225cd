//! What the operator console asks of Leadgate: the queue, a case with everything on one
//! screen, the human actions and the dashboard. The desktop app (`src-tauri`) is a thin
//! shell over this crate; every action goes through the same `Review::resolve` /
//! `Upkeep::resume_connector` the CLI uses, so it means the same wherever it is taken.
//!
//! It stands on the store's API only: no SQL and no database driver here. Live updates
//! come from `store::changes::subscribe`, and "the database cannot be reached" from
//! `StoreError::unreachable`.
//!
//! Every decision is `Review::resolve`, with the same guards as for any other caller;
//! resuming a connector is `Upkeep::resume_connector`, sending a stale or failed operation
//! to review `Review::open_review`; each is a `store::Ask` (see `store::requests` for how a
//! personal login's ask reaches a gateway). What a case allows and which actions need a
//! comment come from `domain::rules` (`allowed_actions`, `needs_comment`), never from the
//! Svelte side, which calls commands only through `ui/src/lib/api.ts`. A link into the
//! CRM percent-encodes the `crm_id` it carries.
//!
//! The types here are the console's wire format: the TypeScript twins in
//! `ui/src/lib/bindings.ts` are generated from them (ts-rs) and checked for freshness by
//! `cargo test` (`bindings_are_fresh` below).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use leadgate_domain::roles::{may_ask, AskKind, Role};
use leadgate_domain::EventKind;
use leadgate_domain::{OperationId, ReviewReason, Status};
use leadgate_store::{
    self as store, Answer, Ask, CaseFilter, HumanAction, Identity, Operation, OperationPage, Page,
    ReviewCase, Store, StoreError, TimelineEvent,
};

mod bindings;
mod case;
mod error;
mod search;
mod views;
pub use bindings::*;
pub use error::*;
pub use search::*;
pub use views::*;
use views::{crm_entities, found_in_crm};

/// The PostgreSQL channel the database notifies on (migration 0004).
pub use leadgate_store::changes::CHANGES_CHANNEL;

/// What the console remembers per user (in the OS's config folder).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct Settings {
    pub database_url: Option<String>,
    /// `ru` or `en`; none: follow the system locale.
    pub language: Option<String>,
    /// How to open a CRM entity: `{id}` is replaced by the `crm_id`.
    pub crm_url_template: Option<String>,
    /// The tenant shown last (its slug), shown again at the next connection when the
    /// login may still see it.
    #[serde(default)]
    pub tenant: Option<String>,
}

impl Settings {
    pub fn load(path: &Path) -> Settings {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default()
    }

    pub fn save(&self, path: &Path) -> ApiResult<()> {
        let fail = |e: std::io::Error| ConsoleError::Failed {
            message: format!("cannot save settings to {}: {e}", path.display()),
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let text = serde_json::to_string_pretty(self).expect("settings serialise");
        // The database URL may hold a password: readable by its owner only, also when
        // the file was created by an older version with wider permissions.
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            options.mode(0o600);
            if path.exists() {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .map_err(fail)?;
            }
        }
        use std::io::Write;
        let mut file = options.open(path).map_err(fail)?;
        file.write_all(text.as_bytes()).map_err(fail)
    }
}

/// What the console shows about the connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Connection {
    pub backend: String,
    /// The URL without a password.
    pub display_url: String,
    #[ts(type = "number")]
    pub schema_version: i64,
    /// The database pushes changes (PostgreSQL LISTEN/NOTIFY, `leadgate://refresh`
    /// events); otherwise the console polls (SQLite).
    pub live: bool,
    /// `local` (SQLite: one machine, one operator, the OS user), `owner` (PostgreSQL with
    /// the gateway's own login: everything, written directly), `person` (a personal login
    /// in `role`: a gateway applies each action), `nobody` (a login in no Leadgate role).
    pub mode: String,
    /// Who every action is recorded as.
    pub actor: String,
    /// `support`, `sales_ops`, `manager` or `admin`: a personal login's role.
    pub role: Option<String>,
    /// What this console may show and do; the database refuses the rest.
    pub may: Permissions,
    /// The tenant shown (its slug): every list, figure, connector and rule is its own.
    pub tenant: String,
    /// The tenants this login may show, the default tenant first; a switcher when more
    /// than one.
    pub tenants: Vec<TenantOption>,
}

/// What a connection's identity may see and do (`domain::roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
pub struct Permissions {
    /// The queue, the cases, their timelines, payloads and contact data.
    pub read_cases: bool,
    /// Decide review cases (other than cross-channel matches).
    pub resolve: bool,
    /// Decide cross-channel matches, and *Create new*.
    pub cross_channel: bool,
    /// Resume a paused connector.
    pub connectors: bool,
    /// Change the business rules (what a contact match means, the window, the channels).
    pub rules: bool,
    /// See and manage the event feed's subscribers (admins).
    pub feed: bool,
}

impl Permissions {
    fn of(identity: &Identity) -> Permissions {
        let role = match identity {
            Identity::Local | Identity::Owner { .. } => {
                return Permissions {
                    read_cases: true,
                    resolve: true,
                    cross_channel: true,
                    connectors: true,
                    rules: true,
                    feed: true,
                }
            }
            Identity::Nobody { .. } => {
                return Permissions {
                    read_cases: false,
                    resolve: false,
                    cross_channel: false,
                    connectors: false,
                    rules: false,
                    feed: false,
                }
            }
            Identity::Person { role, .. } => *role,
        };
        use leadgate_domain::Resolution as Res;
        Permissions {
            read_cases: role.reads_cases(),
            resolve: may_ask(
                role,
                AskKind::Resolve(ReviewReason::UncertainOutcome, Res::ConfirmedCrmResult),
            ),
            cross_channel: may_ask(
                role,
                AskKind::Resolve(ReviewReason::CrossChannelMatch, Res::LinkedExisting),
            ),
            connectors: may_ask(role, AskKind::ResumeConnector),
            rules: may_ask(role, AskKind::EditRules),
            feed: may_ask(role, AskKind::ManageFeed),
        }
    }
}

/// Who carries out a person's action: a gateway, for a personal login (the database
/// records the login), or this console directly, as the given operator.
#[derive(Clone)]
pub(crate) struct Performer {
    store: Arc<dyn Store>,
    identity: Identity,
}

impl Performer {
    pub(crate) async fn perform(&self, operator: &str, ask: Ask) -> ApiResult<Answer> {
        Ok(match &self.identity {
            Identity::Person { .. } => store::ask_and_wait(&*self.store, &ask, ACTION_WAIT).await?,
            Identity::Nobody { login } => {
                return Err(ConsoleError::Forbidden {
                    message: format!("the login `{login}` is in none of Leadgate's roles"),
                })
            }
            Identity::Local | Identity::Owner { .. } => {
                self.store.perform(operator, ask, self.store.now()).await?
            }
        })
    }

    /// The role a personal login has (`None`: local or owner, who may do everything).
    fn role(&self) -> Option<Role> {
        match &self.identity {
            Identity::Person { role, .. } => Some(*role),
            _ => None,
        }
    }

    /// Whether this connection's role decides cases of `reason` at all (a manager
    /// decides cross-channel matches; support and admin decide none; without a role —
    /// local mode, the owner's login — every kind).
    fn decides(&self, reason: ReviewReason) -> bool {
        self.role().is_none_or(|role| {
            leadgate_domain::Resolution::ALL
                .iter()
                .any(|r| may_ask(role, AskKind::Resolve(reason, *r)))
        })
    }
}

impl Console {
    /// Whether this person's role decides cases of `reason` (see `Performer::decides`).
    pub(crate) fn decides(&self, reason: ReviewReason) -> bool {
        self.performer.decides(reason)
    }
}

/// How long a personal login's action waits for a gateway to apply it.
pub const ACTION_WAIT: Duration = Duration::from_secs(10);

/// The OS user: who acts in local single-operator mode.
pub fn os_user() -> String {
    whoami::username()
}

/// The console's connection and preferences; the desktop shell holds one.
pub struct ConsoleState {
    settings_path: PathBuf,
    /// A URL given on the command line or in the environment wins over settings.
    override_url: Option<String>,
    inner: tokio::sync::RwLock<(Settings, Option<Arc<Console>>)>,
    /// What changed in the database (a table name), pushed by PostgreSQL.
    changes: tokio::sync::broadcast::Sender<String>,
    listener: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ConsoleState {
    pub fn new(settings_path: PathBuf, override_url: Option<String>) -> ConsoleState {
        let settings = Settings::load(&settings_path);
        ConsoleState {
            settings_path,
            override_url: override_url.filter(|u| !u.trim().is_empty()),
            inner: tokio::sync::RwLock::new((settings, None)),
            changes: tokio::sync::broadcast::channel(64).0,
            listener: std::sync::Mutex::new(None),
        }
    }

    /// Live updates: a table name when a review case or a connector changes, on a
    /// PostgreSQL database (LISTEN/NOTIFY, migration 0004), at most a few every
    /// `store::changes::REFRESH_EVERY` however many notifications arrive. On SQLite nothing comes: the
    /// console polls (`Connection::live` says which).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    /// (Re)starts listening for the connected database's notifications.
    async fn listen(&self, url: &str, live: bool) -> ApiResult<()> {
        let previous = self.listener.lock().expect("listener lock").take();
        if let Some(old) = previous {
            old.abort();
        }
        if !live {
            return Ok(());
        }
        let Some(feed) = store::changes::subscribe(url).await? else {
            return Ok(());
        };
        let task = feed.relay(self.changes.clone());
        *self.listener.lock().expect("listener lock") = Some(task);
        Ok(())
    }

    pub async fn settings(&self) -> Settings {
        let mut s = self.inner.read().await.0.clone();
        if let Some(url) = &self.override_url {
            s.database_url = Some(url.clone());
        }
        s
    }

    pub async fn save_settings(&self, settings: Settings) -> ApiResult<Settings> {
        let mut inner = self.inner.write().await;
        let s = settings;
        s.save(&self.settings_path)?;
        inner.0 = s;
        drop(inner);
        Ok(self.settings().await)
    }

    /// Connects to `url` (or the remembered/overriding URL) and remembers it on success.
    pub async fn connect(&self, url: Option<String>) -> ApiResult<Connection> {
        let url = match url.filter(|u| !u.trim().is_empty()) {
            Some(u) => u.trim().to_owned(),
            None => self
                .settings()
                .await
                .database_url
                .ok_or(ConsoleError::NotConnected)?,
        };
        let mut console = Console::open(&url).await?;
        // The tenant shown last, if this login may still show it.
        let remembered = self.inner.read().await.0.tenant.clone();
        if let Some(slug) = remembered.filter(|s| *s != console.connection.tenant) {
            if let Ok(other) = console.with_tenant(&slug) {
                console = other;
            }
        }
        let connection = console.connection.clone();
        self.listen(&url, connection.live).await?;
        let mut inner = self.inner.write().await;
        inner.1 = Some(Arc::new(console));
        if self.override_url.as_deref() != Some(url.as_str())
            && inner.0.database_url.as_deref() != Some(&url)
        {
            inner.0.database_url = Some(url);
            inner.0.save(&self.settings_path)?;
        }
        Ok(connection)
    }

    /// Shows the tenant `slug` (one of `Connection::tenants`) and remembers it.
    pub async fn select_tenant(&self, slug: &str) -> ApiResult<Connection> {
        let console = self.console().await?.with_tenant(slug)?;
        let connection = console.connection.clone();
        let mut inner = self.inner.write().await;
        inner.1 = Some(Arc::new(console));
        if inner.0.tenant.as_deref() != Some(slug) {
            inner.0.tenant = Some(slug.to_owned());
            inner.0.save(&self.settings_path)?;
        }
        Ok(connection)
    }

    pub async fn console(&self) -> ApiResult<Arc<Console>> {
        self.inner
            .read()
            .await
            .1
            .clone()
            .ok_or(ConsoleError::NotConnected)
    }

    /// Who this console's actions are recorded as: the database login, or the OS user
    /// on SQLite (`Connection::actor`). Never a name typed in.
    pub async fn operator(&self) -> ApiResult<String> {
        Ok(self.console().await?.connection.actor.clone())
    }
}

mod bulk;
mod call;
mod diagnosis;
mod export;
mod feed;
mod lookup;
mod rules;
mod tenant;
pub use bulk::*;
pub use call::*;
pub use diagnosis::*;
pub use export::*;
pub use feed::*;
pub use leadgate_domain::report::{
    CauseCount, ContentMeasure, Evidence, KeyKind, LineData, LineDetail, LineText, PairData,
    ReportData, ReportInput, SourceCounts, SourcesRead, Trigger, VerdictCount,
};
pub use lookup::*;
pub use rules::*;
pub use tenant::TenantOption;

/// A connected console.
pub struct Console {
    store: Arc<dyn Store>,
    performer: Performer,
    bulk_runs: Arc<bulk::Runs>,
    pub connection: Connection,
    /// `connection.tenants` with their ids.
    tenants: Vec<(leadgate_domain::TenantId, TenantOption)>,
    /// `in_progress` past its lease by this long counts as stale.
    pub stale_after: Duration,
    /// Where a phone searched for without a country code is (intake's `[matching]
    /// default_region`; RU unless the shell sets it).
    pub phone_region: leadgate_domain::contact::Region,
}

pub(crate) fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// An operation id as the UI sends it; a malformed one is the operator's input to fix.
fn parse_operation_id(id: &str) -> ApiResult<OperationId> {
    OperationId::try_from(id.to_owned()).map_err(|e| ConsoleError::Invalid {
        message: e.to_string(),
    })
}

fn unexpected_answer() -> ConsoleError {
    ConsoleError::Failed {
        message: "the gateway answered a different request".into(),
    }
}

fn cursor_err() -> ConsoleError {
    ConsoleError::Invalid {
        message: "bad page cursor".into(),
    }
}

impl Console {
    /// Opens the database without migrating it and checks its schema version.
    pub async fn open(url: &str) -> ApiResult<Console> {
        Console::on(store::open(url).await?, without_password(url)).await
    }

    /// The console over `store`, already opened (the web console opens a person's own,
    /// `PgStore::open_as`), shown as `display_url`; checks the schema version.
    pub async fn on(store: Arc<dyn Store>, display_url: String) -> ApiResult<Console> {
        store.ping().await?;
        let known = store::known_schema_version();
        let found = store
            .schema_version()
            .await?
            .ok_or(ConsoleError::SchemaMissing)?;
        if found < known {
            return Err(ConsoleError::SchemaTooOld { found, known });
        }
        if found > known {
            return Err(ConsoleError::SchemaTooNew { found, known });
        }
        let identity = store.identity().await?;
        let (mode, actor, role) = match &identity {
            Identity::Local => ("local", os_user(), None),
            Identity::Owner { login } => ("owner", login.clone(), None),
            Identity::Person { login, role } => ("person", login.clone(), Some(role.to_string())),
            Identity::Nobody { login } => ("nobody", login.clone(), None),
        };
        let tenants = tenant::tenants_of(&*store, &identity).await?;
        let shown = tenant::first_shown(&*store, &tenants);
        let store = if shown == store.tenant() {
            store
        } else {
            store.for_tenant(shown)
        };
        let slug = tenants
            .iter()
            .find(|(id, _)| *id == shown)
            .map(|(_, t)| t.slug.clone())
            .unwrap_or_default();
        Ok(Console {
            connection: Connection {
                backend: store.backend().name().to_owned(),
                display_url,
                schema_version: found,
                live: store.backend().is_shared(),
                mode: mode.to_owned(),
                actor,
                role,
                may: Permissions::of(&identity),
                tenant: slug,
                tenants: tenants.iter().map(|(_, t)| t.clone()).collect(),
            },
            tenants,
            performer: Performer {
                store: store.clone(),
                identity,
            },
            store,
            bulk_runs: bulk::runs(),
            stale_after: Duration::from_secs(0),
            phone_region: Default::default(),
        })
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The origins a person may open from this console: each published CRM's and the
    /// settings template's. The desktop shell scopes its opener to exactly these.
    pub async fn crm_origins(&self, crm_url_template: Option<&str>) -> ApiResult<Vec<String>> {
        let mut origins: Vec<String> = self
            .store
            .crm_links()
            .await?
            .iter()
            .flat_map(|l| [Some(l.entity_url.as_str()), l.search_url.as_deref()])
            .chain([crm_url_template])
            .flatten()
            .filter_map(origin_of)
            .collect();
        origins.sort();
        origins.dedup();
        Ok(origins)
    }

    fn stale_before(&self) -> DateTime<Utc> {
        self.store.now() - chrono::TimeDelta::from_std(self.stale_after).unwrap_or_default()
    }

    pub async fn counts(&self) -> ApiResult<TabCounts> {
        let by_reason = self.store.case_counts().await?;
        let queue = self.store.queue_counts(self.stale_before()).await?;
        let connectors = self.store.connectors().await?;
        let beats = self.store.beats().await?;
        let last_beat = beats.last;
        let mut c = TabCounts {
            gateway_running: last_beat.is_some_and(|b| self.store.now() - b < GATEWAY_SILENT_AFTER),
            gateway_last_beat: last_beat.map(ts),
            spooled: beats.spooled.records,
            spooled_since: beats.spooled.oldest.map(ts),
            stale: queue.stale_in_progress,
            failed_terminal: queue.failed_terminal,
            paused_connectors: connectors.iter().filter(|c| c.paused).count() as i64,
            ..Default::default()
        };
        for (reason, n) in by_reason {
            if reason == ReviewReason::PayloadConflict {
                c.payload_conflict = n;
            } else {
                c.needs_review += n;
                if !self.decides(reason) {
                    c.others_decide += n;
                }
            }
            c.by_reason.insert(reason.as_str().to_owned(), n);
        }
        Ok(c)
    }

    pub async fn queue(&self, tab: Tab, q: QueueQuery) -> ApiResult<QueuePage> {
        let limit = q.limit.unwrap_or(50).clamp(1, 500);
        let older = q
            .older_than_minutes
            .filter(|m| *m > 0)
            .map(|m| self.store.now() - chrono::TimeDelta::minutes(m));
        let source = q.source.filter(|s| !s.is_empty());
        let newest_first = q.newest_first;
        match tab {
            Tab::NeedsReview | Tab::PayloadConflict => {
                let reason = match tab {
                    Tab::PayloadConflict => Some(ReviewReason::PayloadConflict),
                    _ => q
                        .reason
                        .filter(|r| !r.is_empty())
                        .map(|r| r.parse::<ReviewReason>())
                        .transpose()
                        .map_err(|e| ConsoleError::Invalid {
                            message: e.to_string(),
                        })?,
                };
                let after_id = q
                    .cursor
                    .map(|c| c.parse::<i64>().map_err(|_| cursor_err()))
                    .transpose()?;
                // "Needs review" lists every reason but conflicts (they have a tab of
                // their own); the store leaves them out, so every page is full.
                let filter = CaseFilter {
                    reason,
                    except_reason: (tab == Tab::NeedsReview)
                        .then_some(ReviewReason::PayloadConflict),
                    source,
                    opened_before: older,
                    resolved: false,
                    newest_first,
                };
                let cases = self
                    .store
                    .review_cases(&filter, Page { after_id, limit })
                    .await?;
                let next = (cases.len() as i64 == limit)
                    .then(|| cases.last().map(|c| c.id.to_string()))
                    .flatten();
                let rows = cases
                    .into_iter()
                    .map(|c| {
                        let note = c
                            .detail
                            .get("message")
                            .and_then(|m| m.as_str())
                            .map(str::to_owned);
                        QueueRow {
                            note,
                            ..case_row(c)
                        }
                    })
                    .collect();
                Ok(QueuePage {
                    rows: self.with_leads(rows).await?,
                    next,
                })
            }
            Tab::FailedTerminal | Tab::Stale => {
                let after = q
                    .cursor
                    .map(|c| {
                        let (at, id) = c.split_once('|').ok_or_else(cursor_err)?;
                        let at = DateTime::parse_from_rfc3339(at).map_err(|_| cursor_err())?;
                        Ok::<_, ConsoleError>((at.with_timezone(&Utc), id.to_owned()))
                    })
                    .transpose()?;
                let page = OperationPage {
                    after,
                    limit,
                    newest_first,
                    source,
                    before: older,
                };
                // Failed operations wait since their last change, stale ones since their
                // lease ran out; the cursor is that time and the key.
                let (ops, since): (_, fn(&Operation) -> DateTime<Utc>) = if tab == Tab::Stale {
                    let ops = self
                        .store
                        .stale_in_progress(self.stale_before(), page)
                        .await?;
                    (ops, |o| o.lease_expires_at.unwrap_or(o.updated_at))
                } else {
                    let ops = self
                        .store
                        .operations_with_status(Status::FailedTerminal, page)
                        .await?;
                    (ops, |o| o.updated_at)
                };
                let next = (ops.len() as i64 == limit)
                    .then(|| {
                        ops.last()
                            .map(|o| format!("{}|{}", ts(since(o)), o.operation_id))
                    })
                    .flatten();
                let rows = ops.into_iter().map(|o| op_row(o, since)).collect();
                Ok(QueuePage { rows, next })
            }
            Tab::Connectors => {
                let rows = self
                    .store
                    .connectors()
                    .await?
                    .into_iter()
                    .map(|c| QueueRow {
                        case_id: None,
                        operation_id: None,
                        source: c.name,
                        status: if c.paused {
                            "paused".into()
                        } else {
                            "active".into()
                        },
                        reason: None,
                        since: ts(c.since),
                        attempts: 0,
                        crm_id: None,
                        note: c.reason,
                        lead: LeadSummary::default(),
                    })
                    .collect();
                Ok(QueuePage { rows, next: None })
            }
        }
    }

    /// The operations of `rows`, by key, in one query.
    pub(crate) async fn operations_of(
        &self,
        rows: &[QueueRow],
    ) -> ApiResult<BTreeMap<String, Operation>> {
        let ids: Vec<OperationId> = rows
            .iter()
            .filter_map(|r| r.operation_id.clone())
            .filter_map(|id| OperationId::try_from(id).ok())
            .collect();
        Ok(self
            .store
            .operations(&ids)
            .await?
            .into_iter()
            .map(|o| (o.operation_id.to_string(), o))
            .collect())
    }

    /// Fills each row's lead from its operation (one query for the page).
    async fn with_leads(&self, mut rows: Vec<QueueRow>) -> ApiResult<Vec<QueueRow>> {
        let ops = self.operations_of(&rows).await?;
        for r in &mut rows {
            if let Some(op) = r.operation_id.as_ref().and_then(|id| ops.get(id)) {
                r.lead = LeadSummary::of(op);
                r.crm_id = r.crm_id.take().or_else(|| op.crm_id.clone());
                r.attempts = op.attempts;
            }
        }
        Ok(rows)
    }

    /// Open cases opened after case `after`, oldest first: the notifier's view of "new
    /// review cases". Without `after`, the newest open case alone: where a console's
    /// notifications start (reading every open case at each sign-in cost 150–260 ms and
    /// 2.4 MiB over 10,000 open cases, `make bench`).
    pub async fn cases_after(&self, after: Option<i64>) -> ApiResult<Vec<QueueRow>> {
        if after.is_none() {
            let newest = CaseFilter {
                newest_first: true,
                ..Default::default()
            };
            let page = Page {
                after_id: None,
                limit: 1,
            };
            let cases = self.store.review_cases(&newest, page).await?;
            return Ok(cases.into_iter().map(case_row).collect());
        }
        let mut rows = vec![];
        let mut after_id = after;
        loop {
            let page = self
                .store
                .review_cases(
                    &CaseFilter::default(),
                    Page {
                        after_id,
                        limit: 1000,
                    },
                )
                .await?;
            let done = page.len() < 1000;
            after_id = page.last().map(|c| c.id).or(after_id);
            rows.extend(page.into_iter().map(case_row));
            if done {
                return Ok(rows);
            }
        }
    }

    /// Puts "this operator was notified" on the timeline of each operation a desktop
    /// notification was about (`what`: `review_opened`, ...).
    pub async fn record_notification(
        &self,
        operator: &str,
        what: &str,
        operation_ids: &[String],
    ) -> ApiResult<()> {
        for id in operation_ids {
            let operation_id = parse_operation_id(id)?;
            let detail = serde_json::json!({"what": what, "channel": "desktop", "to": operator});
            self.performer
                .perform(
                    operator,
                    Ask::Notified {
                        operation_id,
                        detail,
                    },
                )
                .await?;
        }
        Ok(())
    }

    pub async fn resume_connector(&self, operator: &str, name: &str) -> ApiResult<bool> {
        match self
            .performer
            .perform(
                operator,
                Ask::ResumeConnector {
                    name: name.to_owned(),
                },
            )
            .await?
        {
            Answer::Resumed { resumed } => Ok(resumed),
            _ => Err(unexpected_answer()),
        }
    }

    /// Pauses a connector by hand (a CRM's maintenance window, a migration): its leads
    /// queue and nothing is sent until it is resumed. False: it was paused already.
    pub async fn pause_connector(
        &self,
        operator: &str,
        name: &str,
        reason: &str,
    ) -> ApiResult<bool> {
        match self
            .performer
            .perform(
                operator,
                Ask::PauseConnector {
                    name: name.to_owned(),
                    reason: reason.to_owned(),
                },
            )
            .await?
        {
            Answer::Paused { paused } => Ok(paused),
            _ => Err(unexpected_answer()),
        }
    }

    pub async fn connectors(&self) -> ApiResult<Vec<ConnectorView>> {
        Ok(self
            .store
            .connectors()
            .await?
            .into_iter()
            .map(|c| ConnectorView {
                name: c.name,
                paused: c.paused,
                reason: c.reason,
                since: ts(c.since),
                changed_by: c.changed_by,
                by_hand: c.by_hand,
            })
            .collect())
    }

    pub async fn dashboard(&self, range: Range) -> ApiResult<Dashboard> {
        let now = self.store.now();
        let m = self
            .store
            .metrics(now, self.stale_after.max(Duration::from_secs(120)))
            .await?;
        let (span, buckets) = range.span_and_buckets();
        let series = self.store.series(now - span, now, buckets).await?;
        Ok(Dashboard {
            unique_operations: m.unique_operations,
            crm_entities_created: m.crm_entities_created,
            duplicates_absorbed: m.duplicates_absorbed,
            retries_by_class: m.retries_by_class,
            operations_by_status: m.operations_by_status,
            stale_in_progress: m.stale_in_progress,
            unprocessed: m.unprocessed,
            lost: m.lost,
            open_cases_by_reason: m.open_cases_by_reason,
            resolved_cases: m.resolved_cases,
            mean_seconds_to_resolve: m.mean_seconds_to_resolve,
            unreconstructable: m.unreconstructable,
            paused_connectors: m.paused_connectors,
            crm_steps: m
                .crm_steps
                .iter()
                .map(|((entity, how), n)| (format!("{entity}:{how}"), *n))
                .collect(),
            unreachable_connectors: m
                .unreachable_connectors
                .into_iter()
                .map(|(c, since)| (c, ts(since)))
                .collect(),
            series: series
                .into_iter()
                .map(|p| SeriesPointView {
                    start: ts(p.start),
                    deliveries: p.deliveries,
                    new_operations: p.new_operations,
                    crm_entities: p.crm_entities,
                    duplicates_absorbed: p.duplicates_absorbed,
                    cases_opened: p.cases_opened,
                    cases_resolved: p.cases_resolved,
                    retries_by_class: p.retries_by_class,
                })
                .collect(),
        })
    }
}

/// A review case as a queue line (waiting since it was opened).
fn case_row(c: ReviewCase) -> QueueRow {
    QueueRow {
        case_id: Some(c.id),
        operation_id: Some(c.operation_id),
        source: c.source,
        status: c.status.to_string(),
        reason: Some(c.reason.to_string()),
        since: ts(c.opened_at),
        attempts: 0,
        crm_id: None,
        note: None,
        lead: LeadSummary::default(),
    }
}

fn op_row(o: Operation, since: impl Fn(&Operation) -> DateTime<Utc>) -> QueueRow {
    QueueRow {
        lead: LeadSummary::of(&o),
        case_id: None,
        since: ts(since(&o)),
        operation_id: Some(o.operation_id.to_string()),
        source: o.source,
        status: o.status.to_string(),
        reason: o.last_error_class.map(|c| c.to_string()),
        attempts: o.attempts,
        crm_id: o.crm_id,
        note: o.last_error,
    }
}

/// The link to a CRM entity: `{id}` in the template replaced by the `crm_id`,
/// percent-encoded — the id is the CRM's (or a person's) text, so it must stay one path
/// segment or query value and never add a scheme, host or path of its own.
pub fn crm_url(template: &str, crm_id: &str) -> Option<String> {
    (!template.is_empty()).then(|| fill(template, "{id}", crm_id))
}

/// The CRM's search page: `{q}` replaced by the query, percent-encoded as one value.
pub fn crm_search_url(template: &str, q: &str) -> String {
    fill(template, "{q}", q)
}

/// `template` with `placeholder` replaced by `value`, every non-alphanumeric byte
/// percent-encoded: a value from the CRM, a person or a web form stays one path segment or
/// query value.
fn fill(template: &str, placeholder: &str, value: &str) -> String {
    template.replace(
        placeholder,
        &percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC)
            .to_string(),
    )
}

/// The scheme, host and port of a URL (`https://acme.bitrix24.ru`), what an opener scope
/// allows; `None` for anything but http(s).
pub fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next()?;
    // The origin becomes a glob pattern in the opener's scope: only a plain host name
    // (letters, digits, dots, hyphens) and a numeric port, so no `*`, `?`, `[` or `@` can
    // widen it to other hosts.
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    let plain_host = !host.is_empty()
        && !host.starts_with(['.', '-'])
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    let plain_port = port.is_none_or(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    (plain_host && plain_port).then(|| format!("{scheme}://{}", authority.to_ascii_lowercase()))
}

pub fn op_view(o: Operation, crm_url_template: Option<&str>) -> OperationView {
    let crm_url = match (&o.crm_id, crm_url_template) {
        (Some(id), Some(t)) => crm_url(t, id),
        _ => None,
    };
    OperationView {
        crm_search_url: None,
        lead: LeadSummary::of(&o),
        operation_id: o.operation_id.to_string(),
        source: o.source,
        status: o.status.to_string(),
        payload_hash: o.payload_hash,
        payload: o.payload,
        crm_id: o.crm_id,
        crm_link: o.crm_link,
        crm_url,
        attempts: o.attempts,
        last_error: o.last_error,
        last_error_class: o.last_error_class.map(|c| c.to_string()),
        review_reason: o.review_reason.map(|r| r.to_string()),
        lease_owner: o.lease_owner,
        lease_expires_at: o.lease_expires_at.map(ts),
        retry_grants: o.retry_grants,
        checks_first: o.attempts > 0 || o.verify_first,
        contact_phone: o.contact.phone,
        contact_email: o.contact.email,
        version: o.version,
        created_at: ts(o.created_at),
        updated_at: ts(o.updated_at),
    }
}

fn case_view(c: ReviewCase) -> CaseView {
    CaseView {
        id: c.id,
        operation_id: c.operation_id,
        reason: c.reason.to_string(),
        opened_at: ts(c.opened_at),
        resolved_at: c.resolved_at.map(ts),
        resolution: c.resolution,
        resolved_by: c.resolved_by,
        comment: c.comment,
        detail: c.detail,
        version: c.version,
    }
}

fn event_view(e: TimelineEvent) -> EventView {
    EventView {
        id: e.id,
        at: ts(e.at),
        kind: e.kind,
        actor: e.actor,
        error_class: e.error_class,
        detail: e.detail,
    }
}

// Search

#[cfg(test)]
mod tests {
    const BINDINGS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../ui/src/lib/bindings.ts");

    /// What a person is told when the store fails: a database that cannot take work now
    /// (PostgreSQL with no connection slot left, 53300; a standby, 25006) is "try again",
    /// a 503, never a 500 with the server's words as if the console had broken.
    #[test]
    fn a_busy_database_is_unreachable_not_a_failure() {
        use leadgate_store::{DbError, DbFault, StoreError};
        let server = |code: &str| {
            super::ConsoleError::from(StoreError::Database(DbError::new(
                DbFault::Server,
                Some(code),
                "the server's own words",
            )))
        };
        for code in ["53300", "53100", "57P03", "25006"] {
            assert!(
                matches!(server(code), super::ConsoleError::Unreachable { .. }),
                "{code}: {:?}",
                server(code)
            );
        }
        // A fault of the statement itself stays a failure.
        assert!(matches!(
            server("42703"),
            super::ConsoleError::Failed { .. }
        ));
    }

    #[test]
    fn bindings_are_fresh() {
        let generated = super::typescript_bindings();
        if std::env::var("UPDATE_BINDINGS").as_deref() == Ok("1") {
            std::fs::write(BINDINGS, &generated).unwrap();
        }
        let committed = std::fs::read_to_string(BINDINGS).unwrap_or_default();
        assert!(
            committed == generated,
            "ui/src/lib/bindings.ts is stale: run `UPDATE_BINDINGS=1 cargo test -p leadgate-console-model bindings_are_fresh`"
        );
    }

    #[test]
    fn searches_encode_the_query_and_origins_refuse_odd_urls() {
        let t = "https://acme.bitrix24.ru/crm/lead/list/?apply_filter=Y&FIND={q}";
        assert_eq!(
            super::crm_search_url(t, "+7 916&x=1"),
            "https://acme.bitrix24.ru/crm/lead/list/?apply_filter=Y&FIND=%2B7%20916%26x%3D1"
        );
        assert_eq!(
            super::origin_of("https://acme.bitrix24.ru/crm/lead/details/{id}/").as_deref(),
            Some("https://acme.bitrix24.ru")
        );
        assert_eq!(
            super::origin_of("http://127.0.0.1:8080/x").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "https://user@evil.example/",
            "https://{host}/x",
            "https:///x",
            "https://*/leads/{id}",
            "https://acme.bitrix24.ru*/x",
            "https://[a-z]cme.ru/x",
            "https://acme.ru:80a/x",
            "https://[::1]/x",
        ] {
            assert_eq!(super::origin_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn crm_urls_encode_the_id() {
        let t = "https://acme.bitrix24.ru/crm/lead/details/{id}/";
        assert_eq!(
            super::crm_url(t, "7001").as_deref(),
            Some("https://acme.bitrix24.ru/crm/lead/details/7001/")
        );
        // An id cannot leave its path segment: no new path, query, host or scheme.
        for (id, encoded) in [
            ("../../admin", "%2E%2E%2F%2E%2E%2Fadmin"),
            (
                "1?next=https://evil.example",
                "1%3Fnext%3Dhttps%3A%2F%2Fevil%2Eexample",
            ),
            ("1#x", "1%23x"),
            ("@evil.example", "%40evil%2Eexample"),
            ("1 2", "1%202"),
        ] {
            assert_eq!(
                super::crm_url(t, id),
                Some(format!(
                    "https://acme.bitrix24.ru/crm/lead/details/{encoded}/"
                )),
                "{id}"
            );
        }
        assert_eq!(super::crm_url("", "1"), None);
    }
}
