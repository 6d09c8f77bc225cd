//! Tenants files (fleet mode, issue 35): one `[[tenant]]` per CRM portal, each with the
//! sections a single deployment has once — `[tenant.crm]`, `[[tenant.source]]`,
//! `[tenant.claim_api]`, `[tenant.api]`, `[tenant.alerts]`, `[tenant.retention]` — read
//! by `leadgate tenant apply`. A CSV file is the same thing a row per tenant, its headers
//! dotted paths (`slug,name,crm.webhook_url,source.site.token`), merged over a defaults
//! file. Whatever the format, a tenant comes out as one canonical JSON text: applying the
//! same tenants twice compares equal texts and changes nothing.
//!
//! A CSV cell is a string unless it reads as a TOML integer, float or boolean (`2`,
//! `2.5`, `true`); a cell written as a TOML string (`"100"`) stays a string.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::{
    validate_api, validate_claim_api, validate_crm, validate_sources, AlertsConfig, ApiConfig,
    ClaimApiConfig, CrmConfig, RetentionConfig, SourceConfig,
};
use crate::domain::TenantSlug;

/// One tenant as a tenants file describes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// In URLs, operation keys and metrics labels; never changes.
    pub slug: TenantSlug,
    /// What people see.
    pub name: String,
    /// Its share of the worker's lanes when tenants contend (1 to 1000).
    #[serde(default = "default_weight")]
    pub weight: i32,
    /// CRM calls at once, per process (1 to 64).
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: i32,
    /// A portal that already holds leads Leadgate created elsewhere (moved into the
    /// fleet from a deployment of its own): every new lead's key is looked up in the CRM
    /// before its first create, one more call per lead, so a lead delivered again after
    /// the move finds its entity instead of making a second. Off once nothing from before
    /// the move can arrive.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub look_up_first: bool,
    pub crm: CrmConfig,
    #[serde(default, rename = "source")]
    pub sources: Vec<SourceConfig>,
    #[serde(default)]
    pub claim_api: ClaimApiConfig,
    /// The tenant's own tokens for the claim API and its reads.
    #[serde(default)]
    pub api: ApiConfig,
    pub alerts: Option<AlertsConfig>,
    /// Its own `full` and `tombstone` windows; `purge_every` is the deployment's.
    #[serde(default)]
    pub retention: TenantRetention,
}

/// A tenant's own retention windows, each the deployment's `[retention]` where not given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantRetention {
    /// Payloads and personal data of its finished operations are kept this long.
    #[serde(default, with = "humantime_serde::option")]
    pub full: Option<std::time::Duration>,
    /// Its keys are kept (as tombstones) this long.
    #[serde(default, with = "humantime_serde::option")]
    pub tombstone: Option<std::time::Duration>,
}

impl TenantRetention {
    /// Its windows, the deployment's where it has none.
    pub fn over(&self, deployment: &RetentionConfig) -> RetentionConfig {
        RetentionConfig {
            full: self.full.unwrap_or(deployment.full),
            tombstone: self.tombstone.unwrap_or(deployment.tombstone),
            purge_every: deployment.purge_every,
        }
    }

    fn validate(&self) -> Result<(), String> {
        const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);
        for (name, window) in [("full", self.full), ("tombstone", self.tombstone)] {
            if window.is_some_and(|w| w < HOUR) {
                return Err(format!("retention.{name}: at least an hour"));
            }
        }
        if let (Some(full), Some(tombstone)) = (self.full, self.tombstone) {
            if full > tombstone {
                return Err(
                    "retention: `full` is longer than `tombstone` (a key is kept at least as \
                     long as its payload)"
                        .into(),
                );
            }
        }
        Ok(())
    }
}

fn default_weight() -> i32 {
    1
}

fn default_max_in_flight() -> i32 {
    2
}

/// A tenant read from a file: its spec, and the canonical JSON text it is stored as.
#[derive(Clone)]
pub struct TenantEntry {
    pub spec: TenantSpec,
    pub canonical: String,
}

/// Its slug only: the canonical text holds the tenant's credentials in clear.
impl std::fmt::Debug for TenantEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantEntry")
            .field("slug", &self.spec.slug)
            .finish_non_exhaustive()
    }
}

/// A TOML error said by where it is and what is wrong, without the line's text (toml's own
/// message quotes the line, which may hold a token).
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {}", e.message())
        }
        None => e.message().to_owned(),
    }
}

impl TenantSpec {
    /// Reads a stored spec (its canonical text) back.
    pub fn from_canonical(text: &str) -> Result<TenantSpec, String> {
        let mut value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        // A spec stored before tenants had retention windows of their own may name
        // `purge_every`, which was then taken (and was always the deployment's); a file
        // naming it now is refused, a stored spec still serves its tenant.
        if let Some(r) = value.get_mut("retention").and_then(Value::as_object_mut) {
            r.remove("purge_every");
        }
        Ok(entry_of(value)?.spec)
    }

    /// The host of the CRM account it writes to: two tenants on one portal would take
    /// each other's leads for their own (their keys are the same in the CRM).
    pub fn portal(&self) -> Option<String> {
        self.crm.portal()
    }
}

/// Reads a tenants file: TOML (`[[tenant]]`…) or, when its name ends in `.csv`, CSV.
/// `defaults` (a TOML file with one `[tenant]` table) is merged under every tenant.
pub fn read(path: &Path, defaults: Option<&Path>) -> Result<Vec<TenantEntry>, String> {
    let text = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    let base = match defaults {
        Some(d) => defaults_of(&text(d)?).map_err(|e| format!("{}: {e}", d.display()))?,
        None => Value::Object(Default::default()),
    };
    let csv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let body = text(path)?;
    let rows = if csv {
        rows_of_csv(&body)
    } else {
        rows_of_toml(&body)
    }
    .map_err(|e| format!("{}: {e}", path.display()))?;
    entries(base, rows).map_err(|e| format!("{}: {e}", path.display()))
}

/// The tenants of a TOML text, `defaults` merged under each.
pub fn parse_toml(text: &str, defaults: Option<&str>) -> Result<Vec<TenantEntry>, String> {
    entries(defaults_of(defaults.unwrap_or(""))?, rows_of_toml(text)?)
}

/// The tenants of a CSV text, `defaults` merged under each.
pub fn parse_csv(text: &str, defaults: Option<&str>) -> Result<Vec<TenantEntry>, String> {
    entries(defaults_of(defaults.unwrap_or(""))?, rows_of_csv(text)?)
}

fn defaults_of(text: &str) -> Result<Value, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Defaults {
        #[serde(default)]
        tenant: Option<toml::Table>,
    }
    let d: Defaults = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    json_of(toml::Value::Table(d.tenant.unwrap_or_default()))
}

fn rows_of_toml(text: &str) -> Result<Vec<Value>, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        tenant: Vec<toml::Table>,
    }
    let file: File = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    file.tenant
        .into_iter()
        .map(|t| json_of(toml::Value::Table(t)))
        .collect()
}

fn json_of(v: toml::Value) -> Result<Value, String> {
    serde_json::to_value(v).map_err(|e| e.to_string())
}

fn rows_of_csv(text: &str) -> Result<Vec<Value>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| format!("its header line: {e}"))?
        .clone();
    let mut rows = vec![];
    for (n, record) in reader.records().enumerate() {
        let line = n + 2;
        let record = record.map_err(|e| format!("line {line}: {e}"))?;
        let mut row = Value::Object(Default::default());
        for (header, cell) in headers.iter().zip(record.iter()) {
            if cell.is_empty() {
                continue;
            }
            set_path(&mut row, header, cell_value(cell))
                .map_err(|e| format!("line {line}, column `{header}`: {e}"))?;
        }
        rows.push(row);
    }
    Ok(rows)
}

/// A cell: a TOML integer, float, boolean or quoted string as such, anything else as text.
fn cell_value(cell: &str) -> Value {
    match toml::from_str::<BTreeMap<String, toml::Value>>(&format!("v = {cell}")) {
        Ok(mut m) => match m.remove("v") {
            Some(
                v @ (toml::Value::Integer(_)
                | toml::Value::Float(_)
                | toml::Value::Boolean(_)
                | toml::Value::String(_)),
            ) => json_of(v).unwrap_or_else(|_| Value::String(cell.to_owned())),
            _ => Value::String(cell.to_owned()),
        },
        Err(_) => Value::String(cell.to_owned()),
    }
}

/// Sets `path` (`crm.webhook_url`; `source.<name>.<field>` for a source, found or added
/// by its name) in `row`.
fn set_path(row: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err("an empty part in the dotted path".into());
    }
    let (target, rest) = if parts[0] == "source" {
        if parts.len() < 3 {
            return Err("a source's column is `source.<name>.<field>`".into());
        }
        let sources = row
            .as_object_mut()
            .expect("a row is a table")
            .entry("source")
            .or_insert_with(|| Value::Array(vec![]));
        let list = sources.as_array_mut().expect("sources are a list");
        let at = match list.iter().position(|s| s["name"] == parts[1]) {
            Some(at) => at,
            None => {
                list.push(serde_json::json!({ "name": parts[1] }));
                list.len() - 1
            }
        };
        (&mut list[at], &parts[2..])
    } else {
        (row, &parts[..])
    };
    let mut at = target;
    for (i, key) in rest.iter().enumerate() {
        let table = at
            .as_object_mut()
            .ok_or_else(|| format!("`{}` is not a table", rest[..i].join(".")))?;
        if i == rest.len() - 1 {
            table.insert((*key).to_owned(), value);
            return Ok(());
        }
        at = table
            .entry(*key)
            .or_insert_with(|| Value::Object(Default::default()));
    }
    unreachable!("the path has at least one part")
}

/// `over` merged onto `base`: tables key by key, sources by name, anything else replaced.
fn merge(base: &Value, over: Value) -> Value {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            let mut out = b.clone();
            for (k, v) in o {
                let merged = match (k.as_str(), out.get(&k)) {
                    ("source", Some(Value::Array(bs))) => merge_sources(bs, v),
                    (_, Some(bv)) => merge(bv, v),
                    (_, None) => v,
                };
                out.insert(k, merged);
            }
            Value::Object(out)
        }
        (_, over) => over,
    }
}

fn merge_sources(base: &[Value], over: Value) -> Value {
    let Value::Array(over) = over else {
        return over;
    };
    let mut out: Vec<Value> = base.to_vec();
    for s in over {
        match out
            .iter_mut()
            .find(|b| b.get("name").is_some() && b.get("name") == s.get("name"))
        {
            Some(b) => *b = merge(b, s),
            None => out.push(s),
        }
    }
    Value::Array(out)
}

fn entries(base: Value, rows: Vec<Value>) -> Result<Vec<TenantEntry>, String> {
    let mut seen = std::collections::HashSet::new();
    let mut out = vec![];
    for (n, row) in rows.into_iter().enumerate() {
        let entry = entry_of(merge(&base, row)).map_err(|e| format!("tenant {}: {e}", n + 1))?;
        let slug = entry.spec.slug.as_str();
        if entry.spec.slug.is_default() {
            return Err(format!(
                "tenant {}: `default` is the deployment's own tenant (leadgate.toml's [crm] \
                 and [[source]]s); give this one another slug",
                n + 1
            ));
        }
        if !seen.insert(slug.to_owned()) {
            return Err(format!("tenant `{slug}` is defined twice"));
        }
        out.push(entry);
    }
    Ok(out)
}

/// Deserializes a tenant's value. A CSV cell that looked like a number or a boolean where
/// the spec wants text (a numeric token) is taken as the text it was, in `value` too. An
/// error names where the value is wrong and what was expected, never the value: it may be
/// a credential.
fn spec_of(value: &mut Value) -> Result<TenantSpec, String> {
    loop {
        let error = match serde_path_to_error::deserialize::<_, TenantSpec>(&*value) {
            Ok(spec) => return Ok(spec),
            Err(e) => e,
        };
        let path = error.path().to_string();
        let message = error.inner().to_string();
        if message.ends_with("expected a string") {
            if let Some(cell) =
                value_at(value, error.path()).filter(|v| v.is_number() || v.is_boolean())
            {
                *cell = Value::String(cell.to_string());
                continue;
            }
        }
        let said = match message.split_once(", expected ") {
            Some((what, expected))
                if what.starts_with("invalid type") || what.starts_with("invalid value") =>
            {
                format!("a value of the wrong kind (expected {expected})")
            }
            _ => message,
        };
        return Err(if path == "." {
            said
        } else {
            format!("{path}: {said}")
        });
    }
}

/// The value `path` names in `value`.
fn value_at<'v>(value: &'v mut Value, path: &serde_path_to_error::Path) -> Option<&'v mut Value> {
    use serde_path_to_error::Segment;
    let mut at = value;
    for segment in path.iter() {
        at = match segment {
            Segment::Seq { index } => at.get_mut(*index)?,
            Segment::Map { key } => at.get_mut(key.as_str())?,
            Segment::Enum { .. } | Segment::Unknown => return None,
        };
    }
    Some(at)
}

/// A tenant's spec from its merged value: deserialized, its sources completed as
/// leadgate.toml's are, validated, and written canonically.
fn entry_of(mut value: Value) -> Result<TenantEntry, String> {
    if let Some(sources) = value.get_mut("source").and_then(Value::as_array_mut) {
        sources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    }
    let slug = value
        .get("slug")
        .and_then(Value::as_str)
        .unwrap_or("(no slug)")
        .to_owned();
    let mut spec = spec_of(&mut value).map_err(|e| format!("`{slug}`: {e}"))?;
    for s in &mut spec.sources {
        s.apply_preset();
        s.infer_auth();
    }
    spec.validate().map_err(|e| format!("`{slug}`: {e}"))?;
    let canonical = serde_json_canonicalizer::to_string(&value).map_err(|e| e.to_string())?;
    Ok(TenantEntry { spec, canonical })
}

impl TenantSpec {
    fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("name is empty: say whose portal it is".into());
        }
        if !(1..=1000).contains(&self.weight) {
            return Err(format!("weight must be 1 to 1000, not {}", self.weight));
        }
        if !(1..=64).contains(&self.max_in_flight) {
            return Err(format!(
                "max_in_flight must be 1 to 64, not {}",
                self.max_in_flight
            ));
        }
        validate_crm(&self.crm)?;
        validate_sources(&self.sources)?;
        validate_claim_api(&self.claim_api, &self.sources)?;
        if self.claim_api.redeliver_url.is_some() && self.api.integration_token.is_none() {
            return Err(
                "claim_api.redeliver_url: the tenant has no [tenant.api] integration_token, so \
                 its integration could not claim what it is sent"
                    .into(),
            );
        }
        self.retention.validate()?;
        if let Some(alerts) = &self.alerts {
            alerts.validate().map_err(|e| format!("alerts: {e}"))?;
        }
        validate_api(&self.api)?;
        if let (true, CrmConfig::Http(http)) = (self.look_up_first, &self.crm) {
            if http.lookup_url.is_none() && http.steps.is_empty() {
                return Err(
                    "look_up_first: this CRM has no lookup by key (`lookup_url`) to look \
                     each lead up in"
                        .into(),
                );
            }
        }
        if self.portal().is_none() {
            return Err("crm: its URL names no host".into());
        }
        Ok(())
    }
}
