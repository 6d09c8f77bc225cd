//! amoCRM / Kommo over API v4, with a long-lived token or with OAuth.
//!
//! amoCRM has no idempotent create either: `request_id` is only echoed back. So every
//! lead carries the operation_id three times — in a configured custom text field, as a
//! tag and as `request_id` — and a lost answer is reconciled by
//! `GET /api/v4/leads?query=<operation_id>` with an exact match on the custom field
//! in code (the search is a substring search over filled fields). That search may lag
//! behind a create, so "not found" is NOT proof: [`Crm::lookup_is_authoritative`] is
//! false and an unfound uncertain create goes to a person.
//!
//! The adapter paces itself (7 requests/s by default, shared by the whole process,
//! see [`super::rate`]): an account that keeps hitting 429 gets blocked, and then every
//! call answers 403 with an nginx page.
//!
//! OAuth: amoCRM ROTATES refresh tokens (every refresh answers a new one and the old
//! one stops working), and several processes on several machines share one account.
//! So the current pair lives in the operations database ([`CrmAccess::crm_token`]), one
//! row per connector, and the access token is kept in memory. The configured
//! refresh token only seeds that row on the first run. A refresh happens when the
//! access token has (nearly) expired, or once per call on a 401; it is written back
//! with a compare-and-set on the row's version, and whoever loses the race (or finds
//! the row already newer than what it holds) uses the winner's tokens instead of
//! refreshing again. In one process refreshes are serialised per account. A refresh
//! refused with 400/401 is `auth`: the connector pauses and a person reconnects the
//! integration (a new `refresh_token` in the configuration is tried when the stored one
//! is refused). Tokens never reach a message, an exchange or a log line.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, TimeDelta, Utc};
use reqwest::header::{HeaderMap, ACCEPT};
use reqwest::StatusCode;
use serde_json::{json, Map, Value};

use super::rate::{self, RateLimiter};
use super::{
    classify_transport, clean_message, note_error, BatchAnswer, ConfigError, ContactChoice, Crm,
    CrmError, EntityUpdate, Exchange, Lead, LeadChanges, Lookup,
};
use crate::domain::ErrorClass;
use crate::store::{self, CrmAccess, CrmToken};

pub mod reads;

/// The connector name: what gets paused when the account stops accepting calls.
pub const CONNECTOR: &str = "amocrm";
/// amoCRM's documented limit per integration.
pub const DEFAULT_RATE_LIMIT: f64 = 7.0;
/// At most this many leads per search page (amoCRM's maximum).
pub const SEARCH_LIMIT: u32 = 250;
/// At most this many leads in one `leads/complex` request, as amoCRM allows.
pub const MAX_COMPLEX: usize = 50;
/// How long all calls of the process wait after a 429 that named no `Retry-After`.
const COOL_DOWN: Duration = Duration::from_secs(1);
/// The longest a 429 holds every call of the process: the rest is the operation's own
/// backoff (its `retry_after`), so one long header cannot freeze the worker's leases.
const MAX_HOLD: Duration = Duration::from_secs(5);

const CREATE: &str = "POST /api/v4/leads/complex";
const UPDATE_LEAD: &str = "PATCH /api/v4/leads/{id}";
const GET_LEAD: &str = "GET /api/v4/leads/{id}?with=contacts";
const GET_CONTACT: &str = "GET /api/v4/contacts/{id}";
const UPDATE_CONTACT: &str = "PATCH /api/v4/contacts/{id}";
const SEARCH: &str = "GET /api/v4/leads";
const CONTACT_SEARCH: &str = "GET /api/v4/contacts";
const REFRESH: &str = "POST /oauth2/access_token";
/// An access token is refreshed this long before it expires at most (less for
/// short-lived tokens: a tenth of the time it had left when it was obtained).
const MAX_REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// After our refresh was refused, how often and how long apart the shared row is read
/// again: another process may have refreshed with the same token a moment earlier and
/// not have saved its answer yet.
const REFUSED_RECHECKS: u32 = 3;
const REFUSED_RECHECK_EVERY: Duration = Duration::from_millis(200);

/// How the adapter authenticates.
#[derive(Clone)]
pub enum Auth {
    /// A long-lived token (a JWT), sent as it is.
    Token(String),
    /// OAuth with rotating refresh tokens kept in the operations database.
    OAuth(OAuth),
}

/// An amoCRM OAuth integration.
#[derive(Clone)]
pub struct OAuth {
    pub client_id: String,
    pub client_secret: String,
    pub redirect_uri: String,
    /// The configured refresh token: seeds the shared row on the first run, and is tried
    /// once when the stored one is refused (a person put a fresh one in the
    /// configuration after reconnecting the integration).
    pub refresh_token: String,
    /// Where the current tokens live, shared by every process.
    pub store: Arc<dyn CrmAccess>,
    /// Seals the tokens in the store (`crm_tokens` holds ciphertext only).
    pub vault: crate::crm::vault::Vault,
}

impl OAuth {
    /// The shared row, opened. A row this key cannot open (the key changed, or the row
    /// is damaged) is logged and read as if it held the configured refresh token: the
    /// next refresh tries that one and, if amoCRM accepts it, overwrites the row
    /// (compare-and-set on its version); if not, the connector pauses as for any refused
    /// refresh token.
    async fn read_row(&self) -> store::Result<Option<CrmToken>> {
        let Some(row) = self.store.crm_token(CONNECTOR).await? else {
            return Ok(None);
        };
        let opened = (|| {
            Ok::<_, crate::crm::vault::OpenError>(CrmToken {
                access_token: row
                    .access_token
                    .as_deref()
                    .map(|t| self.vault.open(ACCESS_CONTEXT, t))
                    .transpose()?,
                refresh_token: self.vault.open(REFRESH_CONTEXT, &row.refresh_token)?,
                ..row.clone()
            })
        })();
        Ok(Some(opened.unwrap_or_else(|e| {
            tracing::error!(
                error = %e,
                "amocrm: the stored OAuth tokens cannot be decrypted (was LEADGATE_TOKEN_KEY or \
                 token_key_file changed?); trying the configured refresh_token"
            );
            CrmToken {
                access_token: None,
                refresh_token: self.refresh_token.clone(),
                expires_at: None,
                version: row.version,
            }
        })))
    }

    /// Saves `token` sealed (see [`CrmAccess::save_crm_token`] for `expected_version`).
    async fn write_row(
        &self,
        token: &CrmToken,
        expected_version: Option<i64>,
    ) -> store::Result<bool> {
        let sealed = CrmToken {
            access_token: token
                .access_token
                .as_deref()
                .map(|t| self.vault.seal(ACCESS_CONTEXT, t)),
            refresh_token: self.vault.seal(REFRESH_CONTEXT, &token.refresh_token),
            ..token.clone()
        };
        self.store
            .save_crm_token(CONNECTOR, &sealed, expected_version)
            .await
    }
}

/// Associated data of the sealed columns: a value cannot be moved to another column.
const ACCESS_CONTEXT: &str = "crm_tokens/amocrm/access_token";
const REFRESH_CONTEXT: &str = "crm_tokens/amocrm/refresh_token";

/// How to reach one amoCRM account.
#[derive(Clone)]
pub struct Settings {
    /// `https://{subdomain}.amocrm.ru` (a trailing `/` or `/api/v4` is fine).
    pub base_url: String,
    pub auth: Auth,
    /// The custom text field that holds the operation_id.
    pub operation_field_id: u64,
    pub pipeline_id: Option<u64>,
    /// Requests per second, for all calls of this process to this account.
    pub rate_limit: f64,
    pub timeout: Duration,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match &self.auth {
            Auth::Token(_) => "token ***".to_owned(),
            Auth::OAuth(o) => format!("oauth client_id={} ***", o.client_id),
        };
        f.debug_struct("Settings")
            .field("base_url", &self.base_url)
            .field("auth", &auth)
            .field("operation_field_id", &self.operation_field_id)
            .field("pipeline_id", &self.pipeline_id)
            .field("rate_limit", &self.rate_limit)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The access token in use, as far as this adapter knows.
#[derive(Clone)]
struct Current {
    access: String,
    /// The shared row's version this token came with.
    version: i64,
    /// From then on the token is refreshed before use.
    refresh_at: DateTime<Utc>,
}

struct OAuthState {
    config: OAuth,
    current: Mutex<Option<Current>>,
    /// A refreshed pair the database did not take (it was down): saved again before
    /// the next call, with the version it was refreshed from.
    unsaved: Mutex<Option<(CrmToken, i64)>>,
    /// One refresh at a time per account in this process.
    refreshing: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Clone)]
enum Credentials {
    Token(String),
    OAuth(Arc<OAuthState>),
}

/// A refresh that failed: `refused` when amoCRM said no to the refresh token.
struct GrantError {
    refused: bool,
    error: CrmError,
}

/// An amoCRM connector.
#[derive(Clone)]
pub struct AmoCrm {
    /// Without a trailing `/`.
    base: String,
    credentials: Credentials,
    field_id: u64,
    pipeline_id: Option<u64>,
    /// Look the lead's contact up by phone and e-mail before the create and attach the
    /// one found by id (`link_contacts`).
    link_contacts: bool,
    limiter: Arc<RateLimiter>,
    rate_limit: f64,
    /// Each request's cut-off, and the budget of a whole batch create.
    timeout: Duration,
    client: reqwest::Client,
}

impl std::fmt::Debug for AmoCrm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmoCrm")
            .field("base", &self.base)
            .field("credentials", &"***")
            .field("field_id", &self.field_id)
            .field("pipeline_id", &self.pipeline_id)
            .finish()
    }
}

impl AmoCrm {
    pub fn new(settings: Settings) -> Result<AmoCrm, ConfigError> {
        let mut base = settings.base_url.trim().trim_end_matches('/').to_owned();
        if let Some(stripped) = base.strip_suffix("/api/v4") {
            base = stripped.to_owned();
        }
        let parsed = reqwest::Url::parse(&base)
            .map_err(|e| ConfigError(format!("the amoCRM base_url is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(ConfigError(
                "the amoCRM base_url must be an http(s) URL with a host".into(),
            ));
        }
        let credentials = match settings.auth {
            Auth::Token(token) => {
                let token = token.trim().to_owned();
                if token.is_empty() {
                    return Err(ConfigError("the amoCRM token is empty".into()));
                }
                Credentials::Token(token)
            }
            Auth::OAuth(mut o) => {
                o.client_id = o.client_id.trim().to_owned();
                o.client_secret = o.client_secret.trim().to_owned();
                o.redirect_uri = o.redirect_uri.trim().to_owned();
                o.refresh_token = o.refresh_token.trim().to_owned();
                if [
                    &o.client_id,
                    &o.client_secret,
                    &o.redirect_uri,
                    &o.refresh_token,
                ]
                .iter()
                .any(|v| v.is_empty())
                {
                    return Err(ConfigError(
                        "amoCRM OAuth needs client_id, client_secret, redirect_uri and refresh_token"
                            .into(),
                    ));
                }
                Credentials::OAuth(Arc::new(OAuthState {
                    refreshing: refresh_lock(&format!("{base}\n{}", o.client_id)),
                    config: o,
                    current: Mutex::new(None),
                    unsaved: Mutex::new(None),
                }))
            }
        };
        if settings.operation_field_id == 0 {
            return Err(ConfigError(
                "amoCRM operation_field_id must be the id of a custom text field".into(),
            ));
        }
        if !(settings.rate_limit.is_finite() && settings.rate_limit > 0.0) {
            return Err(ConfigError(
                "amoCRM rate_limit must be a positive number of requests per second".into(),
            ));
        }
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            // A redirect would turn the POST into a GET; moved accounts need a person.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ConfigError(format!("cannot build the HTTP client: {e}")))?;
        Ok(AmoCrm {
            limiter: rate::shared(&base, settings.rate_limit),
            rate_limit: settings.rate_limit,
            timeout: settings.timeout,
            base,
            credentials,
            field_id: settings.operation_field_id,
            pipeline_id: settings.pipeline_id,
            link_contacts: false,
            client,
        })
    }

    /// Keeps the account's request pace in `store`, shared by every process on it
    /// (without it the pace is this process's).
    pub fn paced_in(mut self, store: Arc<dyn CrmAccess>) -> Self {
        self.limiter = Arc::new(RateLimiter::in_store(store, &self.base, self.rate_limit, 1));
        self
    }

    /// With `on`, every create first looks the lead's contact up by phone and e-mail
    /// and attaches the one found by id instead of creating a new one.
    pub fn with_contact_links(mut self, on: bool) -> Self {
        self.link_contacts = on;
        self
    }

    /// Finds the lead's contact before the create (`GET /api/v4/contacts?query=`, by
    /// the phone's digits, then by the e-mail), matched exactly as
    /// [`LeadChanges::phone_key`] and [`LeadChanges::email_key`] compare them: the
    /// newest (highest id) of those found. Every id found is listed in `summary`.
    async fn existing_contact(
        &self,
        lead: &Lead,
        summary: &mut Map<String, Value>,
    ) -> Result<Option<String>, CrmError> {
        let wanted = [
            ("PHONE", lead.phone.as_deref().map(LeadChanges::phone_key)),
            ("EMAIL", lead.email.as_deref().map(LeadChanges::email_key)),
        ];
        let mut found: Vec<u64> = Vec::new();
        for (code, key) in wanted {
            let Some(key) = key.filter(|k| !k.is_empty()) else {
                continue;
            };
            let url = reqwest::Url::parse_with_params(
                &format!("{}/api/v4/contacts", self.base),
                &[("query", key.as_str()), ("limit", "50")],
            )
            .map_err(|e| {
                CrmError::new(
                    ErrorClass::Auth,
                    format!("{CONNECTOR} {CONTACT_SEARCH}: invalid base URL: {e}"),
                )
            })?;
            let mut call = Map::new();
            let answer = self
                .call(
                    CONTACT_SEARCH,
                    self.client.get(url),
                    &lead.contact_values(),
                    &mut call,
                )
                .await;
            summary.insert(
                format!("contacts_by_{}", code.to_lowercase()),
                Value::Object(call),
            );
            let (status, bytes) = answer?;
            if status == StatusCode::NO_CONTENT || bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let json: Value = serde_json::from_slice(&bytes).map_err(|_| {
                CrmError::new(
                    ErrorClass::Uncertain,
                    format!("{CONNECTOR} {CONTACT_SEARCH}: the answer is not JSON"),
                )
            })?;
            for contact in json
                .pointer("/_embedded/contacts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let holds = values_of_code(contact, code).iter().any(|v| {
                    let k = match code {
                        "PHONE" => LeadChanges::phone_key(v),
                        _ => LeadChanges::email_key(v),
                    };
                    k == key
                });
                if let Some(id) = contact.get("id").and_then(Value::as_u64).filter(|_| holds) {
                    if !found.contains(&id) {
                        found.push(id);
                    }
                }
            }
        }
        summary.insert("contacts_found".into(), json!(found));
        Ok(found.iter().max().map(u64::to_string))
    }

    /// The timeline's summary of one lead's create (which contact fields it had, never
    /// their values).
    fn create_request(&self, lead: &Lead) -> Value {
        json!({
            "connector": CONNECTOR,
            "method": CREATE,
            "request_id": lead.operation_id,
            "operation_field_id": self.field_id,
            "tag": lead.operation_id,
            "pipeline_id": self.pipeline_id,
            "contact": {
                "name": lead.name.is_some(),
                "phone": lead.phone.is_some(),
                "email": lead.email.is_some(),
            },
        })
    }

    /// The one lead of a `leads/complex` call, with its one embedded contact: a new
    /// one, or the existing `contact` attached by id.
    fn lead_body(&self, lead: &Lead, existing: Option<&str>) -> Value {
        let op = &lead.operation_id;
        let mut body = Map::new();
        body.insert(
            "name".into(),
            json!(lead.title.clone().unwrap_or_else(|| format!("Lead {op}"))),
        );
        if let Some(p) = self.pipeline_id {
            body.insert("pipeline_id".into(), json!(p));
        }
        body.insert("request_id".into(), json!(op));
        body.insert(
            "custom_fields_values".into(),
            json!([{"field_id": self.field_id, "values": [{"value": op}]}]),
        );
        let mut embedded = Map::new();
        embedded.insert("tags".into(), json!([{"name": op}]));
        let mut contact = Map::new();
        if let Some(name) = &lead.name {
            contact.insert("first_name".into(), json!(name));
        }
        let mut comms = Vec::new();
        if let Some(phone) = &lead.phone {
            comms.push(
                json!({"field_code": "PHONE", "values": [{"value": phone, "enum_code": "WORK"}]}),
            );
        }
        if let Some(email) = &lead.email {
            comms.push(
                json!({"field_code": "EMAIL", "values": [{"value": email, "enum_code": "WORK"}]}),
            );
        }
        if !comms.is_empty() {
            contact.insert("custom_fields_values".into(), Value::Array(comms));
        }
        if let Some(id) = existing.and_then(|id| id.parse::<u64>().ok()) {
            contact = Map::new();
            contact.insert("id".into(), json!(id));
        }
        if !contact.is_empty() {
            embedded.insert("contacts".into(), json!([contact]));
        }
        body.insert("_embedded".into(), Value::Object(embedded));
        Value::Object(body)
    }

    /// Sends one request (after the shared limiter lets it go) and returns a 2xx answer,
    /// or the classified failure. Fills `summary` with `status`, `duration_ms` and, on
    /// failure, `class` and `message`. With OAuth, a 401 refreshes the access token and
    /// sends the request once more (a 401 is refused before anything is executed).
    async fn call(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
        redact: &[&str],
        summary: &mut Map<String, Value>,
    ) -> Result<(StatusCode, Bytes), CrmError> {
        let (mut bearer, mut version) = match self.bearer(None, summary).await {
            Ok(b) => b,
            Err(e) => {
                note_error(summary, &e);
                return Err(e);
            }
        };
        let mut again = request.try_clone();
        let mut request = request;
        loop {
            let (status, result) = self.send(what, request, &bearer, redact, summary).await;
            let (seen, retry) = match (status, version, again.take()) {
                (Some(StatusCode::UNAUTHORIZED), Some(seen), Some(retry)) => (seen, retry),
                _ => return result,
            };
            // The access token stopped working before its time: refresh once, retry once.
            (bearer, version) = match self.bearer(Some(seen), summary).await {
                Ok(b) => b,
                Err(e) => {
                    note_error(summary, &e);
                    return Err(e);
                }
            };
            request = retry;
        }
    }

    /// One request with `bearer`: `(status if any answer came, result)`.
    async fn send(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
        bearer: &str,
        redact: &[&str],
        summary: &mut Map<String, Value>,
    ) -> (Option<StatusCode>, Result<(StatusCode, Bytes), CrmError>) {
        let mut redact = redact.to_vec();
        redact.push(bearer);
        self.limiter.acquire_unless_prepaid().await;
        let started = Instant::now();
        let mut answered = None;
        let result = async {
            let resp = request
                .bearer_auth(bearer)
                .header(ACCEPT, "application/hal+json, application/json")
                .send()
                .await
                .map_err(|e| classify_transport(CONNECTOR, what, e, &redact))?;
            let status = resp.status();
            answered = Some(status);
            summary.insert("status".into(), json!(status.as_u16()));
            let headers = resp.headers().clone();
            let body = resp
                .bytes()
                .await
                .map_err(|e| classify_transport(CONNECTOR, what, e, &redact))?;
            if status.is_success() {
                Ok((status, body))
            } else {
                let invalid = invalid_request_ids(&body);
                if !invalid.is_empty() {
                    summary.insert("invalid_request_ids".into(), json!(invalid));
                }
                Err(error_answer(what, status, &headers, &body, &redact))
            }
        }
        .await;
        summary.insert(
            "duration_ms".into(),
            json!(started.elapsed().as_millis() as u64),
        );
        if let Err(e) = &result {
            self.slow_down(e).await;
            note_error(summary, e);
            tracing::debug!(what, class = %e.class, "amocrm call failed");
        }
        (answered, result)
    }

    async fn slow_down(&self, e: &CrmError) {
        if e.class == ErrorClass::RateLimited {
            // Slow the whole process down, not just this operation: repeated 429s
            // get the account blocked.
            self.limiter
                .hold(e.retry_after.unwrap_or(COOL_DOWN).min(MAX_HOLD))
                .await;
        }
    }

    /// The token to send and, with OAuth, the shared row version it came with. `stale`
    /// is the version whose access token was just refused with a 401.
    async fn bearer(
        &self,
        stale: Option<i64>,
        summary: &mut Map<String, Value>,
    ) -> Result<(String, Option<i64>), CrmError> {
        let st = match &self.credentials {
            Credentials::Token(t) => return Ok((t.clone(), None)),
            Credentials::OAuth(st) => st,
        };
        self.save_unsaved(st).await;
        let current = st.current.lock().expect("token state").clone();
        let current = match (current, stale) {
            (Some(c), None) if st.config.store.now() < c.refresh_at => c,
            (c, stale) => {
                let seen = stale.or(c.map(|c| c.version));
                // In a task of its own: amoCRM rotates the pair as it answers, so a refresh
                // must run to its end and be saved even when the worker cuts the call that
                // needed it (its budget ran out); cancelled halfway, the new pair would be
                // lost and the old one is dead.
                let (this, st) = (self.clone(), Arc::clone(st));
                let refreshed = tokio::spawn(async move {
                    let mut summary = Map::new();
                    let r = this.refresh(&st, seen, &mut summary).await;
                    (r, summary)
                })
                .await;
                let (r, more) = refreshed.map_err(|e| {
                    CrmError::new(
                        ErrorClass::NotSent,
                        format!("{CONNECTOR} token refresh failed: {e}"),
                    )
                })?;
                summary.extend(more);
                r?
            }
        };
        Ok((current.access, Some(current.version)))
    }

    /// Gets a working access token, refreshing only if nobody else (in this process or
    /// another) already did since `seen`.
    async fn refresh(
        &self,
        st: &OAuthState,
        seen: Option<i64>,
        summary: &mut Map<String, Value>,
    ) -> Result<Current, CrmError> {
        let _one_at_a_time = st.refreshing.lock().await;
        let newer = |version: i64| seen.is_none_or(|s| version > s);
        if let Some(c) = st.current.lock().expect("token state").clone() {
            if newer(c.version) && st.config.store.now() < c.refresh_at {
                return Ok(c);
            }
        }
        let row = self.load(st).await?;
        if newer(row.version) {
            if let Some(c) = adopt(st, &row) {
                return Ok(c);
            }
        }
        let refused = match self.grant(st, &row.refresh_token, summary).await {
            Ok(fresh) => return self.save(st, fresh, row.version).await,
            Err(GrantError {
                refused: true,
                error,
            }) => error,
            Err(GrantError { error, .. }) => return Err(error),
        };
        // Another process may have used the same refresh token a moment earlier.
        let mut latest = row.version;
        for _ in 0..REFUSED_RECHECKS {
            tokio::time::sleep(REFUSED_RECHECK_EVERY).await;
            let again = self.load(st).await?;
            latest = again.version;
            if again.version > row.version {
                if let Some(c) = adopt(st, &again) {
                    return Ok(c);
                }
            }
        }
        // A person may have reconnected the integration and configured a fresh token.
        let configured = st.config.refresh_token.clone();
        if configured != row.refresh_token {
            if let Ok(fresh) = self.grant(st, &configured, summary).await {
                return self.save(st, fresh, latest).await;
            }
        }
        tracing::warn!(
            "amocrm: the refresh token was refused; the integration needs a new refresh_token"
        );
        Err(refused)
    }

    /// The shared row, seeded from the configured refresh token on the first run.
    async fn load(&self, st: &OAuthState) -> Result<CrmToken, CrmError> {
        let store = &st.config;
        let unavailable = |e: store::StoreError| {
            CrmError::new(ErrorClass::NotSent, format!("{CONNECTOR} token store: {e}"))
        };
        if let Some(row) = store.read_row().await.map_err(unavailable)? {
            return Ok(row);
        }
        let seed = CrmToken {
            access_token: None,
            refresh_token: st.config.refresh_token.clone(),
            expires_at: None,
            version: 0,
        };
        // Insert-if-absent: another process may seed (or refresh) at the same time.
        store.write_row(&seed, None).await.map_err(unavailable)?;
        store.read_row().await.map_err(unavailable)?.ok_or_else(|| {
            CrmError::new(
                ErrorClass::NotSent,
                format!("{CONNECTOR} token store: no token row"),
            )
        })
    }

    /// Writes a fresh pair under the version it was refreshed from; if someone else
    /// wrote first, theirs is the shared truth.
    async fn save(&self, st: &OAuthState, fresh: CrmToken, from: i64) -> Result<Current, CrmError> {
        let store = &st.config;
        let fresh = CrmToken {
            version: from + 1,
            ..fresh
        };
        match store.write_row(&fresh, Some(from)).await {
            Ok(true) => {}
            Ok(false) => {
                if let Ok(Some(theirs)) = store.read_row().await {
                    if let Some(c) = adopt(st, &theirs) {
                        return Ok(c);
                    }
                }
            }
            Err(e) => {
                // The old refresh token is dead now: never drop the new pair.
                tracing::error!(error = %e, "amocrm: cannot save the refreshed tokens; keeping them and saving again before the next call");
                *st.unsaved.lock().expect("token state") = Some((fresh.clone(), from));
            }
        }
        adopt(st, &fresh).ok_or_else(|| {
            CrmError::new(
                ErrorClass::NotSent,
                format!("{CONNECTOR} {REFRESH}: no access token"),
            )
        })
    }

    async fn save_unsaved(&self, st: &OAuthState) {
        let pending = st.unsaved.lock().expect("token state").clone();
        if let Some((token, from)) = pending {
            // `false`: someone refreshed since; their row wins and ours is dropped.
            if st.config.write_row(&token, Some(from)).await.is_ok() {
                *st.unsaved.lock().expect("token state") = None;
            }
        }
    }

    /// `POST /oauth2/access_token` with `refresh_token`: the new pair, not yet saved.
    async fn grant(
        &self,
        st: &OAuthState,
        refresh_token: &str,
        summary: &mut Map<String, Value>,
    ) -> Result<CrmToken, GrantError> {
        let o = &st.config;
        let redact = [o.client_secret.as_str(), refresh_token];
        let other = |error: CrmError| GrantError {
            refused: false,
            error,
        };
        self.limiter.acquire().await;
        let started = Instant::now();
        let mut note = Map::new();
        let result = async {
            let resp = self
                .client
                .post(format!("{}/oauth2/access_token", self.base))
                .header(ACCEPT, "application/json")
                .json(&json!({
                    "client_id": o.client_id,
                    "client_secret": o.client_secret,
                    "grant_type": "refresh_token",
                    "refresh_token": refresh_token,
                    "redirect_uri": o.redirect_uri,
                }))
                .send()
                .await
                .map_err(|e| other(not_sent(classify_transport(CONNECTOR, REFRESH, e, &redact))))?;
            let status = resp.status();
            note.insert("status".into(), json!(status.as_u16()));
            let headers = resp.headers().clone();
            let body = resp
                .bytes()
                .await
                .map_err(|e| other(not_sent(classify_transport(CONNECTOR, REFRESH, e, &redact))))?;
            if !status.is_success() {
                let mut error = error_answer(REFRESH, status, &headers, &body, &redact);
                let refused = matches!(status.as_u16(), 400 | 401);
                error.class = match status.as_u16() {
                    429 => ErrorClass::RateLimited,
                    408 | 500..=599 => ErrorClass::NotSent,
                    // Refused credentials, a blocked account, a wrong base URL: a person.
                    _ => ErrorClass::Auth,
                };
                return Err(GrantError { refused, error });
            }
            let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let text = |k: &str| {
                json.get(k)
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
                    .map(str::to_owned)
            };
            let expires_in = json.get("expires_in").and_then(Value::as_u64);
            match (text("access_token"), text("refresh_token"), expires_in) {
                (Some(access), Some(refresh), Some(secs)) => Ok(CrmToken {
                    access_token: Some(access),
                    refresh_token: refresh,
                    expires_at: Some(store::after(o.store.now(), Duration::from_secs(secs))),
                    version: 0,
                }),
                _ => Err(other(CrmError::new(
                    ErrorClass::NotSent,
                    format!("{CONNECTOR} {REFRESH}: HTTP {} without access_token, refresh_token and expires_in", status.as_u16()),
                ))),
            }
        }
        .await;
        note.insert(
            "duration_ms".into(),
            json!(started.elapsed().as_millis() as u64),
        );
        match &result {
            Ok(_) => {
                tracing::info!("amocrm: access token refreshed");
            }
            Err(e) => {
                self.slow_down(&e.error).await;
                note.insert("class".into(), json!(e.error.class));
                tracing::debug!(class = %e.error.class, "amocrm token refresh failed");
            }
        }
        summary.insert("token_refresh".into(), Value::Object(note));
        result
    }
}

/// The process-wide refresh lock of one account (`base URL + client_id`).
fn refresh_lock(key: &str) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    LOCKS
        .get_or_init(Default::default)
        .lock()
        .expect("refresh locks")
        .entry(key.to_owned())
        .or_default()
        .clone()
}

/// Makes `row` the token in use if its access token still works.
fn adopt(st: &OAuthState, row: &CrmToken) -> Option<Current> {
    // The store's clock: the row is shared, and its expiry was written by whichever
    // process refreshed it.
    let now = st.config.store.now();
    let (Some(access), Some(expires_at)) = (&row.access_token, row.expires_at) else {
        return None;
    };
    if expires_at <= now {
        return None;
    }
    let margin = ((expires_at - now) / 10)
        .min(TimeDelta::from_std(MAX_REFRESH_MARGIN).expect("a small duration"));
    let current = Current {
        access: access.clone(),
        version: row.version,
        refresh_at: expires_at - margin,
    };
    *st.current.lock().expect("token state") = Some(current.clone());
    Some(current)
}

/// A refresh that did not go through never sent the lead either.
fn not_sent(mut e: CrmError) -> CrmError {
    if e.class == ErrorClass::Uncertain {
        e.class = ErrorClass::NotSent;
    }
    e
}

/// What a request addresses, for [`classify`]: a 404 means something else for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// An account-wide endpoint (`leads/complex`, the lead and contact searches, the
    /// token endpoint): it always exists, so a 404 there means the address or the API
    /// is wrong.
    Account,
    /// One entity by id (an update's reads and PATCHes): a JSON 404 means that entity
    /// is not in the account any more (deleted) — about the entity, not the connector.
    Entity,
}

/// amoCRM's `response.error_code`s that refuse the account or the integration, not a
/// lead's data (even when they come with a 400): 101 account not found, 104 method
/// unavailable, 110 authorization failed, 111 captcha required, 112 user disabled,
/// 113 access denied from this IP, 244 no rights (to add leads, or the subscription
/// ended), 401 no such account on the server, 403 account blocked.
const ACCOUNT_CODES: &[u64] = &[101, 104, 110, 111, 112, 113, 244, 401, 403];

/// The one classification of an amoCRM answer that is not a success (docs/crm.md):
///
/// | answer | class |
/// |---|---|
/// | 400 with `validation-errors`, 400 naming the lead's data, 409/422 and other 4xx | validation — that lead's data, terminal |
/// | 404 (JSON) for one entity by id (`Target::Entity`: an update's lead or contact) | validation — the entity was deleted |
/// | 400 with an account-level `error_code` (244 no rights, 110, 113 …) | auth — pause the connector |
/// | 401; 402 subscription ended; 403 account blocked / IP not allowed | auth — pause the connector |
/// | 404 on an account-wide endpoint, any 405, an HTML page where JSON was expected | auth — the address or the API is wrong |
/// | 3xx (a moved account we do not follow) | auth — the base URL needs a person |
/// | 408 | uncertain — a timeout is an unknown outcome: look the key up |
/// | 429 (body may not be JSON) | rate limited — `Retry-After`, slow down |
/// | 5xx, a 2xx we cannot read, anything else | uncertain — reconcile first |
///
/// Timeouts and dropped connections are classified by [`classify_transport`].
pub fn classify(status: StatusCode, target: Target, body: &[u8]) -> ErrorClass {
    let json = serde_json::from_slice::<Value>(body).ok();
    let html = json.is_none() && super::looks_like_html(&String::from_utf8_lossy(body));
    let account_code = json
        .as_ref()
        .and_then(|j| j.pointer("/response/error_code"))
        .and_then(|c| match c {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        })
        .is_some_and(|c| ACCOUNT_CODES.contains(&c));
    match status.as_u16() {
        408 => ErrorClass::Uncertain,
        429 => ErrorClass::RateLimited,
        300..=399 => ErrorClass::Auth,
        401..=403 => ErrorClass::Auth,
        404 if target == Target::Entity && json.is_some() => ErrorClass::Validation,
        404 | 405 => ErrorClass::Auth,
        400..=499 if html || account_code => ErrorClass::Auth,
        400..=499 => ErrorClass::Validation,
        _ => ErrorClass::Uncertain,
    }
}

/// What `what` (one of this adapter's request names) addresses.
fn target_of(what: &str) -> Target {
    if [UPDATE_LEAD, GET_LEAD, GET_CONTACT, UPDATE_CONTACT].contains(&what) {
        Target::Entity
    } else {
        Target::Account
    }
}

/// A classified error from a non-2xx answer: problem+json (`title`, `detail`,
/// `validation-errors`), amoCRM's older `{"response":{"error","error_code"}}`, or a
/// body that is not JSON at all (an nginx page, a plain-text 429).
fn error_answer(
    what: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    redact: &[&str],
) -> CrmError {
    let class = classify(status, target_of(what), body);
    let desc = match serde_json::from_slice::<Value>(body) {
        Ok(json) if json.is_object() => problem_text(&json),
        Ok(_) => "unexpected JSON answer".to_owned(),
        Err(_) if body.iter().all(u8::is_ascii_whitespace) => "(empty body)".to_owned(),
        Err(_) => format!("(not JSON) {}", String::from_utf8_lossy(body)),
    };
    let message = clean_message(
        &format!("{CONNECTOR} {what}: HTTP {} {desc}", status.as_u16()),
        redact,
    );
    CrmError {
        class,
        message,
        retry_after: (class == ErrorClass::RateLimited)
            .then(|| rate::retry_after(headers))
            .flatten(),
    }
}

/// `title: detail; code path: detail; ...` from a problem+json body.
fn problem_text(json: &Value) -> String {
    let s = |v: Option<&Value>| match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    let mut parts = Vec::new();
    let title = s(json.get("title"));
    let detail = s(json.get("detail"));
    match (title.is_empty(), detail.is_empty()) {
        (false, false) => parts.push(format!("{title}: {detail}")),
        (false, true) => parts.push(title),
        (true, false) => parts.push(detail),
        (true, true) => {}
    }
    if let Some(resp) = json.get("response") {
        let code = s(resp.get("error_code"));
        let error = s(resp.get("error"));
        parts.push(format!("code {code}: {error}"));
    }
    for entity in json
        .get("validation-errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for e in entity
            .get("errors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            parts.push(format!(
                "{} {}: {}",
                s(e.get("code")),
                s(e.get("path")),
                s(e.get("detail"))
            ));
        }
    }
    if parts.is_empty() {
        "unexpected JSON answer".to_owned()
    } else {
        parts.join("; ")
    }
}

/// An entity id: amoCRM sends integers, a proxy may send digit strings.
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

/// The rows of a `leads/complex` answer (`[{"id":..,"request_id":[..],"merged":..}]`).
fn complex_rows(body: &[u8]) -> Option<Vec<Value>> {
    let json: Value = serde_json::from_slice(body).ok()?;
    match json {
        Value::Array(rows) => Some(rows),
        other => other.pointer("/_embedded/leads")?.as_array().cloned(),
    }
}

/// A row's lead id and what the timeline keeps of it.
fn complex_row(row: &Value) -> Option<(String, Value)> {
    let id = id_of(row.get("id")?)?;
    let mut about = Map::new();
    about.insert("id".into(), json!(id));
    if let Some(c) = row.get("contact_id").and_then(id_of) {
        about.insert("contact_id".into(), json!(c));
    }
    about.insert(
        "merged".into(),
        json!(row.get("merged").and_then(Value::as_bool).unwrap_or(false)),
    );
    Some((id, Value::Object(about)))
}

/// The first lead of a `leads/complex` answer.
fn complex_result(body: &[u8]) -> Option<(String, Value)> {
    complex_row(complex_rows(body)?.first()?)
}

/// The `request_id`s a 400's `validation-errors` name: the leads the account refused
/// (it then created none of the request's leads).
fn invalid_request_ids(body: &[u8]) -> Vec<String> {
    let Ok(json) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    json.get("validation-errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| match e.get("request_id") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        })
        .collect()
}

/// Whether `lead` holds exactly `operation_id` in the custom field `field_id`.
fn holds_key(lead: &Value, field_id: u64, operation_id: &str) -> bool {
    lead.get("custom_fields_values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|f| f.get("field_id").and_then(id_of) == Some(field_id.to_string()))
        .flat_map(|f| {
            f.get("values")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .any(|v| v.get("value").and_then(Value::as_str) == Some(operation_id))
}

#[async_trait::async_trait]
impl Crm for AmoCrm {
    fn connector(&self) -> &str {
        CONNECTOR
    }

    /// The search index may lag behind a create: "not found" proves nothing.
    fn lookup_is_authoritative(&self) -> bool {
        false
    }

    async fn pace(&self) -> Result<(), CrmError> {
        // A refresh here runs outside any call's budget (and to its end: see `bearer`).
        self.bearer(None, &mut Map::new()).await?;
        self.limiter.acquire().await;
        Ok(())
    }

    async fn create(&self, lead: &Lead) -> (Result<String, CrmError>, Exchange) {
        let (choice, exchange) = self.choose_contact(lead, &[]).await;
        let choice = match choice {
            Ok(choice) => choice,
            Err(e) => return (Err(e), exchange),
        };
        let (result, exchange) = self.create_with_contact(lead, choice).await;
        (result.map(|(id, _)| id), exchange)
    }

    fn links_contacts(&self) -> bool {
        self.link_contacts
    }

    async fn choose_contact(
        &self,
        lead: &Lead,
        known: &[String],
    ) -> (Result<ContactChoice, CrmError>, Exchange) {
        let mut summary = Map::new();
        if !self.link_contacts {
            return (
                Ok(ContactChoice::default()),
                Exchange {
                    request: json!({"contact": "none"}),
                    response: json!({"sent": false}),
                },
            );
        }
        // A read: if it fails, nothing was created.
        let result = match self.existing_contact(lead, &mut summary).await {
            // The newest of those found and those a lead with this phone or e-mail
            // made a moment ago (the search lags behind creates).
            Ok(found) => {
                let contact = found
                    .into_iter()
                    .chain(known.iter().cloned())
                    .filter_map(|id| id.parse::<u64>().ok())
                    .max()
                    .map(|id| id.to_string());
                if !known.is_empty() {
                    summary.insert("known".into(), json!(known));
                }
                Ok(ContactChoice {
                    contact,
                    summary: summary.clone(),
                })
            }
            Err(e) => {
                let e = not_sent(e);
                note_error(&mut summary, &e);
                Err(e)
            }
        };
        let exchange = Exchange {
            request: json!({"call": "contact search", "operation_id": lead.operation_id}),
            response: Value::Object(summary),
        };
        (result, exchange)
    }

    async fn create_with_contact(
        &self,
        lead: &Lead,
        choice: ContactChoice,
    ) -> (Result<(String, Option<String>), CrmError>, Exchange) {
        let mut request = self.create_request(lead);
        let mut summary = choice.summary;
        let existing = choice.contact;
        if self.link_contacts {
            request["contact"]["linked"] = json!(existing);
        }
        let body = self.lead_body(lead, existing.as_deref());
        let req = self
            .client
            .post(format!("{}/api/v4/leads/complex", self.base))
            .json(&json!([body]));
        tracing::debug!(operation_id = %lead.operation_id, "amocrm create");
        let result = self
            .call(CREATE, req, &lead.contact_values(), &mut summary)
            .await
            .and_then(|(_, bytes)| {
                complex_result(&bytes).ok_or_else(|| {
                    let e = CrmError::new(
                        ErrorClass::Uncertain,
                        format!("{CONNECTOR} {CREATE}: the answer has no lead id"),
                    );
                    note_error(&mut summary, &e);
                    e
                })
            })
            .map(|(id, about)| {
                let contact = about
                    .get("contact_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or(existing);
                if let Value::Object(about) = about {
                    summary.extend(about);
                }
                (id, contact)
            });
        (
            result,
            Exchange {
                request,
                response: Value::Object(summary),
            },
        )
    }

    fn batch_limit(&self) -> usize {
        // Each lead's contact is looked up first: one lead a request.
        if self.link_contacts {
            1
        } else {
            MAX_COMPLEX
        }
    }

    /// With `link_contacts`, the phone and e-mail searches before the create.
    /// The contact searches of `link_contacts` come before the attempt
    /// ([`Crm::choose_contact`]): the create is one call.
    fn create_calls(&self) -> u32 {
        1
    }

    /// One `leads/complex` request with every lead (`request_id` = its operation id).
    ///
    /// amoCRM validates the whole request before it creates anything, so a request
    /// refused with a 400 created none of its leads, and each of them may be sent again.
    /// The leads the refusal names (`validation-errors` by `request_id`) get it as their
    /// own answer, and the others go again without them; a refusal that names none of
    /// a request's several leads proves nothing about any one of them, so that request
    /// is split in two. This goes on until every lead has an answer of its own — a
    /// refusal of a request of one lead is that lead's — however many rounds the
    /// refusals come in: a valid lead never fails because another of its batch was
    /// refused. Any other failure (an answer lost or cut off, a 5xx: the request may
    /// have been executed) is the answer of every lead of that request, looked up by
    /// key; such a lead is never sent again here. A lead still waiting when too little
    /// of the call's budget is left for another request is `not_sent`, tried later.
    async fn create_many(&self, leads: &[Lead]) -> BatchAnswer {
        let mut answers: Vec<Option<(Result<String, CrmError>, Exchange)>> =
            leads.iter().map(|_| None).collect();
        let redact: Vec<&str> = leads.iter().flat_map(Lead::contact_values).collect();
        let request_of = |lead: &Lead, sent: usize, round: usize| {
            let mut request = self.create_request(lead);
            request["batch"] = json!(sent);
            if round > 0 {
                request["round"] = json!(round);
            }
            request
        };
        let clock = super::SplitClock::start(self.timeout);
        let mut queue: std::collections::VecDeque<Vec<usize>> =
            std::collections::VecDeque::from([(0..leads.len()).collect::<Vec<_>>()]);
        let mut round = 0;
        while let Some(group) = queue.pop_front() {
            let mut cut = None;
            if round > 0 {
                // A follow-up takes its own turn of the pace, and must end before the
                // worker's cut.
                self.limiter.acquire().await;
                cut = clock.left();
                if cut.is_none() {
                    for i in group.into_iter().chain(queue.drain(..).flatten()) {
                        let e = super::not_sent_after_split(CONNECTOR, CREATE);
                        let mut response = Map::new();
                        note_error(&mut response, &e);
                        answers[i] = Some((
                            Err(e),
                            Exchange {
                                request: request_of(&leads[i], 0, round),
                                response: Value::Object(response),
                            },
                        ));
                    }
                    break;
                }
            }
            let bodies: Vec<Value> = group
                .iter()
                .map(|&i| self.lead_body(&leads[i], None))
                .collect();
            let mut summary = Map::new();
            let req = self
                .client
                .post(format!("{}/api/v4/leads/complex", self.base))
                .json(&bodies);
            tracing::debug!(leads = group.len(), round, "amocrm batch create");
            let sent = group.len();
            let answer = match cut {
                None => self.call(CREATE, req, &redact, &mut summary).await,
                Some(left) => {
                    let call = rate::prepaid(self.call(CREATE, req, &redact, &mut summary));
                    match tokio::time::timeout(left, call).await {
                        Ok(answer) => answer,
                        Err(_) => {
                            let e = CrmError::new(
                                ErrorClass::Uncertain,
                                format!(
                                    "{CONNECTOR} {CREATE}: no answer within the {} ms left of the call's budget",
                                    left.as_millis()
                                ),
                            );
                            note_error(&mut summary, &e);
                            Err(e)
                        }
                    }
                }
            };
            let this_round = round;
            round += 1;
            let exchange = |summary: &Map<String, Value>, i: usize| Exchange {
                request: request_of(&leads[i], sent, this_round),
                response: Value::Object(summary.clone()),
            };
            match answer {
                Ok((_, bytes)) => {
                    let rows = complex_rows(&bytes).unwrap_or_default();
                    for (pos, &i) in group.iter().enumerate() {
                        let op = leads[i].operation_id.as_str();
                        // Rows are matched by their echoed request_id, else by position.
                        let row = rows
                            .iter()
                            .find(|r| {
                                r.get("request_id")
                                    .and_then(Value::as_array)
                                    .is_some_and(|ids| ids.iter().any(|id| id == op))
                            })
                            .or_else(|| rows.get(pos).filter(|_| rows.len() == sent));
                        let mut response = summary.clone();
                        let result = match row.and_then(complex_row) {
                            Some((id, Value::Object(about))) => {
                                response.extend(about);
                                Ok(id)
                            }
                            _ => {
                                let e = CrmError::new(
                                    ErrorClass::Uncertain,
                                    format!("{CONNECTOR} {CREATE}: the answer has no lead id for this lead"),
                                );
                                note_error(&mut response, &e);
                                Err(e)
                            }
                        };
                        answers[i] = Some((result, exchange(&response, i)));
                    }
                }
                // Refused before anything was executed: each lead may go again.
                Err(e) if e.class == ErrorClass::Validation => {
                    let named: Vec<String> = summary
                        .get("invalid_request_ids")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    let (refused, rest): (Vec<usize>, Vec<usize>) = if sent == 1 {
                        (group, Vec::new())
                    } else {
                        group
                            .into_iter()
                            .partition(|&i| named.contains(&leads[i].operation_id.to_string()))
                    };
                    for &i in &refused {
                        answers[i] = Some((Err(e.clone()), exchange(&summary, i)));
                    }
                    match (refused.is_empty(), rest.len()) {
                        (_, 0) => {}
                        // Some named: the others go again together.
                        (false, _) => queue.push_back(rest),
                        // None named: halves, until each lead is alone.
                        (true, _) => {
                            let mut rest = rest;
                            let second = rest.split_off(rest.len() / 2);
                            queue.push_back(rest);
                            queue.push_back(second);
                        }
                    }
                }
                Err(e) => {
                    if this_round == 0 {
                        // The request failed as a whole.
                        let request = json!({
                            "connector": CONNECTOR,
                            "method": CREATE,
                            "batch": sent,
                            "request_ids": group.iter().map(|&i| leads[i].operation_id.as_str()).collect::<Vec<_>>(),
                        });
                        return Err((
                            e,
                            Exchange {
                                request,
                                response: Value::Object(summary),
                            },
                        ));
                    }
                    for &i in &group {
                        answers[i] = Some((Err(e.clone()), exchange(&summary, i)));
                    }
                }
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.expect("every lead of the batch has its answer"))
            .collect())
    }

    /// The lead's name with `PATCH /api/v4/leads/{id}`; its contact's name, phone and
    /// e-mail with `PATCH /api/v4/contacts/{id}` of its main contact (read first, so its
    /// numbers and addresses stay beside the new one). A comment has no field here: the
    /// create does not send one either.
    fn update_calls(&self) -> u32 {
        4
    }

    async fn update(&self, u: &EntityUpdate) -> (Result<Vec<String>, CrmError>, Exchange) {
        let (crm_id, changes) = (u.crm_id.as_str(), &u.changes);
        let mut redact: Vec<String> = u.redact.clone();
        let mut steps = Vec::new();
        let mut sent = Vec::new();
        let result = async {
            if !crm_id.bytes().all(|b| b.is_ascii_digit()) || crm_id.is_empty() {
                return Err(CrmError::new(
                    ErrorClass::Validation,
                    format!("{CONNECTOR}: `{crm_id}` is not a lead id"),
                ));
            }
            if let Some(title) = &changes.title {
                let req = self
                    .client
                    .patch(format!("{}/api/v4/leads/{crm_id}", self.base))
                    .json(&json!({"name": title}));
                self.update_step(UPDATE_LEAD, req, &strs(&redact), &mut steps)
                    .await?;
                sent.push("title");
            }
            if changes.name.is_none() && changes.phone.is_none() && changes.email.is_none() {
                return Ok(());
            }
            let contact_id = self
                .main_contact(crm_id, &strs(&redact), &mut steps)
                .await?;
            let Some(contact_id) = contact_id else {
                return Err(CrmError::new(
                    ErrorClass::Validation,
                    format!("{CONNECTOR}: lead {crm_id} has no contact to update"),
                ));
            };
            let url = format!("{}/api/v4/contacts/{contact_id}", self.base);
            let contact = self
                .update_step(
                    GET_CONTACT,
                    self.client.get(&url),
                    &strs(&redact),
                    &mut steps,
                )
                .await?;
            // The values it sends again (the contact's numbers and addresses) are scrubbed
            // from an error that echoes them, as the new ones are.
            redact.extend(values_of(&contact));
            let mut body = Map::new();
            if let Some(name) = &changes.name {
                body.insert("first_name".into(), json!(name));
                sent.push("name");
            }
            let mut fields = Vec::new();
            if let Some(phone) = &changes.phone {
                fields.push(with_value_first(&contact, "PHONE", phone));
                sent.push("phone");
            }
            if let Some(email) = &changes.email {
                fields.push(with_value_first(&contact, "EMAIL", email));
                sent.push("email");
            }
            if !fields.is_empty() {
                body.insert("custom_fields_values".into(), Value::Array(fields));
            }
            let req = self.client.patch(&url).json(&Value::Object(body));
            self.update_step(UPDATE_CONTACT, req, &strs(&redact), &mut steps)
                .await
                .map(|_| ())
        }
        .await;
        let result = result.map(|()| {
            sent.iter()
                .map(|f| (*f).to_owned())
                .collect::<Vec<String>>()
        });
        // amoCRM has no field the create puts a comment in: a changed comment is not sent.
        let not_sent: Vec<&str> = changes
            .fields()
            .into_iter()
            .filter(|f| *f == "comment")
            .collect();
        (
            result,
            Exchange {
                request: json!({"connector": CONNECTOR, "method": "update", "id": crm_id,
                                "fields": sent, "not_sent": not_sent}),
                response: json!({"steps": steps}),
            },
        )
    }

    async fn find(&self, operation_id: &str) -> (Result<Lookup, CrmError>, Exchange) {
        let request = json!({
            "connector": CONNECTOR,
            "method": SEARCH,
            "query": operation_id,
            "operation_field_id": self.field_id,
        });
        let mut summary = Map::new();
        let result = match reqwest::Url::parse_with_params(
            &format!("{}/api/v4/leads", self.base),
            &[
                ("query", operation_id),
                ("limit", &SEARCH_LIMIT.to_string()),
            ],
        ) {
            Err(e) => Err(CrmError::new(
                ErrorClass::Auth,
                format!("{CONNECTOR} {SEARCH}: invalid base URL: {e}"),
            )),
            Ok(url) => self
                .call(SEARCH, self.client.get(url), &[], &mut summary)
                .await
                .and_then(|(status, bytes)| {
                    // An empty result is 204 with no body at all.
                    if status == StatusCode::NO_CONTENT || bytes.iter().all(u8::is_ascii_whitespace)
                    {
                        summary.insert("searched".into(), json!(0));
                        return Ok(Lookup::NotFound);
                    }
                    let json: Value = serde_json::from_slice(&bytes).map_err(|_| {
                        CrmError::new(
                            ErrorClass::Uncertain,
                            format!("{CONNECTOR} {SEARCH}: the answer is not JSON"),
                        )
                    })?;
                    let rows = json
                        .pointer("/_embedded/leads")
                        .and_then(Value::as_array)
                        .ok_or_else(|| {
                            CrmError::new(
                                ErrorClass::Uncertain,
                                format!("{CONNECTOR} {SEARCH}: the answer has no leads list"),
                            )
                        })?;
                    summary.insert("searched".into(), json!(rows.len()));
                    // The search matches substrings of any filled field: keep only the
                    // leads whose key field holds exactly this operation_id.
                    let ids = rows
                        .iter()
                        .filter(|l| holds_key(l, self.field_id, operation_id))
                        .filter_map(|l| l.get("id").and_then(id_of))
                        .collect();
                    Ok(Lookup::from_ids(ids))
                }),
        };
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
            Err(e) if !summary.contains_key("class") => note_error(&mut summary, e),
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
}

impl AmoCrm {
    /// One step of an update: a JSON answer of `request`, or its classified failure.
    async fn update_step(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
        redact: &[&str],
        steps: &mut Vec<Value>,
    ) -> Result<Value, CrmError> {
        let mut summary = Map::new();
        summary.insert("method".into(), json!(what));
        let result = self
            .call(what, request, redact, &mut summary)
            .await
            .and_then(|(status, bytes)| {
                if status == StatusCode::NO_CONTENT || bytes.iter().all(u8::is_ascii_whitespace) {
                    // A lead or contact that is gone answers 204 (or 404).
                    return Err(CrmError::new(
                        ErrorClass::Validation,
                        format!("{CONNECTOR} {what}: the entity is not in the account"),
                    ));
                }
                serde_json::from_slice(&bytes).map_err(|_| {
                    CrmError::new(
                        ErrorClass::Uncertain,
                        format!("{CONNECTOR} {what}: the answer is not JSON"),
                    )
                })
            });
        if let Err(e) = &result {
            if !summary.contains_key("class") {
                note_error(&mut summary, e);
            }
        }
        steps.push(Value::Object(summary));
        result
    }

    /// The lead's main contact id (`?with=contacts`), if it has one.
    async fn main_contact(
        &self,
        crm_id: &str,
        redact: &[&str],
        steps: &mut Vec<Value>,
    ) -> Result<Option<String>, CrmError> {
        let url = format!("{}/api/v4/leads/{crm_id}?with=contacts", self.base);
        let lead = self
            .update_step(GET_LEAD, self.client.get(url), redact, steps)
            .await?;
        let contacts = lead
            .pointer("/_embedded/contacts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let main = contacts
            .iter()
            .find(|c| c.get("is_main").and_then(Value::as_bool) == Some(true))
            .or_else(|| contacts.first());
        Ok(main.and_then(|c| c.get("id")).and_then(id_of))
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Every name and custom-field value of a contact.
/// The values of a contact's multifield `code` (`PHONE`, `EMAIL`).
fn values_of_code(contact: &Value, code: &str) -> Vec<String> {
    contact
        .get("custom_fields_values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|f| f.get("field_code").and_then(Value::as_str) == Some(code))
        .flat_map(|f| {
            f.get("values")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|v| v.get("value").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

fn values_of(contact: &Value) -> Vec<String> {
    let mut out: Vec<String> = ["name", "first_name", "last_name"]
        .iter()
        .filter_map(|k| contact.get(*k).and_then(Value::as_str))
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect();
    for f in contact
        .get("custom_fields_values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for v in f
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(s) = v
                .get("value")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                out.push(s.to_owned());
            }
        }
    }
    out
}

/// A contact's `custom_fields_values` with `value` first in the field `code` (PHONE or
/// EMAIL) and the values it had kept after it: amoCRM replaces a field's values with the
/// list it is sent, so the old number stays only if it is sent again.
fn with_value_first(contact: &Value, code: &str, value: &str) -> Value {
    let old: Vec<Value> = contact
        .get("custom_fields_values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|f| f.get("field_code").and_then(Value::as_str) == Some(code))
        .flat_map(|f| f.get("values").and_then(Value::as_array).cloned().unwrap_or_default())
        .filter(|v| v.get("value").and_then(Value::as_str) != Some(value))
        .map(|v| json!({"value": v.get("value"), "enum_code": v.get("enum_code").cloned().unwrap_or(json!("WORK"))}))
        .collect();
    let mut values = vec![json!({"value": value, "enum_code": "WORK"})];
    values.extend(old);
    json!({"field_code": code, "values": values})
}

/// For `fuzz/`: one amoCRM answer through the adapter's parsing (an error answer and a
/// `leads/complex` result). Not part of the API.
#[doc(hidden)]
#[cfg(feature = "test-support")]
pub fn fuzz_answer(status: u16, body: &[u8]) {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    let _ = error_answer("create", status, &HeaderMap::new(), body, &["s3cret"]);
    let _ = complex_result(body);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use leadgate_fakes::amocrm::{self as fake_amocrm, FakeAmoCrm, Fault, FIELD_ID};

    const TOKEN: &str = "fake-amo-token";

    async fn fake() -> FakeAmoCrm {
        FakeAmoCrm::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }

    fn settings(fake: &FakeAmoCrm) -> Settings {
        Settings {
            base_url: fake.base_url(),
            auth: Auth::Token(TOKEN.into()),
            operation_field_id: FIELD_ID,
            pipeline_id: None,
            rate_limit: 1000.0,
            timeout: Duration::from_secs(5),
        }
    }

    fn adapter(fake: &FakeAmoCrm) -> AmoCrm {
        AmoCrm::new(settings(fake)).unwrap()
    }

    fn lead(op: &str) -> Lead {
        Lead {
            operation_id: op.into(),
            source: "tilda".into(),
            title: Some("Form".into()),
            name: Some("Ivan Petrov".into()),
            phone: Some("+79990001122".into()),
            email: Some("ivan@example.ru".into()),
            comment: Some("call me".into()),
        }
    }

    /// Nothing stored from a call may carry the token or the lead's contact data.
    fn assert_clean(text: &str) {
        for needle in [
            TOKEN,
            "Bearer",
            "Ivan",
            "+7999",
            "79990001122",
            "ivan@example.ru",
        ] {
            assert!(!text.contains(needle), "{needle:?} leaked into {text:?}");
        }
    }

    fn assert_exchange_clean(ex: &Exchange) {
        assert_clean(&ex.request.to_string());
        assert_clean(&ex.response.to_string());
    }

    async fn create_err(fake: &FakeAmoCrm, fault: Fault) -> (CrmError, Exchange) {
        fake.push_fault(fake_amocrm::CREATE, fault, 1);
        let (res, ex) = adapter(fake).create(&lead("tilda:f-1")).await;
        let err = res.unwrap_err();
        assert_clean(&err.message);
        assert_clean(&err.to_string());
        assert_exchange_clean(&ex);
        (err, ex)
    }

    #[tokio::test]
    async fn create_sends_one_lead_with_key_field_tag_request_id_and_contact() {
        let fake = fake().await;
        let crm = adapter(&fake);
        assert_eq!(crm.connector(), "amocrm");
        assert!(!crm.lookup_is_authoritative());
        let (res, ex) = crm.create(&lead("tilda:tr-1")).await;
        assert_eq!(res.unwrap(), "1");
        assert_eq!(ex.request["method"], "POST /api/v4/leads/complex");
        assert_eq!(ex.request["request_id"], "tilda:tr-1");
        assert_eq!(ex.response["status"], 200);
        assert_eq!(ex.response["id"], "1");
        assert_eq!(ex.response["contact_id"], "1");
        assert_eq!(ex.response["merged"], false);
        assert_exchange_clean(&ex);
        assert_eq!(fake.calls(fake_amocrm::CREATE), 1);

        let leads = fake.leads();
        assert_eq!(leads.len(), 1);
        let l = &leads[0];
        assert_eq!(l["name"], "Form");
        assert_eq!(l["pipeline_id"], fake_amocrm::DEFAULT_PIPELINE);
        assert_eq!(l["custom_fields_values"][0]["field_id"], FIELD_ID);
        assert_eq!(
            l["custom_fields_values"][0]["values"][0]["value"],
            "tilda:tr-1"
        );
        assert_eq!(l["_embedded"]["tags"][0]["name"], "tilda:tr-1");
        let contact = &fake.contacts()[0];
        assert_eq!(contact["first_name"], "Ivan Petrov");
        assert_eq!(
            contact["custom_fields_values"],
            json!([
                {"field_code": "PHONE", "values": [{"value": "+79990001122", "enum_code": "WORK"}]},
                {"field_code": "EMAIL", "values": [{"value": "ivan@example.ru", "enum_code": "WORK"}]}
            ])
        );
    }

    #[tokio::test]
    async fn pipeline_is_sent_when_configured_and_a_lead_without_contact_data_has_no_contact() {
        let fake = fake().await;
        let crm = AmoCrm::new(Settings {
            pipeline_id: Some(42),
            ..settings(&fake)
        })
        .unwrap();
        let bare = Lead {
            operation_id: "web:1".into(),
            source: "web".into(),
            ..Lead::default()
        };
        crm.create(&bare).await.0.unwrap();
        let l = &fake.leads()[0];
        assert_eq!(l["pipeline_id"], 42);
        assert_eq!(l["name"], "Lead web:1");
        assert!(fake.contacts().is_empty());
    }

    #[tokio::test]
    async fn find_matches_the_key_field_exactly() {
        let fake = fake().await;
        let crm = adapter(&fake);
        crm.create(&lead("site:s1")).await.0.unwrap();
        crm.create(&lead("site:s10")).await.0.unwrap();
        // The search is by substring: "site:s1" also hits "site:s10".
        let (found, ex) = crm.find("site:s1").await;
        assert_eq!(found.unwrap(), Lookup::One("1".into()));
        assert_eq!(ex.response["searched"], 2);
        assert_eq!(ex.response["found"], 1);
        assert_eq!(ex.request["query"], "site:s1");
        let (found, ex) = crm.find("site:s").await;
        assert_eq!(found.unwrap(), Lookup::NotFound);
        assert_eq!(ex.response["status"], 200);
        assert_eq!(fake.calls(fake_amocrm::SEARCH), 2);
    }

    #[tokio::test]
    async fn an_empty_search_is_204_without_a_body_and_means_not_found() {
        let fake = fake().await;
        let (found, ex) = adapter(&fake).find("site:none").await;
        assert_eq!(found.unwrap(), Lookup::NotFound);
        assert_eq!(ex.response["status"], 204);
        assert_eq!(ex.response["found"], 0);
    }

    #[tokio::test]
    async fn find_reports_duplicates_as_many() {
        let fake = fake().await;
        let crm = adapter(&fake);
        crm.create(&lead("site:dup")).await.0.unwrap();
        crm.create(&lead("site:other")).await.0.unwrap();
        crm.create(&lead("site:dup")).await.0.unwrap();
        let (found, _) = crm.find("site:dup").await;
        assert_eq!(found.unwrap(), Lookup::Many(vec!["1".into(), "3".into()]));
    }

    #[tokio::test]
    async fn a_lagging_search_does_not_see_a_fresh_lead_yet() {
        let fake = fake().await;
        fake.set_search_lag(Duration::from_millis(300));
        let crm = adapter(&fake);
        crm.create(&lead("site:fresh")).await.0.unwrap();
        assert_eq!(crm.find("site:fresh").await.0.unwrap(), Lookup::NotFound);
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(
            crm.find("site:fresh").await.0.unwrap(),
            Lookup::One("1".into())
        );
    }

    #[tokio::test]
    async fn duplicate_control_merges_and_the_exchange_says_so() {
        let fake = fake().await;
        fake.set_duplicate_control(true);
        let crm = adapter(&fake);
        crm.create(&lead("site:first")).await.0.unwrap();
        let (res, ex) = crm.create(&lead("site:second")).await;
        assert_eq!(res.unwrap(), "1", "merged into the existing lead");
        assert_eq!(ex.response["merged"], true);
        assert_eq!(fake.leads().len(), 1);
    }

    #[tokio::test]
    async fn validation_errors_are_validation_with_a_readable_message() {
        let fake = fake().await;
        let (err, ex) = create_err(&fake, Fault::Validation).await;
        assert_eq!(err.class, ErrorClass::Validation);
        assert_eq!(
            err.message,
            "amocrm POST /api/v4/leads/complex: HTTP 400 Bad Request: Request validation failed; \
             NotSupportedChoice custom_fields_values.0.field_id: The value you selected is not a valid choice."
        );
        assert_eq!(ex.response["status"], 400);
        assert_eq!(ex.response["class"], "validation");
        assert!(fake.leads().is_empty());
    }

    #[tokio::test]
    async fn refusals_of_the_account_or_the_address_pause_the_connector() {
        let fake = fake().await;
        let error = |status, detail: &str| Fault::Error {
            status,
            detail: detail.into(),
            after_execute: false,
        };
        // (the fault on leads/complex, the class, a piece of the message)
        let table = [
            (Fault::NoRights, ErrorClass::Auth, "code 244"),
            (Fault::PaymentRequired, ErrorClass::Auth, "HTTP 402"),
            (
                Fault::Blocked,
                ErrorClass::Auth,
                "HTTP 403 (not JSON) 403 Forbidden",
            ),
            (error(404, "Not Found"), ErrorClass::Auth, "HTTP 404"),
            (
                error(405, "Method Not Allowed"),
                ErrorClass::Auth,
                "HTTP 405",
            ),
            (
                Fault::HtmlPage { status: 404 },
                ErrorClass::Auth,
                "404 Not Found nginx",
            ),
            (
                Fault::HtmlPage { status: 400 },
                ErrorClass::Auth,
                "HTTP 400",
            ),
            (
                error(408, "Request Timeout"),
                ErrorClass::Uncertain,
                "HTTP 408",
            ),
            (
                Fault::Validation,
                ErrorClass::Validation,
                "NotSupportedChoice",
            ),
        ];
        for (fault, class, text) in table {
            let (err, ex) = create_err(&fake, fault.clone()).await;
            assert_eq!(err.class, class, "{fault:?}: {err}");
            assert!(err.message.contains(text), "{fault:?}: {err}");
            assert_eq!(ex.response["class"], json!(class), "{fault:?}");
        }
        assert!(fake.leads().is_empty());
        // A lookup's endpoint that is not there: the connector's problem too.
        fake.push_fault(fake_amocrm::SEARCH, error(404, "Not Found"), 1);
        let err = adapter(&fake).find("tilda:x").await.0.unwrap_err();
        assert_eq!(err.class, ErrorClass::Auth, "{err}");
    }

    #[tokio::test]
    async fn a_batch_creates_every_lead_and_matches_the_rows_by_request_id() {
        let fake = fake().await;
        let crm = adapter(&fake);
        assert_eq!(crm.batch_limit(), MAX_COMPLEX);
        let leads: Vec<Lead> = (1..=3).map(|i| lead(&format!("tilda:b{i}"))).collect();
        let answers = crm.create_many(&leads).await.unwrap();
        assert_eq!(answers.len(), 3);
        assert_eq!(fake.calls(fake_amocrm::CREATE), 1, "one request");
        let created = fake.leads();
        for (lead, (result, ex)) in leads.iter().zip(&answers) {
            let id = result.as_ref().unwrap();
            let row = created
                .iter()
                .find(|l| id_of(&l["id"]).as_deref() == Some(id.as_str()))
                .unwrap_or_else(|| panic!("no lead {id}"));
            assert!(holds_key(row, FIELD_ID, &lead.operation_id), "{row}");
            assert_eq!(ex.request["request_id"], lead.operation_id.as_str());
            assert_eq!(ex.request["batch"], 3);
            assert_eq!(ex.response["id"], id.as_str());
            assert_exchange_clean(ex);
        }
    }

    #[tokio::test]
    async fn one_invalid_lead_of_a_batch_fails_alone_and_the_others_go_once_more() {
        let fake = fake().await;
        let crm = adapter(&fake);
        // amoCRM refuses the whole request for one invalid lead and creates none.
        fake.push_fault(
            fake_amocrm::CREATE,
            Fault::InvalidLead {
                request_id: "tilda:v2".into(),
            },
            1,
        );
        let leads: Vec<Lead> = (1..=3).map(|i| lead(&format!("tilda:v{i}"))).collect();
        let answers = crm.create_many(&leads).await.unwrap();
        let (bad, bad_ex) = &answers[1];
        assert_eq!(bad.as_ref().unwrap_err().class, ErrorClass::Validation);
        assert!(bad
            .as_ref()
            .unwrap_err()
            .message
            .contains("This value is not valid"));
        assert_eq!(bad_ex.response["invalid_request_ids"], json!(["tilda:v2"]));
        for i in [0, 2] {
            let (ok, ex) = &answers[i];
            assert!(ok.is_ok(), "{ok:?}");
            assert_eq!(ex.request["batch"], 2, "sent again without the refused one");
        }
        assert_eq!(fake.calls(fake_amocrm::CREATE), 2);
        assert_eq!(fake.leads().len(), 2, "the refused lead was never created");
    }

    #[tokio::test]
    async fn refusals_in_rounds_fail_only_the_invalid_leads() {
        use fake_amocrm::NameRefusals;
        for naming in [NameRefusals::All, NameRefusals::First, NameRefusals::None] {
            let fake = fake().await;
            let crm = adapter(&fake);
            let leads: Vec<Lead> = (0..10).map(|i| lead(&format!("tilda:r{i}"))).collect();
            fake.set_invalid_leads(&["tilda:r1", "tilda:r4", "tilda:r8"], naming);
            let answers = crm.create_many(&leads).await.unwrap();
            for (i, (result, ex)) in answers.iter().enumerate() {
                if [1, 4, 8].contains(&i) {
                    let e = result.as_ref().unwrap_err();
                    assert_eq!(e.class, ErrorClass::Validation, "{naming:?} {i}: {e}");
                } else {
                    assert!(result.is_ok(), "{naming:?} {i}: {result:?}");
                }
                assert_exchange_clean(ex);
            }
            let mut keys: Vec<String> = fake
                .leads()
                .iter()
                .map(|l| {
                    l["custom_fields_values"][0]["values"][0]["value"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
                .collect();
            keys.sort();
            let want: Vec<String> = [0, 2, 3, 5, 6, 7, 9]
                .iter()
                .map(|i| format!("tilda:r{i}"))
                .collect();
            assert_eq!(keys, want, "{naming:?}: each valid lead once");
            let calls = fake.calls(fake_amocrm::CREATE);
            match naming {
                // All named at once: the request, then the others once more.
                NameRefusals::All => assert_eq!(calls, 2),
                // One named a round.
                NameRefusals::First => assert_eq!(calls, 4),
                // None named: halves until each refusal is a lead's own.
                NameRefusals::None => assert!((5..=20).contains(&calls), "{calls}"),
            }
        }
    }

    #[tokio::test]
    async fn a_split_never_sends_again_what_may_have_been_created() {
        let fake = fake().await;
        let crm = adapter(&fake);
        // The request is refused naming no lead; its first half is executed and then
        // answered 500: those two are uncertain (looked up later), never sent again.
        fake.push_fault(
            fake_amocrm::CREATE,
            Fault::Error {
                status: 400,
                detail: "Request validation failed".into(),
                after_execute: false,
            },
            1,
        );
        fake.push_fault(fake_amocrm::CREATE, Fault::ServerErrorAfterCreate, 1);
        let leads: Vec<Lead> = (0..4).map(|i| lead(&format!("tilda:u{i}"))).collect();
        let answers = crm.create_many(&leads).await.unwrap();
        let classes: Vec<Option<ErrorClass>> = answers
            .iter()
            .map(|(r, _)| r.as_ref().err().map(|e| e.class))
            .collect();
        assert_eq!(
            classes,
            [
                Some(ErrorClass::Uncertain),
                Some(ErrorClass::Uncertain),
                None,
                None
            ]
        );
        assert_eq!(fake.calls(fake_amocrm::CREATE), 3);
        assert_eq!(fake.leads().len(), 4, "each lead once");
        assert_eq!(answers[2].1.request["round"], 2);
    }

    #[tokio::test]
    async fn a_batch_refused_as_a_whole_is_one_failure() {
        let fake = fake().await;
        let crm = adapter(&fake);
        fake.push_fault(fake_amocrm::CREATE, Fault::ServerError, 1);
        let leads: Vec<Lead> = (1..=2).map(|i| lead(&format!("tilda:w{i}"))).collect();
        let (err, ex) = crm.create_many(&leads).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::Uncertain);
        assert_eq!(ex.request["request_ids"], json!(["tilda:w1", "tilda:w2"]));
        assert_exchange_clean(&ex);
        assert!(fake.leads().is_empty());
    }

    #[tokio::test]
    async fn a_wrong_operation_field_is_refused_as_validation() {
        let fake = fake().await;
        let crm = AmoCrm::new(Settings {
            operation_field_id: 999,
            ..settings(&fake)
        })
        .unwrap();
        let err = crm.create(&lead("site:x")).await.0.unwrap_err();
        assert_eq!(err.class, ErrorClass::Validation);
        assert!(err.message.contains("NotSupportedChoice"), "{err}");
    }

    #[tokio::test]
    async fn auth_failures_pause_the_connector() {
        let fake = fake().await;
        let (err, _) = create_err(&fake, Fault::Unauthorized).await;
        assert_eq!(err.class, ErrorClass::Auth);
        assert!(err.message.contains("HTTP 401 Unauthorized"), "{err}");
        let (err, _) = create_err(&fake, Fault::PaymentRequired).await;
        assert_eq!(err.class, ErrorClass::Auth);
        assert!(err.message.contains("HTTP 402"), "{err}");
        let (err, ex) = create_err(&fake, Fault::Blocked).await;
        assert_eq!(err.class, ErrorClass::Auth);
        assert_eq!(
            err.message,
            "amocrm POST /api/v4/leads/complex: HTTP 403 (not JSON) 403 Forbidden 403 Forbidden nginx"
        );
        assert_eq!(ex.response["status"], 403);
        assert!(fake.leads().is_empty());
    }

    #[tokio::test]
    async fn a_wrong_token_is_auth_and_never_shown() {
        let fake = fake().await;
        let crm = AmoCrm::new(Settings {
            auth: Auth::Token("wrong-token-value".into()),
            ..settings(&fake)
        })
        .unwrap();
        let (res, ex) = crm.create(&lead("site:w")).await;
        let err = res.unwrap_err();
        assert_eq!(err.class, ErrorClass::Auth);
        for text in [
            err.message.clone(),
            ex.request.to_string(),
            ex.response.to_string(),
            format!("{crm:?}"),
            format!("{:?}", settings(&fake)),
        ] {
            assert!(!text.contains("wrong-token-value"), "{text}");
            assert!(!text.contains(TOKEN), "{text}");
        }
        let err = crm.find("site:w").await.0.unwrap_err();
        assert_eq!(err.class, ErrorClass::Auth);
    }

    #[tokio::test]
    async fn a_plain_text_429_is_rate_limited_with_retry_after() {
        let fake = fake().await;
        let fault = Fault::RateLimit {
            retry_after_secs: Some(7),
        };
        let (err, ex) = create_err(&fake, fault).await;
        assert_eq!(err.class, ErrorClass::RateLimited);
        assert_eq!(err.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(
            err.message,
            "amocrm POST /api/v4/leads/complex: HTTP 429 (not JSON) Too Many Requests"
        );
        assert_eq!(ex.response["status"], 429);
        let fault = Fault::RateLimit {
            retry_after_secs: None,
        };
        let (err, _) = create_err(&fake, fault).await;
        assert_eq!(err.retry_after, None);
        assert!(fake.leads().is_empty());
    }

    #[tokio::test]
    async fn a_429_slows_down_every_call_of_the_process() {
        let fake = fake().await;
        fake.push_fault(
            fake_amocrm::SEARCH,
            Fault::RateLimit {
                retry_after_secs: Some(1),
            },
            1,
        );
        let crm = adapter(&fake);
        let other = adapter(&fake);
        assert_eq!(
            crm.find("x").await.0.unwrap_err().class,
            ErrorClass::RateLimited
        );
        let started = Instant::now();
        other.find("x").await.0.unwrap();
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn server_errors_and_lost_answers_are_uncertain() {
        let fake = fake().await;
        let (err, _) = create_err(&fake, Fault::ServerError).await;
        assert_eq!(err.class, ErrorClass::Uncertain);
        assert!(fake.leads().is_empty());
        let (err, _) = create_err(&fake, Fault::ServerErrorAfterCreate).await;
        assert_eq!(err.class, ErrorClass::Uncertain);
        assert_eq!(
            err.message,
            "amocrm POST /api/v4/leads/complex: HTTP 500 Internal Server Error: Internal server error"
        );
        assert_eq!(fake.leads().len(), 1);
        let (err, _) = create_err(&fake, Fault::LostAnswerDrop).await;
        assert_eq!(err.class, ErrorClass::Uncertain, "{err}");
        assert_eq!(fake.leads().len(), 2);
    }

    #[tokio::test]
    async fn a_hung_answer_times_out_as_uncertain_and_the_search_recovers_it() {
        let fake = fake().await;
        fake.push_fault(fake_amocrm::CREATE, Fault::LostAnswerHang, 1);
        let crm = AmoCrm::new(Settings {
            timeout: Duration::from_millis(300),
            ..settings(&fake)
        })
        .unwrap();
        let (res, ex) = crm.create(&lead("site:hang")).await;
        let err = res.unwrap_err();
        assert_eq!(err.class, ErrorClass::Uncertain);
        assert!(err.message.contains("timed out"), "{err}");
        assert_eq!(ex.response["class"], "uncertain");
        assert_exchange_clean(&ex);
        assert_eq!(
            crm.find("site:hang").await.0.unwrap(),
            Lookup::One("1".into())
        );
    }

    #[tokio::test]
    async fn connection_refused_is_not_sent() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let crm = AmoCrm::new(Settings {
            base_url: format!("http://127.0.0.1:{port}"),
            auth: Auth::Token(TOKEN.into()),
            operation_field_id: FIELD_ID,
            pipeline_id: None,
            rate_limit: 1000.0,
            timeout: Duration::from_secs(2),
        })
        .unwrap();
        let (res, ex) = crm.create(&lead("site:refused")).await;
        let err = res.unwrap_err();
        assert_eq!(err.class, ErrorClass::NotSent, "{err}");
        assert_clean(&err.message);
        assert_exchange_clean(&ex);
        assert_eq!(
            crm.find("site:refused").await.0.unwrap_err().class,
            ErrorClass::NotSent
        );
    }

    #[tokio::test]
    async fn find_faults_are_classified_too() {
        let fake = fake().await;
        let crm = adapter(&fake);
        fake.push_fault(fake_amocrm::SEARCH, Fault::Blocked, 1);
        assert_eq!(crm.find("x").await.0.unwrap_err().class, ErrorClass::Auth);
        fake.push_fault(fake_amocrm::SEARCH, Fault::ServerError, 1);
        let (res, ex) = crm.find("x").await;
        assert_eq!(res.unwrap_err().class, ErrorClass::Uncertain);
        assert_eq!(ex.response["class"], "uncertain");
        assert_eq!(crm.find("x").await.0.unwrap(), Lookup::NotFound);
    }

    #[tokio::test]
    async fn the_rate_limit_spaces_all_calls_of_the_process() {
        let fake = fake().await;
        let rate = 10.0;
        let a = Arc::new(
            AmoCrm::new(Settings {
                rate_limit: rate,
                ..settings(&fake)
            })
            .unwrap(),
        );
        // A second adapter for the same account (another worker in the process)
        // shares the limit.
        let b = Arc::new(
            AmoCrm::new(Settings {
                rate_limit: rate,
                ..settings(&fake)
            })
            .unwrap(),
        );
        let n = 6;
        let started = Instant::now();
        let calls: Vec<_> = (0..n)
            .map(|i| {
                let crm = if i % 2 == 0 { a.clone() } else { b.clone() };
                tokio::spawn(async move { crm.create(&lead(&format!("site:r{i}"))).await.0 })
            })
            .collect();
        for c in calls {
            c.await.unwrap().unwrap();
        }
        let elapsed = started.elapsed();
        let floor = Duration::from_secs_f64((n - 1) as f64 / rate);
        assert!(elapsed >= floor, "{n} calls took {elapsed:?} < {floor:?}");
        assert_eq!(fake.calls(fake_amocrm::CREATE), n as u64);
    }

    // ---- OAuth -------------------------------------------------------------------

    /// The shared row as the adapter sees it (opened with the tests' key), after
    /// checking that the database holds ciphertext only.
    async fn stored_row(store: &Arc<dyn Store>) -> CrmToken {
        let raw = store.crm_token(CONNECTOR).await.unwrap().unwrap();
        assert!(
            crate::crm::vault::Vault::is_sealed(&raw.refresh_token)
                && raw
                    .access_token
                    .as_deref()
                    .is_none_or(crate::crm::vault::Vault::is_sealed),
            "crm_tokens holds ciphertext only"
        );
        let v = crate::crm::vault::Vault::new([3; 32]);
        CrmToken {
            access_token: raw
                .access_token
                .as_deref()
                .map(|a| v.open(ACCESS_CONTEXT, a).unwrap()),
            refresh_token: v.open(REFRESH_CONTEXT, &raw.refresh_token).unwrap(),
            ..raw
        }
    }

    async fn memory_store() -> Arc<dyn Store> {
        store::connect("sqlite::memory:").await.unwrap()
    }

    fn oauth_settings(fake: &FakeAmoCrm, store: &Arc<dyn Store>) -> Settings {
        let (client_id, client_secret, redirect_uri) = fake.oauth_client();
        Settings {
            auth: Auth::OAuth(OAuth {
                client_id,
                client_secret,
                redirect_uri,
                refresh_token: fake.initial_refresh_token(),
                store: store.clone(),
                vault: crate::crm::vault::Vault::new([3; 32]),
            }),
            ..settings(fake)
        }
    }

    fn oauth_adapter(fake: &FakeAmoCrm, store: &Arc<dyn Store>) -> AmoCrm {
        AmoCrm::new(oauth_settings(fake, store)).unwrap()
    }

    /// Nothing stored from a call carries any token or the client secret.
    fn assert_no_tokens(texts: &[String]) {
        for text in texts {
            for needle in [
                "fake-access-",
                "fake-refresh-",
                "fake-client-secret",
                "Bearer",
            ] {
                assert!(!text.contains(needle), "{needle:?} leaked into {text:?}");
            }
        }
    }

    #[tokio::test]
    async fn oauth_first_run_refreshes_with_the_configured_token_and_shares_the_rotation() {
        let fake = fake().await;
        let store = memory_store().await;
        let crm = oauth_adapter(&fake, &store);
        let (res, ex) = crm.create(&lead("site:o1")).await;
        assert_eq!(res.unwrap(), "1");
        assert_eq!(ex.response["token_refresh"]["status"], 200);
        assert_eq!(fake.calls(fake_amocrm::TOKEN), 1);
        let row = stored_row(&store).await;
        assert_eq!(row.version, 1);
        assert_eq!(row.refresh_token, fake.current_refresh_token());
        assert_ne!(row.refresh_token, fake.initial_refresh_token());
        assert!(row.expires_at.unwrap() > store::local_now());
        // The access token is kept: no refresh for the next calls.
        let (res, ex) = crm.create(&lead("site:o2")).await;
        res.unwrap();
        assert!(ex.response.get("token_refresh").is_none());
        crm.find("site:o1").await.0.unwrap();
        assert_eq!(fake.calls(fake_amocrm::TOKEN), 1);
        assert_no_tokens(&[
            ex.request.to_string(),
            ex.response.to_string(),
            format!("{crm:?}"),
            format!("{:?}", oauth_settings(&fake, &store)),
            format!("{row:?}"),
        ]);
        // A restarted process starts from the shared row, not the dead configured token.
        let restarted = oauth_adapter(&fake, &store);
        restarted.create(&lead("site:o3")).await.0.unwrap();
        assert_eq!(fake.calls(fake_amocrm::TOKEN), 1);
    }

    #[tokio::test]
    async fn oauth_refreshes_an_expired_access_token_before_the_call() {
        let fake = fake().await;
        fake.set_access_ttl(Duration::from_secs(1));
        let store = memory_store().await;
        let crm = oauth_adapter(&fake, &store);
        crm.create(&lead("site:e1")).await.0.unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (res, ex) = crm.create(&lead("site:e2")).await;
        res.unwrap();
        assert_eq!(ex.response["token_refresh"]["status"], 200);
        assert_eq!(fake.calls(fake_amocrm::TOKEN), 2);
        assert_eq!(
            fake.calls(fake_amocrm::CREATE),
            2,
            "no call with an expired token"
        );
        assert_eq!(
            store.crm_token(CONNECTOR).await.unwrap().unwrap().version,
            2
        );
    }

    #[tokio::test]
    async fn oauth_refreshes_once_on_a_401_and_retries_once() {
        let fake = fake().await;
        let store = memory_store().await;
        let crm = oauth_adapter(&fake, &store);
        crm.create(&lead("site:u1")).await.0.unwrap();
        // The token dies before its time (revoked, clock skew): 401, refresh, retry.
        fake.expire_access_tokens();
        let (res, ex) = crm.create(&lead("site:u2")).await;
        assert_eq!(res.unwrap(), "2");
        assert_eq!(ex.response["status"], 200);
        assert_eq!(ex.response["token_refresh"]["status"], 200);
        assert_eq!(fake.calls(fake_amocrm::CREATE), 3);
        assert_eq!(fake.calls(fake_amocrm::TOKEN), 2);
        fake.expire_access_tokens();
        assert_eq!(
            crm.find("site:u2").await.0.unwrap(),
            Lookup::One("2".into())
        );
        assert_eq!(fake.calls(fake_amocrm::TOKEN), 3);
        // A 401 that survives the refresh is auth, after exactly one refresh.
        fake.push_fault(fake_amocrm::CREATE, Fault::Unauthorized, 2);
        let (res, ex) = crm.create(&lead("site:u3")).await;
        let err = res.unwrap_err();
        assert_eq!(err.class, ErrorClass::Auth);
        assert!(err.message.contains("HTTP 401"), "{err}");
        assert_eq!(fake.calls(fake_amocrm::TOKEN), 4);
        assert_eq!(fake.calls(fake_amocrm::CREATE), 5);
        assert_no_tokens(&[err.message, ex.request.to_string(), ex.response.to_string()]);
        assert_eq!(fake.leads().len(), 2);
    }

    #[tokio::test]
    async fn oauth_a_rotated_away_refresh_token_is_auth_until_a_person_reconnects() {
        let fake = fake().await;
        let store = memory_store().await;
        let crm = oauth_adapter(&fake, &store);
        crm.create(&lead("site:r1")).await.0.unwrap();
        // The integration was reconnected elsewhere: the stored refresh token is dead.
        fake.reissue_refresh_token("fake-refresh-by-person");
        fake.expire_access_tokens();
        let (res, ex) = crm.create(&lead("site:r2")).await;
        let err = res.unwrap_err();
        assert_eq!(err.class, ErrorClass::Auth, "{err}");
        assert!(
            err.message.contains("POST /oauth2/access_token: HTTP 400"),
            "{err}"
        );
        assert_eq!(ex.response["class"], "auth");
        assert_eq!(ex.response["token_refresh"]["status"], 400);
        assert_no_tokens(&[
            err.message.clone(),
            ex.request.to_string(),
            ex.response.to_string(),
        ]);
        assert_eq!(fake.leads().len(), 1, "nothing was created");
        // Refused twice: the stored token, then the (long dead) configured one.
        assert_eq!(fake.calls(fake_amocrm::TOKEN), 3);
        // The person puts the new refresh token into the configuration and resumes.
        let fixed = AmoCrm::new(Settings {
            auth: match oauth_settings(&fake, &store).auth {
                Auth::OAuth(o) => Auth::OAuth(OAuth {
                    refresh_token: "fake-refresh-by-person".into(),
                    ..o
                }),
                other => other,
            },
            ..settings(&fake)
        })
        .unwrap();
        fixed.create(&lead("site:r2")).await.0.unwrap();
        let row = stored_row(&store).await;
        assert_eq!(row.refresh_token, fake.current_refresh_token());
        // The old adapter picks the repaired row up instead of failing again.
        crm.create(&lead("site:r3")).await.0.unwrap();
        assert_eq!(fake.leads().len(), 3);
    }

    #[tokio::test]
    async fn oauth_two_adapters_sharing_a_store_refresh_once_and_both_keep_working() {
        let fake = fake().await;
        fake.set_access_ttl(Duration::from_secs(1));
        let store = memory_store().await;
        let a = Arc::new(oauth_adapter(&fake, &store));
        let b = Arc::new(oauth_adapter(&fake, &store));
        for round in 0..2 {
            let calls: Vec<_> = (0..6)
                .map(|i| {
                    let crm = if i % 2 == 0 { a.clone() } else { b.clone() };
                    tokio::spawn(
                        async move { crm.create(&lead(&format!("site:{round}-{i}"))).await.0 },
                    )
                })
                .collect();
            for c in calls {
                c.await.unwrap().unwrap();
            }
            assert_eq!(
                fake.calls(fake_amocrm::TOKEN),
                round + 1,
                "one refresh per expiry for both"
            );
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        assert_eq!(fake.leads().len(), 12);
        let row = stored_row(&store).await;
        assert_eq!(
            (row.version, row.refresh_token),
            (2, fake.current_refresh_token())
        );
    }

    #[tokio::test]
    async fn oauth_a_refresh_that_fails_on_the_way_never_sent_the_lead() {
        let fake = fake().await;
        let store = memory_store().await;
        let crm = oauth_adapter(&fake, &store);
        fake.push_fault(fake_amocrm::TOKEN, Fault::ServerError, 1);
        let err = crm.create(&lead("site:n1")).await.0.unwrap_err();
        assert_eq!(err.class, ErrorClass::NotSent, "{err}");
        fake.push_fault(
            fake_amocrm::TOKEN,
            Fault::RateLimit {
                retry_after_secs: None,
            },
            1,
        );
        let err = crm.create(&lead("site:n1")).await.0.unwrap_err();
        assert_eq!(err.class, ErrorClass::RateLimited, "{err}");
        assert_eq!(fake.calls(fake_amocrm::CREATE), 0);
        crm.create(&lead("site:n1")).await.0.unwrap();
        assert_eq!(fake.leads().len(), 1);
    }

    #[test]
    fn bad_settings_are_refused() {
        let good = Settings {
            base_url: "https://acme.amocrm.ru/api/v4/".into(),
            auth: Auth::Token("t".into()),
            operation_field_id: 1,
            pipeline_id: None,
            rate_limit: 7.0,
            timeout: Duration::from_secs(1),
        };
        assert_eq!(
            AmoCrm::new(good.clone()).unwrap().base,
            "https://acme.amocrm.ru"
        );
        for bad in [
            Settings {
                base_url: "acme".into(),
                ..good.clone()
            },
            Settings {
                base_url: "ftp://acme".into(),
                ..good.clone()
            },
            Settings {
                auth: Auth::Token(" ".into()),
                ..good.clone()
            },
            Settings {
                operation_field_id: 0,
                ..good.clone()
            },
            Settings {
                rate_limit: 0.0,
                ..good.clone()
            },
            Settings {
                rate_limit: f64::NAN,
                ..good.clone()
            },
        ] {
            assert!(AmoCrm::new(bad).is_err());
        }
    }

    #[test]
    fn classification_table() {
        use ErrorClass::*;
        use Target::*;
        const HTML: &str =
            "<html><head><title>404 Not Found</title></head><body>nginx</body></html>";
        const PROBLEM: &str = r#"{"title":"Not Found","status":404,"detail":"Not Found"}"#;
        const INVALID: &str = r#"{"validation-errors":[{"request_id":"0","errors":[{"code":"NotSupportedChoice","path":"x","detail":"y"}]}],"title":"Bad Request","status":400}"#;
        const NO_RIGHTS: &str = r#"{"title":"Bad Request","status":400,"response":{"error":"Access denied","error_code":244}}"#;
        const IP_DENIED: &str =
            r#"{"response":{"error":"Access denied from this IP","error_code":"113"}}"#;
        const OTHER_CODE: &str = r#"{"response":{"error":"Invalid data","error_code":"400"}}"#;
        // (status, what the request addresses, body, class)
        let table = [
            // That lead's data: terminal.
            (400, Account, INVALID, Validation),
            (400, Account, OTHER_CODE, Validation),
            (400, Account, "", Validation),
            (400, Account, "Bad Request", Validation),
            (422, Account, PROBLEM, Validation),
            (409, Account, PROBLEM, Validation),
            // The entity an update names by id is gone (deleted in the CRM).
            (404, Entity, PROBLEM, Validation),
            (400, Entity, INVALID, Validation),
            // The connector's problem: credentials, account, method, address — pause.
            (400, Account, NO_RIGHTS, Auth),
            (400, Entity, NO_RIGHTS, Auth),
            (400, Account, IP_DENIED, Auth),
            (401, Account, PROBLEM, Auth),
            (402, Account, PROBLEM, Auth),
            (403, Account, HTML, Auth),
            (403, Entity, PROBLEM, Auth),
            (404, Account, PROBLEM, Auth),
            (404, Account, HTML, Auth),
            (404, Account, "", Auth),
            (404, Entity, HTML, Auth),
            (404, Entity, "", Auth),
            (405, Account, PROBLEM, Auth),
            (405, Entity, PROBLEM, Auth),
            (400, Account, HTML, Auth),
            (410, Account, "<!DOCTYPE html><html></html>", Auth),
            (301, Account, "", Auth),
            (302, Entity, HTML, Auth),
            // Refused before execution: later.
            (429, Account, "Too Many Requests", RateLimited),
            // A timeout is an unknown outcome: looked up, never a refusal.
            (408, Account, "", Uncertain),
            (408, Account, HTML, Uncertain),
            // The account failed while executing, or an answer we cannot read.
            (500, Account, PROBLEM, Uncertain),
            (502, Account, HTML, Uncertain),
            (503, Account, "", Uncertain),
            (504, Account, "", Uncertain),
            (200, Account, "", Uncertain),
        ];
        for (status, target, body, class) in table {
            assert_eq!(
                classify(
                    StatusCode::from_u16(status).unwrap(),
                    target,
                    body.as_bytes()
                ),
                class,
                "{status} {target:?} {body}"
            );
        }
    }

    #[test]
    fn problem_text_reads_every_error_shape() {
        assert_eq!(
            problem_text(&json!({"title": "Unauthorized", "status": 401})),
            "Unauthorized"
        );
        assert_eq!(
            problem_text(&json!({"response": {"error": "Access denied", "error_code": "244"}})),
            "code 244: Access denied"
        );
        assert_eq!(problem_text(&json!({})), "unexpected JSON answer");
        let h = HeaderMap::new();
        let e = error_answer("m", StatusCode::BAD_REQUEST, &h, b"[1]", &[]);
        assert_eq!(e.message, "amocrm m: HTTP 400 unexpected JSON answer");
        let e = error_answer("m", StatusCode::BAD_GATEWAY, &h, b"  ", &[]);
        assert_eq!(
            (e.class, e.message.as_str()),
            (ErrorClass::Uncertain, "amocrm m: HTTP 502 (empty body)")
        );
    }

    #[test]
    fn complex_results_are_read_liberally() {
        assert_eq!(
            complex_result(
                br#"[{"id":9774766,"contact_id":12117258,"request_id":["op"],"merged":false}]"#
            )
            .unwrap()
            .0,
            "9774766"
        );
        assert_eq!(
            complex_result(br#"{"_embedded":{"leads":[{"id":"5"}]}}"#)
                .unwrap()
                .0,
            "5"
        );
        assert!(complex_result(b"[]").is_none());
        assert!(complex_result(br#"[{"id":0}]"#).is_none());
        assert!(complex_result(b"nope").is_none());
    }
}
