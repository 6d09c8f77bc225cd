//! `leadgate.toml`: what the gateway, the worker and the CLI read. Durations are written
//! like `100ms`, `30s`, `5m`, `30d`; sizes like `256KiB`. `LEADGATE_DATABASE_URL` and
//! `LEADGATE_LISTEN` override the file, so one file can serve several machines.
//!
//! Every secret it holds — source secrets and tokens, pull URLs and tokens, IMAP logins
//! and passwords, the `[api]` tokens, CRM webhook URLs and tokens, the database URL, alert
//! channels' bot tokens and webhook URLs — is a `domain::Secret`: Debug prints `***`, and
//! it is never logged or stored. The `[api]` tokens may come from the environment instead
//! of the file, and alert secrets too (`env:NAME`). A configuration that would leave a
//! source open (no authentication and no explicit `auth = "none"`) is refused, as is a
//! `[worker] lease` shorter than the CRM call's timeout plus its margin.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

mod alerts;
mod console;
mod feed;
mod sources;
pub mod tenants;
#[cfg(test)]
mod tests;
pub use crate::crm::CrmConfig;
pub use crate::domain::{RetryConfig, Secret};
pub use alerts::*;
pub use console::ConsoleConfig;
pub use feed::FeedConfig;
pub use sources::*;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub database: DatabaseConfig,
    #[serde(default)]
    pub server: ServerConfig,
    /// `[spool]`: the durable intake spool (src/spool.rs, src/intake/spooled.rs).
    #[serde(default)]
    pub spool: SpoolConfig,
    #[serde(default)]
    pub worker: WorkerConfig,
    #[serde(default)]
    pub retry: RetryConfig,
    /// `[outage]`: when a connector counts as unreachable, and its probes.
    #[serde(default)]
    pub outage: crate::domain::outage::OutageConfig,
    #[serde(default)]
    pub review: ReviewConfig,
    #[serde(default)]
    pub retention: RetentionConfig,
    #[serde(default, rename = "source")]
    pub sources: Vec<SourceConfig>,
    #[serde(default)]
    pub claim_api: ClaimApiConfig,
    #[serde(default)]
    pub api: ApiConfig,
    #[serde(default)]
    pub matching: MatchingConfig,
    pub crm: Option<CrmConfig>,
    /// `[alerts]`: team alerts sent by `serve` (src/alerts); absent: none.
    pub alerts: Option<AlertsConfig>,
    /// `[console]`: the operator console for browsers (src/console_web); absent: none.
    pub console: Option<ConsoleConfig>,
    /// `[feed]`: delivering the signed event feed (src/feed); defaults when absent.
    #[serde(default)]
    pub feed: FeedConfig,
    /// `[fleet]`: where the token key that opens the tenants' specs is (fleet mode).
    #[serde(default)]
    pub fleet: FleetConfig,
}

/// `[fleet]`, all optional: a deployment serves the tenants `leadgate tenant apply` stored,
/// whose specs are sealed with the token key (`LEADGATE_TOKEN_KEY`, else this file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FleetConfig {
    /// A file holding the token key as 64 hex digits.
    pub token_key_file: Option<std::path::PathBuf>,
    /// How often a gateway reads the registry for tenants applied, changed, paused or
    /// removed since (5 s).
    #[serde(with = "humantime_serde")]
    pub reload_every: Duration,
    /// Tenants' steps (an attempt, a batch, a reconciliation) run at once by this process,
    /// shared among the tenants by weight (`turns`; 32). The default tenant's
    /// worker runs its `[worker] concurrency` beside them.
    pub lanes: usize,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            token_key_file: None,
            reload_every: Duration::from_secs(5),
            lanes: 32,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite://leadgate.db?mode=rwc` or `postgres://user@host/db`. May hold a password.
    pub url: Secret,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub listen: String,
    pub max_body: bytesize::ByteSize,
    /// Open connections at most; one more is closed at once (systemd's unit raises the
    /// open-file limit well above it).
    pub max_connections: usize,
    /// A request's head must arrive within this, and a kept-alive connection that sends
    /// nothing is closed after it.
    #[serde(with = "humantime_serde")]
    pub header_timeout: Duration,
    /// A request's body must arrive within this (from the end of its head).
    #[serde(with = "humantime_serde")]
    pub body_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            max_body: bytesize::ByteSize::kib(256),
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// `[spool]`: where a gateway keeps the deliveries the database did not take within
/// `patience` (answered `202 spooled`), until it takes them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpoolConfig {
    /// `false`: no spool (a delivery the database cannot take is answered 503).
    pub enabled: bool,
    /// The gateway's own directory; unset: `spool` in systemd's `$STATE_DIRECTORY`
    /// (`/var/lib/leadgate/spool` for the Debian package's service), and no spool when
    /// that is not set either.
    pub dir: Option<std::path::PathBuf>,
    /// How long a delivery waits for the database before it is spooled.
    #[serde(with = "humantime_serde")]
    pub patience: Duration,
    /// The spool's file holds at most this; past it, 503.
    pub max_size: bytesize::ByteSize,
    /// Nothing is spooled while the oldest delivery waiting is older than this; 503.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
}

impl Default for SpoolConfig {
    fn default() -> Self {
        SpoolConfig {
            enabled: true,
            dir: None,
            patience: Duration::from_secs(2),
            max_size: bytesize::ByteSize::mib(512),
            max_age: Duration::from_secs(3 * 24 * 3600),
        }
    }
}

impl SpoolConfig {
    /// The spool's directory, when it has one: `dir`, else `$STATE_DIRECTORY/spool`
    /// (`state_directory`: that variable's value; systemd may list several, the first is
    /// taken).
    pub fn directory(&self, state_directory: Option<&str>) -> Option<std::path::PathBuf> {
        if !self.enabled {
            return None;
        }
        self.dir.clone().or_else(|| {
            let first = state_directory?
                .split(':')
                .next()
                .filter(|d| !d.is_empty())?;
            Some(std::path::Path::new(first).join("spool"))
        })
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// How long a worker may hold an operation before the reconciler takes it over.
    /// It must cover one whole CRM call (`[crm] timeout`) plus `LEASE_MARGIN`; unset, it
    /// is 30 s or that, whichever is longer (see [`Config::lease`]).
    #[serde(default, with = "humantime_serde")]
    pub lease: Option<Duration>,
    /// CRM attempts one process makes at once.
    pub concurrency: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            poll_interval: Duration::from_millis(200),
            lease: None,
            concurrency: 4,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReviewConfig {
    /// An `in_progress` operation older than this counts as stale (metrics, console).
    #[serde(with = "humantime_serde")]
    pub stale_after: Duration,
}

impl Default for ReviewConfig {
    fn default() -> Self {
        ReviewConfig {
            stale_after: Duration::from_secs(120),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Payloads and personal data are kept this long.
    #[serde(with = "humantime_serde")]
    pub full: Duration,
    /// Key, payload hash, status and crm_id are kept this long.
    #[serde(with = "humantime_serde")]
    pub tombstone: Duration,
    /// How often `serve` runs the purge on its own.
    #[serde(with = "humantime_serde")]
    pub purge_every: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        const DAY: u64 = 24 * 3600;
        RetentionConfig {
            full: Duration::from_secs(30 * DAY),
            tombstone: Duration::from_secs(400 * DAY),
            purge_every: Duration::from_secs(3600),
        }
    }
}

/// Bearer tokens for everything that is not intake: the claim API, the operation and
/// timeline reads and `/metrics`. An endpoint whose token is not configured answers 401
/// to everyone. `LEADGATE_INTEGRATION_TOKEN` and `LEADGATE_READ_TOKEN` override the file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    /// For integrations (n8n): the claim API, and everything `read_token` opens.
    pub integration_token: Option<Secret>,
    /// For reading: `GET /v1/operations/…`, the timeline and `/metrics`.
    pub read_token: Option<Secret>,
}

/// Cross-channel matching of contact keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MatchingConfig {
    /// Region for phone numbers written without a country code.
    pub default_region: String,
    /// How far back a new operation's contact is matched against others.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// A phone or e-mail that this many other operations of the window carry already is
    /// shared (a placeholder number, a switchboard, a common mailbox): neither matched nor
    /// waited on. 0: never.
    pub shared_after: u32,
}

impl Default for MatchingConfig {
    fn default() -> Self {
        MatchingConfig {
            default_region: "RU".into(),
            window: Duration::from_secs(14 * 24 * 3600),
            shared_after: crate::domain::SHARED_CONTACT_AFTER,
        }
    }
}

/// The claim API (`POST /v1/operations`) for integrations that call the CRM themselves.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClaimApiConfig {
    /// Namespace of the keys claimed through it (`<source>:<Idempotency-Key>`), and the
    /// connector paused when the integration reports an auth failure.
    pub source: String,
    /// How long a claimer may take to report the outcome.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// The integration's webhook (the n8n workflow's production URL). When set, the
    /// worker sends a claimed operation's stored payload back there, with the
    /// integration token, once it is due again after a `not_sent` or `rate_limited`
    /// report, or once its paused connector was resumed: the integration's run that got
    /// the failure has ended and nobody else would try again. See `crate::redeliver`.
    pub redeliver_url: Option<Secret>,
    /// How long after a redelivery that no claim followed (the webhook was down, the
    /// run died first) it is sent again.
    #[serde(with = "humantime_serde")]
    pub redeliver_every: Duration,
}

impl Default for ClaimApiConfig {
    fn default() -> Self {
        ClaimApiConfig {
            source: "api".into(),
            lease: Duration::from_secs(60),
            redeliver_url: None,
            redeliver_every: Duration::from_secs(60),
        }
    }
}

/// A lease when `[worker] lease` is not set and the CRM call fits in it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// What a lease must cover beyond the CRM call itself: arming it before the call and
/// recording the answer after. `[worker] lease` must be at least `[crm] timeout` plus this.
pub const LEASE_MARGIN: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("no configuration: pass --config PATH or set LEADGATE_DATABASE_URL")]
    Missing,
    #[error("{0}")]
    Invalid(String),
}

impl Config {
    /// Reads the file (if any), then applies the environment overrides.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let env_url = std::env::var("LEADGATE_DATABASE_URL").ok();
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })?;
                Config::parse(&text).map_err(|e| match e {
                    ConfigError::Parse { source, .. } => ConfigError::Parse {
                        path: path.display().to_string(),
                        source,
                    },
                    other => other,
                })?
            }
            None => match &env_url {
                Some(url) => Config::parse(&format!("[database]\nurl = {url:?}\n"))?,
                None => return Err(ConfigError::Missing),
            },
        };
        if let Some(url) = env_url {
            config.database.url = Secret::new(url);
        }
        if let Ok(listen) = std::env::var("LEADGATE_LISTEN") {
            config.server.listen = listen;
        }
        if let Ok(t) = std::env::var("LEADGATE_INTEGRATION_TOKEN") {
            config.api.integration_token = Some(Secret::new(t));
        }
        if let Ok(t) = std::env::var("LEADGATE_READ_TOKEN") {
            config.api.read_token = Some(Secret::new(t));
        }
        validate_api(&config.api).map_err(ConfigError::Invalid)?;
        Ok(config)
    }

    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let mut config: Config = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: "config".into(),
            source: Box::new(source),
        })?;
        for s in &mut config.sources {
            s.apply_preset();
            s.infer_auth();
        }
        config.validate()?;
        validate_api(&config.api).map_err(ConfigError::Invalid)?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        let server = &self.server;
        if server.max_connections == 0 {
            return invalid("[server] max_connections must be at least 1".into());
        }
        if self.fleet.lanes == 0 {
            return invalid("[fleet] lanes must be at least 1".into());
        }
        for (name, d) in [
            ("header_timeout", server.header_timeout),
            ("body_timeout", server.body_timeout),
        ] {
            if d < Duration::from_millis(100) || d > Duration::from_secs(3600) {
                return invalid(format!(
                    "[server] {name} must be between 100ms and 1h, not {}",
                    humantime::format_duration(d)
                ));
            }
        }
        self.feed.validate().map_err(ConfigError::Invalid)?;
        if let Some(console) = &self.console {
            console.validate().map_err(ConfigError::Invalid)?;
        }
        validate_sources(&self.sources).map_err(ConfigError::Invalid)?;
        validate_claim_api(&self.claim_api, &self.sources).map_err(ConfigError::Invalid)?;
        if let Some(crm) = &self.crm {
            validate_crm(crm).map_err(ConfigError::Invalid)?;
        }
        if self
            .matching
            .default_region
            .parse::<crate::domain::contact::Region>()
            .is_err()
        {
            return invalid(format!(
                "matching.default_region `{}` is not an ISO 3166 region code (e.g. RU)",
                self.matching.default_region
            ));
        }
        if let Some(alerts) = &self.alerts {
            alerts.validate().map_err(ConfigError::Invalid)?;
        }
        if self.retry.max_attempts == 0 {
            return invalid("retry.max_attempts must be at least 1".into());
        }
        if let (Some(lease), Some(crm)) = (self.worker.lease, &self.crm) {
            let needed = crm.timeout() + LEASE_MARGIN;
            if lease < needed {
                return invalid(format!(
                    "worker.lease ({}) must cover a whole CRM call: crm.timeout ({}) + {} = {}; \
                     raise the lease or lower the timeout (a lease that ends while the CRM may \
                     still be creating lets a second worker create again)",
                    humantime::format_duration(lease),
                    humantime::format_duration(crm.timeout()),
                    humantime::format_duration(LEASE_MARGIN),
                    humantime::format_duration(needed),
                ));
            }
        }
        Ok(())
    }

    /// The lease a worker's claim holds: `[worker] lease`, or 30 s stretched to cover
    /// one whole CRM call and the margin.
    pub fn lease(&self) -> Duration {
        self.lease_for(self.crm.as_ref())
    }

    /// [`Config::lease`] for a worker calling `crm` (a tenant's, in fleet mode).
    pub fn lease_for(&self, crm: Option<&CrmConfig>) -> Duration {
        self.worker.lease.unwrap_or_else(|| {
            let call = crm.map_or(Duration::ZERO, CrmConfig::timeout);
            DEFAULT_LEASE.max(call + LEASE_MARGIN)
        })
    }

    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }
}

/// The `[[source]]`s: names, keys, presets and authentication.
pub(crate) fn validate_sources(sources: &[SourceConfig]) -> Result<(), String> {
    let invalid = Err;
    let mut seen = std::collections::HashSet::new();
    for s in sources {
        if !crate::domain::is_valid_source_name(&s.name) {
            return invalid(format!(
                "source name `{}`: use letters, digits, `-` and `_`",
                s.name
            ));
        }
        if !seen.insert(&s.name) {
            return invalid(format!("source `{}` is defined twice", s.name));
        }
        if s.key.is_empty() {
            return invalid(format!(
                "source `{}` has no key: set key = \"json:/…\", \"header:…\", \"form:…\" or \"content:/…+/…\", or a preset",
                s.name
            ));
        }
        if s.preset == Some(Preset::Bitrix24Event) && s.application_token.is_none() {
            return invalid(format!(
                "source `{}`: the bitrix24-event preset needs application_token (from the app's settings)",
                s.name
            ));
        }
        s.validate_auth()?;
        if s.preset == Some(Preset::Zadarma) && s.auth != Some(SourceAuth::ZadarmaSignature) {
            return invalid(format!(
                "source `{}`: the zadarma preset needs secret = the API secret key (Zadarma signs \
                 every notification with it; it sends the Signature header once API keys exist)",
                s.name
            ));
        }
        if s.preset == Some(Preset::TelegramWebhook) {
            // setWebhook's secret_token: 1-256 characters A-Z, a-z, 0-9, `_` and `-`.
            let fits = |t: &Secret| {
                let t = t.expose();
                (1..=256).contains(&t.len())
                    && t.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            };
            if s.auth != Some(SourceAuth::Token)
                || !s.token.iter().chain(s.previous_token.iter()).all(fits)
            {
                return invalid(format!(
                    "source `{}`: the telegram-webhook preset needs token = the webhook's secret_token \
                     (1-256 characters: letters, digits, `_`, `-`), checked in X-Telegram-Bot-Api-Secret-Token",
                    s.name
                ));
            }
        }
        if !["json:", "header:", "form:", "content:"]
            .iter()
            .any(|p| s.key.starts_with(p))
        {
            return invalid(format!(
                "source `{}`: key `{}` must start with json:, header:, form: or content:",
                s.name, s.key
            ));
        }
        if let Some(e) = &s.event_time {
            if !(e.starts_with("json:/") || e.starts_with("form:")) {
                return invalid(format!(
                    "source `{}`: event_time `{e}` must be json:/pointer or form:field",
                    s.name
                ));
            }
        }
        for (what, list) in [("ignore", &s.ignore), ("redact", &s.redact)] {
            if let Some(p) = list.iter().find(|p| !p.starts_with('/')) {
                return invalid(format!(
                    "source `{}`: {what} entry `{p}` is not a JSON pointer (it must start with /)",
                    s.name
                ));
            }
        }
    }
    Ok(())
}

/// `[claim_api]`: its source must be a name of its own among `sources`.
pub(crate) fn validate_claim_api(
    claim_api: &ClaimApiConfig,
    sources: &[SourceConfig],
) -> Result<(), String> {
    let invalid = Err;
    if !crate::domain::is_valid_source_name(&claim_api.source) {
        return invalid(format!(
            "claim_api.source `{}`: use letters, digits, `-` and `_`",
            claim_api.source
        ));
    }
    if sources.iter().any(|s| s.name == claim_api.source) {
        return invalid(format!(
            "claim_api.source `{0}` is also the name of a [[source]]: the gateway's worker and \
             the claim API would share the keys `{0}:…`; give [claim_api] a source name of its own",
            claim_api.source
        ));
    }
    if let Some(url) = &claim_api.redeliver_url {
        let url = url.expose();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return invalid(
                "claim_api.redeliver_url must be an http:// or https:// URL (the integration's webhook)"
                    .into(),
            );
        }
    }
    if claim_api.redeliver_every.is_zero() {
        return invalid("claim_api.redeliver_every must be more than 0".into());
    }
    Ok(())
}

/// `[api]`'s tokens (a deployment's, or a tenant's `[tenant.api]`): none may be empty.
pub(crate) fn validate_api(api: &ApiConfig) -> Result<(), String> {
    for (field, value) in [
        ("integration_token", &api.integration_token),
        ("read_token", &api.read_token),
    ] {
        if value.as_ref().is_some_and(|v| v.expose().trim().is_empty()) {
            return Err(format!(
                "api.{field} is empty: set a long random value, or leave it out to close those endpoints"
            ));
        }
    }
    Ok(())
}

/// `[crm]`: what the adapters cannot check alone (amoCRM's two ways to sign in).
pub(crate) fn validate_crm(crm: &CrmConfig) -> Result<(), String> {
    let invalid = Err;
    if let CrmConfig::Amocrm {
        token,
        client_id,
        client_secret,
        redirect_uri,
        refresh_token,
        ..
    } = crm
    {
        let oauth = [
            client_id.is_some(),
            client_secret.is_some(),
            redirect_uri.is_some(),
            refresh_token.is_some(),
        ];
        match (token.is_some(), oauth) {
            (true, [false, false, false, false]) | (false, [true, true, true, true]) => {}
            (true, _) => {
                return invalid(
                    "crm (amocrm): set either token or client_id, client_secret, \
                     redirect_uri and refresh_token, not both"
                        .into(),
                )
            }
            (false, _) => {
                return invalid(
                    "crm (amocrm): set token (long-lived), or all of client_id, \
                     client_secret, redirect_uri and refresh_token (OAuth)"
                        .into(),
                )
            }
        }
    }
    Ok(())
}
