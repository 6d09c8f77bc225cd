//! Bitrix24 over an incoming webhook (`https://{portal}/rest/{user}/{secret}/`).
//!
//! Bitrix24 has no idempotent create (`ORIGIN_ID` is not unique-enforced, and the
//! REST 3.0 `Idempotency-Key` does not cover CRM methods), so the adapter stamps every
//! entity with `ORIGINATOR_ID = "leadgate"` and `ORIGIN_ID = <operation_id>` and
//! finds it again with an exact-match list filter. That list is authoritative: a
//! create whose answer was lost is either in it or was never executed.

use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, LOCATION, RETRY_AFTER};
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{
    classify_transport, clean_message, ConfigError, Crm, CrmError, Exchange, Lead, Lookup,
};
use crate::domain::ErrorClass;

/// The connector name: what gets paused when the credentials stop working.
pub const CONNECTOR: &str = "bitrix24";
/// The `ORIGINATOR_ID` of every entity Leadgate creates: the external-key namespace.
pub const ORIGINATOR_ID: &str = "leadgate";
/// Bitrix24 cuts requests off after 60 s; waiting longer is pointless.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// A portal whose domain changed answers 302; follow at most this many hops.
const MAX_REDIRECTS: usize = 3;
/// A `Retry-After` beyond this is treated as this: the worker's own stop condition
/// should take over rather than parking a lead for days on one header.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Which CRM entity a lead becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entity {
    #[default]
    Lead,
    Deal,
}

impl Entity {
    fn add_method(self) -> &'static str {
        match self {
            Entity::Lead => "crm.lead.add",
            Entity::Deal => "crm.deal.add",
        }
    }

    fn list_method(self) -> &'static str {
        match self {
            Entity::Lead => "crm.lead.list",
            Entity::Deal => "crm.deal.list",
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Entity::Lead => "lead",
            Entity::Deal => "deal",
        }
    }
}

/// A Bitrix24 connector.
pub struct Bitrix24 {
    /// Ends with `/`; holds the secret, so it is never logged or put in a message.
    webhook_url: String,
    /// The secret path segment, scrubbed from every stored text as a second line of
    /// defence.
    secret: String,
    entity: Entity,
    timeout: Duration,
    client: reqwest::Client,
}

impl std::fmt::Debug for Bitrix24 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bitrix24")
            .field("webhook_url", &"<secret>")
            .field("entity", &self.entity)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Bitrix24 {
    /// Builds a connector for the webhook `webhook_url` (with or without the trailing
    /// `/`). `timeout` bounds each HTTP exchange; it is capped at Bitrix24's own 60 s.
    pub fn new(webhook_url: &str, entity: Entity, timeout: Duration) -> Result<Self, ConfigError> {
        let mut webhook_url = webhook_url.trim().to_owned();
        if !webhook_url.ends_with('/') {
            webhook_url.push('/');
        }
        let parsed = reqwest::Url::parse(&webhook_url)
            .map_err(|e| ConfigError(format!("the Bitrix24 webhook URL is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(ConfigError(
                "the Bitrix24 webhook URL must be an http(s) URL with a host".into(),
            ));
        }
        let secret = parsed
            .path_segments()
            .and_then(|mut segs| segs.rfind(|s| !s.is_empty()))
            .unwrap_or_default()
            .to_owned();
        let timeout = timeout.min(MAX_TIMEOUT);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            // A redirect of a POST would become a GET without the body; we repeat the
            // POST ourselves (see `post`).
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ConfigError(format!("cannot build the HTTP client: {e}")))?;
        Ok(Bitrix24 {
            webhook_url,
            secret,
            entity,
            timeout,
            client,
        })
    }

    pub fn entity(&self) -> Entity {
        self.entity
    }

    /// The `fields` of an add call. Deals have no PHONE/EMAIL (Bitrix24 wants a
    /// contact created and linked first); until contacts are supported the contact
    /// data goes into COMMENTS so the manager still sees it.
    fn fields(&self, lead: &Lead) -> Value {
        let mut fields = serde_json::Map::new();
        fields.insert(
            "TITLE".into(),
            json!(lead
                .title
                .clone()
                .unwrap_or_else(|| format!("Lead {}", lead.operation_id))),
        );
        fields.insert("ORIGINATOR_ID".into(), json!(ORIGINATOR_ID));
        fields.insert("ORIGIN_ID".into(), json!(lead.operation_id));
        fields.insert("SOURCE_DESCRIPTION".into(), json!(lead.source));
        match self.entity {
            Entity::Lead => {
                if let Some(name) = &lead.name {
                    fields.insert("NAME".into(), json!(name));
                }
                if let Some(phone) = &lead.phone {
                    fields.insert(
                        "PHONE".into(),
                        json!([{"VALUE": phone, "VALUE_TYPE": "WORK"}]),
                    );
                }
                if let Some(email) = &lead.email {
                    fields.insert(
                        "EMAIL".into(),
                        json!([{"VALUE": email, "VALUE_TYPE": "WORK"}]),
                    );
                }
                if let Some(comment) = &lead.comment {
                    fields.insert("COMMENTS".into(), json!(comment));
                }
            }
            Entity::Deal => {
                let lines: Vec<String> = [
                    ("Name", &lead.name),
                    ("Phone", &lead.phone),
                    ("Email", &lead.email),
                    ("Comment", &lead.comment),
                ]
                .into_iter()
                .filter_map(|(label, v)| v.as_ref().map(|v| format!("{label}: {v}")))
                .collect();
                if !lines.is_empty() {
                    fields.insert("COMMENTS".into(), json!(lines.join("\n")));
                }
            }
        }
        Value::Object(fields)
    }

    /// POSTs `body` to `method` and returns the `result` of a success envelope.
    ///
    /// The response summary gets `status`, `duration_ms` and, on failure, `error`
    /// (Bitrix24's code) and `class`.
    async fn post(
        &self,
        method: &str,
        body: &Value,
        operation_id: &str,
        redact: &[&str],
        summary: &mut serde_json::Map<String, Value>,
    ) -> Result<Value, CrmError> {
        let mut redact = redact.to_vec();
        redact.push(&self.webhook_url);
        redact.push(&self.secret);
        let started = Instant::now();
        let mut url = format!("{}{method}.json", self.webhook_url);
        let mut hops = 0;
        let result = loop {
            tracing::debug!(operation_id, method, hops, "bitrix24 call");
            let resp = match self.client.post(&url).json(body).send().await {
                Ok(resp) => resp,
                Err(e) => break Err(classify_transport(CONNECTOR, method, e, &redact)),
            };
            let status = resp.status();
            summary.insert("status".into(), json!(status.as_u16()));
            if status.is_redirection() && hops < MAX_REDIRECTS {
                // The portal moved to another domain: nothing was executed here, so
                // repeating the same POST at the new address is safe.
                if let Some(next) = redirect_target(&url, resp.headers()) {
                    hops += 1;
                    url = next;
                    continue;
                }
            }
            let headers = resp.headers().clone();
            let bytes = match resp.bytes().await {
                Ok(b) => b,
                Err(e) => break Err(classify_transport(CONNECTOR, method, e, &redact)),
            };
            break interpret(method, status, &headers, &bytes, &redact);
        };
        summary.insert(
            "duration_ms".into(),
            json!(started.elapsed().as_millis() as u64),
        );
        if hops > 0 {
            summary.insert("redirects".into(), json!(hops));
        }
        if let Err(e) = &result {
            summary.insert("class".into(), json!(e.class));
            summary.insert("message".into(), json!(e.message));
            tracing::debug!(operation_id, method, class = %e.class, "bitrix24 call failed");
        }
        result
    }
}

fn redirect_target(current: &str, headers: &HeaderMap) -> Option<String> {
    let location = headers.get(LOCATION)?.to_str().ok()?;
    let base = reqwest::Url::parse(current).ok()?;
    Some(base.join(location).ok()?.to_string())
}

/// Bitrix24 error codes and what they mean for Leadgate, from `shared/crm/FACTS.md`.
/// A known code decides the class whatever the HTTP status; unknown codes fall back to
/// the status (see [`classify`]).
const ERROR_CODES: &[(&str, ErrorClass)] = &[
    // Rejected before execution.
    ("QUERY_LIMIT_EXCEEDED", ErrorClass::RateLimited),
    ("OPERATION_TIME_LIMIT", ErrorClass::RateLimited),
    // "Terminal for the connector — needs a person (support)": retrying cannot help
    // and every lead must stay queued, which is exactly what pausing the connector
    // does, so it is classed as Auth.
    ("OVERLOAD_LIMIT", ErrorClass::Auth),
    ("PORTAL_DELETED", ErrorClass::Auth),
    // Credentials: a webhook cannot refresh itself, so pause the connector.
    ("expired_token", ErrorClass::Auth),
    ("invalid_token", ErrorClass::Auth),
    ("NO_AUTH_FOUND", ErrorClass::Auth),
    ("insufficient_scope", ErrorClass::Auth),
    ("INVALID_CREDENTIALS", ErrorClass::Auth),
    ("ACCESS_DENIED", ErrorClass::Auth),
    ("user_access_error", ErrorClass::Auth),
    // A wrong method name is configuration: terminal, no retry.
    ("ERROR_METHOD_NOT_FOUND", ErrorClass::Validation),
    // The portal failed while executing: the entity may exist — reconcile first.
    ("INTERNAL_SERVER_ERROR", ErrorClass::Uncertain),
    ("ERROR_UNEXPECTED_ANSWER", ErrorClass::Uncertain),
];

/// The one classification of a Bitrix24 answer that is not a success.
///
/// `code` is Bitrix24's `error` ("" for most CRM validation errors, `None` when the
/// body was not a JSON error). A known code wins; otherwise the status decides:
/// 400/404/other 4xx → Validation (refused, terminal), 401/402/403 → Auth, 408 →
/// NotSent (the server gave up before reading the request), 429 → RateLimited,
/// 3xx (a redirect we could not follow) → Auth (the webhook URL needs a person),
/// 5xx and anything else → Uncertain (the create may have been executed).
pub fn classify(status: StatusCode, code: Option<&str>) -> ErrorClass {
    if let Some(code) = code.filter(|c| !c.is_empty()) {
        if let Some((_, class)) = ERROR_CODES
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(code))
        {
            return *class;
        }
    }
    match status.as_u16() {
        300..=399 => ErrorClass::Auth,
        401..=403 => ErrorClass::Auth,
        408 => ErrorClass::NotSent,
        429 => ErrorClass::RateLimited,
        400..=499 => ErrorClass::Validation,
        _ => ErrorClass::Uncertain,
    }
}

/// Turns a complete HTTP answer into the envelope's `result` or a classified error.
fn interpret(
    method: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    redact: &[&str],
) -> Result<Value, CrmError> {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let code = json
        .as_ref()
        .and_then(|j| j.get("error"))
        .and_then(Value::as_str);
    if status.is_success() && code.is_none_or(str::is_empty) {
        if let Some(result) = json.as_ref().and_then(|j| j.get("result")) {
            return Ok(result.clone());
        }
    }
    // A 2xx without a `result` (or with an unknown code) falls through to Uncertain:
    // we cannot know what was executed.
    let class = classify(status, code);
    let (code_part, desc) = match &json {
        Some(j) if j.get("error").is_some() => (
            code.unwrap_or_default().to_owned(),
            j.get("error_description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ),
        Some(_) if status.is_success() => (
            String::new(),
            "unexpected answer without a result".to_owned(),
        ),
        Some(_) => (String::new(), "unexpected JSON answer".to_owned()),
        None if body.iter().all(u8::is_ascii_whitespace) => {
            (String::new(), "(empty body)".to_owned())
        }
        None => (
            String::new(),
            format!("(not JSON) {}", String::from_utf8_lossy(body)),
        ),
    };
    // `code` may be empty: "HTTP 400 : text" keeps the place of the code visible.
    let message = clean_message(
        &format!(
            "{CONNECTOR} {method}: HTTP {} {code_part}: {desc}",
            status.as_u16()
        ),
        redact,
    );
    let retry_after = if matches!(status.as_u16(), 429 | 503) || class == ErrorClass::RateLimited {
        retry_after(headers, json.as_ref())
    } else {
        None
    };
    Err(CrmError {
        class,
        message,
        retry_after,
    })
}

/// The wait the portal asked for: `Retry-After` (seconds or an HTTP date), else the
/// envelope's `time.operating_reset_at` (when the method's time budget resets).
fn retry_after(headers: &HeaderMap, json: Option<&Value>) -> Option<Duration> {
    let from_header = headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let v = v.trim();
            v.parse::<u64>().ok().map(Duration::from_secs).or_else(|| {
                let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
                let secs = (at.timestamp() - chrono::Utc::now().timestamp()).max(0);
                Some(Duration::from_secs(secs as u64))
            })
        });
    let from_body = || {
        let reset_at = json?.pointer("/time/operating_reset_at")?.as_f64()?;
        let secs = reset_at - chrono::Utc::now().timestamp() as f64;
        Some(Duration::from_secs_f64(secs.max(0.0)))
    };
    from_header
        .or_else(from_body)
        .map(|d| d.min(MAX_RETRY_AFTER))
}

/// The id in an add answer: Bitrix24 sends an integer, some proxies a string.
fn id_of(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) if n.as_u64().is_some_and(|n| n > 0) => Some(n.to_string()),
        Value::String(s)
            if !s.trim().is_empty() && s.trim().bytes().all(|b| b.is_ascii_digit()) =>
        {
            Some(s.trim().to_owned())
        }
        _ => None,
    }
}

#[async_trait::async_trait]
impl Crm for Bitrix24 {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    fn lookup_is_authoritative(&self) -> bool {
        true
    }

    async fn create(&self, lead: &Lead) -> (Result<String, CrmError>, Exchange) {
        let method = self.entity.add_method();
        let fields = self.fields(lead);
        let body = json!({"fields": fields, "params": {"REGISTER_SONET_EVENT": "N"}});
        let field_names: Vec<&String> = fields
            .as_object()
            .map(|f| f.keys().collect())
            .unwrap_or_default();
        let request = json!({
            "connector": CONNECTOR,
            "method": method,
            "entity": self.entity.as_str(),
            "originator_id": ORIGINATOR_ID,
            "origin_id": lead.operation_id,
            "fields": field_names,
        });
        let mut summary = serde_json::Map::new();
        let result = self
            .post(
                method,
                &body,
                &lead.operation_id,
                &lead.contact_values(),
                &mut summary,
            )
            .await
            .and_then(|result| {
                id_of(&result).ok_or_else(|| {
                    CrmError::new(
                        ErrorClass::Uncertain,
                        format!("{CONNECTOR} {method}: the answer has no entity id"),
                    )
                })
            });
        match &result {
            Ok(id) => {
                summary.insert("id".into(), json!(id));
            }
            Err(e) if !summary.contains_key("class") => {
                summary.insert("class".into(), json!(e.class));
                summary.insert("message".into(), json!(e.message));
            }
            Err(_) => {}
        }
        let exchange = Exchange {
            request,
            response: Value::Object(summary),
        };
        (result, exchange)
    }

    async fn find(&self, operation_id: &str) -> (Result<Lookup, CrmError>, Exchange) {
        let method = self.entity.list_method();
        let body = json!({
            "filter": {"=ORIGINATOR_ID": ORIGINATOR_ID, "=ORIGIN_ID": operation_id},
            "select": ["ID"],
            // -1: skip counting `total`, which is cheaper; one page of 50 is plenty to
            // tell 0, 1 and "several".
            "start": -1,
        });
        let request = json!({
            "connector": CONNECTOR,
            "method": method,
            "entity": self.entity.as_str(),
            "originator_id": ORIGINATOR_ID,
            "origin_id": operation_id,
        });
        let mut summary = serde_json::Map::new();
        let result = self
            .post(method, &body, operation_id, &[], &mut summary)
            .await
            .and_then(|result| {
                let rows = result.as_array().ok_or_else(|| {
                    CrmError::new(
                        ErrorClass::Uncertain,
                        format!("{CONNECTOR} {method}: the answer is not a list"),
                    )
                })?;
                let ids: Option<Vec<String>> = rows
                    .iter()
                    .map(|row| row.get("ID").and_then(id_of))
                    .collect();
                ids.map(Lookup::from_ids).ok_or_else(|| {
                    CrmError::new(
                        ErrorClass::Uncertain,
                        format!("{CONNECTOR} {method}: a row has no ID"),
                    )
                })
            });
        match &result {
            Ok(lookup) => {
                let ids = match lookup {
                    Lookup::NotFound => vec![],
                    Lookup::One(id) => vec![id.clone()],
                    Lookup::Many(ids) => ids.clone(),
                };
                summary.insert("found".into(), json!(ids.len()));
                summary.insert("ids".into(), json!(ids));
            }
            Err(e) if !summary.contains_key("class") => {
                summary.insert("class".into(), json!(e.class));
                summary.insert("message".into(), json!(e.message));
            }
            Err(_) => {}
        }
        let exchange = Exchange {
            request,
            response: Value::Object(summary),
        };
        (result, exchange)
    }
}
