//! The *Rules* screen: each source's business rules (what a contact match means, the
//! matching window, the channel; migration 0021) with their history, and a manager's
//! edit — a `store::Ask` like every other action, so on PostgreSQL a gateway applies it
//! under the manager's login and the database refuses every other role.

use serde::{Deserialize, Serialize};
use ts_rs::TS;

use leadgate_domain::MatchRule;
use leadgate_store::{Answer, Ask, RuleChange, SourceRules, StoredRules};

use crate::{ts, unexpected_answer, ApiResult, Console, ConsoleError};

/// How many versions of the history the screen shows.
pub const HISTORY_SHOWN: i64 = 200;

/// One source's rules as the screen shows them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct SourceRulesView {
    pub source: String,
    /// `create`, `link` or `review`.
    pub rule: String,
    #[ts(type = "number")]
    pub window_secs: i64,
    pub channel: String,
    /// What an edit names as the version it was made from.
    #[ts(type = "number")]
    pub version: i64,
    pub changed_at: String,
    pub changed_by: String,
    /// The other sources of its channel.
    pub same_channel: Vec<String>,
}

/// A source's rules before or after a change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct RuleValues {
    pub rule: String,
    #[ts(type = "number")]
    pub window_secs: i64,
    pub channel: String,
}

/// One version in the history: who changed what, when, from what to what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct RuleChangeView {
    #[ts(type = "number")]
    pub id: i64,
    pub source: String,
    #[ts(type = "number")]
    pub version: i64,
    /// A login, the OS user, or `configuration` (seeded from the gateway's TOML).
    pub actor: String,
    pub changed_at: String,
    /// None: seeded.
    pub before: Option<RuleValues>,
    pub after: RuleValues,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct RulesView {
    pub sources: Vec<SourceRulesView>,
    /// Newest first.
    pub history: Vec<RuleChangeView>,
    /// This connection may change them (a manager; local mode and the owner's login).
    pub may_edit: bool,
}

/// A manager's edit of one source's rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct RulesEdit {
    pub source: String,
    /// The version shown when the edit was made: refused if another edit came first.
    #[ts(type = "number")]
    pub expected_version: i64,
    pub rule: String,
    #[ts(type = "number")]
    pub window_secs: i64,
    pub channel: String,
}

fn values(r: &SourceRules) -> RuleValues {
    RuleValues {
        rule: r.rule.to_string(),
        window_secs: r.window_secs,
        channel: r.channel.clone(),
    }
}

fn source_view(s: &StoredRules, all: &[SourceRules]) -> SourceRulesView {
    SourceRulesView {
        source: s.rules.source.clone(),
        rule: s.rules.rule.to_string(),
        window_secs: s.rules.window_secs,
        channel: s.rules.channel.clone(),
        version: s.version,
        changed_at: ts(s.changed_at),
        changed_by: s.changed_by.clone(),
        same_channel: leadgate_domain::business::channel_siblings(&s.rules.source, all)
            .into_iter()
            .map(str::to_owned)
            .collect(),
    }
}

fn change_view(c: RuleChange) -> RuleChangeView {
    RuleChangeView {
        id: c.id,
        source: c.source,
        version: c.version,
        actor: c.actor,
        changed_at: ts(c.changed_at),
        before: c.before.as_ref().map(values),
        after: values(&c.after),
    }
}

impl Console {
    /// Every source's rules and the history, newest first.
    pub async fn rules(&self) -> ApiResult<RulesView> {
        let stored = self.store().business_rules().await?;
        let all: Vec<SourceRules> = stored.iter().map(|s| s.rules.clone()).collect();
        let history = self.store().rules_history(None, HISTORY_SHOWN).await?;
        Ok(RulesView {
            sources: stored.iter().map(|s| source_view(s, &all)).collect(),
            history: history.into_iter().map(change_view).collect(),
            may_edit: self.connection.may.rules,
        })
    }

    /// Changes one source's rules (as `operator` in local mode and under the owner's
    /// login; a personal login's gateway records the login). Refused, with nothing
    /// changed, for an unknown source, a rule other than create/link/review, a window
    /// outside 1 s..365 days, a channel not named like a source, or an edit made from a
    /// version that is no longer current.
    pub async fn set_rules(&self, operator: &str, edit: RulesEdit) -> ApiResult<RulesView> {
        let rule: MatchRule = edit.rule.parse().map_err(|e| ConsoleError::Invalid {
            message: format!("{e}: use create, link or review"),
        })?;
        let ask = Ask::SetRules {
            expected_version: edit.expected_version,
            rules: SourceRules {
                source: edit.source,
                rule,
                window_secs: edit.window_secs,
                channel: edit.channel,
            },
        };
        match self.performer.perform(operator, ask).await? {
            Answer::RulesSet { .. } => self.rules().await,
            _ => Err(unexpected_answer()),
        }
    }
}
