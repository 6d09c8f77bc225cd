//! The channels alerts go to, over HTTP (reqwest, rustls): a Telegram bot's
//! `sendMessage` and a Slack-compatible webhook. Each call has one answer:
//! accepted, try again (after how long, when the channel said), or refused for good.
//! Errors are short sentences without the URL (it holds the bot token or the webhook's
//! secret path) or the message.

use std::time::Duration;

use serde_json::{json, Value};

use super::message::{self, Digest};
use crate::config::{AlertChannelConfig, Secret};

/// The longest wait a channel may ask for (a `retry_after` beyond is clamped).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// What a channel did with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    Accepted,
    /// Not accepted; try again (after `after` when the channel said how long).
    Retry {
        after: Option<Duration>,
        error: String,
    },
    /// Refused for good: the same message would be refused again.
    Refused {
        error: String,
    },
}

/// A channel ready to send.
pub struct Channel {
    pub name: String,
    kind: Kind,
    http: reqwest::Client,
}

enum Kind {
    Telegram {
        chat_id: String,
        send_url: Secret,
        token: Secret,
    },
    Webhook {
        url: Secret,
        blocks: bool,
    },
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Telegram { .. } => "telegram",
            Kind::Webhook { .. } => "webhook",
        };
        f.debug_struct("Channel")
            .field("name", &self.name)
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

/// A configured secret: `env:NAME` is read from the environment (through `env`), else
/// the value as written.
pub fn resolve(
    channel: &str,
    field: &str,
    value: &Secret,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Secret, String> {
    value
        .resolve(env)
        .map_err(|e| format!("alerts channel `{channel}`: {field}: {e}"))
}

impl Channel {
    /// Builds the channel, reading `env:` secrets from `env`.
    pub fn new(
        config: &AlertChannelConfig,
        timeout: Duration,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Channel, String> {
        let name = config.name().to_owned();
        let kind = match config {
            AlertChannelConfig::Telegram {
                chat_id,
                token,
                api_base,
                ..
            } => {
                let token = resolve(&name, "token", token, &env)?;
                if token.expose().contains(['/', '?', '#', ' ']) {
                    return Err(format!(
                        "alerts channel `{name}`: the bot token is not a Telegram token (123456:ABC…)"
                    ));
                }
                let send_url = Secret::new(format!(
                    "{}/bot{}/sendMessage",
                    api_base.trim_end_matches('/'),
                    token.expose()
                ));
                Kind::Telegram {
                    chat_id: chat_id.trim().to_owned(),
                    send_url,
                    token,
                }
            }
            AlertChannelConfig::Webhook { url, blocks, .. } => {
                let url = resolve(&name, "url", url, &env)?;
                let u = url.expose();
                if !(u.starts_with("https://") || u.starts_with("http://")) {
                    return Err(format!(
                        "alerts channel `{name}`: url must be an http:// or https:// URL"
                    ));
                }
                Kind::Webhook {
                    url,
                    blocks: *blocks,
                }
            }
        };
        let http = reqwest::Client::builder()
            .timeout(timeout)
            // The token or secret path goes to this URL and nowhere else.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|_| format!("alerts channel `{name}`: the HTTP client could not be set up"))?;
        Ok(Channel { name, kind, http })
    }

    /// Sends `digest` once.
    pub async fn send(&self, digest: &Digest) -> Sent {
        match &self.kind {
            Kind::Telegram {
                chat_id,
                send_url,
                token,
            } => {
                // A numeric id goes as a number, `@channel` as text, as the Bot API takes them.
                let chat: Value = chat_id
                    .parse::<i64>()
                    .map(Value::from)
                    .unwrap_or_else(|_| Value::from(chat_id.as_str()));
                let body = json!({
                    "chat_id": chat,
                    "text": message::telegram_html(digest),
                    "parse_mode": "HTML",
                    "link_preview_options": {"is_disabled": true},
                });
                match self.http.post(send_url.expose()).json(&body).send().await {
                    Err(e) => transport(&e, "Telegram"),
                    Ok(res) => {
                        let status = res.status().as_u16();
                        let answer: Value = res.json().await.unwrap_or(Value::Null);
                        telegram_answer(status, &answer, token.expose())
                    }
                }
            }
            Kind::Webhook { url, blocks } => {
                let body = message::webhook_body(digest, *blocks);
                post_webhook(self.http.post(url.expose()).json(&body), "the webhook")
                    .await
                    .1
            }
        }
    }
}

/// Sends one webhook request (alerts' and the event feed's): its HTTP status, when it
/// answered, and what it means ([`webhook_answer`], a `Retry-After` in seconds honoured).
pub async fn post_webhook(request: reqwest::RequestBuilder, who: &str) -> (Option<u16>, Sent) {
    match request.send().await {
        Err(e) => (None, transport(&e, who)),
        Ok(res) => {
            let retry_after = res
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
            let status = res.status().as_u16();
            (Some(status), webhook_answer(status, retry_after))
        }
    }
}

fn transport(e: &reqwest::Error, who: &str) -> Sent {
    let error = if e.is_timeout() {
        format!("{who} did not answer in time")
    } else if e.is_connect() {
        format!("{who} could not be reached")
    } else {
        format!("the call to {who} failed")
    };
    Sent::Retry { after: None, error }
}

/// Telegram's answer: `{"ok":true,…}` accepted; 429 (or `error_code` 429) waits
/// `parameters.retry_after` seconds; other 4xx `{"ok":false}` are permanent for this
/// message; 5xx and anything unreadable are tried again.
pub fn telegram_answer(status: u16, answer: &Value, token: &str) -> Sent {
    if (200..300).contains(&status) && answer["ok"] == true {
        return Sent::Accepted;
    }
    let code = answer["error_code"].as_u64().unwrap_or(u64::from(status));
    let mut description = answer["description"].as_str().unwrap_or("").to_owned();
    if !token.is_empty() {
        description = description.replace(token, "***");
    }
    let description: String = description
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    let error = if description.is_empty() {
        format!("Telegram answered HTTP {status}")
    } else {
        format!("Telegram answered HTTP {status}: {description}")
    };
    if status == 429 || code == 429 {
        let after = answer["parameters"]["retry_after"]
            .as_u64()
            .map(|s| Duration::from_secs(s.max(1)).min(MAX_RETRY_AFTER));
        return Sent::Retry { after, error };
    }
    // A revoked token (401) or a bot removed from the chat (403) is the channel's
    // trouble, not this message's: every message would be refused alike, so it is tried
    // again (with backoff) until someone fixes the bot, and nothing is dropped meanwhile.
    if matches!(status, 401 | 403) || matches!(code, 401 | 403) {
        return Sent::Retry { after: None, error };
    }
    if (400..500).contains(&status) && answer["ok"] == false {
        return Sent::Refused { error };
    }
    Sent::Retry { after: None, error }
}

/// A webhook's answer: any 2xx accepted; 429 and 5xx tried again (after `Retry-After`
/// when given), and so are 401, 403, 404 and 410 — a revoked or moved endpoint refuses
/// every message alike, so the messages wait for it to be fixed instead of being
/// dropped; any other status is refused for good (a refused body).
pub fn webhook_answer(status: u16, retry_after: Option<Duration>) -> Sent {
    let error = format!("the webhook answered HTTP {status}");
    match status {
        200..=299 => Sent::Accepted,
        401 | 403 | 404 | 410 | 429 | 500..=599 => Sent::Retry {
            after: retry_after,
            error,
        },
        _ => Sent::Refused { error },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telegram_answers_are_classified_as_the_bot_api_documents() {
        let ok = json!({"ok": true, "result": {"message_id": 1}});
        assert_eq!(telegram_answer(200, &ok, "123:tok"), Sent::Accepted);
        let flood = json!({"ok": false, "error_code": 429,
            "description": "Too Many Requests: retry after 7", "parameters": {"retry_after": 7}});
        assert!(matches!(
            telegram_answer(429, &flood, "123:tok"),
            Sent::Retry { after: Some(d), .. } if d == Duration::from_secs(7)
        ));
        let huge = json!({"ok": false, "error_code": 429, "parameters": {"retry_after": 999999}});
        assert!(matches!(
            telegram_answer(429, &huge, "123:tok"),
            Sent::Retry { after: Some(d), .. } if d == MAX_RETRY_AFTER
        ));
        let bad =
            json!({"ok": false, "error_code": 400, "description": "Bad Request: chat not found"});
        assert_eq!(
            telegram_answer(400, &bad, "123:tok"),
            Sent::Refused {
                error: "Telegram answered HTTP 400: Bad Request: chat not found".into()
            }
        );
        let unauthorized = json!({"ok": false, "error_code": 401,
            "description": "Unauthorized for 123:SECRET"});
        let Sent::Retry { error, .. } = telegram_answer(401, &unauthorized, "123:SECRET") else {
            panic!("a revoked token is the channel's trouble: retried, nothing dropped")
        };
        let kicked = json!({"ok": false, "error_code": 403,
            "description": "Forbidden: bot was kicked from the group chat"});
        assert!(matches!(
            telegram_answer(403, &kicked, "123:tok"),
            Sent::Retry { .. }
        ));
        assert!(!error.contains("SECRET"), "{error}");
        for (status, answer) in [
            (502, Value::Null),
            (500, json!({"ok": false, "error_code": 500})),
        ] {
            assert!(matches!(
                telegram_answer(status, &answer, "123:tok"),
                Sent::Retry { after: None, .. }
            ));
        }
    }

    #[test]
    fn webhook_answers_any_2xx_accepted_429_and_5xx_retried() {
        assert_eq!(webhook_answer(200, None), Sent::Accepted);
        assert_eq!(webhook_answer(204, None), Sent::Accepted);
        assert!(matches!(
            webhook_answer(429, Some(Duration::from_secs(3))),
            Sent::Retry { after: Some(d), .. } if d == Duration::from_secs(3)
        ));
        assert!(matches!(webhook_answer(503, None), Sent::Retry { .. }));
        for moved_or_revoked in [401, 403, 404, 410] {
            assert!(
                matches!(webhook_answer(moved_or_revoked, None), Sent::Retry { .. }),
                "{moved_or_revoked}"
            );
        }
        assert!(matches!(webhook_answer(400, None), Sent::Refused { .. }));
        assert!(matches!(webhook_answer(422, None), Sent::Refused { .. }));
        assert!(matches!(webhook_answer(301, None), Sent::Refused { .. }));
    }

    #[test]
    fn env_secrets_are_read_from_the_environment_and_never_shown() {
        let env = |k: &str| (k == "BOT").then(|| "123:abc".to_owned());
        let s = resolve("team", "token", &Secret::new("env:BOT"), env).unwrap();
        assert_eq!(s.expose(), "123:abc");
        assert_eq!(format!("{s:?}"), "***");
        let err = resolve("team", "token", &Secret::new("env:NOPE"), env).unwrap_err();
        assert_eq!(
            err,
            "alerts channel `team`: token: the environment variable `NOPE` is not set"
        );
        let literal = resolve("team", "url", &Secret::new("https://x/y"), env).unwrap();
        assert_eq!(literal.expose(), "https://x/y");
        let config: AlertChannelConfig = toml::from_str(
            "kind = \"telegram\"\nname = \"team\"\nchat_id = -100123\ntoken = \"123:abc\"\n",
        )
        .unwrap();
        let channel = Channel::new(&config, Duration::from_secs(1), env).unwrap();
        let debug = format!("{channel:?} {config:?}");
        assert!(!debug.contains("123:abc"), "{debug}");
        let bad: AlertChannelConfig = toml::from_str(
            "kind = \"telegram\"\nname = \"team\"\nchat_id = 1\ntoken = \"env:NOPE\"\n",
        )
        .unwrap();
        assert!(Channel::new(&bad, Duration::from_secs(1), env)
            .unwrap_err()
            .contains("`NOPE` is not set"));
    }
}
