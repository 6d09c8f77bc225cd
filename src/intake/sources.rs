//! Per-source rules: where the event key is, which fields are volatile, whether
//! deliveries are signed. Also turns a raw body into the JSON payload that is
//! fingerprinted and stored.
//!
//! **Authentication.** Every source has a method, or the configuration is refused: an
//! HMAC-SHA256 over `<timestamp>.<raw body>` within `replay_window` (two secrets accepted
//! while rotating); a token in `X-Leadgate-Token` or `?token=` (a Telegram webhook's only
//! in `X-Telegram-Bot-Api-Secret-Token`); Bitrix24's `application_token`; Zadarma's
//! `Signature` (HMAC-SHA1 of caller, called number and call start); or an explicit
//! `auth = "none"`, warned about at every start. Secrets are compared in constant time,
//! before the body is parsed where the method allows. A pulled source's intake URL refuses
//! everything (its events come through `src/pull`). A signed source whose key is a header
//! lets each signature name one operation for its replay window (`signature_uses`,
//! migration 0027): the same signature under another key is refused as
//! `signature_replayed`, not taken as a new lead.
//!
//! **Input that cannot hurt.** Bad input is answered 4xx and journaled, never 5xx or a
//! panic: form fields are decoded as strict UTF-8 (so `%FF` and `%FE` stay different); a
//! new key with control, zero-width or bidirectional characters is refused; NUL characters,
//! which PostgreSQL cannot store, are refused where the body is read (`intake::mod`); the
//! fingerprint hashes integers beyond 2^53 exactly and refuses numbers it could only round
//! (`domain::fingerprint`). A source's `redact` values are never stored nor fingerprinted.

use std::collections::HashMap;

use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::config::{Reply, Secret, SourceAuth, SourceConfig};
use crate::crm::FieldMap;
use crate::domain::MatchRule;

use super::problem::Code;
use super::ApiError;

/// A content key's window when the source does not set `content_window`.
pub const DEFAULT_CONTENT_WINDOW: std::time::Duration = std::time::Duration::from_secs(3600);
/// The longest `content_window`: beyond a month the journal's own retention has usually
/// forgotten the first delivery's data anyway.
pub const MAX_CONTENT_WINDOW: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

/// Bumped whenever the way a body becomes a payload changes, so the journal tells which
/// rules produced a stored payload.
pub const TRANSFORM_VERSION: i32 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySpec {
    /// A JSON pointer into the payload (for form bodies: `/field`).
    Json(String),
    /// A request header, e.g. `Idempotency-Key`.
    Header(String),
    /// Form fields: alternatives (`a|b`, the first present wins) of composites (`a+b`,
    /// values joined with `:`), e.g. Tilda's `tranid`.
    Form(Vec<Vec<String>>),
    /// The content of these JSON pointers (`content:/form+/phone+/email+/message`), for
    /// senders whose deliveries carry no id: the same content within the source's
    /// `content_window` is one operation ([`content_hash`], `intake::admission`).
    Content(Vec<String>),
}

impl KeySpec {
    pub fn parse(spec: &str) -> Option<KeySpec> {
        let (kind, rest) = spec.split_once(':')?;
        if rest.is_empty() {
            return None;
        }
        match kind {
            "json" if rest.starts_with('/') => Some(KeySpec::Json(rest.to_owned())),
            "header" => Some(KeySpec::Header(rest.to_owned())),
            "content" => {
                let fields: Vec<String> = rest.split('+').map(str::to_owned).collect();
                let pointers = fields.iter().all(|f| f.len() > 1 && f.starts_with('/'));
                let mut unique = fields.clone();
                unique.sort();
                unique.dedup();
                (pointers && unique.len() == fields.len()).then_some(KeySpec::Content(fields))
            }
            "form" => {
                let alternatives: Vec<Vec<String>> = rest
                    .split('|')
                    .map(|alt| alt.split('+').map(str::to_owned).collect())
                    .collect();
                let blank = alternatives.iter().flatten().any(|f| f.is_empty());
                (!blank).then_some(KeySpec::Form(alternatives))
            }
            _ => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            KeySpec::Json(p) => format!("the JSON field {p}"),
            KeySpec::Header(h) => format!("the {h} header"),
            KeySpec::Form(alts) => {
                let alts: Vec<String> = alts.iter().map(|a| a.join("+")).collect();
                format!("the form field `{}`", alts.join("` or `"))
            }
            KeySpec::Content(fields) => format!("every one of {}", fields.join(", ")),
        }
    }
}

/// How a source's deliveries are authenticated (see [`SourceAuth`]).
#[derive(Debug, Clone)]
pub enum Auth {
    /// Signed: any of `secrets` (the current one and, while rotating, the previous).
    Hmac {
        secrets: Vec<Secret>,
        window: std::time::Duration,
    },
    /// A shared token in `X-Leadgate-Token` or the `token` query parameter.
    Token(Vec<Secret>),
    /// A shared token in this header only (Telegram's webhook `secret_token`).
    HeaderToken {
        header: &'static str,
        tokens: Vec<Secret>,
    },
    /// Bitrix24's `auth[application_token]`, checked once the body is parsed.
    ApplicationToken(Secret),
    None,
    /// A pulled source (`src/pull`): its intake URL takes nothing.
    Pull,
    /// Zadarma's `Signature` header, checked once the body is parsed
    /// ([`Source::authenticate_payload`]).
    Zadarma(Secret),
}

/// Zadarma's signature of a notification: `base64(hex(HMAC-SHA1(caller_id + called_did +
/// call_start)))` under the API secret, as its PHP example computes it
/// (`base64_encode(hash_hmac('sha1', …))`, whose HMAC is hex text).
pub fn zadarma_signature(
    secret: &[u8],
    caller_id: &str,
    called_did: &str,
    call_start: &str,
) -> String {
    use base64::Engine;
    let mut mac =
        Hmac::<sha1::Sha1>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(caller_id.as_bytes());
    mac.update(called_did.as_bytes());
    mac.update(call_start.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(hex::encode(mac.finalize().into_bytes()))
}

/// The header of a signature's timestamp (Unix seconds) and of the signature.
pub const TIMESTAMP_HEADER: &str = "x-leadgate-timestamp";
pub const SIGNATURE_HEADER: &str = "x-leadgate-signature";
/// The header (or, without it, the query parameter `token`) of a source token.
pub const TOKEN_HEADER: &str = "x-leadgate-token";

/// Why a delivery was not let in: an error code and a sentence for the sender (which
/// never repeats what was sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthFailure {
    pub code: Code,
    pub message: &'static str,
}

const fn failure(code: Code, message: &'static str) -> AuthFailure {
    AuthFailure { code, message }
}

/// The MAC an `X-Leadgate-Signature` value carries (`sha256=<hex>`, hex in any case),
/// as bytes: what is checked, and what a signature's one use is remembered by
/// (`intake::signature_used_once`), so a value written differently is the same signature.
pub fn signature_mac(header: &str) -> Option<Vec<u8>> {
    header
        .trim()
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
}

/// The signature of `body` sent at `timestamp` (Unix seconds) under `secret`:
/// `sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`, the value of
/// `X-Leadgate-Signature`.
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Constant-time equality of a presented credential with any of the expected ones.
fn matches_any(got: &[u8], expected: &[Secret]) -> bool {
    use subtle::ConstantTimeEq;
    let mut ok = subtle::Choice::from(0);
    for e in expected {
        ok |= got.ct_eq(e.expose().as_bytes());
    }
    ok.into()
}

/// A configured source, ready for intake.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub key: KeySpec,
    pub event_time: Option<KeySpec>,
    pub ignore: Vec<String>,
    /// JSON pointers whose values are never stored ([`redact`]).
    pub redact: Vec<String>,
    pub auth: Auth,
    pub fields: FieldMap,
    pub reply: Reply,
    pub on_contact_match: MatchRule,
    /// A content key's window: the same content within it of its first delivery is one
    /// operation (`content_window`, default 1 h).
    pub content_window: std::time::Duration,
}

impl Source {
    pub fn from_config(c: &SourceConfig) -> Result<Source, String> {
        let key = KeySpec::parse(&c.key)
            .ok_or_else(|| format!("source `{}`: cannot read key `{}`", c.name, c.key))?;
        let event_time = match &c.event_time {
            Some(spec) => match KeySpec::parse(spec) {
                Some(KeySpec::Content(_)) | None => {
                    return Err(format!(
                        "source `{}`: cannot read event_time `{spec}`",
                        c.name
                    ))
                }
                t => t,
            },
            None => None,
        };
        let content_window = match (&key, c.content_window) {
            (KeySpec::Content(_), None) => DEFAULT_CONTENT_WINDOW,
            (KeySpec::Content(_), Some(w))
                if (std::time::Duration::from_secs(1)..=MAX_CONTENT_WINDOW).contains(&w) =>
            {
                w
            }
            (KeySpec::Content(_), Some(w)) => {
                return Err(format!(
                    "source `{}`: content_window must be between 1s and 30 days, not {}",
                    c.name,
                    humantime::format_duration(w)
                ))
            }
            (_, Some(_)) => {
                return Err(format!(
                    "source `{}`: content_window applies to a content key (key = \"content:/…+/…\") only",
                    c.name
                ))
            }
            (_, None) => DEFAULT_CONTENT_WINDOW,
        };
        // A pulled source reads again what it could not acknowledge, after a restart or a
        // long outage: beyond a content window that would be a second lead. Its sender's
        // own id keys it (review finding).
        if matches!(key, KeySpec::Content(_))
            && (c.auth == Some(SourceAuth::Pull) || c.pull.is_some())
        {
            return Err(format!(
                "source `{}`: a pulled source cannot be keyed by its content (a message read again \
                 after the window would be a second lead); keep its preset's key",
                c.name
            ));
        }
        // The key is kept as the operation's id anyway; and a spooled delivery is keyed
        // again from its redacted payload when it is drained (`intake::spooled`).
        let key_fields: Vec<String> = match &key {
            KeySpec::Json(p) => vec![p.clone()],
            KeySpec::Form(alternatives) => alternatives
                .iter()
                .flatten()
                .map(|f| format!("/{f}"))
                .collect(),
            KeySpec::Header(_) | KeySpec::Content(_) => vec![],
        };
        // A redacted pointer covers what is under it too (`/lead` redacts `/lead/id`).
        let covers = |redacted: &str, f: &str| {
            f == redacted
                || f.strip_prefix(redacted)
                    .is_some_and(|rest| rest.starts_with('/'))
        };
        if let Some(f) = key_fields
            .iter()
            .find(|f| c.redact.iter().any(|r| covers(r, f)))
        {
            return Err(format!(
                "source `{}`: `{f}` is its key, which is kept as the operation's id: it cannot be \
                 redacted",
                c.name
            ));
        }
        if let KeySpec::Content(fields) = &key {
            if let Some(f) = fields
                .iter()
                .find(|f| c.redact.iter().chain(&c.ignore).any(|r| covers(r, f)))
            {
                return Err(format!(
                    "source `{}`: `{f}` keys the content, so it cannot be ignored or redacted too",
                    c.name
                ));
            }
        }
        let missing = || format!("source `{}` has no authentication", c.name);
        let two = |a: &Option<Secret>, b: &Option<Secret>| -> Vec<Secret> {
            a.iter().chain(b.iter()).cloned().collect()
        };
        let auth = match c.auth.ok_or_else(missing)? {
            SourceAuth::Hmac => Auth::Hmac {
                secrets: two(&c.secret, &c.previous_secret),
                window: c.replay_window,
            },
            SourceAuth::Token if c.preset == Some(crate::config::Preset::TelegramWebhook) => {
                Auth::HeaderToken {
                    header: crate::config::TELEGRAM_SECRET_HEADER,
                    tokens: two(&c.token, &c.previous_token),
                }
            }
            SourceAuth::Token => Auth::Token(two(&c.token, &c.previous_token)),
            SourceAuth::ApplicationToken => {
                Auth::ApplicationToken(c.application_token.clone().ok_or_else(missing)?)
            }
            SourceAuth::None => Auth::None,
            SourceAuth::Pull => Auth::Pull,
            SourceAuth::ZadarmaSignature => Auth::Zadarma(c.secret.clone().ok_or_else(missing)?),
        };
        if match &auth {
            Auth::Hmac { secrets, .. }
            | Auth::Token(secrets)
            | Auth::HeaderToken {
                tokens: secrets, ..
            } => secrets.is_empty(),
            _ => false,
        } {
            return Err(missing());
        }
        Ok(Source {
            name: c.name.clone(),
            key,
            event_time,
            // What is never stored cannot count in the fingerprint either (a rotating
            // credential would make every redelivery a conflict).
            ignore: c
                .ignore
                .iter()
                .chain(c.redact.iter().filter(|p| !c.ignore.contains(p)))
                .cloned()
                .collect(),
            redact: c.redact.clone(),
            auth,
            fields: c.fields.clone(),
            reply: c.reply.unwrap_or_default(),
            on_contact_match: c.on_contact_match,
            content_window,
        })
    }

    /// Checks what can be checked before the body is read: the signature over the
    /// timestamp and the raw body (within the replay window), or the token, in
    /// constant time. What is in the body is [`Source::authenticate_payload`]'s; both are
    /// called by [`Source::open`].
    pub fn authenticate(
        &self,
        headers: &axum::http::HeaderMap,
        query: Option<&str>,
        body: &[u8],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), AuthFailure> {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        match &self.auth {
            Auth::None | Auth::ApplicationToken(_) | Auth::Zadarma(_) => Ok(()),
            Auth::Pull => Err(failure(
                Code::PulledSource,
                "this source is pulled by the gateway from its sender; it takes no deliveries",
            )),
            Auth::HeaderToken { header: name, tokens } => match header(name) {
                None => Err(failure(
                    Code::MissingToken,
                    "this source needs its secret token in the X-Telegram-Bot-Api-Secret-Token header",
                )),
                Some(t) if matches_any(t.as_bytes(), tokens) => Ok(()),
                Some(_) => Err(failure(Code::BadToken, "the secret token does not match")),
            },
            Auth::Token(tokens) => {
                let from_query = || {
                    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query?).ok()?;
                    pairs
                        .into_iter()
                        .find(|(k, _)| k == "token")
                        .map(|(_, v)| v)
                };
                let got = header(TOKEN_HEADER).map(str::to_owned).or_else(from_query);
                match got {
                    None => Err(failure(
                        Code::MissingToken,
                        "this source needs its token in the X-Leadgate-Token header or the token query parameter",
                    )),
                    Some(t) if matches_any(t.as_bytes(), tokens) => Ok(()),
                    Some(_) => Err(failure(Code::BadToken, "the source token does not match")),
                }
            }
            Auth::Hmac { secrets, window } => {
                let (Some(ts), Some(sig)) = (header(TIMESTAMP_HEADER), header(SIGNATURE_HEADER))
                else {
                    return Err(failure(
                        Code::MissingSignature,
                        "this source needs X-Leadgate-Timestamp and X-Leadgate-Signature: sha256=<hex HMAC-SHA256 of \"<timestamp>.<body>\">",
                    ));
                };
                let Ok(ts) = ts.trim().parse::<i64>() else {
                    return Err(failure(
                        Code::BadSignature,
                        "X-Leadgate-Timestamp must be Unix seconds",
                    ));
                };
                let skew = now.timestamp().abs_diff(ts);
                if skew > window.as_secs() {
                    return Err(failure(
                        Code::SignatureExpired,
                        "X-Leadgate-Timestamp is outside the replay window: sign each delivery when sending it",
                    ));
                }
                let Some(got) = signature_mac(sig) else {
                    return Err(failure(
                        Code::BadSignature,
                        "X-Leadgate-Signature must be sha256=<hex>",
                    ));
                };
                let mut ok = subtle::Choice::from(0);
                for secret in secrets {
                    let mut mac = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes())
                        .expect("HMAC takes keys of any length");
                    mac.update(ts.to_string().as_bytes());
                    mac.update(b".");
                    mac.update(body);
                    ok |= subtle::Choice::from(u8::from(mac.verify_slice(&got).is_ok()));
                }
                if bool::from(ok) {
                    Ok(())
                } else {
                    Err(failure(
                        Code::BadSignature,
                        "X-Leadgate-Signature does not match the body",
                    ))
                }
            }
        }
    }

    /// The event key of a delivery, if present and not blank. A pulled event has no
    /// headers: a key in a header is missing from it. `Idempotency-Key` is read as the
    /// draft defines it (`intake::idempotency`: a structured-field string, or the bare
    /// extension), the claim API's way; an `Err` is a key present but not valid. A
    /// content key is the content's hash ([`content_hash`]), which admission turns into
    /// the key of its window.
    pub fn key(
        &self,
        payload: &Value,
        headers: Option<&axum::http::HeaderMap>,
    ) -> Result<Option<String>, super::idempotency::KeyError> {
        let value = match &self.key {
            KeySpec::Json(p) => payload.pointer(p).and_then(scalar),
            KeySpec::Form(alternatives) => form_key(payload, alternatives),
            KeySpec::Header(h) if super::idempotency::is_idempotency_key(h) => {
                return match headers {
                    Some(headers) => super::idempotency::key(headers),
                    None => Ok(None),
                };
            }
            KeySpec::Header(h) => headers
                .and_then(|hs| hs.get(h.as_str()))
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            KeySpec::Content(fields) => content_hash(payload, fields),
        };
        Ok(value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()))
    }
}

/// A request's `Content-Type`, as sent.
pub fn content_type(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// A pushed delivery's body once its sender is known to be the source's.
#[derive(Debug, Clone, PartialEq)]
pub enum Opened {
    /// A form builder's connection check (`test=test`): answered, never journaled.
    ConnectionCheck,
    /// The body, parsed, whose credentials (if it carries any) were checked.
    Payload(Value),
}

impl Source {
    /// Authenticates a delivery POSTed to this source and parses its body: the request's
    /// credentials first, before the body is parsed ([`Source::authenticate`]), then the
    /// body, then the credentials some senders carry inside it or sign with it
    /// ([`Source::authenticate_payload`]). Admission's one call for a pushed delivery
    /// (`intake::admission`): a new authentication method is an arm of the two `match`es
    /// over [`Auth`], which the compiler makes every method name.
    pub fn open(
        &self,
        headers: &axum::http::HeaderMap,
        query: Option<&str>,
        body: &[u8],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Opened, ApiError> {
        let unauthorized = |f: AuthFailure| ApiError::Unauthorized {
            code: f.code,
            message: f.message.into(),
        };
        self.authenticate(headers, query, body, now)
            .map_err(unauthorized)?;
        let kind = BodyKind::detect(content_type(headers).as_deref(), body).ok_or_else(|| {
            ApiError::bad(
                Code::UnsupportedMediaType,
                "send application/json or application/x-www-form-urlencoded",
            )
        })?;
        let payload = parse_body(kind, body).map_err(|m| ApiError::bad(Code::MalformedBody, m))?;
        if is_connection_check(kind, &payload) {
            return Ok(Opened::ConnectionCheck);
        }
        self.authenticate_payload(headers, &payload)
            .map_err(unauthorized)?;
        Ok(Opened::Payload(payload))
    }

    /// The second look of [`Source::authenticate`], at the parsed body: Bitrix24's
    /// application token travels in it, Zadarma's `Signature` header signs three of its
    /// fields (`caller_id`, `called_did`, `call_start`); both are compared in constant
    /// time. The other methods were settled by the first look.
    pub fn authenticate_payload(
        &self,
        headers: &axum::http::HeaderMap,
        payload: &Value,
    ) -> Result<(), AuthFailure> {
        match &self.auth {
            Auth::None
            | Auth::Pull
            | Auth::Token(_)
            | Auth::HeaderToken { .. }
            | Auth::Hmac { .. } => Ok(()),
            Auth::ApplicationToken(expected) => {
                let got = payload
                    .get("auth[application_token]")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if matches_any(got.as_bytes(), std::slice::from_ref(expected)) {
                    Ok(())
                } else {
                    Err(failure(
                        Code::BadApplicationToken,
                        "auth[application_token] is missing or does not match",
                    ))
                }
            }
            Auth::Zadarma(secret) => {
                let field = |k: &str| payload.get(k).and_then(Value::as_str).unwrap_or("");
                let expected = zadarma_signature(
                    secret.expose().as_bytes(),
                    field("caller_id"),
                    field("called_did"),
                    field("call_start"),
                );
                let got = headers.get("signature").and_then(|v| v.to_str().ok());
                use subtle::ConstantTimeEq;
                match got {
                    Some(got) if bool::from(got.trim().as_bytes().ct_eq(expected.as_bytes())) => {
                        Ok(())
                    }
                    _ => Err(failure(
                        Code::BadSignature,
                        "the Signature header is missing or does not match caller_id, called_did and call_start",
                    )),
                }
            }
        }
    }

    /// Whether the intake URL answers Zadarma's `GET ?zd_echo=…` check.
    pub fn answers_zd_echo(&self) -> bool {
        matches!(self.auth, Auth::Zadarma(_))
    }

    /// The source's own event time, when configured and readable: RFC 3339 text or
    /// Unix seconds (number or digits).
    pub fn event_time(&self, payload: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
        let raw = match self.event_time.as_ref()? {
            KeySpec::Json(p) => scalar(payload.pointer(p)?)?,
            KeySpec::Form(alternatives) => form_key(payload, alternatives)?,
            // Refused at start (`from_config`): an event time is one value.
            KeySpec::Header(_) | KeySpec::Content(_) => return None,
        };
        let raw = raw.trim();
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(raw) {
            return Some(t.with_timezone(&chrono::Utc));
        }
        raw.parse::<i64>()
            .ok()
            .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
    }
}

/// The first alternative whose fields are all present, values joined with `:`; with
/// several alternatives the field that matched is named first, so different events
/// about one entity (`leads[add]`, `leads[status]`) stay different keys.
fn form_key(payload: &Value, alternatives: &[Vec<String>]) -> Option<String> {
    alternatives.iter().find_map(|fields| {
        let values: Option<Vec<String>> = fields
            .iter()
            .map(|f| scalar(payload.get(f)?).filter(|v| !v.trim().is_empty()))
            .collect();
        let joined = values?.join(":");
        Some(if alternatives.len() > 1 {
            format!("{}:{joined}", fields.join("+"))
        } else {
            joined
        })
    })
}

/// The SHA-256 (hex) of a delivery's content under a content key: each pointer with its
/// value — text trimmed and its runs of white space made one space, a number or a boolean
/// as written, anything else as compact JSON, a missing or `null` value as empty — so a
/// redelivery of the same submission hashes alike however its JSON is laid out. `None`
/// when every value is empty: there is no content to key by.
pub fn content_hash(payload: &Value, fields: &[String]) -> Option<String> {
    use sha2::Digest;
    let values: Vec<String> = fields
        .iter()
        .map(|p| match payload.pointer(p) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => collapsed(s),
            Some(v) => v.to_string(),
        })
        .collect();
    if values.iter().all(String::is_empty) {
        return None;
    }
    let pairs: Vec<(&String, &String)> = fields.iter().zip(&values).collect();
    let text = serde_json::to_string(&pairs).expect("strings serialize");
    Some(hex::encode(Sha256::digest(text.as_bytes())))
}

/// Text as content keys compare it: white space collapsed and trimmed.
fn collapsed(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The payload a source fingerprints: as sent, except that a content-keyed source's keyed
/// text has its white space collapsed as the key compares it — two deliveries differing
/// only there are the same delivery, not a payload conflict for a person.
pub fn fingerprinted<'a>(key: &KeySpec, payload: &'a Value) -> std::borrow::Cow<'a, Value> {
    let KeySpec::Content(fields) = key else {
        return std::borrow::Cow::Borrowed(payload);
    };
    let mut copy = payload.clone();
    for p in fields {
        if let Some(Value::String(s)) = copy.pointer_mut(p) {
            *s = collapsed(s);
        }
    }
    std::borrow::Cow::Owned(copy)
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub fn sources(configs: &[SourceConfig]) -> Result<HashMap<String, Source>, String> {
    configs
        .iter()
        .map(|c| Source::from_config(c).map(|s| (s.name.clone(), s)))
        .collect()
}

/// How a body was encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Json,
    Form,
}

impl BodyKind {
    /// From the content type; a missing one is sniffed (JSON starts with `{` or `[`).
    pub fn detect(content_type: Option<&str>, body: &[u8]) -> Option<BodyKind> {
        let mime = content_type.map(|c| {
            c.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
        match mime.as_deref() {
            Some("application/json") => Some(BodyKind::Json),
            Some(m) if m.ends_with("+json") => Some(BodyKind::Json),
            Some("application/x-www-form-urlencoded") => Some(BodyKind::Form),
            Some("") | None => {
                let first = body.iter().find(|b| !b.is_ascii_whitespace());
                Some(if matches!(first, Some(b'{') | Some(b'[')) {
                    BodyKind::Json
                } else {
                    BodyKind::Form
                })
            }
            Some(_) => None,
        }
    }
}

/// Parses a body into the payload. Form fields become a JSON object of strings; a field
/// repeated becomes an array of its values in order.
pub fn parse_body(kind: BodyKind, body: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(body)
        .map_err(|e| format!("the body is not valid UTF-8 (at byte {})", e.valid_up_to()))?;
    match kind {
        BodyKind::Json => {
            serde_json::from_str(text).map_err(|e| format!("the body is not valid JSON: {e}"))
        }
        BodyKind::Form => {
            let pairs = parse_form(text)?;
            let mut map = Map::new();
            for (k, v) in pairs {
                match map.get_mut(&k) {
                    None => {
                        map.insert(k, Value::String(v));
                    }
                    Some(Value::Array(a)) => a.push(Value::String(v)),
                    Some(prev) => {
                        let first = prev.take();
                        *prev = Value::Array(vec![first, Value::String(v)]);
                    }
                }
            }
            Ok(Value::Object(map))
        }
    }
}

/// What stands in for a value that is never stored.
pub const REDACTED: &str = "[redacted]";

/// Replaces the values at `pointers` in `payload` with [`REDACTED`]; true if any was
/// there.
pub fn redact(payload: &mut Value, pointers: &[String]) -> bool {
    let mut any = false;
    for p in pointers {
        if let Some(v) = payload.pointer_mut(p) {
            *v = Value::String(REDACTED.into());
            any = true;
        }
    }
    any
}

/// The body to journal for a delivery whose payload had values redacted: the redacted
/// payload written back in the body's own form (form fields, repeated keys repeated;
/// JSON as JSON). Nothing when the body's kind is not known.
pub fn redacted_body(kind: Option<BodyKind>, redacted: &Value) -> Vec<u8> {
    match (kind, redacted) {
        (Some(BodyKind::Form), Value::Object(map)) => {
            let mut pairs: Vec<(&str, &str)> = Vec::new();
            for (k, v) in map {
                match v {
                    Value::Array(items) => {
                        pairs.extend(
                            items
                                .iter()
                                .map(|i| (k.as_str(), i.as_str().unwrap_or_default())),
                        );
                    }
                    other => pairs.push((k, other.as_str().unwrap_or_default())),
                }
            }
            serde_urlencoded::to_string(&pairs)
                .unwrap_or_default()
                .into_bytes()
        }
        (Some(BodyKind::Json), v) => serde_json::to_vec(v).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// `application/x-www-form-urlencoded` pairs, decoded strictly: a field whose
/// percent-decoded bytes are not UTF-8 is refused rather than turned into U+FFFD (which
/// would make `%FF` and `%FE` the same text, so that a real change could pass as a
/// duplicate).
fn parse_form(text: &str) -> Result<Vec<(String, String)>, String> {
    fn decode(part: &str, what: &str) -> Result<String, String> {
        let plus = part.replace('+', " ");
        let bytes: Vec<u8> = percent_encoding::percent_decode_str(&plus).collect();
        String::from_utf8(bytes).map_err(|e| {
            format!(
                "the form {what} at byte {} is not valid UTF-8 once percent-decoded",
                e.utf8_error().valid_up_to()
            )
        })
    }
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(k, "field name")?, decode(v, "value")?))
        })
        .collect()
}

/// Where the payload holds a NUL character (in a value or a field name), as a JSON
/// pointer with the NUL written `\u0000`: PostgreSQL cannot store it, so such a
/// delivery is refused with 400 (and journaled) instead of failing in the database.
pub fn find_nul(payload: &Value) -> Option<String> {
    fn walk(v: &Value, path: &mut String) -> bool {
        match v {
            Value::String(s) => s.contains('\0'),
            Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                let found = walk(item, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            Value::Object(map) => map.iter().any(|(k, item)| {
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                let found = k.contains('\0') || walk(item, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            _ => false,
        }
    }
    let mut path = String::new();
    walk(payload, &mut path).then(|| {
        let shown = path.replace('\0', "\\u0000");
        if shown.is_empty() {
            "/".to_owned()
        } else {
            shown
        }
    })
}

/// Tilda checks a new webhook with a form holding `test=test` and expects a 200.
pub fn is_connection_check(kind: BodyKind, payload: &Value) -> bool {
    kind == BodyKind::Form
        && payload.get("test").and_then(Value::as_str) == Some("test")
        && payload.as_object().is_some_and(|m| m.len() == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn source(key: &str, secret: Option<&str>) -> Source {
        Source {
            name: "s".into(),
            key: KeySpec::parse(key).unwrap(),
            event_time: KeySpec::parse("json:/created_at"),
            ignore: vec![],
            redact: vec![],
            auth: match secret {
                Some(s) => Auth::Hmac {
                    secrets: vec![Secret::new(s)],
                    window: std::time::Duration::from_secs(300),
                },
                None => Auth::None,
            },
            fields: FieldMap::default(),
            reply: Reply::Json,
            on_contact_match: MatchRule::Create,
            content_window: DEFAULT_CONTENT_WINDOW,
        }
    }

    #[test]
    fn a_content_key_s_settings_are_checked_at_start() {
        let window = |extra: &str| {
            let c = crate::config::Config::parse(&format!(
                "[database]\nurl = \"sqlite::memory:\"\n[[source]]\nname = \"form\"\ntoken = \"t\"\n{extra}"
            ))
            .map_err(|e| e.to_string())?;
            sources(&c.sources).map(|m| m["form"].content_window)
        };
        let secs = std::time::Duration::from_secs;
        assert_eq!(window("key = \"content:/phone+/message\""), Ok(secs(3600)));
        assert_eq!(
            window("key = \"content:/phone\"\ncontent_window = \"10m\""),
            Ok(secs(600))
        );
        for (extra, says) in [
            (
                "key = \"content:/phone\"\ncontent_window = \"0s\"",
                "between 1s and 30 days",
            ),
            (
                "key = \"content:/phone\"\ncontent_window = \"31days\"",
                "between 1s and 30 days",
            ),
            (
                "key = \"json:/id\"\ncontent_window = \"10m\"",
                "applies to a content key",
            ),
            (
                "key = \"content:/phone+/sent\"\nignore = [\"/sent\"]",
                "cannot be ignored",
            ),
            (
                "key = \"json:/id\"\nredact = [\"/id\"]",
                "is its key, which is kept as the operation's id",
            ),
            (
                "key = \"form:tranid\"\nredact = [\"/tranid\"]",
                "is its key, which is kept as the operation's id",
            ),
            (
                "key = \"json:/lead/id\"\nredact = [\"/lead\"]",
                "is its key, which is kept as the operation's id",
            ),
            (
                "key = \"content:/lead/phone+/sent\"\nignore = [\"/lead\"]",
                "cannot be ignored",
            ),
            (
                "key = \"json:/id\"\nevent_time = \"content:/at\"",
                "must be json:/pointer or form:field",
            ),
            ("key = \"content:phone\"", "cannot read key"),
        ] {
            let e = window(extra).unwrap_err();
            assert!(e.contains(says), "{extra}: {e}");
        }
    }

    #[test]
    fn a_pulled_source_is_not_keyed_by_its_content() {
        let c = crate::config::Config::parse(
            "[database]\nurl = \"sqlite::memory:\"\n[[source]]\nname = \"bot\"\n\
             preset = \"telegram-updates\"\nkey = \"content:/message/text\"\n\
             [source.pull]\nurl = \"https://api.telegram.org\"\nbot_token = \"1:x\"\n",
        )
        .unwrap();
        let e = sources(&c.sources).unwrap_err();
        assert!(
            e.contains("a pulled source cannot be keyed by its content"),
            "{e}"
        );
    }

    #[test]
    fn content_keys_hash_what_was_said_not_how_it_was_laid_out() {
        let spec = |s: &str| KeySpec::parse(s);
        let fields = |v: &[&str]| KeySpec::Content(v.iter().map(|f| f.to_string()).collect());
        assert_eq!(
            spec("content:/form+/phone"),
            Some(fields(&["/form", "/phone"]))
        );
        for bad in [
            "content:form",
            "content:/a+",
            "content:/a+/a",
            "content:/",
            "content:",
        ] {
            assert_eq!(spec(bad), None, "{bad}");
        }
        let f: Vec<String> = vec!["/phone".into(), "/message".into()];
        let h = |v: Value| content_hash(&v, &f);
        let base = h(json!({"phone": "+7 999", "message": "Call me back"})).unwrap();
        assert_eq!(base.len(), 64);
        // White space and other fields do not count; every keyed value does.
        assert_eq!(
            h(json!({"message": " Call\n me  back", "phone": "+7 999", "x": 1})).unwrap(),
            base
        );
        assert_ne!(
            h(json!({"phone": "+7 999", "message": "Call me later"})).unwrap(),
            base
        );
        assert_ne!(
            h(json!({"phone": "+7 998", "message": "Call me back"})).unwrap(),
            base
        );
        // A value cannot slide into its neighbour.
        assert_ne!(
            h(json!({"phone": "a", "message": "b c"})),
            h(json!({"phone": "a b", "message": "c"}))
        );
        assert_eq!(
            h(json!({"phone": 7, "message": null})),
            h(json!({"phone": 7}))
        );
        assert_eq!(h(json!({"name": "Olga"})), None, "nothing to key by");
        let s = source("content:/phone+/message", None);
        let key = s
            .key(&json!({"phone": "+7 999", "message": "Call me back"}), None)
            .unwrap();
        assert_eq!(key.as_deref(), Some(base.as_str()));
    }

    fn signed(ts: i64, sig: &str) -> axum::http::HeaderMap {
        let mut h = axum::http::HeaderMap::new();
        h.insert(TIMESTAMP_HEADER, ts.to_string().parse().unwrap());
        h.insert(SIGNATURE_HEADER, sig.parse().unwrap());
        h
    }

    #[test]
    fn key_specs() {
        assert_eq!(
            KeySpec::parse("json:/a/b"),
            Some(KeySpec::Json("/a/b".into()))
        );
        assert_eq!(
            KeySpec::parse("header:Idempotency-Key"),
            Some(KeySpec::Header("Idempotency-Key".into()))
        );
        assert_eq!(
            KeySpec::parse("form:tranid"),
            Some(KeySpec::Form(vec![vec!["tranid".into()]]))
        );
        assert_eq!(
            KeySpec::parse("form:a+b|c"),
            Some(KeySpec::Form(vec![
                vec!["a".into(), "b".into()],
                vec!["c".into()]
            ]))
        );
        assert_eq!(KeySpec::parse("form:a||b"), None);
        assert_eq!(KeySpec::parse("json:a"), None);
        assert_eq!(KeySpec::parse("form:"), None);
        assert_eq!(KeySpec::parse("query:x"), None);
    }

    #[test]
    fn keys_are_read_from_json_forms_and_headers() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("idempotency-key", " abc ".parse().unwrap());
        let p = json!({"submission_id": 42, "nested": {"id": "x"}, "blank": "  ", "tranid": "t1"});
        assert_eq!(
            source("json:/submission_id", None).key(&p, Some(&headers)),
            Ok(Some("42".into()))
        );
        assert_eq!(
            source("json:/nested/id", None).key(&p, Some(&headers)),
            Ok(Some("x".into()))
        );
        assert_eq!(
            source("json:/blank", None).key(&p, Some(&headers)),
            Ok(None)
        );
        assert_eq!(
            source("json:/nested", None).key(&p, Some(&headers)),
            Ok(None)
        );
        assert_eq!(
            source("json:/missing", None).key(&p, Some(&headers)),
            Ok(None)
        );
        assert_eq!(
            source("header:Idempotency-Key", None).key(&p, Some(&headers)),
            Ok(Some("abc".into()))
        );
        assert_eq!(
            source("form:tranid", None).key(&p, Some(&headers)),
            Ok(Some("t1".into()))
        );
        // A pulled event has no headers: its header key is missing.
        assert_eq!(
            source("header:Idempotency-Key", None).key(&p, None),
            Ok(None)
        );
        // The draft's structured-field string, also at intake; any other header as sent.
        headers.insert("idempotency-key", "\"quoted key\"".parse().unwrap());
        headers.insert("x-request-id", "\"as sent\"".parse().unwrap());
        assert_eq!(
            source("header:Idempotency-Key", None).key(&p, Some(&headers)),
            Ok(Some("quoted key".into()))
        );
        assert_eq!(
            source("header:X-Request-Id", None).key(&p, Some(&headers)),
            Ok(Some("\"as sent\"".into()))
        );
        headers.insert("idempotency-key", "\"unterminated".parse().unwrap());
        assert!(source("header:idempotency-key", None)
            .key(&p, Some(&headers))
            .is_err());
    }

    #[test]
    fn event_times_are_read_as_rfc3339_or_unix_seconds() {
        let s = source("json:/id", None);
        let t = s
            .event_time(&json!({"created_at": "2025-01-02T03:04:05+03:00"}))
            .unwrap();
        assert_eq!(t.to_rfc3339(), "2025-01-02T00:04:05+00:00");
        let t = s.event_time(&json!({"created_at": 1700000000})).unwrap();
        assert_eq!(t.timestamp(), 1_700_000_000);
        assert_eq!(s.event_time(&json!({"created_at": "yesterday"})), None);
        assert_eq!(s.event_time(&json!({})), None);
    }

    #[test]
    fn composite_and_alternative_form_keys() {
        let h = axum::http::HeaderMap::new();
        let b24 = json!({"event": "ONCRMLEADADD", "data[FIELDS][ID]": "42", "ts": "1700000000"});
        assert_eq!(
            source("form:event+data[FIELDS][ID]+ts", None).key(&b24, Some(&h)),
            Ok(Some("ONCRMLEADADD:42:1700000000".into()))
        );
        let amo = json!({"leads[status][0][id]": "9774766", "account[id]": "1"});
        let s = source("form:leads[add][0][id]|leads[status][0][id]", None);
        assert_eq!(
            s.key(&amo, Some(&h)),
            Ok(Some("leads[status][0][id]:9774766".into()))
        );
        assert_eq!(s.key(&json!({"account[id]": "1"}), Some(&h)), Ok(None));
        assert_eq!(
            source("form:a+b", None).key(&json!({"a": "1", "b": " "}), Some(&h)),
            Ok(None)
        );
    }

    #[test]
    fn zadarma_signatures_are_base64_of_the_hex_hmac() {
        // Computed independently: base64(hex(HMAC-SHA1(key, caller+called+start))).
        assert_eq!(
            zadarma_signature(
                b"zd-secret",
                "+79161234567",
                "74951112233",
                "2026-12-01 10:00:00"
            ),
            "NjEwMTZhODI5MWIyYjE3MDZlNjU5M2NhYWE2OWY3MTJlNjEyNmQ5NA=="
        );
        let mut s = source("form:pbx_call_id", None);
        let ok = |s: &Source, h: &axum::http::HeaderMap, p: &Value| {
            s.authenticate_payload(h, p).map_err(|f| f.code.as_str())
        };
        assert_eq!(ok(&s, &axum::http::HeaderMap::new(), &json!({})), Ok(()));
        s.auth = Auth::Zadarma(Secret::new("zd-secret"));
        let call = json!({"caller_id": "+79161234567", "called_did": "74951112233",
                          "call_start": "2026-12-01 10:00:00", "pbx_call_id": "in_1"});
        let mut h = axum::http::HeaderMap::new();
        assert_eq!(ok(&s, &h, &call), Err("bad_signature"), "no signature");
        h.insert(
            "signature",
            "NjEwMTZhODI5MWIyYjE3MDZlNjU5M2NhYWE2OWY3MTJlNjEyNmQ5NA=="
                .parse()
                .unwrap(),
        );
        assert_eq!(ok(&s, &h, &call), Ok(()));
        let mut other = call.clone();
        other["caller_id"] = json!("+79160000000");
        assert_eq!(
            ok(&s, &h, &other),
            Err("bad_signature"),
            "the caller is signed"
        );
    }

    #[test]
    fn redacted_values_are_replaced_and_written_back_in_the_bodys_form() {
        let form = b"a=1&auth%5Baccess_token%5D=SECRET&b=x&b=y";
        let mut payload = parse_body(BodyKind::Form, form).unwrap();
        let pointers = vec!["/auth[access_token]".to_owned(), "/absent".to_owned()];
        assert!(redact(&mut payload, &pointers));
        let body = String::from_utf8(redacted_body(Some(BodyKind::Form), &payload)).unwrap();
        assert!(!body.contains("SECRET"), "{body}");
        let back = parse_body(BodyKind::Form, body.as_bytes()).unwrap();
        assert_eq!(back, payload, "the same fields, repeated keys repeated");
        assert_eq!(back["auth[access_token]"], REDACTED);
        let mut json = json!({"token": "SECRET", "n": 1});
        assert!(redact(&mut json, &["/token".to_owned()]));
        assert_eq!(
            redacted_body(Some(BodyKind::Json), &json),
            br#"{"n":1,"token":"[redacted]"}"#
        );
        assert!(
            redacted_body(None, &json).is_empty(),
            "unknown kind: nothing kept"
        );
        assert!(!redact(&mut json!({"x": 1}), &pointers));
    }

    #[test]
    fn application_tokens_are_checked() {
        let mut s = source("form:x", None);
        let h = axum::http::HeaderMap::new();
        let ok = |s: &Source, p: Value| s.authenticate_payload(&h, &p).map_err(|f| f.code.as_str());
        assert_eq!(ok(&s, json!({})), Ok(()));
        s.auth = Auth::ApplicationToken(Secret::new("tok"));
        assert_eq!(ok(&s, json!({"auth[application_token]": "tok"})), Ok(()));
        for bad in [json!({"auth[application_token]": "bad"}), json!({})] {
            assert_eq!(ok(&s, bad), Err("bad_application_token"));
        }
    }

    #[test]
    fn signatures_cover_the_timestamp_and_the_body_within_the_window() {
        let s = source("json:/id", Some("k"));
        let body = br#"{"id":1}"#;
        let now = chrono::Utc::now();
        let ts = now.timestamp();
        let good = sign(b"k", ts, body);
        let check = |h: &axum::http::HeaderMap, b: &[u8]| s.authenticate(h, None, b, now);
        assert_eq!(check(&signed(ts, &good), body), Ok(()));
        let code = |r: Result<(), AuthFailure>| r.unwrap_err().code.as_str();
        assert_eq!(
            code(check(&signed(ts, &good), b"{\"id\":2}")),
            "bad_signature"
        );
        // The timestamp is signed: moving it breaks the signature.
        assert_eq!(code(check(&signed(ts + 1, &good), body)), "bad_signature");
        // A captured delivery replayed later than the window is refused even though
        // its signature is right.
        let old = ts - 301;
        assert_eq!(
            code(check(&signed(old, &sign(b"k", old, body)), body)),
            "signature_expired"
        );
        let future = ts + 301;
        assert_eq!(
            code(check(&signed(future, &sign(b"k", future, body)), body)),
            "signature_expired"
        );
        assert_eq!(
            code(check(&axum::http::HeaderMap::new(), body)),
            "missing_signature"
        );
        assert_eq!(code(check(&signed(ts, "sha256=zz"), body)), "bad_signature");
        assert_eq!(code(check(&signed(ts, "md5=00"), body)), "bad_signature");
        assert_eq!(
            code(check(&signed(ts, &sign(b"other", ts, body)), body)),
            "bad_signature"
        );
    }

    #[test]
    fn two_secrets_are_accepted_while_rotating() {
        let mut s = source("json:/id", None);
        s.auth = Auth::Hmac {
            secrets: vec![Secret::new("new"), Secret::new("old")],
            window: std::time::Duration::from_secs(60),
        };
        let now = chrono::Utc::now();
        let ts = now.timestamp();
        for key in [&b"new"[..], b"old"] {
            let h = signed(ts, &sign(key, ts, b"x"));
            assert_eq!(s.authenticate(&h, None, b"x", now), Ok(()));
        }
        let h = signed(ts, &sign(b"older", ts, b"x"));
        assert!(s.authenticate(&h, None, b"x", now).is_err());
    }

    #[test]
    fn tokens_come_in_a_header_or_the_query() {
        let mut s = source("form:tranid", None);
        s.auth = Auth::Token(vec![Secret::new("t0k"), Secret::new("prev")]);
        let now = chrono::Utc::now();
        let none = axum::http::HeaderMap::new();
        let mut header = axum::http::HeaderMap::new();
        header.insert(TOKEN_HEADER, "t0k".parse().unwrap());
        assert_eq!(s.authenticate(&header, None, b"", now), Ok(()));
        assert_eq!(s.authenticate(&none, Some("token=t0k"), b"", now), Ok(()));
        assert_eq!(
            s.authenticate(&none, Some("a=1&token=prev"), b"", now),
            Ok(())
        );
        let code = |r: Result<(), AuthFailure>| r.unwrap_err().code.as_str();
        assert_eq!(code(s.authenticate(&none, None, b"", now)), "missing_token");
        assert_eq!(
            code(s.authenticate(&none, Some("token=t0"), b"", now)),
            "bad_token"
        );
        assert_eq!(
            code(s.authenticate(&none, Some("token="), b"", now)),
            "bad_token"
        );
        assert_eq!(
            code(s.authenticate(&none, Some("tok=t0k"), b"", now)),
            "missing_token"
        );
    }

    #[test]
    fn bodies_are_parsed_by_kind() {
        assert_eq!(
            BodyKind::detect(Some("application/json; charset=utf-8"), b""),
            Some(BodyKind::Json)
        );
        assert_eq!(
            BodyKind::detect(Some("application/x-www-form-urlencoded"), b""),
            Some(BodyKind::Form)
        );
        assert_eq!(BodyKind::detect(None, b"  {\"a\":1}"), Some(BodyKind::Json));
        assert_eq!(BodyKind::detect(None, b"a=1"), Some(BodyKind::Form));
        assert_eq!(BodyKind::detect(Some("text/xml"), b"<a/>"), None);
        let form = parse_body(
            BodyKind::Form,
            b"Name=%D0%98%D0%B2%D0%B0%D0%BD&tranid=1&tag=a&tag=b",
        )
        .unwrap();
        assert_eq!(
            form,
            json!({"Name": "Иван", "tranid": "1", "tag": ["a", "b"]})
        );
        assert!(parse_body(BodyKind::Json, b"{nope")
            .unwrap_err()
            .contains("not valid JSON"));
        assert!(parse_body(BodyKind::Json, &[0xff, 0xfe])
            .unwrap_err()
            .contains("UTF-8"));
        // Percent-decoded bytes must be UTF-8: %FF and %FE are not turned into the same
        // replacement character.
        for bad in [&b"name=%FF"[..], b"name=%FE", b"%C3=x", b"a=%D0"] {
            let err = parse_body(BodyKind::Form, bad).unwrap_err();
            assert!(err.contains("not valid UTF-8"), "{err}");
        }
        assert_eq!(
            parse_body(BodyKind::Form, b"a+b=c+d%2B&&e&=f").unwrap(),
            json!({"a b": "c d+", "e": "", "": "f"})
        );
        assert!(is_connection_check(
            BodyKind::Form,
            &json!({"test": "test"})
        ));
        assert!(!is_connection_check(
            BodyKind::Form,
            &json!({"test": "test", "tranid": "1"})
        ));
        assert!(!is_connection_check(
            BodyKind::Json,
            &json!({"test": "test"})
        ));
    }

    #[test]
    fn nul_characters_are_found_in_values_and_names() {
        assert_eq!(find_nul(&json!({"a": "x", "b": [1, "y"]})), None);
        assert_eq!(
            find_nul(&json!({"a": {"b": ["ok", "x\0"]}})),
            Some("/a/b/1".into())
        );
        assert_eq!(find_nul(&json!({"k\0": 1})), Some("/k\\u0000".into()));
        assert_eq!(find_nul(&json!("\0")), Some("/".into()));
        let form = parse_body(BodyKind::Form, b"name=a%00b").unwrap();
        assert_eq!(find_nul(&form), Some("/name".into()));
    }
}
