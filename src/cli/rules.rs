//! `leadgate rules`: the business rules in the database, as the console's Rules screen
//! shows and changes them.

use std::process::ExitCode;

use clap::Subcommand;

use super::{actor, ConfigArg};
use crate::store;

#[derive(Debug, Subcommand)]
pub(super) enum RulesCommand {
    /// Every source's rules.
    List {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Who changed what, when, from what to what (newest first).
    History {
        /// Only this source's.
        #[arg(long)]
        source: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Change a source's rules; what is not given stays as it is.
    Set {
        source: String,
        /// create, link or review.
        #[arg(long)]
        rule: Option<crate::domain::MatchRule>,
        /// How far back a contact is matched (e.g. 14d, 12h; 1 s to 365 days).
        #[arg(long, value_parser = humantime::parse_duration)]
        window: Option<std::time::Duration>,
        /// Sources in one channel are one way in for the client.
        #[arg(long)]
        channel: Option<String>,
        /// The version the change is made from (default: the current one); refused if
        /// someone changed the rules since.
        #[arg(long)]
        from_version: Option<i64>,
        #[command(flatten)]
        config: ConfigArg,
    },
}

/// `leadgate rules`: what the console's Rules screen shows and does. With a personal
/// PostgreSQL login the change is asked of a gateway, as from the console.
pub(super) async fn rules(command: RulesCommand) -> anyhow::Result<ExitCode> {
    let config = match &command {
        RulesCommand::List { config }
        | RulesCommand::History { config, .. }
        | RulesCommand::Set { config, .. } => config.load()?,
    };
    let store = store::open(config.database.url.expose()).await?;
    let show = |r: &store::SourceRules| {
        format!(
            "{:<7} {:<10} {}",
            r.rule.as_str(),
            humantime::format_duration(std::time::Duration::from_secs(r.window_secs.max(0) as u64))
                .to_string(),
            r.channel
        )
    };
    match command {
        RulesCommand::List { .. } => {
            println!(
                "{:<20} {:<7} {:<10} {:<20} version",
                "source", "rule", "window", "channel"
            );
            for s in store.business_rules().await? {
                println!(
                    "{:<20} {:<39} v{} by {} at {}",
                    s.rules.source,
                    show(&s.rules),
                    s.version,
                    s.changed_by,
                    s.changed_at.to_rfc3339()
                );
            }
        }
        RulesCommand::History { source, limit, .. } => {
            for c in store.rules_history(source.as_deref(), limit).await? {
                let before = c
                    .before
                    .as_ref()
                    .map(&show)
                    .unwrap_or_else(|| "(seeded)".into());
                println!(
                    "{} {:<20} v{:<3} {:<20} {} -> {}",
                    c.changed_at.to_rfc3339(),
                    c.source,
                    c.version,
                    c.actor,
                    before,
                    show(&c.after)
                );
            }
        }
        RulesCommand::Set {
            source,
            rule,
            window,
            channel,
            from_version,
            ..
        } => {
            let Some(current) = store
                .business_rules()
                .await?
                .into_iter()
                .find(|s| s.rules.source == source)
            else {
                eprintln!(
                    "leadgate: {}",
                    crate::domain::Refusal::UnknownRuleSource { name: source }
                );
                return Ok(ExitCode::from(2));
            };
            let rules = store::SourceRules {
                source,
                rule: rule.unwrap_or(current.rules.rule),
                window_secs: window
                    .map(|w| i64::try_from(w.as_secs()).unwrap_or(i64::MAX))
                    .unwrap_or(current.rules.window_secs),
                channel: channel.unwrap_or(current.rules.channel),
            };
            let ask = store::Ask::SetRules {
                expected_version: from_version.unwrap_or(current.version),
                rules: rules.clone(),
            };
            let answer = match store.identity().await? {
                store::Identity::Person { .. } => {
                    store::ask_and_wait(&*store, &ask, std::time::Duration::from_secs(10)).await
                }
                _ => store.perform(&actor(), ask, store.now()).await,
            };
            match answer {
                Ok(store::Answer::RulesSet { version }) => {
                    println!("{} {} (version {version})", rules.source, show(&rules));
                }
                Ok(other) => anyhow::bail!("unexpected answer {other:?}"),
                Err(e) => {
                    eprintln!("leadgate: {e}; nothing was changed");
                    return Ok(ExitCode::from(2));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
