//! `[crm]`: which CRM a connector talks to and how (read from the configuration file;
//! the adapters own their settings).

use std::time::Duration;

use serde::Deserialize;

use crate::domain::Secret;

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum CrmConfig {
    Bitrix24 {
        webhook_url: Secret,
        #[serde(default)]
        entity: super::bitrix24::Entity,
        /// `entity = "contact_deal"`: the deal's pipeline (`CATEGORY_ID`; none: the
        /// portal's general pipeline) ...
        #[serde(default)]
        deal_category_id: Option<u64>,
        /// ... and its stage (`STAGE_ID`, e.g. `NEW` or `C3:NEW`; none: the pipeline's
        /// first stage).
        #[serde(default)]
        deal_stage_id: Option<String>,
        /// `entity = "contact_deal"`: which contact a lead whose phone or e-mail several
        /// contacts carry is linked to: `newest` (the highest id) or `review` (a person
        /// decides, `ambiguous_match`).
        #[serde(default)]
        contact_match: super::bitrix24::ContactMatch,
        #[serde(default = "default_crm_timeout", with = "humantime_serde")]
        timeout: Duration,
        /// How long after an unknown outcome a create may still land (default 75 s:
        /// Bitrix24 cuts requests off after 60 s, plus time for its lists to show it).
        #[serde(default, with = "humantime_serde")]
        settle: Option<Duration>,
        /// The portal's request limit, kept by every process on the operations
        /// database: requests per second sustained (cloud: 2, Enterprise: 5) ...
        #[serde(default = "default_bitrix24_rate_limit")]
        rate_limit: f64,
        /// ... and at once after a quiet spell (cloud: 50, Enterprise: 250).
        #[serde(default = "default_bitrix24_burst")]
        burst: u32,
    },
    /// amoCRM / Kommo API v4, with a long-lived token or with OAuth (refreshed tokens
    /// kept in the operations database, shared by every process).
    Amocrm {
        /// `https://{subdomain}.amocrm.ru` or `https://{subdomain}.kommo.com`.
        base_url: String,
        /// The long-lived token (a JWT), sent as `Authorization: Bearer`. Either this or
        /// the four OAuth keys below.
        #[serde(default)]
        token: Option<Secret>,
        /// OAuth: the integration's id and secret, its redirect URI, and the refresh
        /// token it was connected with (used only while the database has no tokens yet).
        #[serde(default)]
        client_id: Option<String>,
        #[serde(default)]
        client_secret: Option<Secret>,
        #[serde(default)]
        redirect_uri: Option<String>,
        #[serde(default)]
        refresh_token: Option<Secret>,
        /// The custom text field of leads that holds the operation_id.
        operation_field_id: u64,
        #[serde(default)]
        pipeline_id: Option<u64>,
        /// Look each lead's contact up by phone and e-mail before `leads/complex` and
        /// attach the one found (the newest) by id instead of creating a new contact;
        /// creates then go one lead a request.
        #[serde(default)]
        link_contacts: bool,
        /// Requests per second sent to the account by every process on the operations
        /// database together (amoCRM: 7).
        #[serde(default = "default_amocrm_rate_limit")]
        rate_limit: f64,
        #[serde(default = "default_crm_timeout", with = "humantime_serde")]
        timeout: Duration,
        /// How long after an unknown outcome a create may still land or its search
        /// catch up (default 120 s; amoCRM documents neither).
        #[serde(default, with = "humantime_serde")]
        settle: Option<Duration>,
        /// OAuth: a file holding the 64-hex-digit key the tokens are encrypted with in
        /// the database (`LEADGATE_TOKEN_KEY` takes precedence).
        #[serde(default)]
        token_key_file: Option<std::path::PathBuf>,
    },
    /// A home-grown CRM over HTTP, described by templates (see [`super::http`]).
    Http(Box<super::http::HttpConfig>),
}

fn default_bitrix24_rate_limit() -> f64 {
    super::bitrix24::DEFAULT_RATE_LIMIT
}

fn default_bitrix24_burst() -> u32 {
    super::bitrix24::DEFAULT_BURST
}

fn default_amocrm_rate_limit() -> f64 {
    super::amocrm::DEFAULT_RATE_LIMIT
}

fn default_crm_timeout() -> Duration {
    Duration::from_secs(10)
}

impl CrmConfig {
    /// The longest one create (or lookup) may take, everything included; the worker
    /// cuts the call there.
    pub fn timeout(&self) -> Duration {
        match self {
            CrmConfig::Bitrix24 { timeout, .. } => (*timeout).min(super::bitrix24::MAX_TIMEOUT),
            CrmConfig::Amocrm { timeout, .. } => *timeout,
            CrmConfig::Http(h) => h.timeout,
        }
    }

    /// The CRM account it writes to, as fleet mode tells tenants apart: a Bitrix24
    /// portal's or an amoCRM account's host, with its port when the URL names one that is
    /// not its scheme's (whichever webhook user or token), an HTTP CRM's create URL. Never
    /// a secret: a Bitrix24 webhook URL's path is left out.
    pub fn portal(&self) -> Option<String> {
        let host = |url: &str| {
            let u = reqwest::Url::parse(url.trim()).ok()?;
            let host = u.host_str()?.to_ascii_lowercase();
            Some(match u.port() {
                Some(port) => format!("{host}:{port}"),
                None => host,
            })
        };
        match self {
            CrmConfig::Bitrix24 { webhook_url, .. } => host(webhook_url.expose()),
            CrmConfig::Amocrm { base_url, .. } => host(base_url),
            CrmConfig::Http(h) => host(&h.create_url).map(|_| h.create_url.trim().to_owned()),
        }
    }

    /// How long after an unknown outcome the CRM may still land the create: a lookup
    /// that finds nothing before then proves nothing. Defaults per CRM: Bitrix24 75 s
    /// (it cuts requests off after 60 s), amoCRM and HTTP CRMs 120 s (undocumented).
    pub fn settle(&self) -> Duration {
        let (configured, default) = match self {
            CrmConfig::Bitrix24 { settle, .. } => (*settle, Duration::from_secs(75)),
            CrmConfig::Amocrm { settle, .. } => (*settle, Duration::from_secs(120)),
            CrmConfig::Http(h) => (h.settle, Duration::from_secs(120)),
        };
        configured.unwrap_or(default)
    }
}
