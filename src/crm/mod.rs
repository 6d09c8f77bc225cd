//! The CRM boundary: the only code that talks to CRMs.
//!
//! The worker hands a [`Lead`] to a [`Crm`] and gets back either the new entity's id
//! or a [`CrmError`] whose [`ErrorClass`] decides what happens next (retry, reconcile,
//! fail, pause the connector). Every call also returns an [`Exchange`]: a summary of
//! what went over the wire, for the operation's timeline. Neither the error message
//! nor the exchange may carry secrets (webhook URLs, tokens) or contact data, because
//! both are stored and shown in the console long after the personal data is scrubbed.
//!
//! Adapters classify failures in exactly one function each, so that the mapping from
//! "what the CRM said" to "what Leadgate does" can be read (and tested) as one table.
//!
//! What comes back from a CRM is untrusted: adapters scrub webhook secrets, tokens and
//! the lead's contact values from every message they keep ([`clean_message`] also strips
//! markup after decoding entities, and control characters); numbers in an answer are
//! clamped before they become durations; Bitrix24 redirects are followed only within the
//! webhook's https origin. Configuration secrets are `domain::Secret` (Debug prints
//! `***`), and logs name the `operation_id`, never the lead's data.

use std::time::Duration;

use crate::domain::ErrorClass;

pub mod amocrm;
pub mod bitrix24;
pub mod http;
pub mod rate;
mod settings;
pub mod vault;

pub use crate::domain::{FieldMap, Lead, LeadChanges};
pub use settings::CrmConfig;

/// A failed CRM call, classified.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{class}: {message}")]
pub struct CrmError {
    pub class: ErrorClass,
    /// Safe to store: never the webhook secret/URL, never contact data.
    pub message: String,
    /// How long the CRM asked us to wait (`Retry-After`), if it said so.
    pub retry_after: Option<Duration>,
}

impl CrmError {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> CrmError {
        CrmError {
            class,
            message: message.into(),
            retry_after: None,
        }
    }
}

/// How a failed call is kept on the operation: its class and its (already cleaned)
/// message.
impl From<&CrmError> for crate::domain::Failure {
    fn from(e: &CrmError) -> Self {
        crate::domain::Failure {
            class: e.class,
            message: e.message.clone(),
        }
    }
}

/// What a search by external key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    NotFound,
    One(String),
    /// Several entities carry the key: duplicates already exist; a person decides.
    Many(Vec<String>),
}

impl Lookup {
    /// Builds the lookup from the ids found, in the CRM's order.
    pub fn from_ids(mut ids: Vec<String>) -> Lookup {
        match ids.len() {
            0 => Lookup::NotFound,
            1 => Lookup::One(ids.remove(0)),
            _ => Lookup::Many(ids),
        }
    }
}

/// One step of a create that takes several calls (Bitrix24 `contact_deal`: the contact,
/// then the deal), as the worker commits it (a `crm_step` timeline event) before the next call: the recovery point an
/// attempt after a crash or a lost answer resumes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepDone {
    /// The step's name (`contact`).
    pub step: String,
    /// The CRM entity kind it produced (`contact`).
    pub entity: String,
    pub crm_id: String,
    /// `created` (this step's create), `linked` (an entity that was there already,
    /// found by phone or e-mail) or `recovered` (found again by the step's own key after
    /// an earlier attempt's answer was lost).
    pub how: String,
}

/// What the phone and e-mail search of a step looks for: the operation's normalized
/// contact keys (E.164 phone, lower-cased e-mail).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContactSearch {
    pub phone: Option<String>,
    pub email: Option<String>,
    /// Contacts that leads with this phone or e-mail made or linked a moment ago (the
    /// contact locks remember them): the CRM's search may not show them yet, so they
    /// count as found.
    pub known: Vec<String>,
}

/// The contact a one-call create links to, chosen before the create
/// ([`Crm::choose_contact`]): its id when one exists, and what the reads said, for the
/// timeline.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContactChoice {
    pub contact: Option<String>,
    pub summary: serde_json::Map<String, serde_json::Value>,
}

/// A step that did not produce its entity.
#[derive(Debug, Clone, PartialEq)]
pub enum StepError {
    /// The call failed, classified as any call.
    Crm(CrmError),
    /// Several entities match and the rule is to ask a person: the step and their ids.
    Ambiguous { step: String, ids: Vec<String> },
}

impl From<CrmError> for StepError {
    fn from(e: CrmError) -> Self {
        StepError::Crm(e)
    }
}

/// Summaries of one CRM call for the timeline: method, status, duration_ms, error
/// code; no secrets, no contact data.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Exchange {
    pub request: serde_json::Value,
    pub response: serde_json::Value,
}

/// What an update of an entity sends ([`Crm::update`]).
#[derive(Debug, Clone, Default)]
pub struct EntityUpdate {
    pub crm_id: String,
    /// The lead as the entity should hold it now: the lead as created with `changes`
    /// laid over it (a deal's COMMENTS are written from it).
    pub target: Lead,
    pub changes: LeadChanges,
    /// The contact values and comments of the original and the later delivery: scrubbed
    /// from anything stored (a CRM may echo what it was sent in an error).
    pub redact: Vec<String>,
}

impl EntityUpdate {
    pub fn redact(&self) -> Vec<&str> {
        self.redact.iter().map(String::as_str).collect()
    }
}

/// A CRM connector.
#[async_trait::async_trait]
pub trait Crm: Send + Sync + 'static {
    /// The connector name (used to pause/resume), e.g. "bitrix24".
    fn connector(&self) -> &str;
    /// Whether "not found" from `find` proves no entity exists (Bitrix24: yes).
    fn lookup_is_authoritative(&self) -> bool;
    /// Gets ready for one call outside its budget: a fresh access token where the
    /// connector refreshes them (amoCRM OAuth), then a turn of its rate limit (amoCRM's 7
    /// per second). The worker and the reconciler call it before a call's budget starts
    /// and then run the call inside [`rate::prepaid`], so neither a token refresh nor the
    /// pacing wait eats into it. An error means nothing was sent.
    async fn pace(&self) -> Result<(), CrmError> {
        Ok(())
    }
    /// Creates one entity carrying the operation id as external key. Returns the new id.
    async fn create(&self, lead: &Lead) -> (Result<String, CrmError>, Exchange);

    /// Whether a create finds the lead's contact by phone and e-mail before it makes one
    /// (Bitrix24 `contact_deal`, amoCRM `link_contacts`): then the worker lets one lead
    /// per phone and e-mail at a time do so (the contact locks).
    fn links_contacts(&self) -> bool {
        false
    }

    /// The reads a one-call create that links contacts makes before it (amoCRM
    /// `link_contacts`: the contact searches by phone and e-mail): `known` are contacts
    /// the search may not show yet (see [`ContactSearch::known`]). The worker makes them
    /// before the attempt is recorded as started, so a process that dies during them
    /// leaves a lead that was never sent, not one that looks sent. An error means nothing
    /// was created. The default looks nothing up.
    async fn choose_contact(
        &self,
        lead: &Lead,
        known: &[String],
    ) -> (Result<ContactChoice, CrmError>, Exchange) {
        let _ = (lead, known);
        (
            Ok(ContactChoice::default()),
            Exchange {
                request: serde_json::json!({"contact": "none"}),
                response: serde_json::json!({"sent": false}),
            },
        )
    }

    /// [`create`](Crm::create) of a one-call create that links contacts, with the
    /// contact [`choose_contact`](Crm::choose_contact) chose: no read before it. Returns
    /// the new id and the contact it was linked to or created with, if the CRM said.
    async fn create_with_contact(
        &self,
        lead: &Lead,
        choice: ContactChoice,
    ) -> (Result<(String, Option<String>), CrmError>, Exchange) {
        let _ = choice;
        let (result, exchange) = self.create(lead).await;
        (result.map(|id| (id, None)), exchange)
    }
    /// Finds entities by external key.
    async fn find(&self, operation_id: &str) -> (Result<Lookup, CrmError>, Exchange);

    /// The steps a create takes before its final entity, in order (Bitrix24
    /// `contact_deal`: `["contact"]`); empty (the default): the create is one call.
    fn steps(&self) -> Vec<&str> {
        Vec::new()
    }

    /// The kind of entity a stepped create makes last (Bitrix24 `contact_deal`: `deal`).
    fn final_entity(&self) -> &'static str {
        "lead"
    }

    /// At most how many requests one whole create makes, its steps included: its
    /// budget is that many calls.
    fn create_calls(&self) -> u32 {
        1
    }

    /// Makes step `step` of `lead`'s create: finds or creates its entity. `done` are the
    /// earlier steps' results; with `may_exist` an earlier attempt may have sent this
    /// step's create, so the step looks its own external key up before anything else
    /// (never a blind second create).
    async fn step(
        &self,
        step: &str,
        lead: &Lead,
        search: &ContactSearch,
        done: &[StepDone],
        may_exist: bool,
    ) -> (Result<StepDone, StepError>, Exchange) {
        let _ = (lead, search, done, may_exist);
        (
            Err(StepError::Crm(CrmError::new(
                ErrorClass::Validation,
                format!("the {} connector has no step {step}", self.connector()),
            ))),
            Exchange {
                request: serde_json::json!({"step": step}),
                response: serde_json::json!({"sent": false}),
            },
        )
    }

    /// The final create of a stepped create, linked to the entities of `done`: what
    /// [`find`](Crm::find) looks up afterwards. One-call CRMs: [`create`](Crm::create).
    async fn create_after(
        &self,
        lead: &Lead,
        done: &[StepDone],
    ) -> (Result<String, CrmError>, Exchange) {
        let _ = done;
        self.create(lead).await
    }

    /// At most how many requests one [`update`](Crm::update) makes (a read before the
    /// write, a contact's and its lead's): the call's budget is that many calls.
    fn update_calls(&self) -> u32 {
        1
    }

    /// Sets `u.changes` on the entity `u.crm_id`, one this connector created: fields it
    /// replaces are replaced, a phone or e-mail is added beside the ones the entity has.
    /// Sending the same update twice leaves the entity as sending it once does. `Ok`: the
    /// fields it sent (`title`, `name`, `phone`, `email`, `comment`; a CRM without a place
    /// for one leaves it out). A connector that cannot update refuses as `validation`
    /// without sending anything.
    async fn update(&self, u: &EntityUpdate) -> (Result<Vec<String>, CrmError>, Exchange) {
        let crm_id = &u.crm_id;
        (
            Err(CrmError::new(
                ErrorClass::Validation,
                format!(
                    "the {} connector has no update request configured",
                    self.connector()
                ),
            )),
            Exchange {
                request: serde_json::json!({"update": crm_id}),
                response: serde_json::json!({"sent": false}),
            },
        )
    }

    /// The most creates one request may carry: above 1 the worker drains waiting work in
    /// batches through [`create_many`](Crm::create_many).
    fn batch_limit(&self) -> usize {
        1
    }

    /// Creates `leads` (at most [`batch_limit`](Crm::batch_limit)) in one request, each
    /// carrying its operation id as external key. `Ok`: one answer per lead, in order,
    /// each classified on its own. `Err`: the request as a whole failed, and the class
    /// says what that means for every lead in it (an `uncertain` batch may have created
    /// any of them).
    async fn create_many(&self, leads: &[Lead]) -> BatchAnswer {
        match leads {
            [lead] => {
                let answer = self.create(lead).await;
                Ok(vec![answer])
            }
            _ => Err((
                CrmError::new(
                    ErrorClass::Validation,
                    format!("the {} connector has no batch create", self.connector()),
                ),
                Exchange {
                    request: serde_json::json!({"batch": leads.len()}),
                    response: serde_json::json!({"sent": false}),
                },
            )),
        }
    }

    /// The most external keys one lookup request may carry: above 1 the uncertain
    /// creates of a batch are looked up together through [`find_many`](Crm::find_many).
    fn lookup_batch_limit(&self) -> usize {
        1
    }

    /// Finds several external keys (2 to
    /// [`lookup_batch_limit`](Crm::lookup_batch_limit)) in one request: one lookup per
    /// key, in order. One key is looked up with [`find`](Crm::find); a CRM whose limit is
    /// 1 is never asked.
    async fn find_many(&self, operation_ids: &[&str]) -> (Result<Vec<Lookup>, CrmError>, Exchange) {
        (
            Err(CrmError::new(
                ErrorClass::Validation,
                format!("the {} connector has no batch lookup", self.connector()),
            )),
            Exchange {
                request: serde_json::json!({"lookup": operation_ids.len()}),
                response: serde_json::json!({"sent": false}),
            },
        )
    }
}

/// Puts a failure's class and (clean) message into an exchange's summary.
pub(crate) fn note_error(summary: &mut serde_json::Map<String, serde_json::Value>, e: &CrmError) {
    summary.insert("class".into(), serde_json::json!(e.class));
    summary.insert("message".into(), serde_json::json!(e.message));
}

/// The time a batch create has for the requests that follow its first one, when a
/// refusal of the whole request made it split the batch (see the adapters'
/// `create_many`): the worker cuts the whole call at the connector's `timeout`, so a
/// follow-up starts only while a fair share of it is left, and must be done a margin
/// before the cut (an answer cut off by the worker would make every lead of the batch
/// uncertain, those already answered too).
pub(crate) struct SplitClock {
    deadline: std::time::Instant,
    min_left: Duration,
}

impl SplitClock {
    /// Started when the first request of a batch goes out, for a call budget of `timeout`.
    pub(crate) fn start(timeout: Duration) -> SplitClock {
        let margin = (timeout / 10).min(Duration::from_millis(500));
        SplitClock {
            deadline: std::time::Instant::now() + timeout.saturating_sub(margin),
            min_left: timeout / 4,
        }
    }

    /// How long the next follow-up request may take, or `None` when too little is left
    /// to start one.
    pub(crate) fn left(&self) -> Option<Duration> {
        let left = self
            .deadline
            .saturating_duration_since(std::time::Instant::now());
        (left >= self.min_left && !left.is_zero()).then_some(left)
    }
}

/// The error of a lead that every request it was in was refused before anything was
/// executed, and no time was left to send it once more: nothing was created, so it is
/// tried again later (its own attempt), never failed for its neighbours' sake.
pub(crate) fn not_sent_after_split(connector: &str, method: &str) -> CrmError {
    CrmError::new(
        ErrorClass::NotSent,
        format!(
            "{connector} {method}: refused together with other leads of its batch, and \
             no time was left to send it on its own: nothing was created"
        ),
    )
}

/// The answer to a batch create: per lead, or a failure of the request as a whole.
pub type BatchAnswer = Result<Vec<(Result<String, CrmError>, Exchange)>, (CrmError, Exchange)>;

/// Why amoCRM OAuth needs the token key, when it is missing.
pub const AMOCRM_KEY_MISSING: &str = "amoCRM OAuth keeps its rotating tokens in the database, \
    encrypted: set LEADGATE_TOKEN_KEY (64 hex digits, e.g. from `openssl rand -hex 32`) or \
    [crm] token_key_file";

/// Builds the adapter the configuration names.
///
/// `store` is the operations store: amoCRM with OAuth keeps its rotating tokens there,
/// shared by every process.
pub fn from_config(
    config: &CrmConfig,
    store: std::sync::Arc<dyn crate::store::Store>,
) -> Result<std::sync::Arc<dyn Crm>, ConfigError> {
    Ok(match config {
        CrmConfig::Bitrix24 {
            webhook_url,
            entity,
            deal_category_id,
            deal_stage_id,
            contact_match,
            timeout,
            rate_limit,
            burst,
            ..
        } => {
            if !(rate_limit.is_finite() && *rate_limit > 0.0) || *burst == 0 {
                return Err(ConfigError(
                    "Bitrix24 rate_limit must be a positive number of requests per second \
                     and burst at least 1"
                        .into(),
                ));
            }
            std::sync::Arc::new(
                bitrix24::Bitrix24::new(webhook_url.expose(), *entity, *timeout)?
                    .with_deals(bitrix24::DealSettings {
                        category_id: *deal_category_id,
                        stage_id: deal_stage_id.clone(),
                        contact_match: *contact_match,
                    })?
                    .paced_in(store, *rate_limit, *burst),
            )
        }
        CrmConfig::Amocrm { link_contacts, .. } => std::sync::Arc::new(
            amocrm::AmoCrm::new(amocrm_settings(config, store.clone())?)?
                .with_contact_links(*link_contacts)
                .paced_in(store),
        ),
        CrmConfig::Http(config) => std::sync::Arc::new(http::HttpCrm::new(config)?),
    })
}

/// The amoCRM adapter's settings from a `[crm]` of kind amocrm (`store` keeps OAuth's
/// rotating tokens).
pub fn amocrm_settings(
    config: &CrmConfig,
    store: std::sync::Arc<dyn crate::store::Store>,
) -> Result<amocrm::Settings, ConfigError> {
    let CrmConfig::Amocrm {
        base_url,
        token,
        client_id,
        client_secret,
        redirect_uri,
        refresh_token,
        operation_field_id,
        pipeline_id,
        rate_limit,
        timeout,
        token_key_file,
        ..
    } = config
    else {
        return Err(ConfigError("the [crm] is not amoCRM".into()));
    };
    Ok(amocrm::Settings {
        base_url: base_url.clone(),
        auth: match (token, client_id, client_secret, redirect_uri, refresh_token) {
            (Some(token), None, None, None, None) => amocrm::Auth::Token(token.expose().to_owned()),
            (None, Some(id), Some(secret), Some(redirect), Some(refresh)) => {
                amocrm::Auth::OAuth(amocrm::OAuth {
                    client_id: id.clone(),
                    client_secret: secret.expose().to_owned(),
                    redirect_uri: redirect.clone(),
                    refresh_token: refresh.expose().to_owned(),
                    store,
                    vault: vault::Vault::from_env_or_file(
                        token_key_file.as_deref(),
                        AMOCRM_KEY_MISSING,
                    )
                    .map_err(ConfigError)?,
                })
            }
            _ => {
                return Err(ConfigError(
                    "amoCRM needs either token, or client_id, client_secret, redirect_uri \
                     and refresh_token"
                        .into(),
                ))
            }
        },
        operation_field_id: *operation_field_id,
        pipeline_id: *pipeline_id,
        rate_limit: *rate_limit,
        timeout: *timeout,
    })
}

/// The connector name of a configured CRM (what `connector resume` defaults to).
pub fn connector_name(config: &CrmConfig) -> &'static str {
    match config {
        CrmConfig::Bitrix24 { .. } => bitrix24::CONNECTOR,
        CrmConfig::Amocrm { .. } => amocrm::CONNECTOR,
        CrmConfig::Http(_) => http::CONNECTOR,
    }
}

/// Where a person opens this CRM in a browser: the entity page (`{id}`) and the list
/// searched for a phone, e-mail or name (`{q}`). Built from the portal's address only —
/// a Bitrix24 webhook's path holds its secret and never leaves this function. `None` for
/// an HTTP CRM without `web_entity_url`.
pub fn web_links(config: &CrmConfig) -> Option<crate::store::CrmLinks> {
    let (entity_url, search_url, contact_url) = match config {
        CrmConfig::Bitrix24 {
            webhook_url,
            entity,
            ..
        } => {
            let url = reqwest::Url::parse(webhook_url.expose()).ok()?;
            let origin = url.origin().ascii_serialization();
            let kind = match entity {
                bitrix24::Entity::Lead => "lead",
                bitrix24::Entity::Deal | bitrix24::Entity::ContactDeal => "deal",
            };
            (
                format!("{origin}/crm/{kind}/details/{{id}}/"),
                Some(format!(
                    "{origin}/crm/{kind}/list/?apply_filter=Y&FIND={{q}}"
                )),
                Some(format!("{origin}/crm/contact/details/{{id}}/")),
            )
        }
        CrmConfig::Amocrm { base_url, .. } => {
            let url = reqwest::Url::parse(base_url).ok()?;
            let origin = url.origin().ascii_serialization();
            (
                format!("{origin}/leads/detail/{{id}}"),
                Some(format!("{origin}/leads/list/?term={{q}}")),
                Some(format!("{origin}/contacts/detail/{{id}}")),
            )
        }
        CrmConfig::Http(http) => (
            http.web_entity_url.clone()?,
            http.web_search_url.clone(),
            None,
        ),
    };
    Some(crate::store::CrmLinks {
        connector: connector_name(config).to_owned(),
        entity_url,
        search_url,
        contact_url,
    })
}

/// A connector's configuration cannot work (bad URL, TLS setup failed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CRM configuration: {0}")]
pub struct ConfigError(pub String);

/// The longest error message kept; CRM error pages can be long and the message is
/// stored per attempt.
pub const MAX_MESSAGE_CHARS: usize = 300;

/// Makes a CRM-provided text safe and short enough to store: strips HTML tags (Bitrix24
/// appends `<br />` to validation texts, proxies answer with whole HTML pages),
/// collapses whitespace, replaces each of `redact` (secrets, contact values) with `***`
/// and caps the length at [`MAX_MESSAGE_CHARS`].
pub fn clean_message(text: &str, redact: &[&str]) -> String {
    // Entities are decoded first and tags stripped after: decoding last would turn
    // `&lt;script&gt;` back into markup. Control and invisible formatting characters
    // (bidirectional overrides, zero-width) become spaces.
    let decoded = text
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#039;", "'")
        .replace("&amp;", "&");
    let mut plain = String::with_capacity(decoded.len());
    let mut in_tag = false;
    for c in decoded.chars() {
        match c {
            '<' => {
                in_tag = true;
                plain.push(' ');
            }
            '>' if in_tag => in_tag = false,
            _ if in_tag => {}
            c if c.is_control() || is_format_char(c) => plain.push(' '),
            c => plain.push(c),
        }
    }
    let mut out = plain.split_whitespace().collect::<Vec<_>>().join(" ");
    for secret in redact {
        // Very short values would redact ordinary words; they are not identifying.
        if secret.chars().count() >= 3 {
            out = out.replace(secret, "***");
        }
    }
    match out.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => {
            out.truncate(cut);
            out
        }
        None => out,
    }
}

/// Whether an answer's body is an HTML page (a proxy's or web server's error page)
/// rather than the API's JSON: it opens with markup.
pub(crate) fn looks_like_html(body: &str) -> bool {
    let t = body.trim_start().to_ascii_lowercase();
    t.starts_with("<!doctype") || t.starts_with("<html") || t.starts_with("<?xml") || {
        t.starts_with('<') && (t.contains("<html") || t.contains("<body") || t.contains("<title"))
    }
}

/// Invisible formatting characters: zero-width, bidirectional controls, BOM.
fn is_format_char(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// Classifies a transport failure of `reqwest` — the part of classification that is
/// the same for every HTTP CRM.
///
/// A connect failure (refused, DNS) proves the request never left: `NotSent`. Anything
/// after the connection was up — a timeout while waiting, a reset or a close before or
/// in the middle of the answer — may have happened after the CRM executed the
/// request: `Uncertain`. The message is built from the error kind and its sources with
/// the URL removed (`reqwest` errors carry the full URL, which holds the webhook
/// secret), and is then scrubbed of `redact` anyway.
pub fn classify_transport(
    connector: &str,
    method: &str,
    err: reqwest::Error,
    redact: &[&str],
) -> CrmError {
    let (class, what) = if err.is_builder() {
        // The request could not even be built: the configuration is broken and only a
        // person can fix it, so pause the connector instead of retrying forever.
        (ErrorClass::Auth, "invalid request configuration")
    } else if err.is_connect() {
        (ErrorClass::NotSent, "could not connect")
    } else if err.is_timeout() {
        (ErrorClass::Uncertain, "timed out waiting for the answer")
    } else if err.is_body() || err.is_decode() {
        (
            ErrorClass::Uncertain,
            "connection broke while reading the answer",
        )
    } else {
        (ErrorClass::Uncertain, "connection broke before the answer")
    };
    let mut detail = String::new();
    let err = err.without_url();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    CrmError::new(
        class,
        clean_message(&format!("{connector} {method}: {what}{detail}"), redact),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_links_keep_the_portal_and_never_the_webhook_secret() {
        let crm = |text: &str| -> CrmConfig { toml::from_str(text).unwrap() };
        let b24 = web_links(&crm(
            "kind = \"bitrix24\"\nwebhook_url = \"https://acme.bitrix24.ru/rest/1/s3cr3tt0ken/\"",
        ))
        .unwrap();
        assert_eq!(b24.connector, "bitrix24");
        assert_eq!(
            b24.entity_url,
            "https://acme.bitrix24.ru/crm/lead/details/{id}/"
        );
        assert_eq!(
            b24.search_url.as_deref(),
            Some("https://acme.bitrix24.ru/crm/lead/list/?apply_filter=Y&FIND={q}")
        );
        assert!(!format!("{b24:?}").contains("s3cr3t"));
        let deals = web_links(&crm(
            "kind = \"bitrix24\"\nentity = \"deal\"\nwebhook_url = \"https://b24.example.com:8443/rest/7/k/\"",
        ))
        .unwrap();
        assert_eq!(
            deals.entity_url,
            "https://b24.example.com:8443/crm/deal/details/{id}/"
        );
        let amo = web_links(&crm(
            "kind = \"amocrm\"\nbase_url = \"https://acme.amocrm.ru/\"\ntoken = \"t\"\noperation_field_id = 5",
        ))
        .unwrap();
        assert_eq!(amo.entity_url, "https://acme.amocrm.ru/leads/detail/{id}");
        assert_eq!(
            amo.search_url.as_deref(),
            Some("https://acme.amocrm.ru/leads/list/?term={q}")
        );
        let http = |extra: &str| {
            crm(&format!(
                "kind = \"http\"\ncreate_url = \"https://crm.example/api\"\nbody = \"{{}}\"\nid_pointer = \"/id\"\n{extra}"
            ))
        };
        assert_eq!(web_links(&http("")), None);
        let own = web_links(&http("web_entity_url = \"https://crm.example/leads/{id}\"")).unwrap();
        assert_eq!(own.entity_url, "https://crm.example/leads/{id}");
        assert_eq!(own.search_url, None);
    }

    #[test]
    fn clean_message_strips_tags_redacts_and_caps() {
        assert_eq!(
            clean_message("The required field 'Lead Name' is missing.<br />", &[]),
            "The required field 'Lead Name' is missing."
        );
        assert_eq!(
            clean_message(
                "<html><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>",
                &[]
            ),
            "502 Bad Gateway nginx"
        );
        assert_eq!(
            clean_message(
                "bad e-mail a@b.ru at /rest/1/s3cr3t/",
                &["a@b.ru", "s3cr3t", "x"]
            ),
            "bad e-mail *** at /rest/1/***/"
        );
        let long = "é".repeat(1000);
        assert_eq!(clean_message(&long, &[]).chars().count(), MAX_MESSAGE_CHARS);
    }

    #[test]
    fn clean_message_never_brings_html_back_and_drops_control_characters() {
        // Found in review: entities were decoded after the tags were stripped.
        for encoded in [
            "bad &lt;script&gt;alert(1)&lt;/script&gt; value",
            "bad &lt;img src=x onerror=alert(1)&gt; value",
            "bad <b>&lt;</b>script&gt; value",
        ] {
            let out = clean_message(encoded, &[]);
            // No `<` survives, so no markup can be formed from what is left.
            assert!(!out.contains('<'), "{encoded} -> {out}");
            assert!(out.starts_with("bad") && out.ends_with("value"), "{out}");
        }
        // A double-encoded entity stays text.
        assert_eq!(clean_message("a &amp;lt;b&amp;gt; c", &[]), "a &lt;b&gt; c");
        assert_eq!(
            clean_message("line1\r\nline2\u{0}\u{1b}[31mred\u{7}", &[]),
            "line1 line2 [31mred"
        );
        assert_eq!(
            clean_message("id \u{202e}cod.exe\u{200b}!", &[]),
            "id cod.exe !"
        );
    }

    #[test]
    fn lookup_from_ids() {
        assert_eq!(Lookup::from_ids(vec![]), Lookup::NotFound);
        assert_eq!(Lookup::from_ids(vec!["1".into()]), Lookup::One("1".into()));
        assert_eq!(
            Lookup::from_ids(vec!["1".into(), "2".into()]),
            Lookup::Many(vec!["1".into(), "2".into()])
        );
    }
}
