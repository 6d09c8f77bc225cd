//! Fleet mode's registry (issue 35): what applying a tenants file changes, worked out
//! against the registry (`store::Tenants`) and written in one transaction.
//!
//! - A tenant the registry does not know is created; one whose spec (its canonical text,
//!   `config::tenants`) differs is changed; an equal one is left alone, its version
//!   unmoved: applying the same file twice changes nothing.
//! - A tenant the file no longer names is paused ([`NOT_IN_THE_FILE`]), not deleted:
//!   intake keeps journaling its leads. Named again, it is resumed. `--prune` removes it
//!   instead: its spec and credentials are forgotten, its id and slug kept for its
//!   tombstones' keys, and the slug cannot be taken again.
//! - A tenant a person paused stays paused whatever the file says.
//! - Two tenants on one CRM portal are refused, as is a tenant on the default tenant's
//!   portal: their keys would be one key space in the CRM.
//!
//! Specs hold credentials, so they are stored sealed with the token key
//! (`LEADGATE_TOKEN_KEY`, `crm::vault`), bound to the tenant's slug.

use std::collections::{BTreeMap, HashMap};

use crate::config::tenants::{TenantEntry, TenantSpec};
use crate::crm::vault::Vault;
use crate::domain::TenantId;
use crate::store::{Tenant, TenantChange, TenantSettings, TenantState, Tenants};

/// Why a tenant the tenants file no longer names is paused.
pub const NOT_IN_THE_FILE: &str = "not in the tenants file";

/// What the vault binds a tenant's sealed spec to.
fn context(slug: &str) -> String {
    format!("tenants/{slug}")
}

/// The token key (`LEADGATE_TOKEN_KEY`, else `[fleet] token_key_file`), with what tenants
/// need it for when it is missing.
pub fn vault(fleet: &crate::config::FleetConfig) -> Result<Vault, String> {
    Vault::from_env_or_file(
        fleet.token_key_file.as_deref(),
        &format!(
            "tenants' specs hold their CRM credentials and are stored encrypted: set {} \
             (64 hex digits, e.g. from `openssl rand -hex 32`) or [fleet] token_key_file, \
             the same on every machine",
            crate::crm::vault::KEY_ENV
        ),
    )
}

/// What a tenants file changes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub changes: Vec<TenantChange>,
    pub created: Vec<String>,
    pub changed: Vec<String>,
    pub resumed: Vec<String>,
    pub paused: Vec<String>,
    pub removed: Vec<String>,
    pub unchanged: usize,
}

impl Plan {
    /// One line per kind of change, for the person who applied the file.
    pub fn summary(&self) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        format!(
            "created: {}\nchanged: {}\nresumed: {}\npaused ({NOT_IN_THE_FILE}): {}\nremoved: {}\nunchanged: {}",
            list(&self.created),
            list(&self.changed),
            list(&self.resumed),
            list(&self.paused),
            list(&self.removed),
            self.unchanged
        )
    }
}

/// The stored specs opened, by slug.
pub async fn opened_specs(
    store: &dyn Tenants,
    vault: &Vault,
) -> Result<HashMap<String, String>, String> {
    each_spec_opened(store, vault)
        .await?
        .into_iter()
        .map(|(slug, text)| Ok((slug, text?)))
        .collect()
}

/// Every stored spec opened, or why it cannot be, by slug: a running fleet serves the
/// tenants whose specs open and says which do not.
pub async fn each_spec_opened(
    store: &dyn Tenants,
    vault: &Vault,
) -> Result<HashMap<String, Result<String, String>>, String> {
    let mut out = HashMap::new();
    for (slug, sealed) in store.tenant_specs().await.map_err(|e| e.to_string())? {
        let text = if Vault::is_sealed(&sealed) {
            vault
                .open(&context(&slug), &sealed)
                .map_err(|e| format!("tenant `{slug}`: {e}"))
        } else {
            Err(format!("tenant `{slug}`: its stored spec is not sealed"))
        };
        out.insert(slug, text);
    }
    Ok(out)
}

/// The tenants a deployment runs: every active or paused tenant's spec.
pub async fn load(store: &dyn Tenants, vault: &Vault) -> Result<Vec<TenantSpec>, String> {
    let opened = opened_specs(store, vault).await?;
    let mut specs = vec![];
    for t in store.tenants().await.map_err(|e| e.to_string())? {
        if let Some(text) = opened.get(&t.slug) {
            specs.push(
                TenantSpec::from_canonical(text)
                    .map_err(|e| format!("tenant `{}`: {e}", t.slug))?,
            );
        }
    }
    Ok(specs)
}

/// Works out what applying `wanted` to the registry (`current`, `stored` specs opened)
/// changes. `default_portal`: the default tenant's `[crm]` portal, if it has one.
pub fn plan(
    current: &[Tenant],
    stored: &HashMap<String, String>,
    wanted: &[TenantEntry],
    prune: bool,
    default_portal: Option<String>,
    vault: &Vault,
) -> Result<Plan, String> {
    let mut portals: BTreeMap<String, String> = BTreeMap::new();
    if let Some(p) = default_portal {
        portals.insert(p, "default".into());
    }
    // The tenants the file no longer names keep their portals while they are paused, not
    // removed (`--prune` removes them): a new tenant may not take one.
    if !prune {
        for t in current {
            let named = wanted.iter().any(|e| e.spec.slug.as_str() == t.slug);
            if named || t.state == TenantState::Removed || t.id == TenantId::DEFAULT.0 {
                continue;
            }
            let portal = stored
                .get(&t.slug)
                .and_then(|text| TenantSpec::from_canonical(text).ok())
                .and_then(|spec| spec.portal());
            if let Some(portal) = portal {
                portals.insert(portal, t.slug.clone());
            }
        }
    }
    for e in wanted {
        let portal = e.spec.portal().unwrap_or_default();
        if let Some(other) = portals.insert(portal.clone(), e.spec.slug.to_string()) {
            let host = reqwest::Url::parse(&portal)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or(portal);
            return Err(format!(
                "tenants `{other}` and `{}` write to one CRM portal ({host}): one portal, one \
                 tenant (their keys would be one key space in the CRM)",
                e.spec.slug
            ));
        }
    }
    let by_slug: HashMap<&str, &Tenant> = current.iter().map(|t| (t.slug.as_str(), t)).collect();
    let mut plan = Plan::default();
    for e in wanted {
        let slug = e.spec.slug.to_string();
        let settings = || TenantSettings {
            name: e.spec.name.clone(),
            weight: e.spec.weight,
            max_in_flight: e.spec.max_in_flight,
            retention_full_secs: e
                .spec
                .retention
                .full
                .map(|w| i64::try_from(w.as_secs()).unwrap_or(i64::MAX)),
            sealed_spec: vault.seal(&context(&slug), &e.canonical),
        };
        let Some(t) = by_slug.get(slug.as_str()) else {
            plan.changes.push(TenantChange::Create {
                slug: slug.clone(),
                settings: settings(),
            });
            plan.created.push(slug);
            continue;
        };
        if t.state == TenantState::Removed {
            return Err(format!(
                "tenant `{slug}` was removed (its tombstones keep its keys): give the portal \
                 another slug"
            ));
        }
        let resume =
            t.state == TenantState::Paused && t.paused_reason.as_deref() == Some(NOT_IN_THE_FILE);
        let same = stored.get(&slug) == Some(&e.canonical);
        if same && !resume {
            plan.unchanged += 1;
            continue;
        }
        let (state, reason) = if resume {
            (TenantState::Active, None)
        } else if t.state == TenantState::Paused {
            (TenantState::Paused, t.paused_reason.clone())
        } else {
            (TenantState::Active, None)
        };
        plan.changes.push(TenantChange::Update {
            slug: slug.clone(),
            expected_version: t.version,
            settings: settings(),
            state,
            reason,
        });
        if resume {
            plan.resumed.push(slug.clone());
        }
        if !same {
            plan.changed.push(slug);
        }
    }
    for t in current {
        let named = wanted.iter().any(|e| e.spec.slug.as_str() == t.slug);
        if named || t.id == 0 || t.state == TenantState::Removed {
            continue;
        }
        let (state, list) = if prune {
            (TenantState::Removed, &mut plan.removed)
        } else if t.state == TenantState::Active {
            (TenantState::Paused, &mut plan.paused)
        } else {
            continue; // paused already, by a person or by an earlier apply
        };
        list.push(t.slug.clone());
        plan.changes.push(TenantChange::State {
            slug: t.slug.clone(),
            expected_version: t.version,
            state,
            reason: Some(NOT_IN_THE_FILE.into()),
        });
    }
    Ok(plan)
}

/// Applies a tenants file: works out its plan and, unless `dry_run`, writes it.
pub async fn apply(
    store: &dyn Tenants,
    vault: &Vault,
    wanted: &[TenantEntry],
    prune: bool,
    dry_run: bool,
    default_portal: Option<String>,
    actor: &str,
) -> Result<Plan, String> {
    let current = store.tenants().await.map_err(|e| e.to_string())?;
    let stored = opened_specs(store, vault).await?;
    let plan = plan(&current, &stored, wanted, prune, default_portal, vault)?;
    if !dry_run && !plan.changes.is_empty() {
        store
            .apply_tenants(&plan.changes, actor, store.now())
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(plan)
}

/// Writes `store`'s tenant's operations to `out` as JSON lines, each with its timeline;
/// how many.
pub async fn export(
    store: &dyn crate::store::Store,
    mut out: impl std::io::Write,
) -> anyhow::Result<u64> {
    const PAGE: i64 = 500;
    let mut after: Option<String> = None;
    let mut n = 0;
    loop {
        let page = store.tenant_operations(after.as_deref(), PAGE).await?;
        for op in &page {
            let timeline = store.timeline(&op.operation_id).await?;
            let line = serde_json::json!({"operation": op, "timeline": timeline});
            serde_json::to_writer(&mut out, &line)?;
            out.write_all(b"\n")?;
            n += 1;
        }
        match page.last() {
            Some(last) if page.len() as i64 == PAGE => {
                after = Some(last.operation_id.as_str().to_owned());
            }
            _ => break,
        }
    }
    out.flush()?;
    Ok(n)
}
