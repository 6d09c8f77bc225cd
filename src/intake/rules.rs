//! The business rules intake matches by (migration 0021): seeded from the configuration
//! for a source the database has none for, then the database's, read live.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context;

use crate::store::{self, StoreError};

/// The business rules every delivery is matched by (migration 0021), as of the
/// database's last version this gateway read: intake reads them without a statement, and
/// [`LiveRules::refresh`] swaps them whole when the version moved.
#[derive(Debug, Default)]
pub struct LiveRules {
    book: std::sync::RwLock<Arc<RuleBook>>,
}

/// The rules of every source at one version of the history.
#[derive(Debug, Default)]
pub struct RuleBook {
    pub version: i64,
    pub sources: HashMap<String, SourceMatching>,
}

/// What matching a source's new operations takes from its rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceMatching {
    pub rule: crate::domain::MatchRule,
    pub window: std::time::Duration,
    /// The other sources of its channel.
    pub same_channel: Vec<String>,
}

/// How often a running gateway reads the business rules' version (each tenant's).
pub const REFRESH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl LiveRules {
    /// [`LiveRules::refresh`], saying in the log when the rules changed or could not be
    /// read (`tenant` names whose they are).
    pub async fn follow(&self, store: &dyn store::Rules, tenant: &str) {
        match self.refresh(store).await {
            Ok(true) => tracing::info!(
                tenant,
                version = self.current().version,
                "business rules changed; matching follows them from the next delivery"
            ),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(tenant, error = %e, "reading the business rules failed; trying again")
            }
        }
    }

    pub fn current(&self) -> Arc<RuleBook> {
        Arc::clone(&self.book.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reads the rules again if the database's version moved since; true when it did.
    /// The version is read before the rules, so rules newer than it are read again on the
    /// next round, never older ones kept.
    pub async fn refresh(&self, store: &dyn store::Rules) -> Result<bool, StoreError> {
        let version = store.rules_version().await?;
        if version == self.current().version {
            return Ok(false);
        }
        let stored = store.business_rules().await?;
        let all: Vec<_> = stored.into_iter().map(|s| s.rules).collect();
        let sources = all
            .iter()
            .map(|r| {
                let same_channel = crate::domain::business::channel_siblings(&r.source, &all)
                    .into_iter()
                    .map(str::to_owned)
                    .collect();
                let window = std::time::Duration::from_secs(r.window_secs.max(0) as u64);
                let m = SourceMatching {
                    rule: r.rule,
                    window,
                    same_channel,
                };
                (r.source.clone(), m)
            })
            .collect();
        let book = Arc::new(RuleBook { version, sources });
        *self.book.write().unwrap_or_else(|e| e.into_inner()) = book;
        Ok(true)
    }
}

/// Gives each configured source without business rules the TOML's (`on_contact_match`,
/// `[matching] window`, its own channel), and says once where the TOML now disagrees with
/// the database, which decides. `store` is the sources' tenant's.
pub async fn seed_rules(
    store: &dyn crate::store::Rules,
    sources: &[crate::config::SourceConfig],
    window: std::time::Duration,
) -> anyhow::Result<()> {
    // A window the rules do not allow (a TOML written before they lived in the database
    // accepted any) seeds the nearest one they do, said once, instead of stopping the start.
    let toml_secs = i64::try_from(window.as_secs()).unwrap_or(i64::MAX);
    let window_secs = toml_secs.clamp(1, crate::domain::business::MAX_WINDOW_SECS);
    if window_secs != toml_secs {
        tracing::warn!(
            toml_window_secs = toml_secs,
            window_secs,
            "[matching] window is outside 1 s to 365 days: new sources are seeded with the \
             nearest window allowed"
        );
    }
    let mut seeds: Vec<crate::store::SourceRules> = sources
        .iter()
        .map(|s| crate::store::SourceRules {
            source: s.name.clone(),
            rule: s.on_contact_match,
            window_secs,
            channel: s.name.clone(),
        })
        .collect();
    // One order for every gateway: two seeding at once on PostgreSQL then wait for each
    // other's rows instead of deadlocking.
    seeds.sort_by(|a, b| a.source.cmp(&b.source));
    let seeded = store
        .seed_rules(&seeds, store.now())
        .await
        .context("seeding the business rules from [matching] window and on_contact_match")?;
    for source in &seeded {
        tracing::info!(%source, "business rules seeded from the configuration");
    }
    let stored = store.business_rules().await?;
    for seed in &seeds {
        let Some(s) = stored.iter().find(|s| s.rules.source == seed.source) else {
            continue;
        };
        if s.rules.rule != seed.rule || s.rules.window_secs != seed.window_secs {
            tracing::warn!(
                source = %seed.source,
                database_rule = %s.rules.rule,
                database_window_secs = s.rules.window_secs,
                toml_rule = %seed.rule,
                toml_window_secs = seed.window_secs,
                "the business rules in the database differ from the TOML's on_contact_match / \
                 [matching] window; the database decides (the TOML only seeds a new source): \
                 change them in the console's Rules screen or with `leadgate rules set`"
            );
        }
    }
    Ok(())
}
