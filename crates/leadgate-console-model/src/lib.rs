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

/// Everything a command can answer instead of a result; the UI switches on `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ConsoleError {
    #[error("not connected to an operations database")]
    NotConnected,
    #[error("the database cannot be reached: {message}")]
    Unreachable { message: String },
    #[error("the database has no Leadgate schema yet; run `leadgate migrate` first")]
    SchemaMissing,
    #[error("the database schema (version {found}) is older than this console ({known}); run `leadgate migrate`")]
    SchemaTooOld {
        #[ts(type = "number")]
        found: i64,
        #[ts(type = "number")]
        known: i64,
    },
    #[error("the database schema (version {found}) is newer than this console ({known}); upgrade the console")]
    SchemaTooNew {
        #[ts(type = "number")]
        found: i64,
        #[ts(type = "number")]
        known: i64,
    },
    #[error("case #{case_id} was already resolved by {by}")]
    AlreadyResolved {
        #[ts(type = "number")]
        case_id: i64,
        by: String,
    },
    #[error("the operation changed since you loaded it; reload and decide again")]
    Changed {
        #[ts(type = "number")]
        expected: i64,
        #[ts(type = "number")]
        current: i64,
    },
    #[error("{message}")]
    Invalid { message: String },
    /// The rules refused a person's action: `code` is `Refusal::code` (the console
    /// translates it), `detail` its variable part.
    #[error("{message}")]
    Refused {
        code: String,
        message: String,
        detail: Option<String>,
    },
    #[error("{message}")]
    NotFound { message: String },
    /// The database refused this login (its role may not read or ask for this).
    #[error("your role may not do this: {message}")]
    Forbidden { message: String },
    #[error("{message}")]
    Failed { message: String },
}

impl From<StoreError> for ConsoleError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::CaseAlreadyResolved(case_id, by) => {
                ConsoleError::AlreadyResolved { case_id, by }
            }
            StoreError::StaleVersion { expected, current } => {
                ConsoleError::Changed { expected, current }
            }
            StoreError::Refused(r) => ConsoleError::Refused {
                code: r.code().to_owned(),
                message: r.to_string(),
                detail: r.detail(),
            },
            e @ StoreError::AttemptInFlight(_, until) => {
                let refusal = leadgate_domain::Refusal::AttemptInFlight { until };
                ConsoleError::Refused {
                    code: refusal.code().to_owned(),
                    message: e.to_string(),
                    detail: refusal.detail(),
                }
            }
            StoreError::Transition(t) => ConsoleError::Invalid {
                message: t.to_string(),
            },
            e @ (StoreError::UnknownCase(_) | StoreError::UnknownOperation(_)) => {
                ConsoleError::NotFound {
                    message: e.to_string(),
                }
            }
            StoreError::SchemaTooNew { found, known } => {
                ConsoleError::SchemaTooNew { found, known }
            }
            e @ StoreError::UnknownScheme(_) => ConsoleError::Invalid {
                message: e.to_string(),
            },
            StoreError::NotApplied(message) => ConsoleError::Failed { message },
            // The database's own sentence (too many requests waiting, a malformed one).
            StoreError::RequestRefused(message) => ConsoleError::Invalid { message },
            StoreError::Forbidden(message) => ConsoleError::Forbidden { message },
            e => match (e.unreachable(), e.forbidden()) {
                (Some(message), _) => ConsoleError::Unreachable { message },
                (None, Some(message)) => ConsoleError::Forbidden { message },
                // The database cannot take work now for a reason of its own (no
                // connection slot left, a standby, a full disk): worth another try later,
                // not a fault of the console (a 500) nor of the request.
                (None, None) if e.kind() == leadgate_store::ErrorKind::Unavailable => {
                    ConsoleError::Unreachable {
                        message: e.to_string(),
                    }
                }
                (None, None) => ConsoleError::Failed {
                    message: e.to_string(),
                },
            },
        }
    }
}

pub type ApiResult<T> = Result<T, ConsoleError>;

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
                }
            }
            Identity::Nobody { .. } => {
                return Permissions {
                    read_cases: false,
                    resolve: false,
                    cross_channel: false,
                    connectors: false,
                    rules: false,
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
        let console = Console::open(&url).await?;
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

/// The queue tabs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum Tab {
    /// Open review cases other than payload conflicts (filter by reason).
    NeedsReview,
    PayloadConflict,
    Stale,
    FailedTerminal,
    Connectors,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct QueueQuery {
    pub reason: Option<String>,
    pub source: Option<String>,
    /// Only items older than this many minutes.
    #[ts(type = "number | null")]
    pub older_than_minutes: Option<i64>,
    /// Newest first instead of oldest first (the default: who waited longest).
    #[serde(default)]
    pub newest_first: bool,
    /// The `next` cursor of the previous page.
    pub cursor: Option<String>,
    #[ts(type = "number | null")]
    pub limit: Option<i64>,
}

/// One line of the queue: a review case, a stale or failed operation, or a connector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct QueueRow {
    #[ts(type = "number | null")]
    pub case_id: Option<i64>,
    pub operation_id: Option<String>,
    pub source: String,
    pub status: String,
    pub reason: Option<String>,
    /// When it started waiting (case opened, lease expired, failure, connector paused).
    pub since: String,
    pub attempts: i32,
    pub crm_id: Option<String>,
    pub note: Option<String>,
    /// Who the lead is, as the queue shows it first.
    pub lead: LeadSummary,
}

/// The lead's name, phone, e-mail and form, as far as the payload tells.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct LeadSummary {
    pub name: Option<String>,
    pub phone: Option<String>,
    pub email: Option<String>,
    /// The form (or channel) it came from, when the payload names one.
    pub form: Option<String>,
}

impl LeadSummary {
    /// From the normalized contact keys and the payload's usual top-level fields
    /// (`name`, `phone`, `email`, `form`/`formname`/`form_name`/`formid`, any case).
    pub fn of(op: &Operation) -> LeadSummary {
        let field = |keys: &[&str]| -> Option<String> {
            let obj = op.payload.as_ref()?.as_object()?;
            keys.iter().find_map(|k| {
                obj.iter()
                    .find(|(name, _)| name.eq_ignore_ascii_case(k))
                    .and_then(|(_, v)| match v {
                        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
                        Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    })
            })
        };
        LeadSummary {
            name: op
                .contact
                .name
                .clone()
                .or_else(|| field(&["name", "fio", "full_name"])),
            phone: op.contact.phone.clone().or_else(|| field(&["phone"])),
            email: op.contact.email.clone().or_else(|| field(&["email"])),
            form: field(&["form", "formname", "form_name", "formid"]),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct QueuePage {
    pub rows: Vec<QueueRow>,
    pub next: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct TabCounts {
    #[ts(type = "number")]
    pub needs_review: i64,
    #[ts(type = "Record<string, number>")]
    pub by_reason: BTreeMap<String, i64>,
    #[ts(type = "number")]
    pub payload_conflict: i64,
    #[ts(type = "number")]
    pub stale: i64,
    #[ts(type = "number")]
    pub failed_terminal: i64,
    #[ts(type = "number")]
    pub paused_connectors: i64,
    /// Of `needs_review`, the cases this person's role does not decide (for sales ops the
    /// cross-channel matches, which wait for a manager).
    #[ts(type = "number")]
    pub others_decide: i64,
    /// A gateway or worker beat within [`GATEWAY_SILENT_AFTER`]: leads are being sent,
    /// and a person's action is applied (on PostgreSQL) within a second.
    pub gateway_running: bool,
    /// When one last did, if ever.
    pub gateway_last_beat: Option<String>,
}

/// A gateway silent this long is taken for gone (it beats every 5 s, `app::BEAT_EVERY`).
pub const GATEWAY_SILENT_AFTER: chrono::TimeDelta = chrono::TimeDelta::seconds(30);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct OperationView {
    pub operation_id: String,
    pub source: String,
    pub status: String,
    pub payload_hash: String,
    pub payload: Option<Value>,
    pub crm_id: Option<String>,
    pub crm_link: Option<String>,
    /// Opens the entity in the CRM (from the settings' template, else the address the
    /// gateway published for its CRM).
    pub crm_url: Option<String>,
    /// The CRM's list searched for this lead's phone (else e-mail, else name): to look
    /// before deciding. Set on a case's own operation only.
    pub crm_search_url: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub last_error_class: Option<String>,
    pub review_reason: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<String>,
    pub retry_grants: i32,
    /// A retry looks the key up in the CRM before it creates: an attempt was made, or a
    /// lookup is owed (an outage gave an attempt back after its create went out). The
    /// console says "re-check" then, and "send" only when nothing can have reached the CRM.
    pub checks_first: bool,
    pub contact_phone: Option<String>,
    pub contact_email: Option<String>,
    pub lead: LeadSummary,
    #[ts(type = "number")]
    pub version: i64,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct CaseView {
    #[ts(type = "number")]
    pub id: i64,
    pub operation_id: String,
    pub reason: String,
    pub opened_at: String,
    pub resolved_at: Option<String>,
    pub resolution: Option<String>,
    pub resolved_by: Option<String>,
    pub comment: Option<String>,
    pub detail: Value,
    #[ts(type = "number")]
    pub version: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct EventView {
    #[ts(type = "number")]
    pub id: i64,
    /// RFC 3339 with microseconds, UTC.
    pub at: String,
    pub kind: String,
    pub actor: String,
    pub error_class: Option<String>,
    pub detail: Value,
}

/// How many timeline events one read of the console shows: a timeline of any length is
/// read a page at a time ("older events…").
pub const TIMELINE_PAGE: i64 = 200;

/// Older events of a timeline ([`Console::older_events`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct TimelinePageView {
    /// Oldest first.
    pub events: Vec<EventView>,
    /// How many are older still.
    #[ts(type = "number")]
    pub older: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct DeliveryPayload {
    #[ts(type = "number")]
    pub delivery_id: i64,
    pub received_at: String,
    pub payload: Option<Value>,
    pub payload_hash: Option<String>,
}

/// The two sides of a payload conflict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Conflict {
    pub original: Option<Value>,
    pub original_hash: String,
    pub incoming: DeliveryPayload,
}

/// Everything about one operation on one screen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct CaseDetail {
    pub operation: OperationView,
    /// The case the operator opened (or the newest open one).
    pub case: Option<CaseView>,
    pub cases: Vec<CaseView>,
    /// The newest [`TIMELINE_PAGE`] events, oldest first; `older_events` more before
    /// them ([`Console::older_events`]).
    pub timeline: Vec<EventView>,
    #[ts(type = "number")]
    pub older_events: i64,
    pub conflict: Option<Conflict>,
    pub candidates: Vec<OperationView>,
    /// What the steps of a stepped create (contact + deal) found or made, each entity
    /// once (its latest `crm_step` event), with the CRM page to open it on.
    pub crm_entities: Vec<CrmEntityView>,
    /// An ambiguous match's entities: the ids the lookup by key found in the CRM, each
    /// with its page, so the person opens them and picks the one that stands.
    pub found_in_crm: Vec<FoundInCrm>,
    /// What a person may do on `case` now, as the resolution each would record
    /// (`domain::rules::allowed_actions`: the same rules `Review::resolve` applies); empty
    /// when the case is resolved.
    pub allowed: Vec<String>,
    /// False when this person's role decides no case of this reason (a cross-channel
    /// match is a manager's): the console says whose it is instead of offering buttons.
    pub role_decides: bool,
    /// Those of `allowed` that need a comment saying why (`rules::needs_comment`).
    pub needs_comment: Vec<String>,
    /// Whether this person may *Fix and resend…* this lead now ([`Console::resend`]):
    /// their role may, and the rules would grant a retry on the case it would resolve.
    pub may_resend: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    Confirm {
        crm_id: String,
    },
    Link {
        crm_id: String,
    },
    AuthorizeRetry,
    KeepOriginal,
    /// Keep the original and send the conflicting delivery's changed fields to the CRM
    /// entity (the worker does, in the background; the timeline shows how it went).
    UpdateCrm,
    AcceptAsNew,
    /// A cross-channel or late match is a new request after all: send it to the CRM.
    CreateNew,
    /// The lead is dropped for good (`failed_terminal`), with the reason in the comment.
    Reject,
    /// Fix and resend: `payload` (the edited JSON text, an object) replaces the lead's
    /// data, and one more attempt sends it (`HumanAction::ResendEdited`).
    ResendEdited {
        payload: String,
    },
}

/// *Fix and resend…* on a lead (a failed one, typically): opens a review case for it
/// unless one is open, and resolves it with [`Action::ResendEdited`], in one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ResendRequest {
    pub operation_id: String,
    /// The operation version the person saw.
    #[ts(type = "number")]
    pub expected_version: i64,
    /// The edited payload, as typed (JSON text of an object).
    pub payload: String,
    pub comment: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ActionRequest {
    #[ts(type = "number")]
    pub case_id: i64,
    /// The operation version the operator saw.
    #[ts(type = "number")]
    pub expected_version: i64,
    pub comment: Option<String>,
    pub action: Action,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ActionOutcome {
    pub operation: OperationView,
    pub new_operation: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ConnectorView {
    pub name: String,
    pub paused: bool,
    pub reason: Option<String>,
    pub since: String,
    pub changed_by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct SeriesPointView {
    pub start: String,
    #[ts(type = "number")]
    pub deliveries: i64,
    #[ts(type = "number")]
    pub new_operations: i64,
    #[ts(type = "number")]
    pub crm_entities: i64,
    #[ts(type = "number")]
    pub duplicates_absorbed: i64,
    #[ts(type = "number")]
    pub cases_opened: i64,
    #[ts(type = "number")]
    pub cases_resolved: i64,
    #[ts(type = "Record<string, number>")]
    pub retries_by_class: BTreeMap<String, i64>,
}

/// One CRM entity a step of a create found or made (a `crm_step` event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct CrmEntityView {
    /// `contact`, `deal`, `lead` or an HTTP CRM step's name.
    pub entity: String,
    pub crm_id: String,
    /// `created`, `linked` (an existing one was found) or `recovered` (found by its key
    /// after an answer that did not come).
    pub how: String,
    pub url: Option<String>,
}

/// One entity a lookup by key found (an ambiguous match lists several).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct FoundInCrm {
    pub crm_id: String,
    pub url: Option<String>,
}

/// The ids an open ambiguous-match case's lookup found (`reconcile::several` writes them
/// as `crm_ids` in the case's detail), with their pages.
fn found_in_crm(case: Option<&ReviewCase>, template: Option<&str>) -> Vec<FoundInCrm> {
    let Some(c) = case.filter(|c| c.reason == ReviewReason::AmbiguousMatch) else {
        return vec![];
    };
    c.detail
        .get("crm_ids")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| {
            v.as_str()
                .map(str::to_owned)
                .or_else(|| v.as_i64().map(|n| n.to_string()))
        })
        .map(|crm_id| FoundInCrm {
            url: template.and_then(|t| crm_url(t, &crm_id)),
            crm_id,
        })
        .collect()
}

/// Each entity's latest `crm_step`, in the order the steps first ran; the contact opens on
/// `contact_url`, any other entity on the operation's own entity page.
fn crm_entities(
    timeline: &[TimelineEvent],
    contact_url: Option<&str>,
    entity_url: Option<&str>,
) -> Vec<CrmEntityView> {
    let mut out: Vec<CrmEntityView> = vec![];
    for e in timeline.iter().filter(|e| e.is(EventKind::CrmStep)) {
        let text = |k: &str| e.detail.get(k).and_then(Value::as_str).map(str::to_owned);
        let (Some(entity), Some(crm_id)) = (text("entity"), text("crm_id")) else {
            continue;
        };
        let template = if entity == "contact" {
            contact_url
        } else {
            entity_url
        };
        let view = CrmEntityView {
            url: template.and_then(|t| crm_url(t, &crm_id)),
            how: text("how").unwrap_or_else(|| "created".into()),
            entity,
            crm_id,
        };
        match out.iter_mut().find(|v| v.entity == view.entity) {
            Some(v) => *v = view,
            None => out.push(view),
        }
    }
    out
}

/// docs/SPEC.md "Metrics" now, and over the chosen range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Dashboard {
    #[ts(type = "number")]
    pub unique_operations: i64,
    #[ts(type = "number")]
    pub crm_entities_created: i64,
    #[ts(type = "Record<string, number>")]
    pub duplicates_absorbed: BTreeMap<String, i64>,
    #[ts(type = "Record<string, number>")]
    pub retries_by_class: BTreeMap<String, i64>,
    #[ts(type = "Record<string, number>")]
    pub operations_by_status: BTreeMap<String, i64>,
    #[ts(type = "number")]
    pub stale_in_progress: i64,
    #[ts(type = "number")]
    pub unprocessed: i64,
    #[ts(type = "number")]
    pub lost: i64,
    #[ts(type = "Record<string, number>")]
    pub open_cases_by_reason: BTreeMap<String, i64>,
    #[ts(type = "number")]
    pub resolved_cases: i64,
    pub mean_seconds_to_resolve: Option<f64>,
    #[ts(type = "number")]
    pub unreconstructable: i64,
    pub paused_connectors: Vec<String>,
    /// Connectors whose CRM does not answer, and since when (leads wait for its probes).
    pub unreachable_connectors: BTreeMap<String, String>,
    pub series: Vec<SeriesPointView>,
    /// Entities made or found by stepped creates (contact + deal), all time:
    /// `"<entity>:<how>"` (`contact:created`, `contact:linked`, `deal:created`, …).
    #[ts(type = "Record<string, number>")]
    pub crm_steps: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum Range {
    Hour,
    Day,
    Week,
    Month,
}

impl Range {
    fn span_and_buckets(self) -> (chrono::TimeDelta, u32) {
        match self {
            Range::Hour => (chrono::TimeDelta::hours(1), 12),
            Range::Day => (chrono::TimeDelta::days(1), 48),
            Range::Week => (chrono::TimeDelta::days(7), 56),
            Range::Month => (chrono::TimeDelta::days(30), 60),
        }
    }
}

mod bulk;
mod call;
mod diagnosis;
mod export;
mod lookup;
mod rules;
pub use bulk::*;
pub use call::*;
pub use diagnosis::*;
pub use export::*;
pub use leadgate_domain::report::{
    CauseCount, ContentMeasure, Evidence, KeyKind, LineData, LineDetail, LineText, PairData,
    ReportData, ReportInput, SourceCounts, SourcesRead, Trigger, VerdictCount,
};
pub use lookup::*;
pub use rules::*;

/// A connected console.
pub struct Console {
    store: Arc<dyn Store>,
    performer: Performer,
    bulk_runs: Arc<bulk::Runs>,
    pub connection: Connection,
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
            },
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
        let last_beat = self.store.last_beat().await?;
        let mut c = TabCounts {
            gateway_running: last_beat.is_some_and(|b| self.store.now() - b < GATEWAY_SILENT_AFTER),
            gateway_last_beat: last_beat.map(ts),
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

    /// One operation with its cases, the newest page of its timeline, conflict sides and
    /// link candidates.
    pub async fn case_detail(
        &self,
        operation_id: &str,
        case_id: Option<i64>,
        crm_url_template: Option<&str>,
    ) -> ApiResult<CaseDetail> {
        let id = parse_operation_id(operation_id)?;
        let op = self
            .store
            .operation(&id)
            .await?
            .ok_or_else(|| ConsoleError::NotFound {
                message: format!("no operation `{operation_id}`"),
            })?;
        let cases = self.store.cases_of(&id).await?;
        let page = self.store.timeline_page(&id, None, TIMELINE_PAGE).await?;
        // The entities come from every `crm_step`, not only the page's.
        let steps = self
            .store
            .timeline_of_kind(&id, "crm_step", TIMELINE_PAGE)
            .await?;
        let case = match case_id {
            Some(cid) => cases.iter().find(|c| c.id == cid).cloned(),
            None => cases
                .iter()
                .rev()
                .find(|c| c.resolved_at.is_none())
                .cloned(),
        };
        let conflict = match case.as_ref() {
            Some(c) if c.reason == ReviewReason::PayloadConflict => match c.delivery_id {
                Some(d) => self.store.delivery(d).await?.map(|d| Conflict {
                    original: op.payload.clone(),
                    original_hash: op.payload_hash.clone(),
                    incoming: DeliveryPayload {
                        delivery_id: d.id,
                        received_at: ts(d.received_at),
                        payload: d.payload,
                        payload_hash: d.payload_hash,
                    },
                }),
                None => None,
            },
            _ => None,
        };
        let candidates = self.store.link_candidates(&id, 20).await?;
        // The settings' template wins; else what the gateway published for its CRM.
        // The newest published link: the CRM the gateway talks to now, not one it used to.
        let links = self.store.crm_links().await?;
        let published = links.first();
        let template = crm_url_template
            .filter(|t| !t.trim().is_empty())
            .or(published.map(|l| l.entity_url.as_str()));
        let crm_url_template = template;
        let allowed = match &case {
            Some(c) if c.resolved_at.is_none() => {
                leadgate_domain::rules::allowed_actions(c.reason, op.facts(), self.store.now())
                    .into_iter()
                    // What this person's role may ask for (the database checks it too).
                    .filter(|r| {
                        self.performer
                            .role()
                            .is_none_or(|role| may_ask(role, AskKind::Resolve(c.reason, *r)))
                    })
                    .map(|r| r.as_str().to_owned())
                    .collect()
            }
            _ => vec![],
        };
        // Whether this person's role decides this kind of case at all (a manager decides
        // cross-channel matches; support and admin decide none).
        let role_decides = case.as_ref().is_none_or(|c| self.decides(c.reason));
        let needs_comment = allowed
            .iter()
            .filter(|r| {
                r.parse::<leadgate_domain::Resolution>()
                    .is_ok_and(|r| leadgate_domain::rules::needs_comment(r, false))
            })
            .cloned()
            .collect();
        let may_resend = self.resend_check(&op, &cases).is_ok();
        let mut operation = op_view(op, crm_url_template);
        let lead = &operation.lead;
        operation.crm_search_url = published
            .and_then(|l| l.search_url.as_deref())
            .zip(
                lead.phone
                    .as_ref()
                    .or(lead.email.as_ref())
                    .or(lead.name.as_ref()),
            )
            .map(|(t, q)| crm_search_url(t, q));
        let crm_entities = crm_entities(
            &steps,
            published.and_then(|l| l.contact_url.as_deref()),
            template,
        );
        Ok(CaseDetail {
            found_in_crm: found_in_crm(case.as_ref(), template),
            crm_entities,
            may_resend,
            needs_comment,
            role_decides,
            allowed,
            operation,
            case: case.map(case_view),
            cases: cases.into_iter().map(case_view).collect(),
            timeline: page.events.into_iter().map(event_view).collect(),
            older_events: page.older,
            conflict,
            candidates: candidates
                .into_iter()
                .map(|o| op_view(o, crm_url_template))
                .collect(),
        })
    }

    /// The [`TIMELINE_PAGE`] events of an operation's timeline before event `before`
    /// (the first one shown): "older events…".
    pub async fn older_events(
        &self,
        operation_id: &str,
        before: i64,
    ) -> ApiResult<TimelinePageView> {
        let id = parse_operation_id(operation_id)?;
        let page = self
            .store
            .timeline_page(&id, Some(before), TIMELINE_PAGE)
            .await?;
        Ok(TimelinePageView {
            events: page.events.into_iter().map(event_view).collect(),
            older: page.older,
        })
    }

    /// A person's decision (`Review::resolve`'s rules, guarded by the version they saw).
    /// `operator`: who a direct write is recorded as (the shell passes
    /// `Connection::actor`); a personal login's is recorded under the login whatever it
    /// says.
    pub async fn act(&self, operator: &str, req: ActionRequest) -> ApiResult<ActionOutcome> {
        let comment = req
            .comment
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty());
        let action = match req.action {
            Action::Confirm { crm_id } => HumanAction::ConfirmCrmResult { crm_id },
            Action::Link { crm_id } => HumanAction::LinkExisting { crm_id },
            Action::AuthorizeRetry => HumanAction::AuthorizeRetry,
            Action::KeepOriginal => HumanAction::KeepOriginal,
            Action::UpdateCrm => HumanAction::UpdateCrm,
            Action::AcceptAsNew => HumanAction::AcceptAsNew,
            Action::CreateNew => HumanAction::CreateNew,
            Action::Reject => HumanAction::Reject,
            Action::ResendEdited { payload } => HumanAction::ResendEdited {
                payload: leadgate_domain::rules::parse_edited_payload(&payload)
                    .map_err(StoreError::from)?,
            },
        };
        self.resolve_case(operator, req.case_id, req.expected_version, comment, action)
            .await
    }

    /// *Fix and resend…*: the edited data replaces the lead's and one more attempt sends
    /// it — looked up by key in the CRM first when an attempt was made before, so a create
    /// that did land is found, not repeated (`rules::decide`, as *Authorize one retry*).
    /// Opens a review case unless one is open ([`open_case`](Console::open_case)) and
    /// resolves it with [`Action::ResendEdited`]: two requests, each a `store::Ask`. What
    /// is refused before the case is opened (data that is not a JSON object, a version
    /// moved, a role or a rule that refuses it now) changes nothing; the resolution is
    /// guarded by the version seen plus the opening's own step, so anything else that
    /// changed the lead meanwhile refuses it (`Changed`) and leaves the case open.
    pub async fn resend(&self, operator: &str, req: ResendRequest) -> ApiResult<ActionOutcome> {
        let payload =
            leadgate_domain::rules::parse_edited_payload(&req.payload).map_err(StoreError::from)?;
        let id = parse_operation_id(&req.operation_id)?;
        let op = self
            .store
            .operation(&id)
            .await?
            .ok_or_else(|| ConsoleError::NotFound {
                message: format!("no operation `{}`", req.operation_id),
            })?;
        if op.version != req.expected_version {
            return Err(ConsoleError::Changed {
                expected: req.expected_version,
                current: op.version,
            });
        }
        let cases = self.store.cases_of(&id).await?;
        self.resend_check(&op, &cases)?;
        let comment = req
            .comment
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty());
        let case_id = self
            .open_case(operator, &req.operation_id, comment.clone())
            .await?;
        // Opening (or noting on the open case) is one step of the version.
        let action = HumanAction::ResendEdited { payload };
        self.resolve_case(operator, case_id, req.expected_version + 1, comment, action)
            .await
    }

    /// Why *Fix and resend* would be refused on `op` now: the role, or the rules on the
    /// case it would resolve (the open one, else a new `uncertain_outcome` case).
    fn resend_check(&self, op: &Operation, cases: &[ReviewCase]) -> ApiResult<()> {
        let reason = cases
            .iter()
            .rev()
            .find(|c| c.resolved_at.is_none() && c.reason != ReviewReason::PayloadConflict)
            .map_or(ReviewReason::UncertainOutcome, |c| c.reason);
        let resolution = leadgate_domain::Resolution::ResentEdited;
        // A role that reads no case is refused by the database when the lead is read; one
        // that reads it but does not decide this case (sales ops, a cross-channel match)
        // is told whose it is before anything is asked.
        if let Some(role) = self.performer.role() {
            if !may_ask(role, AskKind::Resolve(reason, resolution)) {
                return Err(
                    StoreError::Refused(leadgate_domain::Refusal::NotYourRole { reason }).into(),
                );
            }
        }
        let action = HumanAction::ResendEdited {
            payload: Value::Object(Default::default()),
        };
        leadgate_domain::rules::decide(&action, "console", reason, op.facts(), self.store.now())
            .map_err(|r| StoreError::Refused(r).into())
            .map(|_| ())
    }

    /// Resolves case `case_id` with `action` as `operator`, guarded by `expected_version`.
    async fn resolve_case(
        &self,
        operator: &str,
        case_id: i64,
        expected_version: i64,
        comment: Option<String>,
        action: HumanAction,
    ) -> ApiResult<ActionOutcome> {
        let ask = Ask::Resolve {
            case_id,
            expected_version,
            action,
            comment,
            bulk: None,
        };
        let Answer::Resolved {
            operation_id,
            new_operation,
        } = self.performer.perform(operator, ask).await?
        else {
            return Err(unexpected_answer());
        };
        let id = parse_operation_id(&operation_id)?;
        let operation = self
            .store
            .operation(&id)
            .await?
            .ok_or_else(|| ConsoleError::NotFound {
                message: format!("no operation `{operation_id}`"),
            })?;
        Ok(ActionOutcome {
            operation: op_view(operation, None),
            new_operation,
        })
    }

    /// Sends a stale or failed operation to review so it can be acted on.
    pub async fn open_case(
        &self,
        operator: &str,
        operation_id: &str,
        comment: Option<String>,
    ) -> ApiResult<i64> {
        let operation_id = parse_operation_id(operation_id)?;
        let detail = serde_json::json!({"opened_from": "console", "comment": comment});
        match self
            .performer
            .perform(
                operator,
                Ask::OpenReview {
                    operation_id,
                    detail,
                },
            )
            .await?
        {
            Answer::CaseOpened { case_id } => Ok(case_id),
            _ => Err(unexpected_answer()),
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

/// One operation found by [`Console::search`] (any status, not only open cases).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct SearchRow {
    pub operation_id: String,
    pub source: String,
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
    pub crm_id: Option<String>,
    pub review_reason: Option<String>,
    /// The newest open review case, to open it in the case view.
    #[ts(type = "number | null")]
    pub open_case_id: Option<i64>,
    pub name: Option<String>,
    pub phone: Option<String>,
    pub email: Option<String>,
    /// Which field the query matched.
    #[ts(type = "\"operation_id\" | \"crm_id\" | \"name\" | \"phone\" | \"email\"")]
    pub matched: String,
}

/// A page of search results, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct SearchResults {
    /// How the query was read: a phone (`normalized` is its E.164 form), an e-mail
    /// (normalized), or text (key, crm_id and name).
    #[ts(type = "\"phone\" | \"email\" | \"text\"")]
    pub kind: String,
    pub normalized: String,
    pub rows: Vec<SearchRow>,
    /// The cursor of the next page; none on the last.
    pub next: Option<String>,
}

/// What a bulk action or an export covers: a queue tab with its filters, or a search
/// (then the tab and its filters are ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Selection {
    pub tab: Tab,
    pub query: QueueQuery,
    #[serde(default)]
    pub search: Option<String>,
}

impl Console {
    /// Every row `selection` covers, in the queue's order (a search: newest first, as
    /// queue rows whose case is the open one), at most `max`; and whether more matched.
    pub async fn rows_of(
        &self,
        selection: &Selection,
        max: usize,
    ) -> ApiResult<(Vec<QueueRow>, bool)> {
        let mut rows: Vec<QueueRow> = vec![];
        match selection
            .search
            .as_deref()
            .map(str::trim)
            .filter(|q| !q.is_empty())
        {
            Some(q) => {
                let mut cursor = None;
                loop {
                    let page = self.search(q, cursor, Some(200)).await?;
                    rows.extend(page.rows.into_iter().map(|r| QueueRow {
                        case_id: r.open_case_id,
                        operation_id: Some(r.operation_id),
                        source: r.source,
                        status: r.status,
                        reason: r.review_reason,
                        since: r.updated_at,
                        attempts: 0,
                        crm_id: r.crm_id,
                        note: None,
                        lead: LeadSummary {
                            name: r.name,
                            phone: r.phone,
                            email: r.email,
                            form: None,
                        },
                    }));
                    match page.next {
                        Some(next) if rows.len() <= max => cursor = Some(next),
                        _ => break,
                    }
                }
                rows = self.with_leads(rows).await?;
            }
            None => {
                let mut query = selection.query.clone();
                query.limit = Some(500);
                query.cursor = None;
                loop {
                    let page = self.queue(selection.tab, query.clone()).await?;
                    rows.extend(page.rows);
                    match page.next {
                        Some(next) if rows.len() <= max => query.cursor = Some(next),
                        _ => break,
                    }
                }
            }
        }
        let more = rows.len() > max;
        rows.truncate(max);
        Ok((rows, more))
    }

    /// Operations of any status matching `query` — a key (exact or prefix), a phone in
    /// any format, an e-mail, a crm_id or the prefix of a word of the name — newest
    /// first, `limit` (default 50, at most 200) after `cursor` (the `next` of the page
    /// before). Phones without a country code are read in [`Console::phone_region`].
    pub async fn search(
        &self,
        query: &str,
        cursor: Option<String>,
        limit: Option<i64>,
    ) -> ApiResult<SearchResults> {
        use leadgate_store::{SearchCursor, SearchPlan, SearchQuery};
        let q =
            SearchQuery::parse(query, self.phone_region).map_err(|e| ConsoleError::Invalid {
                message: e.to_string(),
            })?;
        let after = cursor
            .filter(|c| !c.is_empty())
            .map(|c| c.parse::<SearchCursor>().map_err(|_| cursor_err()))
            .transpose()?;
        let page = self
            .store
            .search(&q, after.as_ref(), limit.unwrap_or(50), SearchPlan::Auto)
            .await?;
        let (kind, normalized) = match &q {
            SearchQuery::Phone(p) => ("phone", p.clone()),
            SearchQuery::Email(e) => ("email", e.clone()),
            SearchQuery::Text { text, .. } => ("text", text.clone()),
        };
        Ok(SearchResults {
            kind: kind.into(),
            normalized,
            rows: page
                .hits
                .into_iter()
                .map(|h| SearchRow {
                    operation_id: h.operation_id,
                    source: h.source,
                    status: h.status.as_str().into(),
                    created_at: ts(h.created_at),
                    updated_at: ts(h.updated_at),
                    crm_id: h.crm_id,
                    review_reason: h.review_reason.map(|r| r.as_str().into()),
                    open_case_id: h.open_case_id,
                    name: h.name,
                    phone: h.phone,
                    email: h.email,
                    matched: h.matched.as_str().into(),
                })
                .collect(),
            next: page.next.map(|c| c.to_string()),
        })
    }
}

/// The TypeScript declarations of every type above, as `ui/src/lib/bindings.ts` holds them.
pub fn typescript_bindings() -> String {
    let cfg = ts_rs::Config::default();
    let decls = [
        ConsoleError::decl(&cfg),
        Settings::decl(&cfg),
        Connection::decl(&cfg),
        Permissions::decl(&cfg),
        Tab::decl(&cfg),
        QueueQuery::decl(&cfg),
        QueueRow::decl(&cfg),
        LeadSummary::decl(&cfg),
        QueuePage::decl(&cfg),
        TabCounts::decl(&cfg),
        OperationView::decl(&cfg),
        CaseView::decl(&cfg),
        EventView::decl(&cfg),
        DeliveryPayload::decl(&cfg),
        Conflict::decl(&cfg),
        CaseDetail::decl(&cfg),
        TimelinePageView::decl(&cfg),
        CrmEntityView::decl(&cfg),
        FoundInCrm::decl(&cfg),
        Action::decl(&cfg),
        ActionRequest::decl(&cfg),
        ResendRequest::decl(&cfg),
        ActionOutcome::decl(&cfg),
        ConnectorView::decl(&cfg),
        SeriesPointView::decl(&cfg),
        Dashboard::decl(&cfg),
        Range::decl(&cfg),
        BulkAction::decl(&cfg),
        Selection::decl(&cfg),
        BulkItem::decl(&cfg),
        BulkPreview::decl(&cfg),
        BulkRequest::decl(&cfg),
        BulkSkip::decl(&cfg),
        BulkProgress::decl(&cfg),
        RecheckOutcomes::decl(&cfg),
        ReasonGroup::decl(&cfg),
        ExportRequest::decl(&cfg),
        SearchRow::decl(&cfg),
        SearchResults::decl(&cfg),
        LookupRow::decl(&cfg),
        LookupResult::decl(&cfg),
        DiagnosisRow::decl(&cfg),
        DiagnosisView::decl(&cfg),
        ReportData::decl(&cfg),
        VerdictCount::decl(&cfg),
        SourceCounts::decl(&cfg),
        CauseCount::decl(&cfg),
        PairData::decl(&cfg),
        LineData::decl(&cfg),
        ReportInput::decl(&cfg),
        SourcesRead::decl(&cfg),
        Trigger::decl(&cfg),
        KeyKind::decl(&cfg),
        ContentMeasure::decl(&cfg),
        Evidence::decl(&cfg),
        LineDetail::decl(&cfg),
        LineText::decl(&cfg),
        SourceRulesView::decl(&cfg),
        RuleValues::decl(&cfg),
        RuleChangeView::decl(&cfg),
        RulesView::decl(&cfg),
        RulesEdit::decl(&cfg),
    ];
    let mut out = String::from(
        "// Generated from crates/leadgate-console-model/src/lib.rs by ts-rs: do not edit.\n\
         // Regenerate: UPDATE_BINDINGS=1 cargo test -p leadgate-console-model bindings_are_fresh\n\n\
         export type JsonValue = number | string | boolean | Array<JsonValue> | { [key in string]?: JsonValue } | null;\n",
    );
    for d in decls {
        out.push_str("\nexport ");
        out.push_str(&d);
        out.push('\n');
    }
    // The timeline's kinds, from the one list (`domain::EventKind`): what the console
    // has sentences for.
    out.push_str(
        "\n/** Every kind of timeline event Leadgate writes (`EventKind` in crates/leadgate-domain). */\n\
         export const EVENT_KINDS = [\n",
    );
    for k in EventKind::ALL {
        out.push_str(&format!("  \"{k}\",\n"));
    }
    out.push_str("] as const;\n\nexport type EventKind = (typeof EVENT_KINDS)[number];\n");
    out
}

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
