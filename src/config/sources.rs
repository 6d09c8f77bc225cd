//! `[[source]]`: how each source's deliveries are authenticated, parsed and keyed, its
//! presets, and `[source.pull]` for the sources Leadgate reads from instead of being sent to.

use std::time::Duration;

use serde::Deserialize;

use super::Secret;

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
    pub(super) fn apply_preset(&mut self) {
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
    pub(super) fn infer_auth(&mut self) {
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
    pub(super) fn validate_auth(&self) -> Result<SourceAuth, String> {
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
pub(super) fn same_mailbox(a: &str, b: &str) -> bool {
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

fn default_replay_window() -> Duration {
    Duration::from_secs(300)
}
