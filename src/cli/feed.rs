//! `leadgate feed`: the signed event feed's subscribers (src/feed). Run with the gateway's
//! configuration (its login owns the subscribers; on PostgreSQL only an admin's login may
//! read them, never their secrets).

use std::process::ExitCode;

use clap::Subcommand;

use super::ConfigArg;
use crate::domain::text::escape_controls as esc;
use crate::domain::Secret;
use crate::store;

#[derive(Debug, Subcommand)]
pub(super) enum FeedCommand {
    /// Add a subscriber: prints its id and (once) its signing secret.
    Subscribe {
        /// Where events are POSTed (http:// or https://).
        url: String,
        /// Comma-separated event types (default: all): operation.completed, operation.failed,
        /// review.opened, review.resolved, connector.paused, connector.unreachable,
        /// connector.resumed.
        #[arg(long, default_value = "all")]
        events: String,
        /// Use this secret (`whsec_` then base64 of 24 to 64 bytes) instead of a generated
        /// one. Prefer the environment: a command line is visible to every user.
        #[arg(long, env = "LEADGATE_FEED_SECRET", hide_env_values = true)]
        secret: Option<String>,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Every subscriber: id, state (and why disabled), events owed, URL, event types.
    List {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Remove a subscriber and what it is owed.
    Remove {
        id: i64,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Make a disabled subscriber active again: what it missed is sent.
    Enable {
        id: i64,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// A subscriber's delivery attempts, newest first.
    Deliveries {
        id: i64,
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=500))]
        limit: i64,
        #[command(flatten)]
        config: ConfigArg,
    },
}

pub(super) async fn feed(command: FeedCommand) -> anyhow::Result<ExitCode> {
    let config = match &command {
        FeedCommand::Subscribe { config, .. }
        | FeedCommand::List { config }
        | FeedCommand::Remove { config, .. }
        | FeedCommand::Enable { config, .. }
        | FeedCommand::Deliveries { config, .. } => config.load()?,
    };
    let refuse = |e: String| {
        eprintln!("leadgate: {e}; nothing was changed");
        Ok(ExitCode::from(2))
    };
    // Checked before the database is opened: bad input costs nothing.
    if let FeedCommand::Subscribe {
        url,
        events,
        secret,
        ..
    } = &command
    {
        if let Err(e) = crate::feed::check_url(url) {
            return refuse(e);
        }
        if let Err(e) = crate::feed::event_types(events) {
            return refuse(e);
        }
        if let Some(s) = secret {
            if let Err(e) = crate::feed::sign::key(&Secret::new(s.trim())) {
                return refuse(e);
            }
        }
    }
    let store = store::open(config.database.url.expose()).await?;
    match command {
        FeedCommand::Subscribe {
            url,
            events,
            secret,
            ..
        } => {
            let events = crate::feed::event_types(&events).map_err(anyhow::Error::msg)?;
            let given = secret.is_some();
            let secret = secret
                .map(|s| Secret::new(s.trim()))
                .unwrap_or_else(crate::feed::sign::new_secret);
            let id = store
                .feed_subscribe(&url, &secret, &events, store.now())
                .await?;
            println!("subscriber {id}: {} → {}", events.join(","), esc(&url));
            if !given {
                println!("secret (shown once; verify the webhook-signature with it):");
                println!("{}", secret.expose());
            }
        }
        FeedCommand::List { .. } => {
            for s in store.feed_subscribers().await? {
                let state = match &s.disabled_reason {
                    Some(why) if s.state == "disabled" => format!("DISABLED ({})", esc(why)),
                    _ => s.state.clone(),
                };
                println!(
                    "{:<5} {state} owed {} failures {} {} [{}]",
                    s.id,
                    s.pending,
                    s.failures,
                    esc(&s.url),
                    s.events
                );
            }
        }
        FeedCommand::Remove { id, .. } => {
            if !store.feed_remove(id).await? {
                return refuse(format!("there is no subscriber {id}"));
            }
            println!("subscriber {id} removed");
        }
        FeedCommand::Enable { id, .. } => {
            if !store.feed_enable(id).await? {
                return refuse(format!("there is no subscriber {id}"));
            }
            println!("subscriber {id} is active; what it missed is sent");
        }
        FeedCommand::Deliveries { id, limit, .. } => {
            for a in store.feed_attempts(id, limit).await? {
                println!(
                    "{} {:<9} {:<22} {} {}{}",
                    a.at.to_rfc3339(),
                    if a.ok { "delivered" } else { "failed" },
                    a.kind,
                    a.event_id,
                    a.status.map(|s| format!("HTTP {s}")).unwrap_or_default(),
                    a.error.map(|e| format!(" {}", esc(&e))).unwrap_or_default()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
