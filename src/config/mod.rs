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

mod console;
mod feed;
pub use crate::crm::CrmConfig;
pub use crate::domain::{RetryConfig, Secret};
pub use console::ConsoleConfig;
pub use feed::FeedConfig;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub database: DatabaseConfig,
    #[serde(default)]
    pub server: ServerConfig,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// Tilda forms: form-urlencoded, keyed by `tranid`, the `test=test` check, `ok`.
    Tilda,
    /// amoCRM/Kommo webhooks: form-urlencoded flat keys, keyed by event and lead id.
    AmocrmWebhook,
    /// Bitrix24 outgoing events: keyed by event, entity id and time; the application
    /// token is checked.
    Bitrix24Event,
    /// Any JSON sender: key by JSON pointer or `Idempotency-Key`, optional HMAC.
    GenericJson,
    /// Bitrix24 offline events, pulled (`[source.pull]`: `event.bind` with
    /// `event_type=offline`, then `event.offline.get` / `event.offline.clear`): keyed by
    /// event name and queue record id; a batch is cleared only once all of it is recorded.
    Bitrix24Offline,
    /// Telegram bot webhook updates: JSON keyed by `update_id`; `token` is the webhook's
    /// `secret_token`, checked in `X-Telegram-Bot-Api-Secret-Token`.
    TelegramWebhook,
    /// Call webhooks of any telephony (JSON): keyed by `call_id`, the caller in `caller`;
    /// the events of one call (ringing, answered, finished) are one operation: the fields
    /// that change between them are left out of the fingerprint.
    CallWebhook,
    /// As `call-webhook`, but every event of a call is an operation of its own (keyed by
    /// `call_id` + `event`).
    CallWebhookEvents,
    /// Zadarma's PBX notifications (`NOTIFY_START`, `NOTIFY_END`: form-urlencoded, keyed by
    /// `pbx_call_id`, one operation per call), signed in the `Signature` header with the
    /// API secret (`auth = "zadarma_signature"`, set by `secret`); answers `zd_echo`.
    Zadarma,
    /// Telegram bot updates pulled with `getUpdates` (`[source.pull]` with `bot_token`),
    /// for bots without a public address: keyed by `update_id` as the webhook.
    TelegramUpdates,
    /// A mailbox read over IMAP (`[source.pull]` with `url = "imaps://…"`, `username`,
    /// `password`): each message is journaled raw (RFC 822) and keyed by its
    /// `Message-ID` (or `sha256:` of the raw message); acknowledged (`\Seen`, or moved
    /// to `move_to`) only once recorded.
    Imap,
}

impl Preset {
    /// Whether sources of this preset are pulled by the gateway rather than pushed to it.
    pub fn is_pulled(self) -> bool {
        matches!(
            self,
            Preset::Bitrix24Offline | Preset::TelegramUpdates | Preset::Imap
        )
    }
}

/// What changes between the events of one call, left out of `call-webhook`'s fingerprint.
const CALL_PROGRESS: &[&str] = &[
    "/event",
    "/status",
    "/duration",
    "/answered_at",
    "/ended_at",
    "/record_url",
];

/// The header Telegram carries a webhook's `secret_token` in.
pub const TELEGRAM_SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// How a source proves that a delivery comes from it. Every source has one: a
/// configuration without it is refused at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceAuth {
    /// `X-Leadgate-Timestamp` + `X-Leadgate-Signature: sha256=<hex HMAC-SHA256 of
    /// "<timestamp>.<raw body>">`, within `replay_window`; `secret` (and, while
    /// rotating, `previous_secret`).
    Hmac,
    /// A shared secret in the `X-Leadgate-Token` header or the `token` query parameter
    /// of the intake URL, for senders that cannot sign (Tilda, amoCRM webhooks).
    Token,
    /// Bitrix24 outgoing events: `auth[application_token]` in the body.
    ApplicationToken,
    /// No authentication: anyone who reaches the port may deliver. Logged as a
    /// warning at every start.
    None,
    /// Zadarma: `Signature: base64(hex(HMAC-SHA1(caller_id + called_did + call_start)))`
    /// with `secret`, the API secret key.
    ZadarmaSignature,
    /// A pulled source (`[source.pull]`): nothing is delivered to the intake URL, which
    /// refuses every request; the gateway authenticates to the sender with the pull's
    /// credentials instead.
    Pull,
}

impl SourceAuth {
    pub fn name(self) -> &'static str {
        match self {
            SourceAuth::Hmac => "hmac",
            SourceAuth::Token => "token",
            SourceAuth::ApplicationToken => "application_token",
            SourceAuth::None => "none",
            SourceAuth::Pull => "pull",
            SourceAuth::ZadarmaSignature => "zadarma_signature",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reply {
    #[default]
    Json,
    Ok,
}

/// What a Bitrix24 outgoing event carries that works as a credential of the portal: never
/// stored (`redact`).
const BITRIX24_EVENT_CREDENTIALS: &[&str] = &[
    "/auth[access_token]",
    "/auth[refresh_token]",
    "/auth[application_token]",
];

impl SourceConfig {
    /// Fills what the table leaves open from its preset.
    fn apply_preset(&mut self) {
        let Some(preset) = self.preset else { return };
        let (key, ignore, reply): (&str, &[&str], Reply) = match preset {
            Preset::Tilda => ("form:tranid", &[], Reply::Ok),
            Preset::AmocrmWebhook => (
                "form:leads[add][0][id]|leads[status][0][id]|leads[update][0][id]|leads[delete][0][id]",
                &[],
                Reply::Json,
            ),
            Preset::Bitrix24Event => (
                "form:event+data[FIELDS][ID]+ts",
                &[
                    "/auth[access_token]",
                    "/auth[expires]",
                    "/auth[expires_in]",
                    "/auth[domain]",
                    "/auth[client_endpoint]",
                    "/auth[server_endpoint]",
                    "/auth[member_id]",
                    "/auth[application_token]",
                ],
                Reply::Json,
            ),
            Preset::GenericJson => ("header:Idempotency-Key", &[], Reply::Json),
            // A re-read after a crash carries the record's newer TIMESTAMP_X when the
            // portal coalesced a change into it: the same event, not a conflict.
            Preset::Bitrix24Offline => ("form:EVENT_NAME+ID", &["/TIMESTAMP_X"], Reply::Json),
            Preset::TelegramWebhook | Preset::TelegramUpdates => {
                ("json:/update_id", &[], Reply::Json)
            }
            Preset::CallWebhook => ("json:/call_id", CALL_PROGRESS, Reply::Json),
            // The payload is derived from the message alone (src/pull/imap.rs): nothing
            // in it changes on a re-read.
            Preset::Imap => ("json:/message_id", &[], Reply::Json),
            Preset::CallWebhookEvents => ("form:call_id+event", &[], Reply::Json),
            Preset::Zadarma => (
                "form:pbx_call_id",
                &[
                    "/event",
                    "/internal",
                    "/destination",
                    "/duration",
                    "/disposition",
                    "/status_code",
                    "/is_recorded",
                    "/call_id_with_rec",
                    "/last_internal",
                    "/calltype",
                ],
                Reply::Json,
            ),
        };
        let call = |phone: &str, name: Option<&str>, f: &mut crate::domain::FieldMap| {
            if f.title.is_none()
                && f.name.is_none()
                && f.phone.is_none()
                && f.email.is_none()
                && f.comment.is_none()
            {
                f.phone = Some(phone.into());
                f.name = name.map(str::to_owned);
            }
        };
        match preset {
            Preset::CallWebhook | Preset::CallWebhookEvents => {
                call("/caller", Some("/caller_name"), &mut self.fields)
            }
            Preset::Zadarma => call("/caller_id", None, &mut self.fields),
            _ => {}
        }
        if matches!(preset, Preset::TelegramWebhook | Preset::TelegramUpdates) {
            if self.event_time.is_none() {
                self.event_time = Some("json:/message/date".into());
            }
            let f = &mut self.fields;
            if f.title.is_none()
                && f.name.is_none()
                && f.phone.is_none()
                && f.email.is_none()
                && f.comment.is_none()
            {
                // The sender's name, the phone of a shared contact, the text. The chat and
                // message ids stay in the stored update.
                f.name = Some("/message/from/first_name".into());
                f.phone = Some("/message/contact/phone_number".into());
                f.comment = Some("/message/text".into());
            }
        }
        if preset == Preset::Bitrix24Offline && self.event_time.is_none() {
            self.event_time = Some("json:/TIMESTAMP_X".into());
        }
        // The message's `Date`; the payload's top-level name, email, phone and comment
        // are the default field mapping already.
        if preset == Preset::Imap && self.event_time.is_none() {
            self.event_time = Some("json:/date".into());
        }
        if self.key.is_empty() {
            self.key = key.into();
        }
        if preset == Preset::Bitrix24Event && self.redact.is_empty() {
            self.redact = BITRIX24_EVENT_CREDENTIALS
                .iter()
                .map(|s| s.to_string())
                .collect();
        }
        if self.ignore.is_empty() {
            self.ignore = ignore.iter().map(|s| s.to_string()).collect();
        }
        if self.reply.is_none() {
            self.reply = Some(reply);
        }
    }

    /// The authentication method: as written, else the one the credentials set imply
    /// (`application_token` for the bitrix24-event preset). `None` when nothing says.
    fn infer_auth(&mut self) {
        if self.auth.is_some() {
            return;
        }
        self.auth = if self.preset.is_some_and(Preset::is_pulled) || self.pull.is_some() {
            Some(SourceAuth::Pull)
        } else if self.preset == Some(Preset::Zadarma) && self.secret.is_some() {
            Some(SourceAuth::ZadarmaSignature)
        } else if self.preset == Some(Preset::Bitrix24Event) || self.application_token.is_some() {
            Some(SourceAuth::ApplicationToken)
        } else if self.secret.is_some() {
            Some(SourceAuth::Hmac)
        } else if self.token.is_some() {
            Some(SourceAuth::Token)
        } else {
            None
        };
    }

    /// Fail closed: a method, its credentials, no credentials of another method, and
    /// no empty secret.
    fn validate_auth(&self) -> Result<SourceAuth, String> {
        let name = &self.name;
        let Some(auth) = self.auth else {
            return Err(format!(
                "source `{name}` has no authentication: set secret (HMAC signatures), token \
                 (a secret in the URL or a header, for senders that cannot sign) or \
                 application_token (Bitrix24), or auth = \"none\" to accept deliveries from anyone"
            ));
        };
        let credentials = [
            ("secret", &self.secret, SourceAuth::Hmac),
            ("previous_secret", &self.previous_secret, SourceAuth::Hmac),
            ("token", &self.token, SourceAuth::Token),
            ("previous_token", &self.previous_token, SourceAuth::Token),
            (
                "application_token",
                &self.application_token,
                SourceAuth::ApplicationToken,
            ),
        ];
        for (field, value, method) in &credentials {
            if let Some(v) = value {
                if v.expose().trim().is_empty() {
                    return Err(format!("source `{name}`: {field} is empty"));
                }
                let zadarma = auth == SourceAuth::ZadarmaSignature && *field == "secret";
                if *method != auth && !zadarma {
                    return Err(format!(
                        "source `{name}`: {field} is set but auth = \"{}\"; remove it or set auth = \"{}\"",
                        auth.name(),
                        method.name()
                    ));
                }
            }
        }
        let needs = match auth {
            SourceAuth::Hmac => Some(("secret", &self.secret)),
            SourceAuth::Token => Some(("token", &self.token)),
            SourceAuth::ApplicationToken => Some(("application_token", &self.application_token)),
            SourceAuth::ZadarmaSignature => Some(("secret", &self.secret)),
            SourceAuth::None | SourceAuth::Pull => None,
        };
        if let Some((field, None)) = needs {
            return Err(format!(
                "source `{name}`: auth = \"{}\" needs {field}",
                auth.name()
            ));
        }
        match (&self.pull, auth) {
            (Some(pull), SourceAuth::Pull) => pull.validate(name, self.preset)?,
            (None, SourceAuth::Pull) => {
                return Err(format!(
                    "source `{name}`: auth = \"pull\" needs a [source.pull] table with the sender's address and credentials"
                ))
            }
            (Some(_), other) => {
                return Err(format!(
                    "source `{name}`: [source.pull] is set but auth = \"{}\"; a pulled source takes no deliveries (leave auth out)",
                    other.name()
                ))
            }
            (None, _) => {}
        }
        if auth == SourceAuth::Hmac && self.replay_window.is_zero() {
            return Err(format!(
                "source `{name}`: replay_window must be more than 0"
            ));
        }
        Ok(auth)
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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    pub name: String,
    /// A starting point for a known sender (`tilda`, `amocrm-webhook`,
    /// `bitrix24-event`, `generic-json`, `bitrix24-offline`); what the table sets
    /// overrides it.
    pub preset: Option<Preset>,
    /// Where the event key is: `json:/pointer`, `header:Name` or `form:field`
    /// (`form:a+b` joins several fields, `form:a|b` takes the first present), or
    /// `content:/a+/b` for senders without an id: the content of those fields, one
    /// operation per `content_window`.
    #[serde(default)]
    pub key: String,
    /// A content key's window (default 1 h, at most 30 days): the same content within it
    /// of its first delivery is one operation; after it, a new one.
    #[serde(default, with = "humantime_serde")]
    pub content_window: Option<Duration>,
    /// JSON pointers left out of the fingerprint.
    #[serde(default)]
    pub ignore: Vec<String>,
    /// JSON pointers whose values are never stored: replaced with `[redacted]` in the
    /// journaled body and the payload (credentials a sender puts in its deliveries, which
    /// people reading a case must not see). The bitrix24-event preset redacts the
    /// event's `auth[access_token]`, `auth[refresh_token]` and `auth[application_token]`.
    #[serde(default)]
    pub redact: Vec<String>,
    /// What the sender gets back: `json` (the documented answers) or `ok` (a plain
    /// `200 ok`, for senders such as Tilda that want exactly that).
    pub reply: Option<Reply>,
    /// Bitrix24 outgoing events: the `auth[application_token]` every event must carry.
    pub application_token: Option<Secret>,
    /// What a new operation does when its contact matches another's within
    /// `[matching] window`: `create` (default), `link` or `review`.
    #[serde(default)]
    pub on_contact_match: crate::domain::MatchRule,
    /// How deliveries are authenticated (`hmac`, `token`, `application_token` or
    /// `none`); implied by the credential that is set when left out.
    pub auth: Option<SourceAuth>,
    /// `auth = "hmac"`: the HMAC-SHA256 key deliveries are signed with.
    pub secret: Option<Secret>,
    /// `auth = "hmac"`: the key being rotated out, accepted as well meanwhile.
    pub previous_secret: Option<Secret>,
    /// `auth = "hmac"`: how far a signature's timestamp may be from now.
    #[serde(default = "default_replay_window", with = "humantime_serde")]
    pub replay_window: Duration,
    /// `auth = "token"`: the secret the sender puts into `X-Leadgate-Token` or the
    /// intake URL's `token` query parameter.
    pub token: Option<Secret>,
    /// `auth = "token"`: the token being rotated out, accepted as well meanwhile.
    pub previous_token: Option<Secret>,
    /// Where the source's own event time is (`json:/pointer` or `form:field`; RFC 3339
    /// or Unix seconds). A delivery whose event is older than the tombstone horizon and
    /// whose key is unknown goes to review instead of creating (a late duplicate).
    pub event_time: Option<String>,
    /// Where the CRM fields are in this source's payload (JSON pointers); by default
    /// top-level `name`, `phone`, `email`, `comment`, `title`, in any letter case.
    #[serde(default)]
    pub fields: crate::domain::FieldMap,
    /// A pulled source: where the gateway fetches its events and with what credentials.
    pub pull: Option<PullConfig>,
}

/// `[source.pull]`: a source the gateway polls (src/pull). Secrets may be written
/// `env:NAME` to be read from the environment at start; a pull without its credentials
/// refuses to start.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullConfig {
    /// The sender's REST base. Bitrix24: the portal's incoming webhook
    /// (`https://acme.bitrix24.ru/rest/1/<secret>/`), or its REST endpoint
    /// (`https://acme.bitrix24.ru/rest/`) together with `access_token`.
    pub url: Secret,
    /// Bitrix24: the application's access token, sent as `auth` with every call (the
    /// `event.*` methods want an application's authorization).
    pub access_token: Option<Secret>,
    /// Telegram: the bot's token (`env:NAME`), the secret part of every Bot API URL.
    pub bot_token: Option<Secret>,
    /// IMAP: the login (`env:NAME` or as written).
    pub username: Option<Secret>,
    /// IMAP: the password (`env:NAME`; the file had better not hold it).
    pub password: Option<Secret>,
    /// IMAP: the mailbox read (default `INBOX`).
    pub mailbox: Option<String>,
    /// IMAP: where a recorded message is moved (`MOVE`, or `COPY` + `\Deleted` +
    /// `EXPUNGE` on a server without it). Unset: it is marked `\Seen` and stays.
    pub move_to: Option<String>,
    /// IMAP: a PEM file of the CA (or the self-signed certificate) the server's
    /// certificate must chain to, instead of the public roots. Verification is never off.
    pub ca_file: Option<std::path::PathBuf>,
    /// IMAP: the largest message read, in bytes (default 25 MiB). A larger one is
    /// journaled as rejected (its size and the limit as the reason, not its content)
    /// and acknowledged, so it cannot stall the mailbox.
    pub max_message_size: Option<u64>,
    /// Bitrix24: the events bound offline and drained (default `ONCRMLEADADD`).
    #[serde(default = "default_pull_events")]
    pub events: Vec<String>,
    /// How long to wait after the queue was found empty (or the sender failed).
    #[serde(default = "default_pull_every", with = "humantime_serde")]
    pub every: Duration,
    /// Events taken per call (Bitrix24: at most 50).
    #[serde(default = "default_pull_batch")]
    pub batch: u32,
    /// The cut-off of one call to the sender.
    #[serde(default = "default_pull_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

/// Whether two IMAP mailbox names name the same mailbox: `INBOX` is case-insensitive
/// (RFC 3501 5.1), every other name is compared as written.
fn same_mailbox(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    a == b || (a.eq_ignore_ascii_case("INBOX") && b.eq_ignore_ascii_case("INBOX"))
}

fn default_pull_events() -> Vec<String> {
    vec!["ONCRMLEADADD".into()]
}

fn default_pull_every() -> Duration {
    Duration::from_secs(5)
}

fn default_pull_batch() -> u32 {
    50
}

fn default_pull_timeout() -> Duration {
    Duration::from_secs(10)
}

impl PullConfig {
    fn validate(&self, name: &str, preset: Option<Preset>) -> Result<(), String> {
        if !preset.is_some_and(Preset::is_pulled) {
            return Err(format!(
                "source `{name}`: [source.pull] needs a pulled preset (`bitrix24-offline`, `telegram-updates`, `imap`)"
            ));
        }
        let telegram = preset == Some(Preset::TelegramUpdates);
        let imap = preset == Some(Preset::Imap);
        let blank = |s: &Secret| s.expose().trim().is_empty() || s.expose().trim() == "env:";
        match &self.bot_token {
            None if telegram => {
                return Err(format!(
                    "source `{name}`: the telegram-updates preset needs pull.bot_token (env:NAME)"
                ))
            }
            Some(_) if !telegram => {
                return Err(format!(
                    "source `{name}`: pull.bot_token is for the telegram-updates preset"
                ))
            }
            Some(t) if blank(t) => return Err(format!("source `{name}`: pull.bot_token is empty")),
            _ => {}
        }
        if (telegram || imap) && self.access_token.is_some() {
            return Err(format!(
                "source `{name}`: pull.access_token is for the bitrix24-offline preset"
            ));
        }
        let imap_fields = [
            ("username", self.username.is_some()),
            ("password", self.password.is_some()),
            ("mailbox", self.mailbox.is_some()),
            ("move_to", self.move_to.is_some()),
            ("ca_file", self.ca_file.is_some()),
            ("max_message_size", self.max_message_size.is_some()),
        ];
        if imap {
            for (field, value) in [("username", &self.username), ("password", &self.password)] {
                match value {
                    None => {
                        return Err(format!(
                            "source `{name}`: the imap preset needs pull.{field} (env:NAME)"
                        ))
                    }
                    Some(v) if blank(v) => {
                        return Err(format!("source `{name}`: pull.{field} is empty"))
                    }
                    Some(_) => {}
                }
            }
            for (field, value) in [("mailbox", &self.mailbox), ("move_to", &self.move_to)] {
                if value.as_ref().is_some_and(|v| {
                    v.trim().is_empty() || v.chars().any(|c| c.is_control() || c == '"')
                }) {
                    return Err(format!(
                        "source `{name}`: pull.{field} must be a mailbox name (not blank, no quotes or control characters)"
                    ));
                }
            }
            let mailbox = self.mailbox.as_deref().unwrap_or("INBOX");
            if self
                .move_to
                .as_deref()
                .is_some_and(|m| same_mailbox(m, mailbox))
            {
                return Err(format!(
                    "source `{name}`: pull.move_to is the mailbox read (pull.mailbox): a moved message would be read again"
                ));
            }
            if self.max_message_size == Some(0) {
                return Err(format!(
                    "source `{name}`: pull.max_message_size must be at least 1 byte"
                ));
            }
        } else if let Some((field, _)) = imap_fields.iter().find(|(_, set)| *set) {
            return Err(format!(
                "source `{name}`: pull.{field} is for the imap preset"
            ));
        }
        let url = self.url.expose().trim();
        if url.is_empty() || url == "env:" {
            return Err(format!("source `{name}`: pull.url is empty"));
        }
        if imap {
            if !(url.starts_with("env:") || url.starts_with("imaps://")) {
                return Err(format!(
                    "source `{name}`: pull.url must be imaps://host[:port] (implicit TLS) or env:NAME"
                ));
            }
        } else if !(url.starts_with("env:")
            || url.starts_with("https://")
            || url.starts_with("http://"))
        {
            return Err(format!(
                "source `{name}`: pull.url must be an http:// or https:// URL or env:NAME"
            ));
        }
        if self.access_token.as_ref().is_some_and(blank) {
            return Err(format!("source `{name}`: pull.access_token is empty"));
        }
        if self.events.is_empty() || self.events.iter().any(|e| e.trim().is_empty()) {
            return Err(format!(
                "source `{name}`: pull.events must name at least one event, none blank"
            ));
        }
        let most = match preset {
            Some(Preset::TelegramUpdates) | Some(Preset::Imap) => 100,
            _ => 50,
        };
        if !(1..=most).contains(&self.batch) {
            return Err(format!("source `{name}`: pull.batch must be 1 to {most}"));
        }
        if self.every.is_zero() || self.timeout.is_zero() {
            return Err(format!(
                "source `{name}`: pull.every and pull.timeout must be more than 0"
            ));
        }
        Ok(())
    }
}

/// `[alerts]`: what `serve` tells the team, and where (see src/alerts and README "Team
/// alerts"). Messages carry counts, reasons, sources, case ids, connector names and
/// thresholds only — never a lead's data or key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    /// The grouping window: new review cases are announced at most once per `interval`
    /// per channel, in one message, counted from the oldest case not yet announced.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How often each channel's loop looks at the figures.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// A case is counted only this long after it opened, so that a case whose
    /// transaction is still committing (PostgreSQL assigns ids before commit) is never
    /// skipped by the cursor.
    #[serde(with = "humantime_serde")]
    pub settle: Duration,
    /// Alert when more operations than this are stale `in_progress` (older than
    /// `[review] stale_after`).
    pub stale_above: i64,
    /// Alert when open review cases are older than this.
    #[serde(with = "humantime_serde")]
    pub review_older_than: Duration,
    /// A threshold (or a pause) still crossed is announced again after this.
    #[serde(with = "humantime_serde")]
    pub repeat: Duration,
    /// At most this many messages a minute per channel (Telegram: 20 a minute to a group).
    pub max_per_minute: u32,
    /// At least this long between two messages to a channel (Telegram: about 1 a second
    /// per chat).
    #[serde(with = "humantime_serde")]
    pub min_spacing: Duration,
    /// One call to a channel.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// After a failed try the message waits this long, doubled per failure up to
    /// `max_retry_delay` (a Telegram `retry_after` or a webhook's `Retry-After` wins).
    #[serde(with = "humantime_serde")]
    pub retry_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub max_retry_delay: Duration,
    #[serde(rename = "channel")]
    pub channels: Vec<AlertChannelConfig>,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        AlertsConfig {
            interval: Duration::from_secs(60),
            poll_interval: Duration::from_secs(1),
            settle: Duration::from_secs(5),
            stale_above: 0,
            review_older_than: Duration::from_secs(4 * 3600),
            repeat: Duration::from_secs(3600),
            max_per_minute: 20,
            min_spacing: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
            retry_delay: Duration::from_secs(1),
            max_retry_delay: Duration::from_secs(300),
            channels: Vec::new(),
        }
    }
}

/// One `[[alerts.channel]]`. Secrets (`token`, `url`) may be written `env:NAME` to be
/// read from the environment variable NAME at start, as `[crm]` header values are.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum AlertChannelConfig {
    /// A Telegram chat, through a bot (Bot API `sendMessage`).
    Telegram {
        /// Names the channel's state in the operations database: keep it when editing.
        name: String,
        /// The chat's id (a number, negative for groups) or `@channelusername`.
        #[serde(deserialize_with = "chat_id")]
        chat_id: String,
        /// The bot token (`env:LEADGATE_TELEGRAM_TOKEN`).
        token: Secret,
        #[serde(default = "default_telegram_api")]
        api_base: String,
    },
    /// A Slack-compatible incoming webhook: `{"text": …}` (and `blocks` when asked).
    Webhook {
        name: String,
        /// The webhook URL; its path is a secret (`env:LEADGATE_ALERT_WEBHOOK`).
        url: Secret,
        /// Also send Slack `blocks` (a section per alert) next to `text`.
        #[serde(default)]
        blocks: bool,
    },
}

impl AlertChannelConfig {
    pub fn name(&self) -> &str {
        match self {
            AlertChannelConfig::Telegram { name, .. }
            | AlertChannelConfig::Webhook { name, .. } => name,
        }
    }
}

fn default_telegram_api() -> String {
    "https://api.telegram.org".into()
}

fn chat_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Number(i64),
        Text(String),
    }
    Ok(match Id::deserialize(d)? {
        Id::Number(n) => n.to_string(),
        Id::Text(s) => s,
    })
}

impl AlertsConfig {
    fn validate(&self) -> Result<(), String> {
        let positive = [
            ("interval", self.interval),
            ("poll_interval", self.poll_interval),
            ("repeat", self.repeat),
            ("timeout", self.timeout),
            ("retry_delay", self.retry_delay),
            ("review_older_than", self.review_older_than),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, d)| d.is_zero()) {
            return Err(format!("alerts.{field} must be more than 0"));
        }
        if self.max_retry_delay < self.retry_delay {
            return Err("alerts.max_retry_delay must be at least alerts.retry_delay".into());
        }
        if self.max_per_minute == 0 {
            return Err("alerts.max_per_minute must be at least 1".into());
        }
        if self.stale_above < 0 {
            return Err("alerts.stale_above must be 0 or more".into());
        }
        if self.channels.is_empty() {
            return Err(
                "[alerts] has no [[alerts.channel]]: add a telegram or webhook channel, or remove [alerts]"
                    .into(),
            );
        }
        let mut seen = std::collections::HashSet::new();
        for c in &self.channels {
            let name = c.name();
            if !crate::domain::is_valid_source_name(name) {
                return Err(format!(
                    "alerts channel name `{name}`: use letters, digits, `-` and `_`"
                ));
            }
            if !seen.insert(name) {
                return Err(format!("alerts channel `{name}` is defined twice"));
            }
            let secret_ok = |field: &str, v: &Secret| -> Result<(), String> {
                let v = v.expose().trim();
                if v.is_empty() || v == "env:" {
                    Err(format!("alerts channel `{name}`: {field} is empty"))
                } else {
                    Ok(())
                }
            };
            match c {
                AlertChannelConfig::Telegram {
                    chat_id,
                    token,
                    api_base,
                    ..
                } => {
                    if chat_id.trim().is_empty() {
                        return Err(format!("alerts channel `{name}`: chat_id is empty"));
                    }
                    secret_ok("token", token)?;
                    if !(api_base.starts_with("https://") || api_base.starts_with("http://")) {
                        return Err(format!(
                            "alerts channel `{name}`: api_base must be an http:// or https:// URL"
                        ));
                    }
                }
                AlertChannelConfig::Webhook { url, .. } => {
                    secret_ok("url", url)?;
                    let u = url.expose();
                    if !(u.starts_with("env:")
                        || u.starts_with("https://")
                        || u.starts_with("http://"))
                    {
                        return Err(format!(
                            "alerts channel `{name}`: url must be an http:// or https:// URL or env:NAME"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

fn default_replay_window() -> Duration {
    Duration::from_secs(300)
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
        config.validate_api()?;
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
        config.validate_api()?;
        Ok(config)
    }

    fn validate_api(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("integration_token", &self.api.integration_token),
            ("read_token", &self.api.read_token),
        ] {
            if value.as_ref().is_some_and(|v| v.expose().trim().is_empty()) {
                return Err(ConfigError::Invalid(format!(
                    "api.{field} is empty: set a long random value, or leave it out to close those endpoints"
                )));
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        let server = &self.server;
        if server.max_connections == 0 {
            return invalid("[server] max_connections must be at least 1".into());
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
        let mut seen = std::collections::HashSet::new();
        for s in &self.sources {
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
            s.validate_auth().map_err(ConfigError::Invalid)?;
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
        if !crate::domain::is_valid_source_name(&self.claim_api.source) {
            return invalid(format!(
                "claim_api.source `{}`: use letters, digits, `-` and `_`",
                self.claim_api.source
            ));
        }
        if self.source(&self.claim_api.source).is_some() {
            return invalid(format!(
                "claim_api.source `{0}` is also the name of a [[source]]: the gateway's worker and \
                 the claim API would share the keys `{0}:…`; give [claim_api] a source name of its own",
                self.claim_api.source
            ));
        }
        if let Some(url) = &self.claim_api.redeliver_url {
            let url = url.expose();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return invalid(
                    "claim_api.redeliver_url must be an http:// or https:// URL (the integration's webhook)"
                        .into(),
                );
            }
        }
        if self.claim_api.redeliver_every.is_zero() {
            return invalid("claim_api.redeliver_every must be more than 0".into());
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
        if let Some(CrmConfig::Amocrm {
            token,
            client_id,
            client_secret,
            redirect_uri,
            refresh_token,
            ..
        }) = &self.crm
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
        self.worker.lease.unwrap_or_else(|| {
            let call = self.crm.as_ref().map_or(Duration::ZERO, CrmConfig::timeout);
            DEFAULT_LEASE.max(call + LEASE_MARGIN)
        })
    }

    pub fn source(&self, name: &str) -> Option<&SourceConfig> {
        self.sources.iter().find(|s| s.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
[database]
url = "sqlite://leadgate.db?mode=rwc"

[server]
listen = "127.0.0.1:8080"
max_body = "256KiB"

[worker]
poll_interval = "200ms"
lease = "30s"

[retry]
max_attempts = 5
base_delay = "1s"
max_delay = "5m"

[review]
stale_after = "2m"

[retention]
full = "30d"
tombstone = "400d"

[[source]]
name = "site"
key = "json:/submission_id"
ignore = ["/sent_at"]
secret = "s3cret"

[[source]]
name = "tilda"
key = "form:tranid"
token = "t1lda-token"

[api]
integration_token = "int-t0ken"
read_token = "read-t0ken"

[crm]
kind = "bitrix24"
webhook_url = "https://portal.bitrix24.ru/rest/1/secret/"
entity = "lead"
timeout = "10s"
"#;

    #[test]
    fn parses_the_documented_example() {
        let c = Config::parse(FULL).unwrap();
        assert_eq!(c.server.max_body.as_u64(), 256 * 1024);
        assert_eq!(c.worker.poll_interval, Duration::from_millis(200));
        assert_eq!(c.retry.max_delay, Duration::from_secs(300));
        assert_eq!(c.retention.full, Duration::from_secs(30 * 24 * 3600));
        assert_eq!(c.retention.tombstone, Duration::from_secs(400 * 24 * 3600));
        assert_eq!(c.sources.len(), 2);
        assert_eq!(c.source("site").unwrap().ignore, vec!["/sent_at"]);
        let Some(CrmConfig::Bitrix24 { timeout, .. }) = &c.crm else {
            panic!("crm")
        };
        assert_eq!(*timeout, Duration::from_secs(10));
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let c = Config::parse(FULL).unwrap();
        let debug = format!("{c:?}");
        for secret in [
            "s3cret",
            "/rest/1/secret/",
            "t1lda-token",
            "int-t0ken",
            "read-t0ken",
        ] {
            assert!(!debug.contains(secret), "{debug}");
        }
    }

    #[test]
    fn presets_fill_what_the_table_leaves_open() {
        let c = Config::parse(
            r#"
[database]
url = "sqlite::memory:"
[[source]]
name = "tilda"
preset = "tilda"
token = "t"
[[source]]
name = "amo"
preset = "amocrm-webhook"
token = "t"
[[source]]
name = "b24"
preset = "bitrix24-event"
application_token = "tok"
[[source]]
name = "own"
preset = "tilda"
key = "form:formid+tranid"
reply = "json"
on_contact_match = "review"
auth = "none"
"#,
        )
        .unwrap();
        let tilda = c.source("tilda").unwrap();
        assert_eq!(
            (tilda.key.as_str(), tilda.reply),
            ("form:tranid", Some(Reply::Ok))
        );
        assert!(c
            .source("amo")
            .unwrap()
            .key
            .starts_with("form:leads[add][0][id]|"));
        let b24 = c.source("b24").unwrap();
        assert_eq!(b24.key, "form:event+data[FIELDS][ID]+ts");
        assert!(b24.ignore.contains(&"/auth[application_token]".to_string()));
        assert_eq!(c.source("tilda").unwrap().auth, Some(SourceAuth::Token));
        assert_eq!(b24.auth, Some(SourceAuth::ApplicationToken));
        let own = c.source("own").unwrap();
        assert_eq!(own.auth, Some(SourceAuth::None));
        assert_eq!(
            (own.key.as_str(), own.reply),
            ("form:formid+tranid", Some(Reply::Json))
        );
        assert_eq!(own.on_contact_match, crate::domain::MatchRule::Review);
        let err = Config::parse(
            "[database]\nurl = \"x\"\n[[source]]\nname = \"b\"\npreset = \"bitrix24-event\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("application_token"), "{err}");
        let err =
            Config::parse("[database]\nurl = \"x\"\n[[source]]\nname = \"b\"\nauth = \"none\"\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("has no key"), "{err}");
        let err = Config::parse("[database]\nurl = \"x\"\n[matching]\ndefault_region = \"XX\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("region"), "{err}");
    }

    #[test]
    fn minimal_config_uses_defaults() {
        let c = Config::parse("[database]\nurl = \"sqlite::memory:\"\n").unwrap();
        assert_eq!(c.server.listen, "127.0.0.1:8080");
        assert_eq!(c.retry.max_attempts, 5);
        assert_eq!(c.review.stale_after, Duration::from_secs(120));
        assert!(c.crm.is_none());
        assert_eq!(c.server.max_connections, 512);
        assert_eq!(c.server.header_timeout, Duration::from_secs(10));
        assert_eq!(c.server.body_timeout, Duration::from_secs(30));
    }

    #[test]
    fn slow_client_limits_are_checked() {
        let with = |server: &str| {
            Config::parse(&format!(
                "[database]\nurl = \"sqlite::memory:\"\n[server]\n{server}\n"
            ))
            .map_err(|e| e.to_string())
        };
        assert!(with("max_connections = 0")
            .unwrap_err()
            .contains("max_connections"));
        let e = with("header_timeout = \"10ms\"").unwrap_err();
        assert!(e.contains("header_timeout") && e.contains("10ms"), "{e}");
        assert!(with("body_timeout = \"2h\"")
            .unwrap_err()
            .contains("body_timeout"));
        let c = with("max_connections = 64\nheader_timeout = \"2s\"").unwrap();
        assert_eq!(c.server.max_connections, 64);
        assert_eq!(c.server.header_timeout, Duration::from_secs(2));
    }

    #[test]
    fn amocrm_takes_a_long_lived_token_or_oauth() {
        let base = "[database]\nurl = \"sqlite::memory:\"\n[crm]\nkind = \"amocrm\"\n\
                    base_url = \"https://acme.amocrm.ru\"\noperation_field_id = 1\n";
        let oauth = "client_id = \"id\"\nclient_secret = \"cs3cret\"\n\
                     redirect_uri = \"https://x/cb\"\nrefresh_token = \"rt0ken\"\n";
        let c = Config::parse(&format!("{base}token = \"t0ken\"\n")).unwrap();
        assert!(matches!(
            &c.crm,
            Some(CrmConfig::Amocrm {
                token: Some(_),
                client_id: None,
                ..
            })
        ));
        let c = Config::parse(&format!("{base}{oauth}")).unwrap();
        let Some(CrmConfig::Amocrm {
            token, client_id, ..
        }) = &c.crm
        else {
            panic!("crm")
        };
        assert!(token.is_none());
        assert_eq!(client_id.as_deref(), Some("id"));
        let debug = format!("{c:?}");
        assert!(
            !debug.contains("cs3cret") && !debug.contains("rt0ken"),
            "{debug}"
        );
        for bad in [
            base.to_owned(),
            format!("{base}token = \"t\"\n{oauth}"),
            format!("{base}client_id = \"id\"\nrefresh_token = \"r\"\n"),
        ] {
            let err = Config::parse(&bad).unwrap_err().to_string();
            assert!(err.contains("client_secret"), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_configs_get_clear_errors() {
        let base = "[database]\nurl = \"sqlite::memory:\"\n";
        let cases = [
            ("[worker]\nlease = \"soon\"\n", "lease"),
            ("[[source]]\nname = \"a b\"\nkey = \"json:/id\"\nauth = \"none\"\n", "source name"),
            ("[[source]]\nname = \"a\"\nkey = \"id\"\nauth = \"none\"\n", "must start with"),
            ("[[source]]\nname = \"a\"\nkey = \"json:/id\"\nauth = \"none\"\nignore = [\"x\"]\n", "JSON pointer"),
            ("[[source]]\nname = \"a\"\nkey = \"json:/id\"\nauth = \"none\"\n[[source]]\nname = \"a\"\nkey = \"json:/id\"\nauth = \"none\"\n", "twice"),
            ("[retry]\nmax_attempts = 0\n", "max_attempts"),
            ("[server]\nlisten_on = \"x\"\n", "listen_on"),
        ];
        for (extra, needle) in cases {
            let err = Config::parse(&format!("{base}{extra}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{extra:?}: {err}");
        }
    }

    const ALERTS: &str = r#"
[alerts]
interval = "2m"
stale_above = 5
review_older_than = "4h"

[[alerts.channel]]
kind = "telegram"
name = "team"
chat_id = -1001234567890
token = "env:LEADGATE_TELEGRAM_TOKEN"

[[alerts.channel]]
kind = "webhook"
name = "slack"
url = "https://hooks.slack.com/services/T000/B000/s3cr3tpath"
blocks = true
"#;

    #[test]
    fn alerts_parse_with_defaults_and_hide_their_secrets() {
        let c = Config::parse(&format!("[database]\nurl = \"sqlite::memory:\"\n{ALERTS}")).unwrap();
        let a = c.alerts.as_ref().unwrap();
        assert_eq!(a.interval, Duration::from_secs(120));
        assert_eq!(a.stale_above, 5);
        assert_eq!(a.repeat, Duration::from_secs(3600), "default repeat");
        assert_eq!(a.max_per_minute, 20);
        assert_eq!(a.channels.len(), 2);
        let AlertChannelConfig::Telegram {
            chat_id, api_base, ..
        } = &a.channels[0]
        else {
            panic!("telegram")
        };
        assert_eq!(chat_id, "-1001234567890");
        assert_eq!(api_base, "https://api.telegram.org");
        let debug = format!("{c:?}");
        assert!(!debug.contains("s3cr3tpath"), "{debug}");
        assert!(Config::parse("[database]\nurl = \"x\"\n")
            .unwrap()
            .alerts
            .is_none());
    }

    #[test]
    fn bad_alert_configs_get_clear_errors() {
        let base = "[database]\nurl = \"sqlite::memory:\"\n";
        let tg = "[[alerts.channel]]\nkind = \"telegram\"\nname = \"team\"\nchat_id = 1\ntoken = \"t\"\n";
        let cases = [
            ("[alerts]\n".to_owned(), "has no [[alerts.channel]]"),
            (format!("[alerts]\ninterval = \"0s\"\n{tg}"), "alerts.interval must be more than 0"),
            (format!("[alerts]\nmax_per_minute = 0\n{tg}"), "max_per_minute"),
            (format!("[alerts]\nstale_above = -1\n{tg}"), "stale_above"),
            (format!("[alerts]\nretry_delay = \"1m\"\nmax_retry_delay = \"1s\"\n{tg}"), "max_retry_delay"),
            (format!("{tg}{tg}"), "alerts channel `team` is defined twice"),
            (
                "[[alerts.channel]]\nkind = \"telegram\"\nname = \"a b\"\nchat_id = 1\ntoken = \"t\"\n".into(),
                "alerts channel name `a b`",
            ),
            (
                "[[alerts.channel]]\nkind = \"telegram\"\nname = \"t\"\nchat_id = \"\"\ntoken = \"t\"\n".into(),
                "chat_id is empty",
            ),
            (
                "[[alerts.channel]]\nkind = \"telegram\"\nname = \"t\"\nchat_id = 1\ntoken = \"env:\"\n".into(),
                "token is empty",
            ),
            (
                "[[alerts.channel]]\nkind = \"telegram\"\nname = \"t\"\nchat_id = 1\ntoken = \"x\"\napi_base = \"ftp://x\"\n".into(),
                "api_base",
            ),
            (
                "[[alerts.channel]]\nkind = \"webhook\"\nname = \"w\"\nurl = \"hooks.slack.com/x\"\n".into(),
                "url must be an http",
            ),
            (
                "[[alerts.channel]]\nkind = \"pager\"\nname = \"w\"\n".into(),
                "unknown variant `pager`",
            ),
            (
                "[[alerts.channel]]\nkind = \"webhook\"\nname = \"w\"\n".into(),
                "missing field `url`",
            ),
        ];
        for (extra, needle) in cases {
            let err = Config::parse(&format!("{base}{extra}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{extra:?}: {err}");
        }
    }

    #[test]
    fn the_claim_api_source_may_not_be_a_configured_source() {
        let text = "[database]\nurl = \"sqlite::memory:\"\n\
                    [claim_api]\nsource = \"site\"\n\
                    [[source]]\nname = \"site\"\nkey = \"json:/id\"\ntoken = \"t\"\n";
        let err = Config::parse(text).unwrap_err().to_string();
        assert!(err.contains("claim_api.source `site`"), "{err}");
        assert!(err.contains("[[source]]"), "{err}");
    }

    #[test]
    fn sources_without_authentication_are_refused() {
        let base = "[database]\nurl = \"sqlite::memory:\"\n";
        let cases = [
            // No method at all: refused, naming the source.
            ("name = \"web\"\nkey = \"json:/id\"\n", "source `web` has no authentication"),
            ("name = \"tilda\"\npreset = \"tilda\"\n", "source `tilda` has no authentication"),
            ("name = \"amo\"\npreset = \"amocrm-webhook\"\n", "source `amo` has no authentication"),
            ("name = \"j\"\npreset = \"generic-json\"\n", "source `j` has no authentication"),
            // A method without its credential.
            ("name = \"h\"\nkey = \"json:/id\"\nauth = \"hmac\"\n", "source `h`: auth = \"hmac\" needs secret"),
            ("name = \"t\"\nkey = \"json:/id\"\nauth = \"token\"\n", "source `t`: auth = \"token\" needs token"),
            // Empty secrets.
            ("name = \"e\"\nkey = \"json:/id\"\nsecret = \"\"\n", "source `e`: secret is empty"),
            ("name = \"e\"\nkey = \"json:/id\"\ntoken = \"  \"\n", "source `e`: token is empty"),
            ("name = \"e\"\nkey = \"json:/id\"\nsecret = \"k\"\nprevious_secret = \"\"\n", "source `e`: previous_secret is empty"),
            ("name = \"b\"\npreset = \"bitrix24-event\"\napplication_token = \"\"\n", "source `b`: application_token is empty"),
            // Credentials of another method than the one named.
            ("name = \"m\"\nkey = \"json:/id\"\nauth = \"none\"\nsecret = \"k\"\n", "source `m`: secret is set but auth = \"none\""),
            ("name = \"m\"\nkey = \"json:/id\"\nauth = \"token\"\ntoken = \"t\"\nsecret = \"k\"\n", "source `m`: secret is set"),
            ("name = \"w\"\nkey = \"json:/id\"\nsecret = \"k\"\nreplay_window = \"0s\"\n", "replay_window"),
            // A pulled source needs its sender's address and credentials.
            ("name = \"p\"\npreset = \"bitrix24-offline\"\n", "source `p`: auth = \"pull\" needs a [source.pull] table"),
            ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"\"\n", "source `p`: pull.url is empty"),
            ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"portal/rest\"\n", "pull.url must be an http"),
            ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"env:B24\"\naccess_token = \"env:\"\n", "pull.access_token is empty"),
            ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"env:B24\"\nbatch = 51\n", "pull.batch must be 1 to 50"),
            ("name = \"p\"\npreset = \"bitrix24-offline\"\ntoken = \"t\"\n[source.pull]\nurl = \"env:B24\"\n", "source `p`: token is set but auth = \"pull\""),
            ("name = \"p\"\nkey = \"json:/id\"\ntoken = \"t\"\nauth = \"token\"\n[source.pull]\nurl = \"env:B24\"\n", "[source.pull] is set but auth = \"token\""),
            ("name = \"p\"\nkey = \"json:/id\"\n[source.pull]\nurl = \"env:B24\"\n", "[source.pull] needs a pulled preset"),
            ("name = \"tg\"\npreset = \"telegram-webhook\"\n", "source `tg` has no authentication"),
            ("name = \"zd\"\npreset = \"zadarma\"\n", "source `zd` has no authentication"),
            ("name = \"zd\"\npreset = \"zadarma\"\ntoken = \"t\"\n", "the zadarma preset needs secret"),
            ("name = \"zd\"\npreset = \"zadarma\"\nauth = \"zadarma_signature\"\n", "needs secret"),
            ("name = \"tg\"\npreset = \"telegram-webhook\"\ntoken = \"has space\"\n", "the telegram-webhook preset needs token"),
            ("name = \"tg\"\npreset = \"telegram-webhook\"\nsecret = \"k\"\n", "the telegram-webhook preset needs token"),
            ("name = \"tp\"\npreset = \"telegram-updates\"\n[source.pull]\nurl = \"https://api.telegram.org\"\n", "needs pull.bot_token"),
            ("name = \"tp\"\npreset = \"telegram-updates\"\n[source.pull]\nurl = \"https://api.telegram.org\"\nbot_token = \"env:\"\n", "pull.bot_token is empty"),
            ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"env:B24\"\nbot_token = \"x\"\n", "pull.bot_token is for the telegram-updates preset"),
            ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://imap.example.com\"\npassword = \"env:PW\"\n", "the imap preset needs pull.username"),
            ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://imap.example.com\"\nusername = \"env:U\"\n", "the imap preset needs pull.password"),
            ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://imap.example.com\"\nusername = \"env:U\"\npassword = \"env:\"\n", "pull.password is empty"),
            ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imap://imap.example.com\"\nusername = \"env:U\"\npassword = \"env:PW\"\n", "pull.url must be imaps://"),
            ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nmove_to = \"INBOX\"\n", "pull.move_to is the mailbox read"),
            ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nmove_to = \"Inbox\"\n", "pull.move_to is the mailbox read"),
            ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nmailbox = \"inbox\"\nmove_to = \"INBOX\"\n", "pull.move_to is the mailbox read"),
            ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nmax_message_size = 0\n", "pull.max_message_size must be at least 1 byte"),
            ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"env:B24\"\nmax_message_size = 10\n", "pull.max_message_size is for the imap preset"),
            ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nmailbox = \" \"\n", "pull.mailbox must be a mailbox name"),
            ("name = \"m\"\npreset = \"imap\"\n[source.pull]\nurl = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\nbot_token = \"x\"\n", "pull.bot_token is for the telegram-updates preset"),
            ("name = \"p\"\npreset = \"bitrix24-offline\"\n[source.pull]\nurl = \"env:B24\"\npassword = \"env:PW\"\n", "pull.password is for the imap preset"),
        ];
        for (source, needle) in cases {
            let err = Config::parse(&format!("{base}[[source]]\n{source}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{source:?}: {err}");
        }
        for (api, needle) in [
            (
                "[api]\nintegration_token = \"\"\n",
                "api.integration_token is empty",
            ),
            ("[api]\nread_token = \" \"\n", "api.read_token is empty"),
        ] {
            let err = Config::parse(&format!("{base}{api}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{api:?}: {err}");
        }
        // Each method with its credential is accepted, and the method is implied.
        let c = Config::parse(&format!(
            "{base}[[source]]\nname = \"h\"\nkey = \"json:/id\"\nsecret = \"k\"\nprevious_secret = \"o\"\n\
             [[source]]\nname = \"t\"\npreset = \"tilda\"\ntoken = \"x\"\nprevious_token = \"y\"\n"
        ))
        .unwrap();
        assert_eq!(c.source("h").unwrap().auth, Some(SourceAuth::Hmac));
        assert_eq!(
            c.source("h").unwrap().replay_window,
            Duration::from_secs(300)
        );
        assert_eq!(c.source("t").unwrap().auth, Some(SourceAuth::Token));
    }

    #[test]
    fn only_inbox_is_compared_without_regard_to_case() {
        assert!(same_mailbox("INBOX", "inbox"));
        assert!(same_mailbox("Inbox", "INBOX"));
        assert!(same_mailbox("Leads", "Leads"));
        // Other names are the server's to compare: "leads" may well be another folder.
        assert!(!same_mailbox("Leads", "leads"));
        assert!(!same_mailbox("INBOX/Done", "inbox/done"));
        let toml = "[[source]]\nname = \"m\"\npreset = \"imap\"\n[source.pull]\n\
url = \"imaps://h\"\nusername = \"u\"\npassword = \"env:PW\"\n\
mailbox = \"Leads\"\nmove_to = \"leads\"\n";
        let c = Config::parse(&format!(
            "[database]\nurl = \"sqlite::memory:\"\n[crm]\nkind = \"http\"\nurl = \"http://x\"\n{toml}"
        ));
        assert!(
            c.as_ref()
                .err()
                .is_none_or(|e| !e.to_string().contains("pull.move_to is the mailbox read")),
            "{c:?}"
        );
    }
}
