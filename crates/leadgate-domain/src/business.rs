//! The business rules of matching (issue 17, "two owners"): per source, what a contact
//! match means, how far back it looks, and which channel the source belongs to. They live
//! in the database (migration 0021), are edited by managers and read live by every
//! gateway; what is valid, and what a channel changes, is decided here.

use serde::{Deserialize, Serialize};

use super::rules::{match_step, MatchStep, Refusal};
use super::{is_valid_source_name, MatchRule};

/// The longest matching window: a year.
pub const MAX_WINDOW_SECS: i64 = 365 * 24 * 3600;

/// One source's business rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRules {
    pub source: String,
    /// What a new operation whose contact matches an earlier one's does.
    pub rule: MatchRule,
    /// How far back, in seconds, a new operation's contact is matched.
    pub window_secs: i64,
    /// Sources in one channel are one way in for the client (a site's form and its
    /// callback widget): see [`step_for`]. By default a source is its own channel.
    pub channel: String,
}

impl SourceRules {
    /// Refused unless the window is 1 s to 365 days and the channel is named like a
    /// source (letters, digits, `-`, `_`).
    pub fn check(&self) -> Result<(), Refusal> {
        if !(1..=MAX_WINDOW_SECS).contains(&self.window_secs) {
            return Err(Refusal::RuleWindowOutOfRange {
                secs: self.window_secs,
            });
        }
        if !is_valid_source_name(&self.channel) {
            return Err(Refusal::RuleChannelName {
                channel: self.channel.clone(),
            });
        }
        Ok(())
    }
}

/// An earlier operation that shares the new one's phone or e-mail, as matching sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchFact<'a> {
    /// Of another source in the new operation's channel.
    pub same_channel: bool,
    pub crm_id: Option<&'a str>,
}

/// What a new operation does with its contact matches (newest first).
///
/// A match with an operation of *another source of the same channel* is the same request
/// coming in again through that channel (the site's form, then its callback widget): it
/// is linked to that operation's CRM entity, whatever the source's rule (a person decides
/// while that entity is not known yet). Every other match — another channel's, or the
/// source's own earlier operation (as before channels existed) — follows the source's
/// rule. With every source its own channel, this is the rule alone.
pub fn step_for(rule: MatchRule, matches: &[MatchFact<'_>]) -> MatchStep {
    // The newest same-channel match decides: while its entity is not known, an older
    // one's is no answer (it may be the client's earlier deal, not this request's).
    if let Some(newest) = matches.iter().find(|m| m.same_channel) {
        return match_step(MatchRule::Link, newest.crm_id.map(str::to_owned));
    }
    match_step(
        rule,
        matches.iter().find_map(|m| m.crm_id).map(str::to_owned),
    )
}

/// The other sources of `source`'s channel, among `all`.
pub fn channel_siblings<'a>(source: &str, all: &'a [SourceRules]) -> Vec<&'a str> {
    let Some(channel) = all.iter().find(|r| r.source == source).map(|r| &r.channel) else {
        return vec![];
    };
    all.iter()
        .filter(|r| r.source != source && &r.channel == channel)
        .map(|r| r.source.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(window_secs: i64, channel: &str) -> SourceRules {
        SourceRules {
            source: "site".into(),
            rule: MatchRule::Create,
            window_secs,
            channel: channel.into(),
        }
    }

    #[test]
    fn windows_and_channel_names_are_checked() {
        assert_eq!(rules(3600, "site").check(), Ok(()));
        assert_eq!(rules(MAX_WINDOW_SECS, "web_site-2").check(), Ok(()));
        for secs in [0, -5, MAX_WINDOW_SECS + 1] {
            assert_eq!(
                rules(secs, "site").check(),
                Err(Refusal::RuleWindowOutOfRange { secs })
            );
        }
        for bad in ["", "a b", "сайт", "x;drop", &"x".repeat(65)] {
            assert!(
                matches!(rules(60, bad).check(), Err(Refusal::RuleChannelName { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_match_in_the_same_channel_links_and_others_follow_the_rule() {
        let own = |crm_id| MatchFact {
            same_channel: false,
            crm_id,
        };
        let sibling = |crm_id| MatchFact {
            same_channel: true,
            crm_id,
        };
        use MatchRule::{Create, Link, Review};
        use MatchStep as S;
        let table: Vec<(MatchRule, Vec<MatchFact>, MatchStep)> = vec![
            // every source its own channel: the rule alone, as before channels
            (Create, vec![own(Some("7"))], S::Create),
            (Link, vec![own(Some("7"))], S::Link("7".into())),
            (Link, vec![own(None), own(Some("6"))], S::Link("6".into())),
            (Link, vec![own(None)], S::Review),
            (Review, vec![own(Some("7"))], S::Review),
            // another source of the same channel: the same request again, linked
            (Create, vec![sibling(Some("9"))], S::Link("9".into())),
            (Review, vec![sibling(Some("9"))], S::Link("9".into())),
            (
                Create,
                vec![own(Some("1")), sibling(Some("9"))],
                S::Link("9".into()),
            ),
            // its entity is not known yet: a person decides
            (Create, vec![sibling(None)], S::Review),
            // ... even when an older sibling's is: that may be an earlier deal
            (Create, vec![sibling(None), sibling(Some("9"))], S::Review),
            (
                Link,
                vec![own(Some("5")), sibling(None), sibling(Some("9"))],
                S::Review,
            ),
        ];
        for (rule, matches, want) in table {
            assert_eq!(step_for(rule, &matches), want, "{rule} {matches:?}");
        }
    }

    #[test]
    fn siblings_are_the_other_sources_of_the_channel() {
        let all = vec![
            SourceRules {
                source: "site".into(),
                ..rules(60, "web")
            },
            SourceRules {
                source: "callback".into(),
                ..rules(60, "web")
            },
            SourceRules {
                source: "calls".into(),
                ..rules(60, "calls")
            },
        ];
        assert_eq!(channel_siblings("site", &all), vec!["callback"]);
        assert!(channel_siblings("calls", &all).is_empty());
        assert!(channel_siblings("unknown", &all).is_empty());
    }
}
