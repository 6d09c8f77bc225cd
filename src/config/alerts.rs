//! `[alerts]`: the team's channels (Telegram, a webhook) and when they are told.

use std::time::Duration;

use serde::Deserialize;

use super::Secret;

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
    /// Alert when a delivery has waited in a gateway's intake spool longer than this (the
    /// deployment's alerts only: `[spool]`, src/spool.rs).
    #[serde(with = "humantime_serde")]
    pub spool_older_than: Duration,
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
            spool_older_than: Duration::from_secs(300),
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
    pub(super) fn validate(&self) -> Result<(), String> {
        let positive = [
            ("interval", self.interval),
            ("poll_interval", self.poll_interval),
            ("repeat", self.repeat),
            ("timeout", self.timeout),
            ("retry_delay", self.retry_delay),
            ("review_older_than", self.review_older_than),
            ("spool_older_than", self.spool_older_than),
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
