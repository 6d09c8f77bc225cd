//! A home-grown CRM over HTTP, described by configuration instead of code.
//!
//! ```toml
//! [crm]
//! kind = "http"
//! create_url = "https://crm.example/api/leads"
//! method = "POST"                                   # default
//! body = '''{"external_id": "{{operation_id}}", "name": "{{name}}",
//!           "phone": "{{phone}}", "email": "{{email}}", "note": "{{comment}}"}'''
//! id_pointer = "/data/id"                           # where the new id is in the answer
//! lookup_url = "https://crm.example/api/leads?external_id={{operation_id}}"
//! lookup_ids_pointer = "/items"                     # the array of matches ("" = the answer)
//! lookup_id_pointer = "/id"                         # the id in each match (default /id)
//! lookup_authoritative = true                       # "not found" proves nothing was created
//! update_url = "https://crm.example/api/leads/{{crm_id}}"   # optional: Keep original, update CRM
//! update_method = "PATCH"                           # default
//! update_body = '''{"name": "{{name}}", "phone": "{{phone}}", "note": "{{comment}}"}'''
//! timeout = "10s"
//! [crm.headers]
//! Authorization = "env:MYCRM_AUTH"                  # read from the environment, never logged
//! [crm.errors]
//! 409 = "validation"
//! ```
//!
//! The body template must be JSON once its placeholders are read as strings: a
//! placeholder may stand alone (`"name": {{name}}`) or sit inside a string
//! (`"name": "{{name}}"`, `"title": "Lead {{operation_id}}"`). Values are inserted as
//! JSON strings, so quotes and newlines in a lead cannot break the body. A placeholder
//! that is a whole value becomes `null` when the lead has no such field; inside a longer
//! string it becomes empty. Placeholders: `operation_id`, `name`, `phone`, `email`,
//! `comment`, `title`, `source`. In `lookup_url`, `{{operation_id}}` is URL-encoded.
//!
//! An update (*Keep original, update CRM*) renders `update_body` with the lead as it
//! should stand now (the lead as created with the later delivery's changes laid over
//! it), so sending it twice sets the same values; in `update_url`, `{{crm_id}}` (the only
//! placeholder there) is URL-encoded. Without `update_url` the connector cannot update.
//!
//! Steps (optional): entities created before the lead, each by a templated request whose
//! extracted id the later templates use as `{{<name>_id}}`, each committed by the worker
//! before the next call (a recovery point per step):
//!
//! ```toml
//! [[crm.steps]]
//! name = "contact"                                  # the next templates get {{contact_id}}
//! url = "https://crm.example/api/contacts"
//! body = '{"external_id": "{{operation_id}}", "phone": "{{phone}}"}'
//! id_pointer = "/id"
//! lookup_url = "https://crm.example/api/contacts?external_id={{operation_id}}"
//! lookup_ids_pointer = "/items"
//! ```
//!
//! Each step must carry the operation's key and be found by it (`lookup_url`): after an
//! attempt that may have sent it, the step is looked up before it is created again.
//!
//! Default classification of a non-2xx answer (a `[crm.errors]` entry overrides it):
//! 429 → rate_limited (honours `Retry-After`); 408 → uncertain (a timeout is an unknown
//! outcome: looked up by key); 401/402/403/405, a 404 of the create URL, an HTML page
//! and 3xx (a redirect is not followed) → auth: the connector's request is refused, it
//! pauses until a person fixes it; a 404 of `update_url` (the entity was deleted),
//! 400/422 and other 4xx → validation; 5xx and anything else → uncertain. A 404 of
//! `lookup_url` is "not found".

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use serde_json::{json, Map, Value};

use super::rate::{self, RateLimiter};
use super::{
    classify_transport, clean_message, note_error, ConfigError, Crm, CrmError, EntityUpdate,
    Exchange, Lead, Lookup,
};
use crate::domain::ErrorClass;
use crate::domain::Secret;

/// The connector name: what gets paused when the credentials stop working.
pub const CONNECTOR: &str = "http";
/// The placeholders a template may use.
pub const PLACEHOLDERS: &[&str] = &[
    "operation_id",
    "name",
    "phone",
    "email",
    "comment",
    "title",
    "source",
];

/// `[crm] kind = "http"`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    pub create_url: String,
    #[serde(default = "default_method")]
    pub method: String,
    /// Header values; `env:VAR` reads the value from the environment variable VAR.
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// The JSON body template (see the module documentation).
    pub body: String,
    /// RFC 6901 pointer to the new entity's id in the create answer ("" = the answer).
    pub id_pointer: String,
    /// GET URL template for the lookup by `{{operation_id}}`; without it nothing can
    /// be reconciled and every uncertain create goes to a person.
    #[serde(default)]
    pub lookup_url: Option<String>,
    /// Pointer to the array of matches in the lookup answer ("" = the answer).
    #[serde(default)]
    pub lookup_ids_pointer: String,
    /// Pointer to the id inside each match (default: the match itself when it is a
    /// number or string, else `/id`).
    #[serde(default)]
    pub lookup_id_pointer: Option<String>,
    /// Whether an empty lookup proves that nothing was created.
    #[serde(default)]
    pub lookup_authoritative: bool,
    /// URL template of an update of entity `{{crm_id}}`; without it nothing is updated.
    #[serde(default)]
    pub update_url: Option<String>,
    #[serde(default = "default_update_method")]
    pub update_method: String,
    /// The JSON body template of an update (the create's placeholders).
    #[serde(default)]
    pub update_body: Option<String>,
    /// Status code → error class, overriding the defaults.
    #[serde(default)]
    pub errors: BTreeMap<String, ErrorClass>,
    /// The CRM's page of an entity, `{id}` replaced by its id, for the console's "open in
    /// CRM" (published to the operations database; never put a secret here).
    #[serde(default)]
    pub web_entity_url: Option<String>,
    /// The CRM's list searched for `{q}` (a phone, e-mail or name), for "find in CRM".
    #[serde(default)]
    pub web_search_url: Option<String>,
    /// Requests per second for all calls of this process to this CRM (no limit if unset).
    #[serde(default)]
    pub rate_limit: Option<f64>,
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// How long after an unknown outcome a create may still land on this CRM (default
    /// 120 s): set it to at least the server's own request time limit.
    #[serde(default, with = "humantime_serde")]
    pub settle: Option<Duration>,
    /// Entities created before the lead, in order (see the module documentation).
    #[serde(default)]
    pub steps: Vec<HttpStep>,
}

/// `[[crm.steps]]`: one entity created before the lead.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpStep {
    /// Lower-case letters, digits and `_`; later templates use `{{<name>_id}}`.
    pub name: String,
    pub url: String,
    #[serde(default = "default_method")]
    pub method: String,
    /// The JSON body template: the lead's placeholders and earlier steps' ids.
    pub body: String,
    /// Pointer to the new entity's id in the answer ("" = the answer).
    pub id_pointer: String,
    /// GET URL template finding the step's entity by `{{operation_id}}`.
    pub lookup_url: String,
    #[serde(default)]
    pub lookup_ids_pointer: String,
    #[serde(default)]
    pub lookup_id_pointer: Option<String>,
}

/// A configured step.
struct Step {
    name: String,
    method: Method,
    url: reqwest::Url,
    body: Value,
    id_pointer: String,
    lookup_url: String,
    lookup_ids_pointer: String,
    lookup_id_pointer: Option<String>,
}

fn default_method() -> String {
    "POST".into()
}

fn default_update_method() -> String {
    "PATCH".into()
}

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

/// A configured HTTP CRM.
pub struct HttpCrm {
    method: Method,
    create_url: reqwest::Url,
    headers: HeaderMap,
    /// Header values that are secrets (from the environment or credential-like names):
    /// scrubbed from every stored text.
    secrets: Vec<String>,
    body: Value,
    id_pointer: String,
    lookup_url: Option<String>,
    lookup_ids_pointer: String,
    lookup_id_pointer: Option<String>,
    lookup_authoritative: bool,
    /// `(method, URL template, body template)` of an update.
    update: Option<(Method, String, Value)>,
    steps: Vec<Step>,
    errors: BTreeMap<u16, ErrorClass>,
    limiter: Option<Arc<RateLimiter>>,
    client: reqwest::Client,
}

impl std::fmt::Debug for HttpCrm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpCrm")
            .field("method", &self.method)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("lookup_authoritative", &self.lookup_authoritative)
            .finish_non_exhaustive()
    }
}

fn bad(msg: impl Into<String>) -> ConfigError {
    ConfigError(format!("[crm] kind = \"http\": {}", msg.into()))
}

fn check_pointer(what: &str, p: &str) -> Result<(), ConfigError> {
    if p.is_empty() || p.starts_with('/') {
        Ok(())
    } else {
        Err(bad(format!(
            "{what} `{p}` is not a JSON pointer (it must be empty or start with /)"
        )))
    }
}

impl HttpCrm {
    pub fn new(config: &HttpConfig) -> Result<HttpCrm, ConfigError> {
        let method = Method::from_bytes(config.method.trim().to_uppercase().as_bytes())
            .map_err(|_| bad(format!("method `{}` is not an HTTP method", config.method)))?;
        let create_url = http_url("create_url", &config.create_url)?;
        let mut headers = HeaderMap::new();
        let mut secrets = Vec::new();
        for (name, value) in &config.headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| bad(format!("`{name}` is not a header name")))?;
            let raw = value.expose();
            let (text, secret) = match raw.strip_prefix("env:") {
                Some(var) => (
                    std::env::var(var).map_err(|_| {
                        bad(format!(
                            "header `{name}`: the environment variable `{var}` is not set"
                        ))
                    })?,
                    true,
                ),
                None => {
                    let lower = name.to_ascii_lowercase();
                    let credential = ["auth", "token", "key", "secret", "cookie", "password"]
                        .iter()
                        .any(|w| lower.contains(w));
                    (raw.to_owned(), credential)
                }
            };
            let mut hv = HeaderValue::from_str(&text)
                .map_err(|_| bad(format!("header `{name}`: the value is not a valid header")))?;
            if secret {
                hv.set_sensitive(true);
                secrets.push(text.clone());
                // `Bearer xyz` may come back as `xyz` alone.
                if let Some((_, token)) = text.split_once(' ') {
                    secrets.push(token.trim().to_owned());
                }
            }
            headers.insert(header, hv);
        }
        let mut step_ids: Vec<String> = Vec::new();
        let mut steps = Vec::new();
        for step in &config.steps {
            let name = step.name.trim();
            let well_formed = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            let id = format!("{name}_id");
            if !well_formed || PLACEHOLDERS.contains(&id.as_str()) || step_ids.contains(&id) {
                return Err(bad(format!(
                    "steps: `{name}` must be a new name of lower-case letters, digits and _"
                )));
            }
            let method =
                Method::from_bytes(step.method.trim().to_uppercase().as_bytes()).map_err(|_| {
                    bad(format!(
                        "steps.{name}: `{}` is not an HTTP method",
                        step.method
                    ))
                })?;
            check_pointer("steps.id_pointer", &step.id_pointer)?;
            check_pointer("steps.lookup_ids_pointer", &step.lookup_ids_pointer)?;
            if let Some(p) = &step.lookup_id_pointer {
                check_pointer("steps.lookup_id_pointer", p)?;
            }
            if placeholders(&step.lookup_url)
                .iter()
                .any(|p| p != "operation_id")
            {
                return Err(bad(format!(
                    "steps.{name}.lookup_url: only {{{{operation_id}}}} can be used"
                )));
            }
            http_url("steps.lookup_url", &lookup_target(&step.lookup_url, "x"))?;
            steps.push(Step {
                name: name.to_owned(),
                method,
                url: http_url("steps.url", &step.url)?,
                body: parse_template(&step.body, &step_ids)?,
                id_pointer: step.id_pointer.clone(),
                lookup_url: step.lookup_url.clone(),
                lookup_ids_pointer: step.lookup_ids_pointer.clone(),
                lookup_id_pointer: step.lookup_id_pointer.clone(),
            });
            step_ids.push(id);
        }
        let body = parse_template(&config.body, &step_ids)?;
        check_pointer("id_pointer", &config.id_pointer)?;
        check_pointer("lookup_ids_pointer", &config.lookup_ids_pointer)?;
        if let Some(p) = &config.lookup_id_pointer {
            check_pointer("lookup_id_pointer", p)?;
        }
        if let Some(url) = &config.lookup_url {
            for name in placeholders(url) {
                if name != "operation_id" {
                    return Err(bad(format!(
                        "lookup_url: only {{{{operation_id}}}} can be used, not {{{{{name}}}}}"
                    )));
                }
            }
            http_url("lookup_url", &lookup_target(url, "x"))?;
        } else if config.lookup_authoritative {
            return Err(bad("lookup_authoritative needs a lookup_url"));
        }
        let update = match (&config.update_url, &config.update_body) {
            (None, None) => None,
            (Some(url), Some(body)) => {
                for name in placeholders(url) {
                    if name != "crm_id" {
                        return Err(bad(format!(
                            "update_url: only {{{{crm_id}}}} can be used, not {{{{{name}}}}}"
                        )));
                    }
                }
                http_url("update_url", &lookup_target(url, "1"))?;
                let method =
                    Method::from_bytes(config.update_method.trim().to_uppercase().as_bytes())
                        .map_err(|_| {
                            bad(format!(
                                "update_method `{}` is not an HTTP method",
                                config.update_method
                            ))
                        })?;
                Some((method, url.clone(), parse_template(body, &[])?))
            }
            _ => return Err(bad("update_url and update_body go together")),
        };
        let mut errors = BTreeMap::new();
        for (code, class) in &config.errors {
            let status = code
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|s| (100..=599).contains(s))
                .ok_or_else(|| bad(format!("errors: `{code}` is not an HTTP status code")))?;
            if *class == ErrorClass::Conflict {
                return Err(bad(format!(
                    "errors: {code} = \"conflict\": conflicts are found by Leadgate, not by a CRM answer"
                )));
            }
            errors.insert(status, *class);
        }
        let limiter = match config.rate_limit {
            None => None,
            Some(r) if r.is_finite() && r > 0.0 => {
                let account = format!(
                    "{}://{}",
                    create_url.scheme(),
                    create_url.host_str().unwrap_or_default()
                );
                Some(rate::shared(&account, r))
            }
            Some(_) => return Err(bad("rate_limit must be a positive number per second")),
        };
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ConfigError(format!("cannot build the HTTP client: {e}")))?;
        Ok(HttpCrm {
            method,
            create_url,
            headers,
            secrets,
            body,
            id_pointer: config.id_pointer.clone(),
            lookup_url: config.lookup_url.clone(),
            lookup_ids_pointer: config.lookup_ids_pointer.clone(),
            lookup_id_pointer: config.lookup_id_pointer.clone(),
            lookup_authoritative: config.lookup_authoritative,
            update,
            steps,
            errors,
            limiter,
            client,
        })
    }

    /// Sends one request; returns a 2xx answer or the classified failure, and fills
    /// `summary` with `status`, `duration_ms` and, on failure, `class` and `message`.
    async fn call(
        &self,
        what: &str,
        target: Target,
        request: reqwest::RequestBuilder,
        redact: &[&str],
        summary: &mut Map<String, Value>,
    ) -> Result<(StatusCode, bytes::Bytes), CrmError> {
        let mut redact = redact.to_vec();
        redact.extend(self.secrets.iter().map(String::as_str));
        if let Some(l) = &self.limiter {
            l.acquire_unless_prepaid().await;
        }
        let started = Instant::now();
        let result = async {
            let resp = request
                .headers(self.headers.clone())
                .send()
                .await
                .map_err(|e| classify_transport(CONNECTOR, what, e, &redact))?;
            let status = resp.status();
            summary.insert("status".into(), json!(status.as_u16()));
            let headers = resp.headers().clone();
            let body = resp
                .bytes()
                .await
                .map_err(|e| classify_transport(CONNECTOR, what, e, &redact))?;
            if status.is_success() {
                return Ok((status, body));
            }
            let class = classify(status, &self.errors, target, &body);
            let message = clean_message(
                &format!(
                    "{CONNECTOR} {what}: HTTP {} {}",
                    status.as_u16(),
                    describe(&body)
                ),
                &redact,
            );
            Err(CrmError {
                class,
                message,
                retry_after: (class == ErrorClass::RateLimited)
                    .then(|| rate::retry_after(&headers))
                    .flatten(),
            })
        }
        .await;
        summary.insert(
            "duration_ms".into(),
            json!(started.elapsed().as_millis() as u64),
        );
        if let Err(e) = &result {
            note_error(summary, e);
        }
        result
    }
}

fn http_url(what: &str, url: &str) -> Result<reqwest::Url, ConfigError> {
    let parsed =
        reqwest::Url::parse(url.trim()).map_err(|e| bad(format!("{what} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(bad(format!("{what} must be an http(s) URL with a host")));
    }
    Ok(parsed)
}

/// What a request addresses, for [`classify`]: a 404 means something else for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The create URL (or a step's): it always exists, so a 404 there means the
    /// configured address is wrong.
    Create,
    /// One entity by id (`update_url`): a 404 means that entity was deleted in the
    /// CRM — about the entity, not the connector.
    Entity,
    /// The lookup by key: a 404 there is "not found" — unless it is an HTML page.
    Lookup,
}

/// The one classification of a non-2xx answer: the configured table first, then the
/// defaults (see the module documentation):
///
/// - 429 → rate_limited; a timeout (408) → uncertain, looked up, never a refusal;
/// - the request, the method or the address refused — 3xx, 401, 402, 403, 405, 404 of
///   the create URL or the lookup, an HTML page where the API answers JSON — is the
///   connector's problem: auth (pause);
/// - 404 of an update's entity (deleted), 400, 422 and other 4xx → validation: that
///   lead's data (or entity), terminal;
/// - 5xx and anything else → uncertain.
pub fn classify(
    status: StatusCode,
    overrides: &BTreeMap<u16, ErrorClass>,
    target: Target,
    body: &[u8],
) -> ErrorClass {
    if let Some(class) = overrides.get(&status.as_u16()) {
        return *class;
    }
    let html = super::looks_like_html(&String::from_utf8_lossy(body));
    match status.as_u16() {
        429 => ErrorClass::RateLimited,
        408 => ErrorClass::Uncertain,
        300..=399 => ErrorClass::Auth,
        401..=403 | 405 => ErrorClass::Auth,
        // An update's entity that was deleted; a lookup's "no such key" (read as not found).
        404 if target != Target::Create && !html => ErrorClass::Validation,
        404 => ErrorClass::Auth,
        400..=499 if html => ErrorClass::Auth,
        400..=499 => ErrorClass::Validation,
        _ => ErrorClass::Uncertain,
    }
}

/// A short text for an error body: a JSON error's `message`/`error`/`detail`/`title`,
/// else the body itself (cleaned and capped by the caller).
fn describe(body: &[u8]) -> String {
    if body.iter().all(u8::is_ascii_whitespace) {
        return "(empty body)".into();
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(json) => ["message", "error", "detail", "title", "error_description"]
            .iter()
            .filter_map(|k| match json.get(*k) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(v @ Value::Object(_)) => {
                    v.get("message").and_then(Value::as_str).map(str::to_owned)
                }
                _ => None,
            })
            .next()
            .unwrap_or_else(|| "unexpected JSON answer".into()),
        Err(_) => format!("(not JSON) {}", String::from_utf8_lossy(body)),
    }
}

/// `text` split into literal pieces and `{{placeholder}}` names (trimmed), in order.
fn segments(text: &str) -> Vec<(bool, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        if start > 0 {
            out.push((false, &rest[..start]));
        }
        out.push((true, after[..end].trim()));
        rest = &after[end + 2..];
    }
    if !rest.is_empty() {
        out.push((false, rest));
    }
    out
}

/// The names of the `{{...}}` placeholders in `text`, in order.
fn placeholders(text: &str) -> Vec<String> {
    segments(text)
        .into_iter()
        .filter(|(is_placeholder, _)| *is_placeholder)
        .map(|(_, name)| name.to_owned())
        .collect()
}

/// Replaces every placeholder of `text` with `value(name)`.
fn substitute(text: &str, value: impl Fn(&str) -> String) -> String {
    segments(text)
        .into_iter()
        .map(|(is_placeholder, s)| {
            if is_placeholder {
                value(s)
            } else {
                s.to_owned()
            }
        })
        .collect()
}

/// Parses a body template: placeholders standing alone outside JSON strings are quoted
/// first, then the whole must be JSON and name only known placeholders (the lead's and
/// `step_ids`).
fn parse_template(template: &str, step_ids: &[String]) -> Result<Value, ConfigError> {
    let mut quoted = String::with_capacity(template.len() + 16);
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = template.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if in_string {
            quoted.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        if c == '"' {
            in_string = true;
            quoted.push(c);
        } else if template[i..].starts_with("{{") {
            let end = template[i..]
                .find("}}")
                .ok_or_else(|| bad("body: a `{{` is never closed"))?;
            quoted.push('"');
            quoted.push_str(&template[i..i + end + 2]);
            quoted.push('"');
            // Skip the rest of the placeholder.
            while chars.peek().is_some_and(|(j, _)| *j < i + end + 2) {
                chars.next();
            }
        } else {
            quoted.push(c);
        }
    }
    let body: Value = serde_json::from_str(&quoted)
        .map_err(|e| bad(format!("body is not a JSON template: {e}")))?;
    let mut unknown = Vec::new();
    visit_strings(&body, &mut |s| {
        for name in placeholders(s) {
            if !PLACEHOLDERS.contains(&name.as_str()) && !step_ids.contains(&name) {
                unknown.push(name);
            }
        }
    });
    if let Some(name) = unknown.first() {
        return Err(bad(format!(
            "body: unknown placeholder {{{{{name}}}}} (known: {})",
            PLACEHOLDERS.join(", ")
        )));
    }
    Ok(body)
}

fn visit_strings(v: &Value, f: &mut impl FnMut(&str)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|i| visit_strings(i, f)),
        Value::Object(map) => map.values().for_each(|i| visit_strings(i, f)),
        _ => {}
    }
}

fn field<'a>(lead: &'a Lead, name: &str) -> Option<&'a str> {
    match name {
        "operation_id" => Some(&lead.operation_id),
        "source" => Some(&lead.source),
        "name" => lead.name.as_deref(),
        "phone" => lead.phone.as_deref(),
        "email" => lead.email.as_deref(),
        "comment" => lead.comment.as_deref(),
        "title" => lead.title.as_deref(),
        _ => None,
    }
}

/// Fills the template with the lead's values, as JSON strings.
pub fn render(template: &Value, lead: &Lead) -> Value {
    render_with(template, lead, &[])
}

/// [`render`] with the ids of earlier steps (`{{<step>_id}}`).
fn render_with(template: &Value, lead: &Lead, done: &[super::StepDone]) -> Value {
    let value = |name: &str| {
        field(lead, name).or_else(|| {
            done.iter()
                .find(|d| name.strip_suffix("_id") == Some(d.step.as_str()))
                .map(|d| d.crm_id.as_str())
        })
    };
    match template {
        Value::String(s) => match segments(s.trim()).as_slice() {
            // A placeholder that is the whole value: the field, or null when absent.
            [(true, name)] => value(name).map_or(Value::Null, |v| json!(v)),
            _ => Value::String(substitute(s, |name| {
                value(name).unwrap_or_default().to_owned()
            })),
        },
        Value::Array(items) => {
            Value::Array(items.iter().map(|i| render_with(i, lead, done)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), render_with(v, lead, done)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The lookup URL for `operation_id`, URL-encoded.
fn lookup_target(template: &str, operation_id: &str) -> String {
    const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    let encoded = percent_encoding::utf8_percent_encode(operation_id, COMPONENT).to_string();
    substitute(template, |_| encoded.clone())
}

/// An id: a non-empty string or an integer.
fn id_of(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        _ => None,
    }
}

fn pointer<'a>(v: &'a Value, p: &str) -> Option<&'a Value> {
    if p.is_empty() {
        Some(v)
    } else {
        v.pointer(p)
    }
}

#[async_trait::async_trait]
impl Crm for HttpCrm {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    fn lookup_is_authoritative(&self) -> bool {
        self.lookup_url.is_some() && self.lookup_authoritative
    }

    async fn pace(&self) -> Result<(), CrmError> {
        if let Some(l) = &self.limiter {
            l.acquire().await;
        }
        Ok(())
    }

    async fn create(&self, lead: &Lead) -> (Result<String, CrmError>, Exchange) {
        self.create_after(lead, &[]).await
    }

    fn steps(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.name.as_str()).collect()
    }

    /// Per step a lookup and a create, then the lead.
    fn create_calls(&self) -> u32 {
        1 + 2 * self.steps.len() as u32
    }

    async fn step(
        &self,
        step: &str,
        lead: &Lead,
        _search: &super::ContactSearch,
        done: &[super::StepDone],
        may_exist: bool,
    ) -> (Result<super::StepDone, super::StepError>, Exchange) {
        let request = json!({"connector": CONNECTOR, "step": step, "by_key_first": may_exist,
                             "operation_id": lead.operation_id});
        let mut summary = Map::new();
        let result = match self.steps.iter().find(|s| s.name == step) {
            None => Err(super::StepError::Crm(CrmError::new(
                ErrorClass::Validation,
                format!("{CONNECTOR}: no step {step:?} is configured"),
            ))),
            Some(s) => self.run_step(s, lead, done, may_exist, &mut summary).await,
        };
        match &result {
            Ok(d) => {
                summary.insert("id".into(), json!(d.crm_id));
                summary.insert("how".into(), json!(d.how));
            }
            Err(super::StepError::Crm(e)) if !summary.contains_key("class") => {
                note_error(&mut summary, e)
            }
            Err(super::StepError::Ambiguous { ids, .. }) => {
                summary.insert("ambiguous".into(), json!(ids));
            }
            Err(_) => {}
        }
        (
            result,
            Exchange {
                request,
                response: Value::Object(summary),
            },
        )
    }

    async fn create_after(
        &self,
        lead: &Lead,
        done: &[super::StepDone],
    ) -> (Result<String, CrmError>, Exchange) {
        let what = format!("{} create", self.method);
        let request = json!({
            "connector": CONNECTOR,
            "method": self.method.as_str(),
            "endpoint": "create",
            "operation_id": lead.operation_id,
        });
        let mut summary = Map::new();
        let body = render_with(&self.body, lead, done);
        let req = self
            .client
            .request(self.method.clone(), self.create_url.clone())
            .json(&body);
        let result = self
            .call(
                &what,
                Target::Create,
                req,
                &lead.contact_values(),
                &mut summary,
            )
            .await
            .and_then(|(_, bytes)| {
                serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|json| pointer(&json, &self.id_pointer).and_then(id_of))
                    .ok_or_else(|| {
                        let e = CrmError::new(
                            ErrorClass::Uncertain,
                            format!(
                                "{CONNECTOR} {what}: the answer has no id at `{}`",
                                self.id_pointer
                            ),
                        );
                        note_error(&mut summary, &e);
                        e
                    })
            });
        if let Ok(id) = &result {
            summary.insert("id".into(), json!(id));
        }
        (
            result,
            Exchange {
                request,
                response: Value::Object(summary),
            },
        )
    }

    async fn update(&self, u: &EntityUpdate) -> (Result<Vec<String>, CrmError>, Exchange) {
        let Some((method, url, body)) = &self.update else {
            return (
                Err(CrmError::new(
                    ErrorClass::Validation,
                    format!(
                        "{CONNECTOR}: no update_url is configured, so this CRM cannot be updated"
                    ),
                )),
                Exchange {
                    request: json!({"connector": CONNECTOR, "endpoint": "update", "id": u.crm_id}),
                    response: json!({"sent": false}),
                },
            );
        };
        let what = format!("{method} update");
        let request = json!({
            "connector": CONNECTOR,
            "method": method.as_str(),
            "endpoint": "update",
            "id": u.crm_id,
        });
        let mut summary = Map::new();
        let target = match reqwest::Url::parse(&lookup_target(url, &u.crm_id)) {
            Ok(t) => t,
            Err(e) => {
                let e = CrmError::new(ErrorClass::Validation, format!("{CONNECTOR} {what}: {e}"));
                note_error(&mut summary, &e);
                return (
                    Err(e),
                    Exchange {
                        request,
                        response: Value::Object(summary),
                    },
                );
            }
        };
        let req = self
            .client
            .request(method.clone(), target)
            .json(&render(body, &u.target));
        let used = placeholders(&body.to_string());
        let result = self
            .call(&what, Target::Entity, req, &u.redact(), &mut summary)
            .await
            .map(|_| {
                u.changes
                    .fields()
                    .into_iter()
                    .filter(|f| used.iter().any(|p| p == f))
                    .map(str::to_owned)
                    .collect()
            });
        (
            result,
            Exchange {
                request,
                response: Value::Object(summary),
            },
        )
    }

    async fn find(&self, operation_id: &str) -> (Result<Lookup, CrmError>, Exchange) {
        let request = json!({
            "connector": CONNECTOR,
            "method": "GET",
            "endpoint": "lookup",
            "operation_id": operation_id,
        });
        let mut summary = Map::new();
        let Some(template) = &self.lookup_url else {
            let e = CrmError::new(
                ErrorClass::Uncertain,
                format!("{CONNECTOR}: no lookup_url is configured; the outcome cannot be checked"),
            );
            note_error(&mut summary, &e);
            return (
                Err(e),
                Exchange {
                    request,
                    response: Value::Object(summary),
                },
            );
        };
        let result = self
            .lookup_by(
                template,
                &self.lookup_ids_pointer,
                self.lookup_id_pointer.as_deref(),
                operation_id,
                &mut summary,
            )
            .await;
        if let Ok(lookup) = &result {
            let ids = match lookup {
                Lookup::NotFound => vec![],
                Lookup::One(id) => vec![id.clone()],
                Lookup::Many(ids) => ids.clone(),
            };
            summary.insert("found".into(), json!(ids.len()));
            summary.insert("ids".into(), json!(ids));
        }
        (
            result,
            Exchange {
                request,
                response: Value::Object(summary),
            },
        )
    }
}

impl HttpCrm {
    /// A GET of `template` for `operation_id`: the ids of the answer at the pointers; a
    /// 404 (or an empty answer) is "not found".
    async fn lookup_by(
        &self,
        template: &str,
        ids_pointer: &str,
        id_pointer: Option<&str>,
        operation_id: &str,
        summary: &mut Map<String, Value>,
    ) -> Result<Lookup, CrmError> {
        let what = "GET lookup";
        let url = lookup_target(template, operation_id);
        match self
            .call(what, Target::Lookup, self.client.get(url), &[], summary)
            .await
        {
            Ok((StatusCode::NO_CONTENT, _)) => Ok(Lookup::NotFound),
            Ok((_, bytes)) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(Lookup::NotFound),
            Ok((_, bytes)) => ids_at(&bytes, ids_pointer, id_pointer)
                .map(Lookup::from_ids)
                .ok_or_else(|| {
                    let e = CrmError::new(
                        ErrorClass::Uncertain,
                        format!("{CONNECTOR} {what}: no list of ids at `{ids_pointer}`"),
                    );
                    note_error(summary, &e);
                    e
                }),
            // A lookup by key that says "no such thing" (not a web server's page: that
            // is an address that is wrong, and the connector pauses).
            Err(e) if summary.get("status") == Some(&json!(404)) && e.class != ErrorClass::Auth => {
                summary.remove("class");
                summary.remove("message");
                Ok(Lookup::NotFound)
            }
            Err(e) => Err(e),
        }
    }

    /// One step: found by its key first when an earlier attempt may have sent it, else
    /// created from its template with the earlier steps' ids.
    async fn run_step(
        &self,
        step: &Step,
        lead: &Lead,
        done: &[super::StepDone],
        may_exist: bool,
        summary: &mut Map<String, Value>,
    ) -> Result<super::StepDone, super::StepError> {
        let made = |crm_id: String, how: &str| super::StepDone {
            step: step.name.clone(),
            entity: step.name.clone(),
            crm_id,
            how: how.into(),
        };
        if may_exist {
            let mut call = Map::new();
            let found = self
                .lookup_by(
                    &step.lookup_url,
                    &step.lookup_ids_pointer,
                    step.lookup_id_pointer.as_deref(),
                    &lead.operation_id,
                    &mut call,
                )
                .await;
            summary.insert("by_key".into(), Value::Object(call));
            match found? {
                Lookup::One(id) => return Ok(made(id, "recovered")),
                Lookup::Many(ids) => {
                    return Err(super::StepError::Ambiguous {
                        step: step.name.clone(),
                        ids,
                    })
                }
                // Not proof where the CRM's search may lag behind its creates: the step
                // is not sent again; a person decides (confirm or link the final entity).
                Lookup::NotFound if !self.lookup_authoritative => {
                    return Err(super::StepError::Crm(CrmError::new(
                        ErrorClass::Uncertain,
                        format!(
                            "{CONNECTOR} step {}: an earlier attempt may have created it and its \
                             lookup is not authoritative (lookup_authoritative = false)",
                            step.name
                        ),
                    )))
                }
                Lookup::NotFound => {}
            }
        }
        let what = format!("{} step {}", step.method, step.name);
        let body = render_with(&step.body, lead, done);
        let req = self
            .client
            .request(step.method.clone(), step.url.clone())
            .json(&body);
        let (_, bytes) = self
            .call(&what, Target::Create, req, &lead.contact_values(), summary)
            .await?;
        let id = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|json| pointer(&json, &step.id_pointer).and_then(id_of))
            .ok_or_else(|| {
                CrmError::new(
                    ErrorClass::Uncertain,
                    format!(
                        "{CONNECTOR} {what}: the answer has no id at `{}`",
                        step.id_pointer
                    ),
                )
            })?;
        Ok(made(id, "created"))
    }
}

/// The ids of a lookup answer; `None` when it does not have the configured shape.
fn ids_at(body: &[u8], ids_pointer: &str, id_pointer: Option<&str>) -> Option<Vec<String>> {
    let json: Value = serde_json::from_slice(body).ok()?;
    let items = pointer(&json, ids_pointer)?.as_array()?;
    items
        .iter()
        .map(|item| match id_pointer {
            Some(p) => pointer(item, p).and_then(id_of),
            None if item.is_object() => item.get("id").and_then(id_of),
            None => id_of(item),
        })
        .collect()
}

/// For `fuzz/`: one answer of a home-grown CRM through the adapter's parsing (the error
/// description, the id at a pointer). Not part of the API.
#[doc(hidden)]
#[cfg(feature = "test-support")]
pub fn fuzz_answer(pointer_text: &str, body: &[u8]) {
    let _ = describe(body);
    if let Ok(json) = serde_json::from_slice::<Value>(body) {
        let _ = pointer(&json, pointer_text).and_then(id_of);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use axum::extract::{Query, State};
    use axum::http::HeaderMap as AxumHeaders;
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};
    use axum::{Json, Router};

    const KEY: &str = "k-secret-4711";

    /// A templated home-grown CRM: `POST /api/leads` stores `{external_id, ...}` and
    /// answers `{"data":{"id":N}}`; `GET /api/leads?external_id=` answers
    /// `{"items":[{"id":N,...}]}`. Queued answers replace the next create's answer
    /// (`execute` = store the lead first).
    #[derive(Default)]
    struct Fake {
        leads: Mutex<Vec<Value>>,
        queued: Mutex<VecDeque<(u16, String, bool)>>,
    }

    async fn create(
        State(fake): State<Arc<Fake>>,
        headers: AxumHeaders,
        Json(body): Json<Value>,
    ) -> Response {
        if headers.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(KEY) {
            // Echo the wrong key back, as careless servers do.
            let got = headers
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            return (
                StatusCode::UNAUTHORIZED,
                Json(json!({"message": format!("bad key {got}")})),
            )
                .into_response();
        }
        let queued = fake.queued.lock().unwrap().pop_front();
        let store = |fake: &Fake| {
            let mut leads = fake.leads.lock().unwrap();
            let id = leads.len() as u64 + 1;
            let mut row = body.clone();
            row["id"] = json!(id);
            leads.push(row);
            id
        };
        match queued {
            Some((status, text, execute)) => {
                if execute {
                    store(&fake);
                }
                let mut resp = (StatusCode::from_u16(status).unwrap(), text).into_response();
                if status == 429 {
                    resp.headers_mut()
                        .insert("retry-after", HeaderValue::from_static("3"));
                }
                resp
            }
            None => Json(json!({"data": {"id": store(&fake)}})).into_response(),
        }
    }

    async fn lookup(
        State(fake): State<Arc<Fake>>,
        Query(q): Query<BTreeMap<String, String>>,
    ) -> Response {
        let wanted = q.get("external_id").cloned().unwrap_or_default();
        let items: Vec<Value> = fake
            .leads
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l["external_id"] == wanted.as_str())
            .cloned()
            .collect();
        if wanted == "gone" {
            return StatusCode::NOT_FOUND.into_response();
        }
        Json(json!({"items": items})).into_response()
    }

    /// `PATCH /api/leads/{id}`: the body's fields replace the lead's.
    async fn patch_lead(
        State(fake): State<Arc<Fake>>,
        axum::extract::Path(id): axum::extract::Path<u64>,
        Json(body): Json<Value>,
    ) -> Response {
        let mut leads = fake.leads.lock().unwrap();
        let Some(lead) = leads.iter_mut().find(|l| l["id"] == json!(id)) else {
            return (
                StatusCode::NOT_FOUND,
                Json(json!({"message": "no such lead"})),
            )
                .into_response();
        };
        for (k, v) in body.as_object().unwrap() {
            lead[k] = v.clone();
        }
        Json(json!({"ok": true})).into_response()
    }

    async fn spawn() -> (String, Arc<Fake>) {
        let fake = Arc::new(Fake::default());
        let app = Router::new()
            .route("/api/leads", post(create))
            .route("/api/leads", get(lookup))
            .route("/api/leads/{id}", axum::routing::patch(patch_lead))
            // Contacts share the store; their key is `c-<operation_id>`.
            .route("/api/contacts", post(create))
            .route("/api/contacts", get(lookup))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (format!("http://{addr}"), fake)
    }

    fn toml(base: &str, env_var: &str, extra: &str) -> String {
        format!(
            r#"
[database]
url = "sqlite::memory:"

[crm]
kind = "http"
create_url = "{base}/api/leads"
body = '''{{"external_id": {{{{operation_id}}}}, "name": "{{{{name}}}}", "phone": {{{{phone}}}},
          "email": "{{{{email}}}}", "note": "{{{{title}}}} / {{{{comment}}}}", "src": "{{{{source}}}}",
          "fixed": [1, true, "x"]}}'''
id_pointer = "/data/id"
lookup_url = "{base}/api/leads?external_id={{{{operation_id}}}}"
lookup_ids_pointer = "/items"
timeout = "2s"
{extra}
[crm.headers]
X-Api-Key = "env:{env_var}"
X-Client = "leadgate"

[crm.errors]
409 = "validation"
"#
        )
    }

    fn config(text: &str) -> HttpConfig {
        match crate::config::Config::parse(text).unwrap().crm.unwrap() {
            crate::config::CrmConfig::Http(c) => *c,
            other => panic!("{other:?}"),
        }
    }

    /// A fresh environment variable holding the key (tests run in parallel).
    fn key_var(test: &str) -> String {
        let var = format!("LEADGATE_TEST_HTTP_KEY_{test}");
        std::env::set_var(&var, KEY);
        var
    }

    fn lead(op: &str) -> Lead {
        Lead {
            operation_id: op.into(),
            source: "site".into(),
            title: Some("Form".into()),
            name: Some("Ivan \"Vanya\"\nPetrov".into()),
            phone: Some("+79990001122".into()),
            email: None,
            comment: Some("call me".into()),
        }
    }

    fn assert_clean(text: &str) {
        for needle in [KEY, "Ivan", "79990001122"] {
            assert!(!text.contains(needle), "{needle:?} leaked into {text:?}");
        }
    }

    #[tokio::test]
    async fn steps_go_in_order_with_the_earlier_ids_and_find_their_own_key_first() {
        let (base, fake) = spawn().await;
        let steps = format!(
            "[[crm.steps]]\nname = \"contact\"\nurl = \"{base}/api/contacts\"\n\
             body = '{{\"external_id\": \"c-{{{{operation_id}}}}\", \"phone\": {{{{phone}}}}}}'\n\
             id_pointer = \"/data/id\"\n\
             lookup_url = \"{base}/api/contacts?external_id=c-{{{{operation_id}}}}\"\n\
             lookup_ids_pointer = \"/items\"\n"
        );
        let text = toml(&base, &key_var("steps"), "").replace(
            "\"fixed\": [1, true, \"x\"]",
            "\"fixed\": [1, true, \"x\"], \"contact\": {{contact_id}}",
        );
        // The steps' tables come after every key of [crm].
        let text = text.replace("[crm.headers]", &format!("{steps}[crm.headers]"));
        let crm = HttpCrm::new(&config(&text)).unwrap();
        assert_eq!(crm.steps(), ["contact"]);
        assert_eq!(crm.create_calls(), 3);
        let lead = lead("site:s1");
        let search = super::super::ContactSearch::default();
        let (made, ex) = crm.step("contact", &lead, &search, &[], false).await;
        let made = made.unwrap();
        assert_eq!((made.crm_id.as_str(), made.how.as_str()), ("1", "created"));
        assert_clean(&ex.request.to_string());
        assert_clean(&ex.response.to_string());
        let (id, _) = crm.create_after(&lead, std::slice::from_ref(&made)).await;
        assert_eq!(id.unwrap(), "2");
        let rows = fake.leads.lock().unwrap().clone();
        assert_eq!(
            rows[1]["contact"], "1",
            "the lead names the step's id: {rows:?}"
        );
        assert_eq!(rows[0]["external_id"], "c-site:s1");
        // After an attempt that may have sent it, the step is found by its own key.
        let (again, ex) = crm.step("contact", &lead, &search, &[], true).await;
        let again = again.unwrap();
        assert_eq!(
            (again.crm_id.as_str(), again.how.as_str()),
            ("1", "recovered")
        );
        assert_eq!(ex.request["by_key_first"], true);
        assert_eq!(fake.leads.lock().unwrap().len(), 2, "nothing created again");
        // The lead's own lookup sees the lead only.
        assert_eq!(
            crm.find("site:s1").await.0.unwrap(),
            Lookup::One("2".into())
        );
        // A template may only name steps before it; names are checked.
        for bad in [
            text.replace("\"contact\": {{contact_id}}", "\"contact\": {{company_id}}"),
            text.replace("name = \"contact\"", "name = \"Contact\""),
            text.replace("lookup_url = \"", "lookup_url = \"{{name}}"),
        ] {
            assert!(HttpCrm::new(&config(&bad)).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn updates_from_its_template_with_the_lead_as_it_stands_now() {
        let (base, fake) = spawn().await;
        let extra = format!(
            "update_url = \"{base}/api/leads/{{{{crm_id}}}}\"\n\
             update_body = '''{{\"name\": \"{{{{name}}}}\", \"phone\": {{{{phone}}}}}}'''"
        );
        let crm = HttpCrm::new(&config(&toml(&base, &key_var("upd"), &extra))).unwrap();
        let was = lead("site:u");
        let id = crm.create(&was).await.0.unwrap();
        let later = Lead {
            phone: Some("+79990003344".into()),
            comment: Some("later".into()),
            ..was.clone()
        };
        let changes = was.changes_to(&later);
        let update = EntityUpdate {
            crm_id: id.clone(),
            target: was.overlaid(&changes),
            changes,
            redact: vec!["+79990003344".into()],
        };
        let (sent, ex) = crm.update(&update).await;
        // The comment has no place in this template: not said to be sent.
        assert_eq!(sent.unwrap(), ["phone"]);
        assert_eq!(ex.request["method"], "PATCH");
        let stored = fake.leads.lock().unwrap()[0].clone();
        assert_eq!(stored["phone"], "+79990003344");
        assert_eq!(
            stored["name"], "Ivan \"Vanya\"\nPetrov",
            "unchanged, sent as it was"
        );
        // A lead that is gone: the data's fault.
        let gone = EntityUpdate {
            crm_id: "99".into(),
            ..update
        };
        let (err, ex) = crm.update(&gone).await;
        assert_eq!(err.unwrap_err().class, ErrorClass::Validation);
        assert_clean(&ex.response.to_string());
        // Without update_url nothing is sent.
        let plain = HttpCrm::new(&config(&toml(&base, &key_var("upd2"), ""))).unwrap();
        let (err, ex) = plain.update(&gone).await;
        assert_eq!(err.unwrap_err().class, ErrorClass::Validation);
        assert_eq!(ex.response["sent"], false);
        // Only {{crm_id}} in the URL, and both settings or neither.
        for bad in [
            format!("update_url = \"{base}/x/{{{{name}}}}\"\nupdate_body = '{{}}'"),
            format!("update_url = \"{base}/x/{{{{crm_id}}}}\""),
        ] {
            let text = toml(&base, &key_var("upd3"), &bad);
            assert!(HttpCrm::new(&config(&text)).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn creates_from_the_template_and_finds_by_the_encoded_key() {
        let (base, fake) = spawn().await;
        let crm = HttpCrm::new(&config(&toml(&base, &key_var("a"), ""))).unwrap();
        assert_eq!(crm.connector(), "http");
        assert!(!crm.lookup_is_authoritative());
        let op = "site:a b/c&d=é";
        let (res, ex) = crm.create(&lead(op)).await;
        assert_eq!(res.unwrap(), "1");
        assert_eq!(ex.response["status"], 200);
        assert_eq!(ex.response["id"], "1");
        assert_clean(&ex.request.to_string());
        assert_clean(&ex.response.to_string());
        let stored = fake.leads.lock().unwrap()[0].clone();
        assert_eq!(
            stored,
            json!({"external_id": op, "name": "Ivan \"Vanya\"\nPetrov", "phone": "+79990001122",
                   "email": null, "note": "Form / call me", "src": "site", "fixed": [1, true, "x"], "id": 1})
        );
        let (found, ex) = crm.find(op).await;
        assert_eq!(found.unwrap(), Lookup::One("1".into()));
        assert_eq!(ex.response["found"], 1);
        assert_eq!(crm.find("site:other").await.0.unwrap(), Lookup::NotFound);
        // A 404 from a lookup by key means "no such entity".
        let (found, ex) = crm.find("gone").await;
        assert_eq!(found.unwrap(), Lookup::NotFound);
        assert_eq!(ex.response["status"], 404);
        crm.create(&lead(op)).await.0.unwrap();
        assert_eq!(
            crm.find(op).await.0.unwrap(),
            Lookup::Many(vec!["1".into(), "2".into()])
        );
    }

    #[tokio::test]
    async fn statuses_map_to_classes_with_the_configured_table_first() {
        let (base, fake) = spawn().await;
        let crm = HttpCrm::new(&config(&toml(&base, &key_var("b"), ""))).unwrap();
        let cases = [
            (
                409,
                r#"{"message":"duplicate external_id"}"#,
                false,
                ErrorClass::Validation,
            ),
            (
                422,
                r#"{"error":"phone is invalid: +79990001122"}"#,
                false,
                ErrorClass::Validation,
            ),
            (400, "bad", false, ErrorClass::Validation),
            (
                403,
                "<html><h1>Forbidden</h1></html>",
                false,
                ErrorClass::Auth,
            ),
            (429, "slow down", false, ErrorClass::RateLimited),
            (500, "", true, ErrorClass::Uncertain),
            (
                503,
                r#"{"detail":"maintenance"}"#,
                false,
                ErrorClass::Uncertain,
            ),
            (200, r#"{"data":{}}"#, true, ErrorClass::Uncertain),
            (201, "created", true, ErrorClass::Uncertain),
        ];
        for (status, body, execute, class) in cases {
            fake.queued
                .lock()
                .unwrap()
                .push_back((status, body.into(), execute));
            let (res, ex) = crm.create(&lead("site:e")).await;
            let err = res.unwrap_err();
            assert_eq!(err.class, class, "{status}: {err}");
            assert_eq!(ex.response["class"], json!(class), "{status}");
            assert_clean(&err.message);
            assert_clean(&ex.response.to_string());
            if status == 429 {
                assert_eq!(err.retry_after, Some(Duration::from_secs(3)));
            } else {
                assert_eq!(err.retry_after, None);
            }
            if status == 409 {
                assert_eq!(
                    err.message,
                    "http POST create: HTTP 409 duplicate external_id"
                );
            }
            if status == 422 {
                assert_eq!(
                    err.message,
                    "http POST create: HTTP 422 phone is invalid: ***"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_wrong_key_is_auth_and_the_key_is_never_shown() {
        let (base, _fake) = spawn().await;
        let var = "LEADGATE_TEST_HTTP_KEY_wrong";
        std::env::set_var(var, "wrong-key-value");
        let crm = HttpCrm::new(&config(&toml(&base, var, ""))).unwrap();
        let (res, ex) = crm.create(&lead("site:w")).await;
        let err = res.unwrap_err();
        assert_eq!(err.class, ErrorClass::Auth);
        assert_eq!(err.message, "http POST create: HTTP 401 bad key ***");
        for text in [
            ex.request.to_string(),
            ex.response.to_string(),
            format!("{crm:?}"),
        ] {
            assert!(!text.contains("wrong-key-value"), "{text}");
        }
    }

    #[tokio::test]
    async fn an_authoritative_lookup_and_no_lookup_at_all() {
        let (base, _fake) = spawn().await;
        let crm = HttpCrm::new(&config(&toml(
            &base,
            &key_var("c"),
            "lookup_authoritative = true",
        )))
        .unwrap();
        assert!(crm.lookup_is_authoritative());
        let mut c = config(&toml(&base, &key_var("c2"), ""));
        c.lookup_url = None;
        let crm = HttpCrm::new(&c).unwrap();
        assert!(!crm.lookup_is_authoritative());
        let (res, ex) = crm.find("site:x").await;
        assert_eq!(res.unwrap_err().class, ErrorClass::Uncertain);
        assert_eq!(ex.response["class"], "uncertain");
    }

    #[tokio::test]
    async fn the_rate_limit_spaces_calls() {
        let (base, _fake) = spawn().await;
        let crm = HttpCrm::new(&config(&toml(&base, &key_var("r"), "rate_limit = 20.0"))).unwrap();
        let started = Instant::now();
        for i in 0..5 {
            crm.create(&lead(&format!("site:r{i}"))).await.0.unwrap();
        }
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn bad_configurations_get_clear_errors() {
        let base = "http://127.0.0.1:9";
        let var = key_var("bad");
        let good = config(&toml(base, &var, ""));
        assert!(HttpCrm::new(&good).is_ok());
        type Change = Box<dyn Fn(&mut HttpConfig)>;
        let cases: Vec<(Change, &str)> = vec![
            (Box::new(|c| c.method = "P O S T".into()), "method"),
            (Box::new(|c| c.create_url = "ftp://x".into()), "create_url"),
            (
                Box::new(|c| c.body = "{\"a\": {{nope}}}".into()),
                "unknown placeholder",
            ),
            (
                Box::new(|c| c.body = "{\"a\": ".into()),
                "not a JSON template",
            ),
            (
                Box::new(|c| c.body = "{\"a\": {{name}".into()),
                "never closed",
            ),
            (Box::new(|c| c.id_pointer = "data.id".into()), "id_pointer"),
            (
                Box::new(|c| c.lookup_url = Some("http://h/x?n={{name}}".into())),
                "only {{operation_id}}",
            ),
            (
                Box::new(|c| {
                    c.lookup_url = None;
                    c.lookup_authoritative = true
                }),
                "needs a lookup_url",
            ),
            (
                Box::new(|c| {
                    c.headers
                        .insert("X-T".into(), Secret::new("env:LEADGATE_TEST_SURELY_UNSET"));
                }),
                "LEADGATE_TEST_SURELY_UNSET",
            ),
            (
                Box::new(|c| {
                    c.errors.insert("abc".into(), ErrorClass::Auth);
                }),
                "status code",
            ),
            (
                Box::new(|c| {
                    c.errors.insert("409".into(), ErrorClass::Conflict);
                }),
                "conflict",
            ),
            (Box::new(|c| c.rate_limit = Some(0.0)), "rate_limit"),
        ];
        for (change, needle) in cases {
            let mut c = good.clone();
            change(&mut c);
            let err = HttpCrm::new(&c).unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
            assert!(!err.contains(KEY), "{err}");
        }
        // The header values never print, even in the configuration's Debug output.
        assert!(!format!("{good:?}").contains(KEY));
    }

    #[test]
    fn templates_render_whole_values_and_embedded_placeholders() {
        let t = parse_template(
            r#"{"id": {{operation_id}}, "e": {{email}}, "s": "[{{email}}]", "n": "{{ name }}", "k": ["{{title}}", 3]}"#,
            &[],
        )
        .unwrap();
        let out = render(&t, &lead("op-1"));
        assert_eq!(
            out,
            json!({"id": "op-1", "e": null, "s": "[]", "n": "Ivan \"Vanya\"\nPetrov", "k": ["Form", 3]})
        );
        // Braces inside string literals of the template are left alone.
        let t = parse_template(r#"{"raw": "a {b} \" {{source}}"}"#, &[]).unwrap();
        assert_eq!(render(&t, &lead("x")), json!({"raw": "a {b} \" site"}));
        assert_eq!(
            lookup_target("http://h/l?k={{operation_id}}", "site:a b/é"),
            "http://h/l?k=site%3Aa%20b%2F%C3%A9"
        );
    }

    #[test]
    fn default_classification_table() {
        use ErrorClass::*;
        use Target::*;
        const HTML: &str =
            "<html><head><title>404 Not Found</title></head><body>nginx</body></html>";
        const JSON: &str = r#"{"error":"invalid phone"}"#;
        let none = BTreeMap::new();
        // (status, what the request addresses, body, class)
        for (status, target, body, class) in [
            // That lead's data, or the entity an update names (deleted): terminal.
            (400, Create, JSON, Validation),
            (400, Create, "bad phone", Validation),
            (409, Create, JSON, Validation),
            (422, Create, JSON, Validation),
            (404, Entity, JSON, Validation),
            (404, Entity, "", Validation),
            (410, Entity, JSON, Validation),
            // The connector's request refused: credentials, method, address — pause.
            (401, Create, JSON, Auth),
            (402, Create, JSON, Auth),
            (403, Create, JSON, Auth),
            (403, Entity, HTML, Auth),
            (404, Create, JSON, Auth),
            (404, Create, HTML, Auth),
            (404, Create, "", Auth),
            (404, Entity, HTML, Auth),
            (404, Lookup, HTML, Auth),
            // (a lookup's 404 that is not a web page is read as "not found")
            (404, Lookup, JSON, Validation),
            (405, Create, "", Auth),
            (405, Entity, JSON, Auth),
            (400, Create, HTML, Auth),
            (302, Create, "", Auth),
            (301, Entity, "", Auth),
            // Refused before execution: later.
            (429, Create, "", RateLimited),
            // A timeout is an unknown outcome: looked up, never a refusal.
            (408, Create, "", Uncertain),
            (408, Entity, HTML, Uncertain),
            // The CRM failed while executing, or an answer we cannot read.
            (500, Create, JSON, Uncertain),
            (502, Create, HTML, Uncertain),
            (504, Create, "", Uncertain),
        ] {
            assert_eq!(
                classify(
                    StatusCode::from_u16(status).unwrap(),
                    &none,
                    target,
                    body.as_bytes()
                ),
                class,
                "{status} {target:?} {body}"
            );
        }
        // The configured table comes first.
        let table = BTreeMap::from([(503, RateLimited), (401, Validation), (404, Validation)]);
        let c = |status: StatusCode| classify(status, &table, Create, b"");
        assert_eq!(c(StatusCode::SERVICE_UNAVAILABLE), RateLimited);
        assert_eq!(c(StatusCode::UNAUTHORIZED), Validation);
        assert_eq!(c(StatusCode::NOT_FOUND), Validation);
    }
}
