//! The business rules (migration 0021): a gateway seeds a source that has none from its
//! TOML, and a manager's edit replaces a source's rules at the version it was made from,
//! each with its row in the append-only history.
//!
//! Business rules are the database's; technical settings are the TOML's. What a contact
//! match means per source, the matching window and the channels are `business_rules` rows
//! (migration 0021), changed only through `store::Ask::SetRules`: compare-and-set on the
//! source's version, `SourceRules::check`, one `business_rule_history` row per version
//! (append-only by trigger). On PostgreSQL only a manager's login may ask (`may_ask`'s
//! `EditRules`). The TOML's `on_contact_match` and `[matching] window` only seed a source
//! that has no row (`app::seed_rules`). Intake never reads the rules per delivery: it
//! holds them in `intake::LiveRules`, and each `serve`'s rules loop swaps them whole when
//! the history's row count moves (`Rules::rules_version`, polled every second) — the
//! count, not the newest id, because PostgreSQL ids can commit out of order. What a
//! channel changes is `domain::business::step_for`.

use chrono::{DateTime, Utc};

use crate::{Result, SourceRules, SEEDED_BY};
use leadgate_domain::Refusal;

use crate::ops::WriteTx;

/// Seeds every source of `seeds` that has no rules yet; the sources seeded.
pub(crate) async fn seed<T: WriteTx>(
    mut tx: T,
    seeds: &[SourceRules],
    now: DateTime<Utc>,
) -> Result<Vec<String>> {
    let mut seeded = vec![];
    for s in seeds {
        s.check()?;
        if tx.insert_rules(s, SEEDED_BY, now).await? {
            tx.append_rule_change(1, SEEDED_BY, now, None, s).await?;
            seeded.push(s.source.clone());
        }
    }
    tx.commit().await?;
    Ok(seeded)
}

/// Replaces a source's rules, if they are still at `expected_version`; the new version
/// (the same one when nothing changed).
pub(crate) async fn set_in<T: WriteTx>(
    tx: &mut T,
    actor: &str,
    expected_version: i64,
    rules: SourceRules,
    now: DateTime<Utc>,
) -> Result<i64> {
    let Some(current) = tx.lock_rules(&rules.source).await? else {
        return Err(Refusal::UnknownRuleSource { name: rules.source }.into());
    };
    rules.check()?;
    if current.version != expected_version {
        return Err(Refusal::RulesChanged {
            current: current.version,
        }
        .into());
    }
    if current.rules == rules {
        return Ok(current.version);
    }
    let version = current.version + 1;
    tx.save_rules(&rules, version, actor, now).await?;
    tx.append_rule_change(version, actor, now, Some(&current.rules), &rules)
        .await?;
    Ok(version)
}
