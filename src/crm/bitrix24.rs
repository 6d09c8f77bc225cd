//! Bitrix24 over an incoming webhook (`https://{portal}/rest/{user}/{secret}/`).
//!
//! Bitrix24 has no idempotent create (`ORIGIN_ID` is not unique-enforced, and the
//! REST 3.0 `Idempotency-Key` does not cover CRM methods), so the adapter stamps every
//! entity with `ORIGINATOR_ID = "leadgate"` and `ORIGIN_ID = <operation_id>` and
//! finds it again with an exact-match list filter. That list is authoritative: a
//! create whose answer was lost is either in it or was never executed.

use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, LOCATION};
use reqwest::StatusCode;
use serde_json::{json, Value};

use std::sync::Arc;

use super::rate::{self, RateLimiter, MAX_RETRY_AFTER};
use super::{
    classify_transport, clean_message, note_error, BatchAnswer, ConfigError, Crm, CrmError,
    EntityUpdate, Exchange, Lead, LeadChanges, Lookup,
};
use crate::domain::ErrorClass;
use crate::store::CrmAccess;

/// Read-only calls for `leadgate diagnose`.
pub mod reads;

/// The connector name: what gets paused when the credentials stop working.
pub const CONNECTOR: &str = "bitrix24";
/// The `ORIGINATOR_ID` of every entity Leadgate creates: the external-key namespace.
pub const ORIGINATOR_ID: &str = "leadgate";
/// Bitrix24 cuts requests off after 60 s; waiting longer is pointless.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// At most this many commands in one `batch` request (Bitrix24 refuses more with
/// `ERROR_BATCH_LENGTH_EXCEEDED`), and rows in one list page.
pub const MAX_BATCH: usize = 50;
/// The cloud portal's documented request limit: a leaky bucket draining 2 requests a
/// second with room for 50 (Enterprise: 5 and 250). A `batch` is one request.
pub const DEFAULT_RATE_LIMIT: f64 = 2.0;
pub const DEFAULT_BURST: u32 = 50;
/// How long every request waits after a `QUERY_LIMIT_EXCEEDED` without a `Retry-After`,
/// and the most a refusal holds every request up (the refused lead itself waits for as
/// long as it was told).
const COOL_DOWN: Duration = Duration::from_secs(1);
const MAX_HOLD: Duration = Duration::from_secs(5);
/// The most list pages one lookup of a batch reads (duplicates beyond are rare; the
/// lookup then reports failure rather than a partial answer).
const MAX_LOOKUP_PAGES: usize = 4;
/// A portal whose domain changed answers 302; follow at most this many hops.
const MAX_REDIRECTS: usize = 3;
/// Which CRM entity a lead becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entity {
    #[default]
    Lead,
    /// A deal carrying the contact data in its COMMENTS (no client card).
    Deal,
    /// A contact found by phone or e-mail (`crm.duplicate.findbycomm`) or created, then
    /// a deal linked to it (`CONTACT_IDS`): two steps, each committed before the next.
    ContactDeal,
}

/// Which contact a lead is linked to when several carry its phone or e-mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContactMatch {
    /// The newest of them (the highest id: Bitrix24 ids grow with every create).
    #[default]
    Newest,
    /// None: the operation goes to a person as `ambiguous_match`.
    Review,
}

/// How `entity = "contact_deal"` makes its deal and picks its contact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DealSettings {
    pub category_id: Option<u64>,
    pub stage_id: Option<String>,
    pub contact_match: ContactMatch,
}

/// The contact step's name, and the one entity kind a step of this adapter makes.
pub const CONTACT_STEP: &str = "contact";

impl Entity {
    fn add_method(self) -> &'static str {
        match self {
            Entity::Lead => "crm.lead.add",
            Entity::Deal | Entity::ContactDeal => "crm.deal.add",
        }
    }

    fn get_method(self) -> &'static str {
        match self {
            Entity::Lead => "crm.lead.get",
            Entity::Deal | Entity::ContactDeal => "crm.deal.get",
        }
    }

    fn update_method(self) -> &'static str {
        match self {
            Entity::Lead => "crm.lead.update",
            Entity::Deal | Entity::ContactDeal => "crm.deal.update",
        }
    }

    fn list_method(self) -> &'static str {
        match self {
            Entity::Lead => "crm.lead.list",
            Entity::Deal | Entity::ContactDeal => "crm.deal.list",
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Entity::Lead => "lead",
            Entity::Deal | Entity::ContactDeal => "deal",
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
    deals: DealSettings,
    timeout: Duration,
    client: reqwest::Client,
    /// The portal's request pace; none: unpaced (adapter tests).
    limiter: Option<Arc<RateLimiter>>,
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
            deals: DealSettings::default(),
            timeout,
            client,
            limiter: None,
        })
    }

    /// The deal's pipeline, stage and contact rule for `entity = "contact_deal"`; a
    /// stage that is blank or not a Bitrix24 status id is refused.
    pub fn with_deals(mut self, deals: DealSettings) -> Result<Self, ConfigError> {
        if let Some(stage) = &deals.stage_id {
            let ok = !stage.is_empty()
                && stage.len() <= 50
                && stage
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-'));
            if !ok {
                return Err(ConfigError(format!(
                    "crm.deal_stage_id {stage:?} is not a Bitrix24 stage id (like NEW or C3:NEW)"
                )));
            }
        }
        let deal_settings = deals.category_id.is_some()
            || deals.stage_id.is_some()
            || deals.contact_match != ContactMatch::default();
        if deal_settings && self.entity != Entity::ContactDeal {
            return Err(ConfigError(
                "crm.deal_category_id, deal_stage_id and contact_match need entity = \"contact_deal\""
                    .into(),
            ));
        }
        self.deals = deals;
        Ok(self)
    }

    /// Paces every request to the portal at `per_second` with `burst` at once, the
    /// pace kept in `store` and shared by every process on it. The portal is named by
    /// its host and webhook user, never the secret.
    pub fn paced_in(mut self, store: Arc<dyn CrmAccess>, per_second: f64, burst: u32) -> Self {
        let account = reqwest::Url::parse(&self.webhook_url)
            .map(|u| {
                let user = u
                    .path_segments()
                    .and_then(|mut s| s.nth(1).map(str::to_owned))
                    .unwrap_or_default();
                format!(
                    "bitrix24:{}:{}/{user}",
                    u.host_str().unwrap_or_default(),
                    u.port_or_known_default().unwrap_or_default()
                )
            })
            .unwrap_or_else(|_| "bitrix24".into());
        self.limiter = Some(Arc::new(RateLimiter::in_store(
            store, &account, per_second, burst,
        )));
        self
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
                if let Some(comments) = deal_comments(lead) {
                    fields.insert("COMMENTS".into(), json!(comments));
                }
            }
            Entity::ContactDeal => {
                // The contact holds the name, phone and e-mail; the deal the comment.
                if let Some(comment) = &lead.comment {
                    fields.insert("COMMENTS".into(), json!(comment));
                }
                if let Some(category) = self.deals.category_id {
                    fields.insert("CATEGORY_ID".into(), json!(category));
                }
                if let Some(stage) = &self.deals.stage_id {
                    fields.insert("STAGE_ID".into(), json!(stage));
                }
            }
        }
        Value::Object(fields)
    }

    /// The `fields` of an update call: the changed values only. A phone or e-mail is
    /// sent without an `ID`, so Bitrix24 adds it beside the entity's others (none is
    /// lost); a deal's COMMENTS, which carry its contact data, are written again from
    /// `later` when any of it changed.
    fn update_fields(&self, later: &Lead, changes: &LeadChanges) -> Value {
        let mut fields = serde_json::Map::new();
        if let Some(title) = &changes.title {
            fields.insert("TITLE".into(), json!(title));
        }
        match self.entity {
            Entity::Lead => {
                if let Some(name) = &changes.name {
                    fields.insert("NAME".into(), json!(name));
                }
                if let Some(phone) = &changes.phone {
                    fields.insert(
                        "PHONE".into(),
                        json!([{"VALUE": phone, "VALUE_TYPE": "WORK"}]),
                    );
                }
                if let Some(email) = &changes.email {
                    fields.insert(
                        "EMAIL".into(),
                        json!([{"VALUE": email, "VALUE_TYPE": "WORK"}]),
                    );
                }
                if let Some(comment) = &changes.comment {
                    fields.insert("COMMENTS".into(), json!(comment));
                }
            }
            Entity::Deal => {
                let contact_changed = [
                    &changes.name,
                    &changes.phone,
                    &changes.email,
                    &changes.comment,
                ]
                .iter()
                .any(|v| v.is_some());
                if let Some(comments) = deal_comments(later).filter(|_| contact_changed) {
                    fields.insert("COMMENTS".into(), json!(comments));
                }
            }
            Entity::ContactDeal => {
                if let Some(comment) = &changes.comment {
                    fields.insert("COMMENTS".into(), json!(comment));
                }
            }
        }
        Value::Object(fields)
    }

    /// POSTs `body` to `method` and returns the `result` of a success envelope.
    async fn post(
        &self,
        method: &str,
        body: &Value,
        operation_id: &str,
        redact: &[&str],
        summary: &mut serde_json::Map<String, Value>,
    ) -> Result<Value, CrmError> {
        let mut envelope = self
            .post_envelope(method, body, operation_id, redact, summary)
            .await?;
        Ok(envelope["result"].take())
    }

    /// POSTs `body` to `method` (after the portal's pace lets it go) and returns the
    /// whole success envelope (`result`, and `next` for list pages).
    ///
    /// The response summary gets `status`, `duration_ms` and, on failure, `error`
    /// (Bitrix24's code) and `class`.
    async fn post_envelope(
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
        if let Some(limiter) = &self.limiter {
            limiter.acquire_unless_prepaid().await;
        }
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
                if let Some(next) = redirect_target(&url, &self.webhook_url, resp.headers()) {
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
            note_error(summary, e);
            tracing::debug!(operation_id, method, class = %e.class, "bitrix24 call failed");
            if let (ErrorClass::RateLimited, Some(limiter)) = (e.class, &self.limiter) {
                // Slow every process down, not just this operation: portals that keep
                // overflowing the bucket get blocked.
                limiter
                    .hold(e.retry_after.unwrap_or(COOL_DOWN).min(MAX_HOLD))
                    .await;
            }
        }
        result
    }

    /// One add of the entity; a deal of `contact_deal` linked to `contact`.
    async fn add(
        &self,
        lead: &Lead,
        contact: Option<&str>,
    ) -> (Result<String, CrmError>, Exchange) {
        let method = self.entity.add_method();
        let mut body = self.add_params(lead);
        if let (Some(contact), Value::Object(fields)) = (contact, &mut body["fields"]) {
            fields.insert("CONTACT_IDS".into(), json!([contact]));
        }
        let mut request = self.create_request(lead, &body["fields"]);
        if let Some(contact) = contact {
            request.insert("contact_id".into(), json!(contact));
        }
        let request = Value::Object(request);
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
            Err(e) if !summary.contains_key("class") => note_error(&mut summary, e),
            Err(_) => {}
        }
        let exchange = Exchange {
            request,
            response: Value::Object(summary),
        };
        (result, exchange)
    }

    /// The add call's parameters.
    fn add_params(&self, lead: &Lead) -> Value {
        json!({"fields": self.fields(lead), "params": {"REGISTER_SONET_EVENT": "N"}})
    }

    /// The ids of the contacts carrying `operation_id` as their external key: an earlier
    /// attempt's contact create that may have landed.
    async fn contacts_by_key(
        &self,
        operation_id: &str,
        summary: &mut serde_json::Map<String, Value>,
    ) -> Result<Vec<String>, CrmError> {
        let method = "crm.contact.list";
        let body = json!({
            "filter": {"=ORIGINATOR_ID": ORIGINATOR_ID, "=ORIGIN_ID": operation_id},
            "select": ["ID"],
            "start": -1,
        });
        let rows = self.post(method, &body, operation_id, &[], summary).await?;
        rows.as_array()
            .and_then(|rows| {
                rows.iter()
                    .map(|row| row.get("ID").and_then(id_of))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| {
                CrmError::new(
                    ErrorClass::Uncertain,
                    format!("{CONNECTOR} {method}: the answer is not a list of rows with an ID"),
                )
            })
    }

    /// The ids of the contacts whose phone (`kind = "PHONE"`) or e-mail (`EMAIL`) is
    /// `value` (`crm.duplicate.findbycomm`).
    async fn contacts_by_comm(
        &self,
        kind: &str,
        value: &str,
        operation_id: &str,
        redact: &[&str],
        summary: &mut serde_json::Map<String, Value>,
    ) -> Result<Vec<String>, CrmError> {
        let method = "crm.duplicate.findbycomm";
        let body = json!({"entity_type": "CONTACT", "type": kind, "values": [value]});
        let result = self
            .post(method, &body, operation_id, redact, summary)
            .await?;
        let bad = || {
            CrmError::new(
                ErrorClass::Uncertain,
                format!("{CONNECTOR} {method}: unexpected answer"),
            )
        };
        match result {
            // Nothing matches: Bitrix24 answers an empty array.
            Value::Array(a) if a.is_empty() => Ok(vec![]),
            Value::Object(m) => match m.get("CONTACT") {
                None => Ok(vec![]),
                Some(Value::Array(ids)) => ids
                    .iter()
                    .map(id_of)
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(bad),
                Some(_) => Err(bad()),
            },
            _ => Err(bad()),
        }
    }

    /// The contact step: the contact an earlier attempt created (by its key, when one
    /// may have), else the contacts carrying the lead's phone or e-mail (the newest, or
    /// a person decides), else a new contact carrying the operation's key.
    async fn contact_step(
        &self,
        lead: &Lead,
        search: &super::ContactSearch,
        may_exist: bool,
        summary: &mut serde_json::Map<String, Value>,
    ) -> Result<super::StepDone, super::StepError> {
        let op = lead.operation_id.as_str();
        let mut redact = lead.contact_values();
        redact.extend(search.phone.as_deref());
        redact.extend(search.email.as_deref());
        let done = |crm_id: String, how: &str| super::StepDone {
            step: CONTACT_STEP.into(),
            entity: "contact".into(),
            crm_id,
            how: how.into(),
        };
        if may_exist {
            let mut call = serde_json::Map::new();
            let found = self.contacts_by_key(op, &mut call).await;
            summary.insert("by_key".into(), Value::Object(call));
            let found = found?;
            summary.insert("by_key_found".into(), json!(found));
            match found.len() {
                0 => {}
                1 => return Ok(done(found[0].clone(), "recovered")),
                _ => {
                    return Err(super::StepError::Ambiguous {
                        step: CONTACT_STEP.into(),
                        ids: found,
                    })
                }
            }
        }
        let mut matches: Vec<String> = Vec::new();
        for (kind, value) in [("PHONE", &search.phone), ("EMAIL", &search.email)] {
            let Some(value) = value else { continue };
            let mut call = serde_json::Map::new();
            let found = self
                .contacts_by_comm(kind, value, op, &redact, &mut call)
                .await;
            summary.insert(kind.to_lowercase(), Value::Object(call));
            for id in found? {
                if !matches.contains(&id) {
                    matches.push(id);
                }
            }
        }
        // Contacts leads with this phone or e-mail made a moment ago: the search may not
        // show them yet (it lags behind creates).
        let mut known = Vec::new();
        for id in &search.known {
            if !matches.contains(id) {
                matches.push(id.clone());
                known.push(id.clone());
            }
        }
        if !known.is_empty() {
            summary.insert("known".into(), json!(known));
        }
        summary.insert("matched".into(), json!(matches));
        if matches.len() > 1 && self.deals.contact_match == ContactMatch::Review {
            return Err(super::StepError::Ambiguous {
                step: CONTACT_STEP.into(),
                ids: matches,
            });
        }
        // The newest: Bitrix24 ids grow with every create.
        if let Some(newest) = matches
            .iter()
            .max_by_key(|id| id.parse::<u64>().unwrap_or_default())
        {
            return Ok(done(newest.clone(), "linked"));
        }
        let method = "crm.contact.add";
        let mut fields = serde_json::Map::new();
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
        fields.insert("ORIGINATOR_ID".into(), json!(ORIGINATOR_ID));
        fields.insert("ORIGIN_ID".into(), json!(op));
        fields.insert("SOURCE_DESCRIPTION".into(), json!(lead.source));
        summary.insert("fields".into(), json!(fields.keys().collect::<Vec<_>>()));
        let body = json!({"fields": fields, "params": {"REGISTER_SONET_EVENT": "N"}});
        let mut call = serde_json::Map::new();
        let created = self.post(method, &body, op, &redact, &mut call).await;
        summary.insert("add".into(), Value::Object(call));
        let id = id_of(&created?).ok_or_else(|| {
            CrmError::new(
                ErrorClass::Uncertain,
                format!("{CONNECTOR} {method}: the answer has no entity id"),
            )
        })?;
        Ok(done(id, "created"))
    }

    /// The timeline's summary of one create's request (no contact data).
    fn create_request(&self, lead: &Lead, fields: &Value) -> serde_json::Map<String, Value> {
        let field_names: Vec<&String> = fields
            .as_object()
            .map(|f| f.keys().collect())
            .unwrap_or_default();
        let mut request = serde_json::Map::new();
        request.insert("connector".into(), json!(CONNECTOR));
        request.insert("method".into(), json!(self.entity.add_method()));
        request.insert("entity".into(), json!(self.entity.as_str()));
        request.insert("originator_id".into(), json!(ORIGINATOR_ID));
        request.insert("origin_id".into(), json!(lead.operation_id));
        request.insert("fields".into(), json!(field_names));
        request
    }

    /// One list page of the entities carrying any of `operation_ids` as `ORIGIN_ID`:
    /// `(ID, ORIGIN_ID)` rows and the next page's start, if any.
    async fn list_page(
        &self,
        operation_ids: &[&str],
        start: u64,
        summary: &mut serde_json::Map<String, Value>,
    ) -> Result<(Vec<(String, String)>, Option<u64>), CrmError> {
        let method = self.entity.list_method();
        let body = json!({
            "filter": {"=ORIGINATOR_ID": ORIGINATOR_ID, "@ORIGIN_ID": operation_ids},
            "select": ["ID", "ORIGIN_ID"],
            "order": {"ID": "ASC"},
            "start": start,
        });
        let page = self
            .post_envelope(method, &body, "lookup", &[], summary)
            .await?;
        let bad = |what: &str| {
            CrmError::new(
                ErrorClass::Uncertain,
                format!("{CONNECTOR} {method}: {what}"),
            )
        };
        let rows = page
            .get("result")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("the answer is not a list"))?;
        let rows = rows
            .iter()
            .map(|row| {
                let id = row.get("ID").and_then(id_of);
                let origin = row.get("ORIGIN_ID").and_then(Value::as_str);
                id.zip(origin.map(str::to_owned))
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("a row has no ID or ORIGIN_ID"))?;
        let next = page.get("next").and_then(Value::as_u64);
        Ok((rows, next))
    }

    /// One `batch` request of `crm.lead.add` (or `crm.deal.add`) commands, `halt: 0`:
    /// each command runs on its own (no transaction) and has its own result or error.
    async fn batch_once(&self, leads: &[&Lead]) -> BatchAnswer {
        let method = self.entity.add_method();
        let mut cmd = serde_json::Map::new();
        let mut requests = Vec::with_capacity(leads.len());
        for (i, lead) in leads.iter().enumerate() {
            let params = self.add_params(lead);
            let mut request = self.create_request(lead, &params["fields"]);
            request.insert("via".into(), json!("batch"));
            request.insert("command".into(), json!(command_key(i)));
            request.insert("batch".into(), json!(leads.len()));
            requests.push(Value::Object(request));
            cmd.insert(
                command_key(i),
                json!(format!("{method}?{}", php_query(&params))),
            );
        }
        let body = json!({"halt": 0, "cmd": cmd});
        let redact: Vec<&str> = leads.iter().flat_map(|l| l.contact_values()).collect();
        let mut summary = serde_json::Map::new();
        summary.insert("batch".into(), json!(leads.len()));
        let answer = self
            .post("batch", &body, "batch", &redact, &mut summary)
            .await;
        let batch = match answer {
            Ok(batch) => batch,
            Err(e) => {
                let request = json!({
                    "connector": CONNECTOR,
                    "method": "batch",
                    "command": method,
                    "batch": leads.len(),
                    "origin_ids": leads.iter().map(|l| l.operation_id.as_str()).collect::<Vec<_>>(),
                });
                return Err((
                    e,
                    Exchange {
                        request,
                        response: Value::Object(summary),
                    },
                ));
            }
        };
        Ok(requests
            .into_iter()
            .enumerate()
            .map(|(i, request)| {
                let result = batch_item(method, &command_key(i), &batch, &redact);
                let mut response = summary.clone();
                match &result {
                    Ok(id) => {
                        response.insert("id".into(), json!(id));
                    }
                    Err(e) => note_error(&mut response, e),
                }
                (
                    result,
                    Exchange {
                        request,
                        response: Value::Object(response),
                    },
                )
            })
            .collect())
    }
}

/// A PHP-style query string (`fields[PHONE][0][VALUE]=…`), as a `batch` command's
/// parameters are written.
fn php_query(params: &Value) -> String {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
        let key = |k: &str| {
            if prefix.is_empty() {
                k.to_owned()
            } else {
                format!("{prefix}[{k}]")
            }
        };
        match v {
            Value::Object(m) => m.iter().for_each(|(k, v)| walk(&key(k), v, out)),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, v)| walk(&key(&i.to_string()), v, out)),
            Value::Null => out.push((prefix.to_owned(), String::new())),
            Value::Bool(b) => out.push((prefix.to_owned(), if *b { "1" } else { "0" }.into())),
            Value::Number(n) => out.push((prefix.to_owned(), n.to_string())),
            Value::String(s) => out.push((prefix.to_owned(), s.clone())),
        }
    }
    let mut pairs = Vec::new();
    walk("", params, &mut pairs);
    serde_urlencoded::to_string(pairs).unwrap_or_default()
}

/// The key of the `i`-th command of a batch: sorted as the commands were given.
fn command_key(i: usize) -> String {
    format!("c{i:02}")
}

/// One command's answer in a `batch` result: its id, or its own error classified.
fn batch_item(method: &str, key: &str, batch: &Value, redact: &[&str]) -> Result<String, CrmError> {
    if let Some(v) = batch.get("result").and_then(|r| r.get(key)) {
        return id_of(v).ok_or_else(|| {
            CrmError::new(
                ErrorClass::Uncertain,
                format!("{CONNECTOR} batch {method}: the answer has no entity id"),
            )
        });
    }
    if let Some(err) = batch.get("result_error").and_then(|r| r.get(key)) {
        let code = err.get("error").and_then(Value::as_str).unwrap_or_default();
        let desc = err
            .get("error_description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // A command's error carries no HTTP status: as a call of its own it would have
        // been refused with a 400 (validation) unless its code or text says otherwise —
        // a method the portal refuses pauses the connector, a timeout is looked up.
        let class = classify(StatusCode::BAD_REQUEST, Some(code), desc);
        return Err(CrmError::new(
            class,
            clean_message(
                &format!("{CONNECTOR} batch {method}: {code}: {desc}"),
                redact,
            ),
        ));
    }
    Err(CrmError::new(
        ErrorClass::Uncertain,
        format!("{CONNECTOR} batch {method}: the answer says nothing of this create"),
    ))
}

/// Where a redirect points, if it may be followed: only within the webhook's own origin
/// (same host and port) and only over https. A redirect elsewhere — another host, or a
/// downgrade to http — would hand the webhook secret in the path to whoever answers
/// there; it is not followed, and the 3xx pauses the connector for a person.
fn redirect_target(current: &str, webhook_url: &str, headers: &HeaderMap) -> Option<String> {
    let location = headers.get(LOCATION)?.to_str().ok()?;
    let base = reqwest::Url::parse(current).ok()?;
    let origin = reqwest::Url::parse(webhook_url).ok()?;
    let next = base.join(location).ok()?;
    let same_origin = next.scheme() == "https"
        && origin.scheme() == "https"
        && next.host_str() == origin.host_str()
        && next.port_or_known_default() == origin.port_or_known_default()
        && next.username().is_empty()
        && next.password().is_none();
    same_origin.then(|| next.to_string())
}

/// Bitrix24 error codes and what they mean for Leadgate (`docs/crm.md`, "Bitrix24").
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
    ("PAYMENT_REQUIRED", ErrorClass::Auth),
    // Credentials and scope: a webhook cannot refresh itself, so pause the connector.
    ("expired_token", ErrorClass::Auth),
    ("invalid_token", ErrorClass::Auth),
    ("NO_AUTH_FOUND", ErrorClass::Auth),
    ("insufficient_scope", ErrorClass::Auth),
    ("INVALID_CREDENTIALS", ErrorClass::Auth),
    ("ACCESS_DENIED", ErrorClass::Auth),
    ("user_access_error", ErrorClass::Auth),
    ("WRONG_AUTH_TYPE", ErrorClass::Auth),
    ("ALLOWED_ONLY_INTRANET_USER", ErrorClass::Auth),
    // The portal has no such method (no CRM module, a tariff without it, a webhook
    // pointing elsewhere), or refuses it in a batch: no lead can ever go through it
    // until a person fixes the connection — pause, never fail the leads.
    ("ERROR_METHOD_NOT_FOUND", ErrorClass::Auth),
    ("ERROR_BATCH_METHOD_NOT_ALLOWED", ErrorClass::Auth),
    // The lead's data (or the entity an update names by id, deleted in the CRM).
    ("ERROR_CORE", ErrorClass::Validation),
    ("NOT_FOUND", ErrorClass::Validation),
    ("ERROR_NOT_FOUND", ErrorClass::Validation),
    ("ENTITY_NOT_FOUND", ErrorClass::Validation),
    // The portal failed while executing: the entity may exist — reconcile first.
    ("INTERNAL_SERVER_ERROR", ErrorClass::Uncertain),
    ("ERROR_UNEXPECTED_ANSWER", ErrorClass::Uncertain),
];

/// Codes with which Bitrix24 refuses a `batch` before running any of its commands: only
/// then may its leads be sent again (split), as nothing of it can have been created.
const BATCH_REFUSED_BEFORE_RUNNING: &[&str] = &["ERROR_BATCH_LENGTH_EXCEEDED"];

/// Whether a whole `batch`'s refusal proves none of its commands ran.
fn refused_before_running(e: &CrmError) -> bool {
    e.class == ErrorClass::Validation
        && BATCH_REFUSED_BEFORE_RUNNING
            .iter()
            .any(|code| e.message.contains(&format!(" {code}:")))
}

/// A `batch` refused as a whole for another reason: its commands may have run (it has no
/// transaction), so it is no one lead's refusal — uncertain, each lead looked up by key.
fn not_proof_of_refusal(e: CrmError) -> CrmError {
    CrmError::new(
        ErrorClass::Uncertain,
        format!(
            "{} (the batch as a whole: each lead is looked up)",
            e.message
        ),
    )
}

/// The one classification of a Bitrix24 answer that is not a success, and of a batch
/// command's `result_error` entry (given as a 400 with its code and description).
///
/// `code` is Bitrix24's `error` ("" for most CRM validation errors, `None` when the
/// body was not a JSON error); `text` its `error_description`, or the body itself when
/// it was not JSON. A known code wins. Then:
///
/// - a timeout — 408, or a code or text that says so (`Request Timeout` in a batch
///   entry) — is an answer that did not come: Uncertain (looked up by key), never a
///   refusal;
/// - 429 → RateLimited;
/// - the request, the method or the address refused — 3xx (a redirect we could not
///   follow), 401/402/403, 404 and 405 without an entity code, an HTML page where the
///   API answers JSON — is the connector's problem, not the lead's: Auth (pause);
/// - other 4xx (400 with a validation text, `ERROR_CORE`) → Validation: that lead's
///   data, terminal;
/// - 5xx and anything else → Uncertain (the create may have been executed).
pub fn classify(status: StatusCode, code: Option<&str>, text: &str) -> ErrorClass {
    // Only a body that was not a JSON error can be a web page.
    let page = code.is_none() && super::looks_like_html(text);
    let code = code.filter(|c| !c.is_empty());
    let status = status.as_u16();
    if let Some(code) = code {
        if let Some((_, class)) = ERROR_CODES
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(code))
        {
            // A refusal of the data is one only when the portal said so with a 4xx: the
            // same code on a 5xx (or a 2xx) may come after the create ran.
            if *class != ErrorClass::Validation || (400..=499).contains(&status) {
                return *class;
            }
        }
    }
    if status == 429 {
        return ErrorClass::RateLimited;
    }
    if (400..=499).contains(&status)
        && (status == 408 || code.is_some_and(says_timeout) || says_timeout(text))
    {
        return ErrorClass::Uncertain;
    }
    match status {
        300..=399 => ErrorClass::Auth,
        401..=405 => ErrorClass::Auth,
        400..=499 if page => ErrorClass::Auth,
        400..=499 => ErrorClass::Validation,
        _ => ErrorClass::Uncertain,
    }
}

/// Whether a code or text says the request timed out (`Request Timeout`,
/// `ERROR_TIMEOUT`, "timed out").
fn says_timeout(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    t.contains("timeout") || t.contains("timed out") || t.contains("time out") || t.trim() == "408"
}

/// Turns a complete HTTP answer into the success envelope (it has a `result`) or a
/// classified error.
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
        if let Some(envelope) = json.as_ref().filter(|j| j.get("result").is_some()) {
            return Ok(envelope.clone());
        }
    }
    // A 2xx without a `result` (or with an unknown code) falls through to Uncertain:
    // we cannot know what was executed.
    let text = match &json {
        Some(j) => j
            .get("error_description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        None => String::from_utf8_lossy(body).into_owned(),
    };
    let class = classify(status, code, &text);
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
    let from_body = || {
        let reset_at = json?.pointer("/time/operating_reset_at")?.as_f64()?;
        // Clamped before it becomes a Duration: the portal's number may be anything
        // (1e20 would overflow and panic in `Duration::from_secs_f64`). This machine's
        // clock, not the store's: the portal's time is compared with the clock of the
        // process that will wait, and only for how long to wait.
        let secs = (reset_at - chrono::Utc::now().timestamp() as f64)
            .clamp(0.0, MAX_RETRY_AFTER.as_secs_f64());
        Duration::try_from_secs_f64(secs).ok()
    };
    rate::retry_after(headers)
        .or_else(from_body)
        .map(|d| d.min(MAX_RETRY_AFTER))
}

/// Whether the entity's multifield `code` (PHONE, EMAIL) holds `value` already, compared
/// as `key` reads them.
fn has_value(
    entity: &Value,
    code: &str,
    value: Option<&str>,
    key: impl Fn(&str) -> String,
) -> bool {
    let Some(value) = value else {
        return false;
    };
    let wanted = key(value);
    entity
        .get(code)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|item| item.get("VALUE").and_then(Value::as_str))
        .any(|v| key(v) == wanted)
}

/// A deal's COMMENTS: its contact data, one `Label: value` line each (deals have no
/// PHONE/EMAIL of their own).
fn deal_comments(lead: &Lead) -> Option<String> {
    let lines: Vec<String> = [
        ("Name", &lead.name),
        ("Phone", &lead.phone),
        ("Email", &lead.email),
        ("Comment", &lead.comment),
    ]
    .into_iter()
    .filter_map(|(label, v)| v.as_ref().map(|v| format!("{label}: {v}")))
    .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
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

    async fn pace(&self) -> Result<(), CrmError> {
        if let Some(limiter) = &self.limiter {
            limiter.acquire().await;
        }
        Ok(())
    }

    fn batch_limit(&self) -> usize {
        // A contact and a deal are two steps, each committed before the next: one
        // operation at a time.
        match self.entity {
            Entity::ContactDeal => 1,
            _ => MAX_BATCH,
        }
    }

    fn steps(&self) -> Vec<&str> {
        match self.entity {
            Entity::ContactDeal => vec![CONTACT_STEP],
            _ => Vec::new(),
        }
    }

    fn links_contacts(&self) -> bool {
        self.entity == Entity::ContactDeal
    }

    fn final_entity(&self) -> &'static str {
        self.entity.as_str()
    }

    /// The contact's key lookup, its phone and e-mail searches and its add, then the
    /// deal's add.
    fn create_calls(&self) -> u32 {
        match self.entity {
            Entity::ContactDeal => 5,
            _ => 1,
        }
    }

    async fn step(
        &self,
        step: &str,
        lead: &Lead,
        search: &super::ContactSearch,
        _done: &[super::StepDone],
        may_exist: bool,
    ) -> (Result<super::StepDone, super::StepError>, Exchange) {
        let request = json!({
            "connector": CONNECTOR,
            "step": step,
            "entity": "contact",
            "originator_id": ORIGINATOR_ID,
            "origin_id": lead.operation_id,
            "by_key_first": may_exist,
            "match_rule": match self.deals.contact_match {
                ContactMatch::Newest => "newest",
                ContactMatch::Review => "review",
            },
        });
        let mut summary = serde_json::Map::new();
        let result = if step == CONTACT_STEP && self.entity == Entity::ContactDeal {
            self.contact_step(lead, search, may_exist, &mut summary)
                .await
        } else {
            Err(super::StepError::Crm(CrmError::new(
                ErrorClass::Validation,
                format!("{CONNECTOR}: no step {step:?} for this entity"),
            )))
        };
        match &result {
            Ok(done) => {
                summary.insert("id".into(), json!(done.crm_id));
                summary.insert("how".into(), json!(done.how));
            }
            Err(super::StepError::Crm(e)) => note_error(&mut summary, e),
            Err(super::StepError::Ambiguous { ids, .. }) => {
                summary.insert("ambiguous".into(), json!(ids));
            }
        }
        (
            result,
            Exchange {
                request,
                response: Value::Object(summary),
            },
        )
    }

    /// `crm.deal.add` linked to the contact step's contact (`CONTACT_IDS`), carrying the
    /// operation's key in the deal list (`ORIGIN_ID`), where `find` looks it up.
    async fn create_after(
        &self,
        lead: &Lead,
        done: &[super::StepDone],
    ) -> (Result<String, CrmError>, Exchange) {
        let contact = done
            .iter()
            .find(|d| d.step == CONTACT_STEP)
            .map(|d| d.crm_id.clone());
        match (self.entity, contact) {
            (Entity::ContactDeal, Some(contact)) => self.add(lead, Some(&contact)).await,
            (Entity::ContactDeal, None) => (
                Err(CrmError::new(
                    ErrorClass::Validation,
                    format!("{CONNECTOR}: a deal needs its contact step first"),
                )),
                Exchange {
                    request: json!({"connector": CONNECTOR, "method": "crm.deal.add"}),
                    response: json!({"sent": false}),
                },
            ),
            _ => self.create(lead).await,
        }
    }

    fn lookup_batch_limit(&self) -> usize {
        MAX_BATCH
    }

    async fn create(&self, lead: &Lead) -> (Result<String, CrmError>, Exchange) {
        self.add(lead, None).await
    }

    /// `crm.lead.update` (or `crm.deal.update`) of the changed fields; Bitrix24 answers
    /// `result: true`.
    fn update_calls(&self) -> u32 {
        2
    }

    async fn update(&self, u: &EntityUpdate) -> (Result<Vec<String>, CrmError>, Exchange) {
        let (crm_id, later) = (u.crm_id.as_str(), &u.target);
        let method = self.entity.update_method();
        let mut summary = serde_json::Map::new();
        let redact = u.redact();
        // A phone or e-mail is added beside the entity's others: one it has already (an
        // earlier try of this update landed after all) is not added twice.
        let mut changes = u.changes.clone();
        if self.entity == Entity::Lead && (changes.phone.is_some() || changes.email.is_some()) {
            let get = self.entity.get_method();
            let mut got = serde_json::Map::new();
            let entity = self
                .post(get, &json!({"id": crm_id}), crm_id, &redact, &mut got)
                .await;
            summary.insert("read".into(), Value::Object(got));
            match entity {
                Ok(entity) => {
                    if has_value(
                        &entity,
                        "PHONE",
                        changes.phone.as_deref(),
                        LeadChanges::phone_key,
                    ) {
                        changes.phone = None;
                    }
                    if has_value(
                        &entity,
                        "EMAIL",
                        changes.email.as_deref(),
                        LeadChanges::email_key,
                    ) {
                        changes.email = None;
                    }
                }
                Err(e) => {
                    let request = json!({"connector": CONNECTOR, "method": get, "id": crm_id});
                    return (
                        Err(e),
                        Exchange {
                            request,
                            response: Value::Object(summary),
                        },
                    );
                }
            }
        }
        let fields = self.update_fields(later, &changes);
        let field_names: Vec<&String> = fields
            .as_object()
            .map(|f| f.keys().collect())
            .unwrap_or_default();
        let request = json!({"connector": CONNECTOR, "method": method, "id": crm_id,
                             "entity": self.entity.as_str(), "fields": field_names});
        let body = json!({"id": crm_id, "fields": fields, "params": {"REGISTER_SONET_EVENT": "N"}});
        let result = self
            .post(method, &body, crm_id, &redact, &mut summary)
            .await
            .and_then(|result| match result {
                Value::Bool(true) => Ok(changes.fields().into_iter().map(str::to_owned).collect()),
                _ => Err(CrmError::new(
                    ErrorClass::Uncertain,
                    format!("{CONNECTOR} {method}: the answer is not `true`"),
                )),
            });
        if let Err(e) = &result {
            if !summary.contains_key("class") {
                note_error(&mut summary, e);
            }
        }
        (
            result,
            Exchange {
                request,
                response: Value::Object(summary),
            },
        )
    }

    /// The commands of a batch, each with its own answer: a command's `result_error` is
    /// classified as its own (a method refused pauses the connector, a timeout is looked
    /// up, a validation text fails that lead alone), and a command with neither a result
    /// nor an error (a `halt` stopped the batch, or the answer is cut short) is uncertain,
    /// looked up by key — never re-sent here, as it may have run.
    ///
    /// A `batch` refused as a whole before any command ran (a 400: too long, a body the
    /// portal could not parse) says nothing about any one lead: it is split in two and
    /// each half sent again, down to a lead sent alone (`crm.lead.add`, its own answer;
    /// a batch of one lead goes so at once), so a valid lead never fails for another's
    /// sake. A lead still waiting when too
    /// little of the call's budget is left for another request is `not_sent`.
    async fn create_many(&self, leads: &[Lead]) -> BatchAnswer {
        let clock = super::SplitClock::start(self.timeout);
        let all: Vec<&Lead> = leads.iter().collect();
        let refusal = match self.batch_once(&all).await {
            Err((e, ex)) if refused_before_running(&e) => (e, ex),
            // Refused as a whole for a reason that does not prove no command ran: each
            // lead is looked up by its key before anything is sent again.
            Err((e, ex)) if e.class == ErrorClass::Validation => {
                return Err((not_proof_of_refusal(e), ex))
            }
            answer => return answer,
        };
        tracing::debug!(batch = leads.len(), error = %refusal.0, "bitrix24 batch refused as a whole: splitting it");
        let mut answers: Vec<Option<(Result<String, CrmError>, Exchange)>> =
            leads.iter().map(|_| None).collect();
        let mut first: Vec<usize> = (0..leads.len()).collect();
        let second = first.split_off(first.len() / 2);
        let mut queue: std::collections::VecDeque<Vec<usize>> = [first, second]
            .into_iter()
            .filter(|g| !g.is_empty())
            .collect();
        let split = |mut ex: Exchange| {
            ex.request["split_after"] = json!(refusal.0.message);
            ex
        };
        while let Some(group) = queue.pop_front() {
            if let Some(limiter) = &self.limiter {
                limiter.acquire().await;
            }
            let Some(left) = clock.left() else {
                for i in group.into_iter().chain(queue.drain(..).flatten()) {
                    let e = super::not_sent_after_split(CONNECTOR, "batch");
                    let mut response = serde_json::Map::new();
                    note_error(&mut response, &e);
                    let request = Value::Object(
                        self.create_request(&leads[i], &self.add_params(&leads[i])["fields"]),
                    );
                    answers[i] = Some((
                        Err(e),
                        split(Exchange {
                            request,
                            response: Value::Object(response),
                        }),
                    ));
                }
                break;
            };
            let call = async {
                match group.as_slice() {
                    [one] => Ok(vec![self.add(&leads[*one], None).await]),
                    _ => {
                        let some: Vec<&Lead> = group.iter().map(|&i| &leads[i]).collect();
                        self.batch_once(&some).await
                    }
                }
            };
            let answer = match tokio::time::timeout(left, super::rate::prepaid(call)).await {
                Ok(answer) => answer,
                Err(_) => Err((
                    CrmError::new(
                        ErrorClass::Uncertain,
                        format!(
                            "{CONNECTOR} batch: no answer within the {} ms left of the call's budget",
                            left.as_millis()
                        ),
                    ),
                    Exchange {
                        request: json!({"connector": CONNECTOR, "method": "batch", "batch": group.len()}),
                        response: json!({"cut_off_ms": left.as_millis() as u64}),
                    },
                )),
            };
            match answer {
                // One answer per command (or the one add), in order.
                Ok(items) => {
                    for (&i, (result, ex)) in group.iter().zip(items) {
                        answers[i] = Some((result, split(ex)));
                    }
                }
                Err((e, _)) if refused_before_running(&e) && group.len() > 1 => {
                    let mut first = group;
                    let second = first.split_off(first.len() / 2);
                    queue.push_back(first);
                    queue.push_back(second);
                }
                Err((e, ex)) => {
                    let e = if e.class == ErrorClass::Validation && group.len() > 1 {
                        not_proof_of_refusal(e)
                    } else {
                        e
                    };
                    for &i in &group {
                        answers[i] = Some((Err(e.clone()), split(ex.clone())));
                    }
                }
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.expect("every lead of the batch has its answer"))
            .collect())
    }

    /// One `crm.lead.list` (or `crm.deal.list`) with `@ORIGIN_ID` for all the keys,
    /// following its pages.
    async fn find_many(&self, operation_ids: &[&str]) -> (Result<Vec<Lookup>, CrmError>, Exchange) {
        let method = self.entity.list_method();
        let request = json!({
            "connector": CONNECTOR,
            "method": method,
            "entity": self.entity.as_str(),
            "originator_id": ORIGINATOR_ID,
            "origin_ids": operation_ids,
        });
        let mut summary = serde_json::Map::new();
        let mut rows = Vec::new();
        let mut start = 0;
        let mut pages = 0;
        let result = loop {
            pages += 1;
            match self.list_page(operation_ids, start, &mut summary).await {
                Err(e) => break Err(e),
                Ok((page, next)) => {
                    rows.extend(page);
                    match next {
                        Some(next) if pages < MAX_LOOKUP_PAGES => start = next,
                        Some(_) => {
                            break Err(CrmError::new(
                                ErrorClass::Uncertain,
                                format!("{CONNECTOR} {method}: more than {MAX_LOOKUP_PAGES} pages of matches"),
                            ))
                        }
                        None => break Ok(()),
                    }
                }
            }
        };
        summary.insert("pages".into(), json!(pages));
        let result = result.map(|()| {
            summary.insert("found".into(), json!(rows.len()));
            operation_ids
                .iter()
                .map(|id| {
                    Lookup::from_ids(
                        rows.iter()
                            .filter(|(_, origin)| origin == id)
                            .map(|(crm_id, _)| crm_id.clone())
                            .collect(),
                    )
                })
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
            Err(e) if !summary.contains_key("class") => note_error(&mut summary, e),
            Err(_) => {}
        }
        let exchange = Exchange {
            request,
            response: Value::Object(summary),
        };
        (result, exchange)
    }
}

/// For `fuzz/`: one Bitrix24 answer through the same parsing and classification the
/// adapter uses. Not part of the API.
#[doc(hidden)]
#[cfg(feature = "test-support")]
pub fn fuzz_answer(status: u16, retry_after: &str, body: &[u8]) {
    let mut headers = HeaderMap::new();
    if let Ok(v) = retry_after.parse() {
        headers.insert(reqwest::header::RETRY_AFTER, v);
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let _ = interpret("crm.lead.add", status, &headers, body, &["s3cret"]);
    let _ = redirect_target(
        "https://a.bitrix24.ru/rest/1/s/crm.lead.add.json",
        "https://a.bitrix24.ru/rest/1/s/",
        &{
            let mut h = HeaderMap::new();
            if let Ok(v) = String::from_utf8_lossy(body).parse() {
                h.insert(LOCATION, v);
            }
            h
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use leadgate_fakes::bitrix24::{FakeBitrix24, Fault};
    use reqwest::header::RETRY_AFTER;

    const SECRET: &str = "fake-secret";

    async fn fake() -> FakeBitrix24 {
        FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap()
    }

    fn adapter(fake: &FakeBitrix24, entity: Entity, timeout: Duration) -> Bitrix24 {
        Bitrix24::new(&fake.webhook_url(), entity, timeout).unwrap()
    }

    #[test]
    fn deal_settings_need_contact_deal_and_a_stage_id_that_is_one() {
        let new = |entity| Bitrix24::new("https://p.bitrix24.ru/rest/1/s/", entity, MAX_TIMEOUT);
        let deals = |stage: Option<&str>, rule| DealSettings {
            category_id: Some(3),
            stage_id: stage.map(str::to_owned),
            contact_match: rule,
        };
        let ok = new(Entity::ContactDeal)
            .unwrap()
            .with_deals(deals(Some("C3:NEW"), ContactMatch::Review))
            .unwrap();
        assert_eq!(ok.steps(), [CONTACT_STEP]);
        assert_eq!(ok.batch_limit(), 1, "one operation at a time");
        assert_eq!(ok.create_calls(), 5);
        let refused = new(Entity::Deal)
            .unwrap()
            .with_deals(deals(None, ContactMatch::Newest))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("contact_deal"), "{refused}");
        for stage in ["", "NEW STAGE", "C3:NEW\"x"] {
            let refused = new(Entity::ContactDeal)
                .unwrap()
                .with_deals(deals(Some(stage), ContactMatch::Newest))
                .unwrap_err()
                .to_string();
            assert!(refused.contains("deal_stage_id"), "{refused}");
        }
        // Leads and plain deals take no steps and keep their batches.
        let lead = new(Entity::Lead).unwrap();
        assert!(lead.steps().is_empty());
        assert_eq!(lead.batch_limit(), MAX_BATCH);
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

    /// Nothing stored from a call may carry the secret or the lead's contact data.
    fn assert_clean(text: &str) {
        for needle in [SECRET, "/rest/", "Ivan", "+7999", "ivan@example.ru"] {
            assert!(!text.contains(needle), "{needle:?} leaked into {text:?}");
        }
    }

    fn assert_exchange_clean(ex: &Exchange) {
        assert_clean(&ex.request.to_string());
        assert_clean(&ex.response.to_string());
    }

    async fn create_err(fake: &FakeBitrix24, method: &str, fault: Fault) -> (CrmError, Exchange) {
        fake.push_fault(method, fault, 1);
        let crm = adapter(fake, Entity::Lead, Duration::from_secs(5));
        let (res, ex) = crm.create(&lead("tilda:f-1")).await;
        let err = res.unwrap_err();
        assert_clean(&err.message);
        assert_clean(&err.to_string());
        assert_exchange_clean(&ex);
        (err, ex)
    }

    #[tokio::test]
    async fn create_then_find_one() {
        let fake = fake().await;
        let crm = adapter(&fake, Entity::Lead, Duration::from_secs(5));
        assert_eq!(crm.connector(), "bitrix24");
        assert!(crm.lookup_is_authoritative());
        let (res, ex) = crm.create(&lead("tilda:tr-1")).await;
        let id = res.unwrap();
        assert_eq!(id, "1");
        assert_eq!(ex.request["method"], "crm.lead.add");
        assert_eq!(ex.request["origin_id"], "tilda:tr-1");
        assert_eq!(ex.response["status"], 200);
        assert_eq!(ex.response["id"], "1");
        assert!(ex.response["duration_ms"].is_u64());
        assert_exchange_clean(&ex);

        let entities = fake.entities();
        assert_eq!(entities.len(), 1);
        let f = &entities[0].fields;
        assert_eq!(entities[0].kind, "lead");
        assert_eq!(f["TITLE"], "Form");
        assert_eq!(f["NAME"], "Ivan Petrov");
        assert_eq!(f["COMMENTS"], "call me");
        assert_eq!(f["ORIGINATOR_ID"], "leadgate");
        assert_eq!(f["ORIGIN_ID"], "tilda:tr-1");
        assert_eq!(f["SOURCE_DESCRIPTION"], "tilda");
        assert_eq!(
            f["PHONE"],
            json!([{"VALUE": "+79990001122", "VALUE_TYPE": "WORK"}])
        );
        assert_eq!(
            f["EMAIL"],
            json!([{"VALUE": "ivan@example.ru", "VALUE_TYPE": "WORK"}])
        );

        let (found, ex) = crm.find("tilda:tr-1").await;
        assert_eq!(found.unwrap(), Lookup::One("1".into()));
        assert_eq!(ex.request["method"], "crm.lead.list");
        assert_eq!(ex.response["found"], 1);
        assert_eq!(fake.calls("crm.lead.add"), 1);
        assert_eq!(fake.calls("crm.lead.list"), 1);
    }

    #[tokio::test]
    async fn find_none_and_other_keys_do_not_match() {
        let fake = fake().await;
        let crm = adapter(&fake, Entity::Lead, Duration::from_secs(5));
        crm.create(&lead("tilda:a")).await.0.unwrap();
        let (found, ex) = crm.find("tilda:b").await;
        assert_eq!(found.unwrap(), Lookup::NotFound);
        assert_eq!(ex.response["found"], 0);
    }

    #[tokio::test]
    async fn find_reports_duplicates_as_many() {
        let fake = fake().await;
        let crm = adapter(&fake, Entity::Lead, Duration::from_secs(5));
        // ORIGIN_ID is not unique in Bitrix24: two creates with one key both succeed.
        crm.create(&lead("tilda:dup")).await.0.unwrap();
        crm.create(&lead("tilda:other")).await.0.unwrap();
        crm.create(&lead("tilda:dup")).await.0.unwrap();
        let (found, _) = crm.find("tilda:dup").await;
        assert_eq!(found.unwrap(), Lookup::Many(vec!["1".into(), "3".into()]));
    }

    #[tokio::test]
    async fn deals_carry_contact_data_in_comments() {
        let fake = fake().await;
        let crm = adapter(&fake, Entity::Deal, Duration::from_secs(5));
        let id = crm.create(&lead("tilda:deal-1")).await.0.unwrap();
        assert_eq!(fake.calls("crm.deal.add"), 1);
        let entities = fake.entities();
        assert_eq!(entities[0].kind, "deal");
        let f = &entities[0].fields;
        assert_eq!(f.get("PHONE"), None);
        assert_eq!(f.get("NAME"), None);
        assert_eq!(
            f["COMMENTS"],
            "Name: Ivan Petrov\nPhone: +79990001122\nEmail: ivan@example.ru\nComment: call me"
        );
        let (found, _) = crm.find("tilda:deal-1").await;
        assert_eq!(found.unwrap(), Lookup::One(id));
        assert_eq!(fake.calls("crm.deal.list"), 1);
    }

    #[tokio::test]
    async fn a_deal_update_writes_its_comments_from_the_lead_as_it_stands_now() {
        // The later delivery changes the phone and sends no e-mail: the deal's COMMENTS
        // keep the e-mail of the lead as created, with the new phone.
        let fake = fake().await;
        let crm = adapter(&fake, Entity::Deal, Duration::from_secs(5));
        let was = lead("tilda:deal-2");
        let id = crm.create(&was).await.0.unwrap();
        let later = Lead {
            phone: Some("+79990003344".into()),
            email: None,
            ..was.clone()
        };
        let changes = was.changes_to(&later);
        let update = EntityUpdate {
            crm_id: id.clone(),
            target: was.overlaid(&changes),
            changes,
            redact: vec![],
        };
        let (sent, ex) = crm.update(&update).await;
        assert_eq!(sent.unwrap(), ["phone"]);
        assert_eq!(ex.request["method"], "crm.deal.update");
        assert_eq!(fake.calls("crm.deal.get"), 0, "a deal has no PHONE to read");
        let f = &fake.entities()[0].fields;
        assert_eq!(
            f["COMMENTS"],
            "Name: Ivan Petrov\nPhone: +79990003344\nEmail: ivan@example.ru\nComment: call me"
        );
        assert_exchange_clean(&ex);
        // An entity that is gone: refused as the data's fault, nothing stored with secrets.
        let missing = EntityUpdate {
            crm_id: "999".into(),
            ..update
        };
        let (err, ex) = crm.update(&missing).await;
        assert_eq!(err.unwrap_err().class, ErrorClass::Validation);
        assert_exchange_clean(&ex);
    }

    #[tokio::test]
    async fn webhook_url_is_normalised_and_never_shown() {
        let fake = fake().await;
        let url = fake.webhook_url();
        let crm = Bitrix24::new(
            url.trim_end_matches('/'),
            Entity::Lead,
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(crm.create(&lead("tilda:n")).await.0.unwrap(), "1");
        assert!(!format!("{crm:?}").contains(SECRET));
        assert!(Bitrix24::new("not a url", Entity::Lead, Duration::from_secs(1)).is_err());
        assert!(Bitrix24::new("ftp://x/rest/1/s/", Entity::Lead, Duration::from_secs(1)).is_err());
    }

    #[tokio::test]
    async fn lost_answer_hang_is_uncertain_and_the_entity_exists() {
        let fake = fake().await;
        fake.push_fault("crm.lead.add", Fault::LostAnswerHang, 1);
        let crm = adapter(&fake, Entity::Lead, Duration::from_millis(300));
        let (res, ex) = crm.create(&lead("tilda:hang")).await;
        let err = res.unwrap_err();
        assert_eq!(err.class, ErrorClass::Uncertain, "{err}");
        assert!(err.message.contains("timed out"), "{err}");
        assert_clean(&err.message);
        assert_eq!(ex.response["class"], "uncertain");
        assert_eq!(fake.entities().len(), 1);
        // Reconciliation by key recovers the id the answer lost.
        let (found, _) = crm.find("tilda:hang").await;
        assert_eq!(found.unwrap(), Lookup::One("1".into()));
    }

    #[tokio::test]
    async fn lost_answer_drop_is_uncertain_and_the_entity_exists() {
        let fake = fake().await;
        let (err, _) = create_err(&fake, "crm.lead.add", Fault::LostAnswerDrop).await;
        assert_eq!(err.class, ErrorClass::Uncertain, "{err}");
        assert_eq!(fake.entities().len(), 1);
    }

    #[tokio::test]
    async fn server_error_after_create_is_uncertain_and_the_entity_exists() {
        let fake = fake().await;
        let (err, ex) = create_err(&fake, "crm.lead.add", Fault::ServerErrorAfterCreate).await;
        assert_eq!(err.class, ErrorClass::Uncertain, "{err}");
        assert_eq!(
            err.message,
            "bitrix24 crm.lead.add: HTTP 500 INTERNAL_SERVER_ERROR: Internal server error"
        );
        assert_eq!(ex.response["status"], 500);
        assert_eq!(fake.entities().len(), 1);
    }

    #[tokio::test]
    async fn server_error_is_uncertain() {
        let fake = fake().await;
        let (err, _) = create_err(&fake, "crm.lead.add", Fault::ServerError).await;
        assert_eq!(err.class, ErrorClass::Uncertain);
        assert!(fake.entities().is_empty());
    }

    #[tokio::test]
    async fn connection_refused_is_not_sent() {
        // Bind then drop a listener: the port is (almost certainly) closed now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/rest/1/{SECRET}/");
        let crm = Bitrix24::new(&url, Entity::Lead, Duration::from_secs(2)).unwrap();
        let (res, ex) = crm.create(&lead("tilda:refused")).await;
        let err = res.unwrap_err();
        assert_eq!(err.class, ErrorClass::NotSent, "{err}");
        assert_clean(&err.message);
        assert_exchange_clean(&ex);
        let err = crm.find("tilda:refused").await.0.unwrap_err();
        assert_eq!(err.class, ErrorClass::NotSent);
        assert_clean(&err.message);
    }

    #[tokio::test]
    async fn rate_limit_is_rate_limited_with_retry_after() {
        let fake = fake().await;
        let fault = Fault::RateLimit {
            retry_after_secs: Some(7),
        };
        let (err, ex) = create_err(&fake, "crm.lead.add", fault).await;
        assert_eq!(err.class, ErrorClass::RateLimited);
        assert_eq!(err.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(ex.response["status"], 503);
        assert!(fake.entities().is_empty());

        let fault = Fault::OperationTimeLimit {
            retry_after_secs: Some(2),
        };
        let (err, _) = create_err(&fake, "crm.lead.add", fault).await;
        assert_eq!(err.class, ErrorClass::RateLimited);
        assert_eq!(err.retry_after, Some(Duration::from_secs(2)));

        // Without a header the wait is unknown: the worker's backoff decides.
        let fault = Fault::RateLimit {
            retry_after_secs: None,
        };
        let (err, _) = create_err(&fake, "crm.lead.add", fault).await;
        assert_eq!(err.class, ErrorClass::RateLimited);
        assert_eq!(err.retry_after, None);
    }

    #[tokio::test]
    async fn expired_token_is_auth() {
        let fake = fake().await;
        let (err, _) = create_err(&fake, "crm.lead.add", Fault::ExpiredToken).await;
        assert_eq!(err.class, ErrorClass::Auth);
        assert!(err.message.contains("HTTP 401 expired_token"), "{err}");
    }

    #[tokio::test]
    async fn wrong_secret_is_auth_and_not_leaked() {
        let fake = fake().await;
        let url = fake.webhook_url().replace(SECRET, "wrong-secret-value");
        let crm = Bitrix24::new(&url, Entity::Lead, Duration::from_secs(5)).unwrap();
        let err = crm.create(&lead("tilda:w")).await.0.unwrap_err();
        assert_eq!(err.class, ErrorClass::Auth);
        assert!(err.message.contains("NO_AUTH_FOUND"), "{err}");
        assert!(!err.message.contains("wrong-secret-value"));
    }

    #[tokio::test]
    async fn validation_is_validation_with_a_clean_message() {
        let fake = fake().await;
        let (err, _) = create_err(&fake, "crm.lead.add", Fault::Validation).await;
        assert_eq!(err.class, ErrorClass::Validation);
        assert_eq!(
            err.message,
            "bitrix24 crm.lead.add: HTTP 400 : The required field 'Lead Name' is missing."
        );
        assert!(!err.message.contains("<br"));
        assert_eq!(err.retry_after, None);
    }

    #[tokio::test]
    async fn html_502_is_uncertain() {
        let fake = fake().await;
        let (err, ex) = create_err(&fake, "crm.lead.add", Fault::HtmlError).await;
        assert_eq!(err.class, ErrorClass::Uncertain);
        assert_eq!(
            err.message,
            "bitrix24 crm.lead.add: HTTP 502 : (not JSON) 502 Bad Gateway 502 Bad Gateway nginx"
        );
        assert_eq!(ex.response["status"], 502);
    }

    #[tokio::test]
    async fn connector_level_errors_pause_the_connector() {
        let fake = fake().await;
        for (status, code) in [
            (503, "OVERLOAD_LIMIT"),
            (500, "PORTAL_DELETED"),
            (403, "insufficient_scope"),
            (403, "ACCESS_DENIED"),
        ] {
            let fault = Fault::Error {
                status,
                error: code.into(),
                error_description: "x".into(),
                after_execute: false,
            };
            let (err, _) = create_err(&fake, "crm.lead.add", fault).await;
            assert_eq!(err.class, ErrorClass::Auth, "{code}: {err}");
        }
    }

    #[tokio::test]
    async fn unknown_method_pauses_the_connector() {
        // A portal without the method (no CRM module, a tariff without it, a webhook
        // pointing elsewhere): no lead can go through until a person fixes it.
        let fake = fake().await;
        let crm = adapter(&fake, Entity::Lead, Duration::from_secs(5));
        let mut summary = serde_json::Map::new();
        let err = crm
            .post("crm.nothing.add", &json!({}), "tilda:x", &[], &mut summary)
            .await
            .unwrap_err();
        assert_eq!(err.class, ErrorClass::Auth);
        assert!(
            err.message.contains("HTTP 404 ERROR_METHOD_NOT_FOUND"),
            "{err}"
        );
        assert_clean(&err.message);
        assert_eq!(summary["status"], 404);
    }

    #[tokio::test]
    async fn refusals_of_the_request_pause_and_timeouts_are_looked_up() {
        let fake = fake().await;
        let error = |status, code: &str, desc: &str| Fault::Error {
            status,
            error: code.into(),
            error_description: desc.into(),
            after_execute: false,
        };
        // (the fault on crm.lead.add, the class, a piece of the message)
        let table = [
            (
                error(404, "ERROR_METHOD_NOT_FOUND", "Method not found!"),
                ErrorClass::Auth,
                "HTTP 404 ERROR_METHOD_NOT_FOUND",
            ),
            (
                Fault::HtmlPage { status: 404 },
                ErrorClass::Auth,
                "404 Not Found nginx",
            ),
            (
                Fault::HtmlPage { status: 405 },
                ErrorClass::Auth,
                "HTTP 405",
            ),
            (
                Fault::HtmlPage { status: 400 },
                ErrorClass::Auth,
                "HTTP 400",
            ),
            (
                error(403, "insufficient_scope", "x"),
                ErrorClass::Auth,
                "insufficient_scope",
            ),
            (
                error(408, "", "Request Timeout"),
                ErrorClass::Uncertain,
                "HTTP 408",
            ),
            (
                error(400, "ERROR_CORE", "Invalid e-mail"),
                ErrorClass::Validation,
                "ERROR_CORE",
            ),
        ];
        for (fault, class, text) in table {
            let (err, ex) = create_err(&fake, "crm.lead.add", fault.clone()).await;
            assert_eq!(err.class, class, "{fault:?}: {err}");
            assert!(err.message.contains(text), "{fault:?}: {err}");
            assert_eq!(ex.response["class"], json!(class), "{fault:?}");
        }
        assert!(fake.entities().is_empty());
    }

    #[tokio::test]
    async fn batch_entries_are_classified_as_their_own_answers() {
        let fake = fake().await;
        let crm = adapter(&fake, Entity::Lead, Duration::from_secs(5));
        let error = |status, code: &str, desc: &str, after_execute| Fault::Error {
            status,
            error: code.into(),
            error_description: desc.into(),
            after_execute,
        };
        // Each fault strikes one command: c00 a timeout after the add ran, c01 a method
        // the portal refuses, c02 the lead's data, c03 goes through.
        fake.push_fault("crm.lead.add", error(408, "", "Request Timeout", true), 1);
        fake.push_fault(
            "crm.lead.add",
            error(404, "ERROR_METHOD_NOT_FOUND", "Method not found!", false),
            1,
        );
        fake.push_fault(
            "crm.lead.add",
            error(400, "", "The required field 'Lead Name' is missing.", false),
            1,
        );
        let leads: Vec<Lead> = (0..4).map(|i| lead(&format!("tilda:e{i}"))).collect();
        let answers = crm.create_many(&leads).await.unwrap();
        let classes: Vec<Option<ErrorClass>> = answers
            .iter()
            .map(|(r, _)| r.as_ref().err().map(|e| e.class))
            .collect();
        assert_eq!(
            classes,
            [
                Some(ErrorClass::Uncertain),
                Some(ErrorClass::Auth),
                Some(ErrorClass::Validation),
                None
            ]
        );
        for (_, ex) in &answers {
            assert_exchange_clean(ex);
        }
        // The timed-out add ran: its lookup finds it.
        assert_eq!(fake.entities().len(), 2);
        assert_eq!(
            crm.find("tilda:e0").await.0.unwrap(),
            Lookup::One("1".into())
        );
    }

    #[tokio::test]
    async fn find_faults_are_classified_too() {
        let fake = fake().await;
        let crm = adapter(&fake, Entity::Lead, Duration::from_millis(300));
        fake.push_fault("crm.lead.list", Fault::LostAnswerHang, 1);
        let err = crm.find("tilda:x").await.0.unwrap_err();
        assert_eq!(err.class, ErrorClass::Uncertain);
        fake.push_fault("crm.lead.list", Fault::ExpiredToken, 1);
        let err = crm.find("tilda:x").await.0.unwrap_err();
        assert_eq!(err.class, ErrorClass::Auth);
        assert_eq!(crm.find("tilda:x").await.0.unwrap(), Lookup::NotFound);
    }

    #[tokio::test]
    async fn latency_below_the_timeout_succeeds() {
        let fake = fake().await;
        fake.push_fault("crm.lead.add", Fault::LatencyMs { ms: 50 }, 1);
        let crm = adapter(&fake, Entity::Lead, Duration::from_secs(5));
        assert_eq!(crm.create(&lead("tilda:slow")).await.0.unwrap(), "1");
    }

    #[tokio::test]
    async fn contact_data_echoed_by_the_crm_is_scrubbed() {
        let fake = fake().await;
        let fault = Fault::Error {
            status: 400,
            error: "ERROR_CORE".into(),
            error_description: "Invalid e-mail ivan@example.ru for Ivan Petrov".into(),
            after_execute: false,
        };
        let (err, _) = create_err(&fake, "crm.lead.add", fault).await;
        assert_eq!(err.class, ErrorClass::Validation);
        assert_eq!(
            err.message,
            "bitrix24 crm.lead.add: HTTP 400 ERROR_CORE: Invalid e-mail *** for ***"
        );
    }

    #[tokio::test]
    async fn a_batch_refused_as_a_whole_is_split_down_to_each_lead_s_own_answer() {
        let fake = fake().await;
        let crm = adapter(&fake, Entity::Lead, Duration::from_secs(5));
        let refused = Fault::Error {
            status: 400,
            error: "ERROR_BATCH_LENGTH_EXCEEDED".into(),
            error_description: "Max batch length exceeded".into(),
            after_execute: false,
        };
        // The whole batch and both halves are refused; the four go one by one, and the
        // first of them is refused for its own data.
        fake.push_fault("batch", refused, 3);
        fake.push_fault("crm.lead.add", Fault::Validation, 1);
        let leads: Vec<Lead> = (0..4).map(|i| lead(&format!("tilda:s{i}"))).collect();
        let answers = crm.create_many(&leads).await.unwrap();
        let classes: Vec<Option<ErrorClass>> = answers
            .iter()
            .map(|(r, _)| r.as_ref().err().map(|e| e.class))
            .collect();
        assert_eq!(classes, [Some(ErrorClass::Validation), None, None, None]);
        for (_, ex) in &answers {
            assert!(ex.request["split_after"]
                .as_str()
                .unwrap()
                .contains("ERROR_BATCH_LENGTH_EXCEEDED"));
            assert_exchange_clean(ex);
        }
        assert_eq!(fake.calls("batch"), 3);
        assert_eq!(fake.calls("crm.lead.add"), 4);
        assert_eq!(fake.entities().len(), 3, "each valid lead once");
        // A batch refused as a whole for a reason that does not prove no command ran
        // (a batch has no transaction; ERROR_CORE may even come on a 500 after some
        // commands ran) is nobody's refusal and is never sent again here: uncertain,
        // each lead looked up by its key.
        for (status, error) in [
            (400, "INVALID_REQUEST"),
            (500, "ERROR_CORE"),
            (400, "ERROR_CORE"),
        ] {
            fake.push_fault(
                "batch",
                Fault::Error {
                    status,
                    error: error.into(),
                    error_description: "x".into(),
                    after_execute: false,
                },
                1,
            );
            let (err, _) = crm.create_many(&leads).await.unwrap_err();
            assert_eq!(err.class, ErrorClass::Uncertain, "{status} {error}");
        }
        assert_eq!(fake.calls("batch"), 6, "none of them split and sent again");
        assert_eq!(fake.calls("crm.lead.add"), 4, "no lead sent alone");
        // Anything else that fails the request as a whole is the batch's failure.
        fake.push_fault("batch", Fault::ServerError, 1);
        let (err, _) = crm.create_many(&leads).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::Uncertain);
    }

    #[test]
    fn classification_table() {
        use ErrorClass::*;
        let s = |n| StatusCode::from_u16(n).unwrap();
        const HTML: &str =
            "<html><head><title>404 Not Found</title></head><body>nginx</body></html>";
        // (status, Bitrix24's `error`, its description or the raw body, class)
        let table = [
            // Refused before execution: try again later.
            (503, Some("QUERY_LIMIT_EXCEEDED"), "", RateLimited),
            (429, Some("OPERATION_TIME_LIMIT"), "", RateLimited),
            (429, None, "", RateLimited),
            // The connector's problem: credentials, scope, method, address — pause.
            (503, Some("OVERLOAD_LIMIT"), "", Auth),
            (500, Some("PORTAL_DELETED"), "", Auth),
            (402, Some("PAYMENT_REQUIRED"), "", Auth),
            (401, Some("expired_token"), "", Auth),
            (401, Some("invalid_token"), "", Auth),
            (401, Some("NO_AUTH_FOUND"), "", Auth),
            (403, Some("insufficient_scope"), "", Auth),
            (403, Some("INVALID_CREDENTIALS"), "", Auth),
            (403, Some("ACCESS_DENIED"), "", Auth),
            (403, Some("user_access_error"), "", Auth),
            (401, Some("WRONG_AUTH_TYPE"), "", Auth),
            (403, Some("ALLOWED_ONLY_INTRANET_USER"), "", Auth),
            (
                404,
                Some("ERROR_METHOD_NOT_FOUND"),
                "Method not found!",
                Auth,
            ),
            // …a batch entry (no status of its own: given as 400).
            (
                400,
                Some("ERROR_METHOD_NOT_FOUND"),
                "Method not found!",
                Auth,
            ),
            (400, Some("ACCESS_DENIED"), "", Auth),
            (400, Some("ERROR_BATCH_METHOD_NOT_ALLOWED"), "", Auth),
            (401, None, "", Auth),
            (402, None, "", Auth),
            (403, None, "", Auth),
            (404, None, HTML, Auth),
            (404, None, "", Auth),
            (404, Some(""), "", Auth),
            (405, None, "Method Not Allowed", Auth),
            (400, None, HTML, Auth),
            (410, None, "<!DOCTYPE html><html></html>", Auth),
            (302, None, "", Auth),
            (301, None, HTML, Auth),
            // That lead's data, or the entity an update names (deleted): terminal.
            (
                400,
                Some(""),
                "The required field 'Lead Name' is missing.<br />",
                Validation,
            ),
            (400, Some("ERROR_CORE"), "Invalid e-mail", Validation),
            // The same code on a 5xx may come after the create ran.
            (500, Some("ERROR_CORE"), "Internal error", Uncertain),
            (503, Some("NOT_FOUND"), "", Uncertain),
            (400, None, "oops", Validation),
            (400, Some(""), "Not found", Validation),
            (404, Some("NOT_FOUND"), "Not found", Validation),
            (404, Some("ERROR_NOT_FOUND"), "", Validation),
            (400, Some("INVALID_REQUEST"), "", Validation),
            // (a JSON error whose description happens to hold markup is still JSON)
            (400, Some(""), "<html><body>x</body></html>", Validation),
            (422, None, "", Validation),
            // A timeout is an answer that did not come: looked up, never a refusal.
            (408, None, "", Uncertain),
            (408, Some(""), "Request Timeout", Uncertain),
            (400, Some(""), "Request Timeout", Uncertain),
            (400, Some("REQUEST_TIMEOUT"), "", Uncertain),
            (400, Some("408"), "", Uncertain),
            (
                400,
                Some("ERROR_TIMEOUT"),
                "The operation timed out",
                Uncertain,
            ),
            (504, None, HTML, Uncertain),
            // The portal failed while executing, or an answer we cannot read.
            (500, Some("INTERNAL_SERVER_ERROR"), "", Uncertain),
            (500, Some("ERROR_UNEXPECTED_ANSWER"), "", Uncertain),
            (502, None, HTML, Uncertain),
            (504, Some(""), "", Uncertain),
            (503, None, "", Uncertain),
            (200, Some("SOMETHING_NEW"), "", Uncertain),
            (200, None, "", Uncertain),
        ];
        for (status, code, text, class) in table {
            assert_eq!(
                classify(s(status), code, text),
                class,
                "{status} {code:?} {text:?}"
            );
        }
    }

    #[test]
    fn interpret_handles_odd_bodies() {
        let h = HeaderMap::new();
        let ok = interpret(
            "m",
            StatusCode::OK,
            &h,
            br#"{"result": 5, "time": {}}"#,
            &[],
        );
        assert_eq!(ok.unwrap()["result"], json!(5));
        let err = interpret("m", StatusCode::OK, &h, b"", &[]).unwrap_err();
        assert_eq!(err.class, ErrorClass::Uncertain);
        assert_eq!(err.message, "bitrix24 m: HTTP 200 : (empty body)");
        let err = interpret("m", StatusCode::OK, &h, br#"{"time":{}}"#, &[]).unwrap_err();
        assert_eq!(err.class, ErrorClass::Uncertain);
        let err = interpret("m", StatusCode::BAD_REQUEST, &h, b"oops", &[]).unwrap_err();
        assert_eq!(err.class, ErrorClass::Validation);
        let long = format!(
            r#"{{"error":"","error_description":"{}"}}"#,
            "x".repeat(1000)
        );
        let err = interpret("m", StatusCode::BAD_REQUEST, &h, long.as_bytes(), &[]).unwrap_err();
        assert_eq!(err.message.chars().count(), crate::crm::MAX_MESSAGE_CHARS);
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_the_reset_time() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, "12".parse().unwrap());
        assert_eq!(retry_after(&h, None), Some(Duration::from_secs(12)));
        h.insert(RETRY_AFTER, "999999".parse().unwrap());
        assert_eq!(retry_after(&h, None), Some(MAX_RETRY_AFTER));
        let at = (chrono::Utc::now() + chrono::Duration::seconds(30)).to_rfc2822();
        h.insert(RETRY_AFTER, at.parse().unwrap());
        let d = retry_after(&h, None).unwrap();
        assert!(
            d > Duration::from_secs(25) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        let reset = chrono::Utc::now().timestamp() + 20;
        let body = json!({"time": {"operating_reset_at": reset}});
        let d = retry_after(&HeaderMap::new(), Some(&body)).unwrap();
        assert!(
            d > Duration::from_secs(15) && d <= Duration::from_secs(20),
            "{d:?}"
        );
        assert_eq!(retry_after(&HeaderMap::new(), None), None);
    }

    #[test]
    fn absurd_reset_times_never_panic() {
        // Found in review: 1e20 made Duration::from_secs_f64 panic and killed the loop.
        for reset in [1e20, 1.7e308, -1e20, -1.7e308, 0.0, 1e-300] {
            let body = json!({"time": {"operating_reset_at": reset}});
            let d = retry_after(&HeaderMap::new(), Some(&body)).unwrap();
            assert!(d <= MAX_RETRY_AFTER, "{reset}: {d:?}");
        }
        let body = json!({"time": {"operating_reset_at": 1e20}});
        assert_eq!(
            retry_after(&HeaderMap::new(), Some(&body)),
            Some(MAX_RETRY_AFTER)
        );
        // The whole answer, as the worker sees it.
        let answer = br#"{"error":"QUERY_LIMIT_EXCEEDED","time":{"operating_reset_at":1e20}}"#;
        let err = interpret(
            "crm.lead.add",
            StatusCode::SERVICE_UNAVAILABLE,
            &HeaderMap::new(),
            answer,
            &[],
        )
        .unwrap_err();
        assert_eq!(err.class, ErrorClass::RateLimited);
        assert_eq!(err.retry_after, Some(MAX_RETRY_AFTER));
    }

    #[test]
    fn redirects_are_followed_only_within_the_https_origin() {
        let hook = "https://acme.bitrix24.ru/rest/1/s3cr3t/";
        let at = |loc: &str| {
            let mut h = HeaderMap::new();
            h.insert(LOCATION, loc.parse().unwrap());
            redirect_target(&format!("{hook}crm.lead.add.json"), hook, &h)
        };
        assert_eq!(
            at("/rest/1/s3cr3t/crm.lead.add.json?x=1").as_deref(),
            Some("https://acme.bitrix24.ru/rest/1/s3cr3t/crm.lead.add.json?x=1")
        );
        assert_eq!(
            at("https://acme.bitrix24.ru:443/rest/2/").as_deref(),
            Some("https://acme.bitrix24.ru/rest/2/")
        );
        for refused in [
            "https://evil.example/rest/1/s3cr3t/crm.lead.add.json",
            "http://acme.bitrix24.ru/rest/1/s3cr3t/crm.lead.add.json",
            "https://acme.bitrix24.ru:8443/rest/",
            "https://acme.bitrix24.ru.evil.example/",
            "//evil.example/x",
            "https://user:pw@acme.bitrix24.ru/",
            "ftp://acme.bitrix24.ru/",
        ] {
            assert_eq!(at(refused), None, "{refused}");
        }
        // An http webhook (a test portal) follows no redirect at all.
        let mut h = HeaderMap::new();
        h.insert(LOCATION, "/rest/1/x/".parse().unwrap());
        assert_eq!(
            redirect_target(
                "http://127.0.0.1:1/rest/1/x/a",
                "http://127.0.0.1:1/rest/1/x/",
                &h
            ),
            None
        );
    }
}
