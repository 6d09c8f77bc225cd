//! Pull sources: senders the gateway fetches events from instead of waiting for them
//! (`[[source]]` with a pulled preset and a `[source.pull]` table). Each runs one loop
//! under `supervise`; every event is journaled and claimed through the intake's own steps
//! (`intake::record_pulled`) and acknowledged to its sender only once it is recorded, so a
//! gateway that dies in between fetches it again and the operation key absorbs the repeat.
//! A pulled source's credentials (`[source.pull]`, `env:` values read at start) are
//! required: without them the pull refuses to start, and the source's HTTP intake URL
//! refuses every request.
//!
//! - `bitrix24_offline`: Bitrix24's offline-event queue (`event.bind` with
//!   `event_type=offline`, `event.offline.get` with `clear=0`, `event.offline.clear`).
//! - `telegram`: a bot's updates by `getUpdates`, the offset advanced only past what is
//!   recorded.
//! - `imap`: a mailbox, each message journaled raw (RFC 822) and marked `\Seen` (or moved)
//!   only once recorded.

pub mod bitrix24_offline;
pub mod imap;
pub mod telegram;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::config::{Config, Preset};
use crate::intake::{self, IntakeState, Pulled};
use crate::store::StoreError;

/// Records the events of a batch in order. `Err` at the first the database did not take:
/// the batch must then not be acknowledged (what was recorded is absorbed on the re-read).
pub async fn record_batch(
    state: &IntakeState,
    source: &str,
    events: &[Value],
) -> Result<(), StoreError> {
    for event in events {
        let raw = serde_json::to_vec(event).expect("a JSON value serializes");
        match intake::record_pulled(state, source, raw, "application/json", event.clone()).await? {
            Pulled::Recorded(outcome) => {
                tracing::info!(source, outcome = outcome.name(), "pulled event recorded")
            }
            Pulled::Rejected(reason) => {
                tracing::warn!(source, reason = %reason, "pulled event rejected (journaled)")
            }
        }
    }
    Ok(())
}

/// Sleeps `d`; `true` when the gateway is stopping instead.
pub(crate) async fn pause(d: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    let stopped = tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = shutdown.wait_for(|stop| *stop) => true,
    };
    stopped || *shutdown.borrow()
}

/// A configured pull source, ready to run.
#[derive(Clone)]
pub enum Puller {
    Bitrix24Offline(Arc<bitrix24_offline::OfflineQueue>),
    TelegramUpdates(Arc<telegram::UpdatesPoll>),
    Imap(Arc<imap::MailPoll>),
}

impl Puller {
    pub async fn run(self, state: IntakeState, shutdown: watch::Receiver<bool>) {
        match self {
            Puller::Bitrix24Offline(q) => q.run(state, shutdown).await,
            Puller::TelegramUpdates(t) => t.run(state, shutdown).await,
            Puller::Imap(m) => m.run(state, shutdown).await,
        }
    }
}

/// The pull sources of `config`, their secrets read from `env`: an error when one lacks
/// its credentials (the gateway then refuses to start).
pub fn pullers(
    config: &Config,
    env: impl Fn(&str) -> Option<String> + Copy,
) -> Result<Vec<(String, Puller)>, String> {
    pullers_of(&config.sources, env)
}

/// The pulled ones of `sources` (leadgate.toml's, or a fleet tenant's), ready to run.
pub fn pullers_of(
    sources: &[crate::config::SourceConfig],
    env: impl Fn(&str) -> Option<String> + Copy,
) -> Result<Vec<(String, Puller)>, String> {
    let mut out = Vec::new();
    for source in sources {
        let (Some(pull), Some(preset)) = (&source.pull, source.preset) else {
            continue;
        };
        match preset {
            Preset::Bitrix24Offline => {
                let q = bitrix24_offline::OfflineQueue::new(&source.name, pull, env)?;
                out.push((source.name.clone(), Puller::Bitrix24Offline(Arc::new(q))));
            }
            Preset::TelegramUpdates => {
                let t = telegram::UpdatesPoll::new(&source.name, pull, env)?;
                out.push((source.name.clone(), Puller::TelegramUpdates(Arc::new(t))));
            }
            Preset::Imap => {
                let m = imap::MailPoll::new(&source.name, pull, env)?;
                out.push((source.name.clone(), Puller::Imap(Arc::new(m))));
            }
            other => {
                return Err(format!(
                    "source `{}`: the preset {other:?} is not pulled",
                    source.name
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pull: &str) -> Config {
        Config::parse(&format!(
            "[database]\nurl = \"sqlite::memory:\"\n[[source]]\nname = \"b24\"\n\
             preset = \"bitrix24-offline\"\n[source.pull]\n{pull}"
        ))
        .unwrap()
    }

    #[test]
    fn a_pull_without_its_credentials_refuses_to_start() {
        let env = |v: &str| {
            (v == "B24_HOOK").then(|| "https://acme.bitrix24.ru/rest/1/s3cr3t".to_owned())
        };
        let err = |c: &Config| pullers(c, env).err().unwrap_or_default();
        assert_eq!(
            err(&config("url = \"env:MISSING\"\n")),
            "source `b24`: pull.url: the environment variable `MISSING` is not set"
        );
        assert_eq!(
            err(&config(
                "url = \"env:B24_HOOK\"\naccess_token = \"env:NO_TOKEN\"\n"
            )),
            "source `b24`: pull.access_token: the environment variable `NO_TOKEN` is not set"
        );
        let ok = pullers(&config("url = \"env:B24_HOOK\"\n"), env).unwrap();
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].0, "b24");
    }

    #[test]
    fn a_mailbox_without_its_password_or_ca_file_refuses_to_start() {
        let config = |pull: &str| {
            Config::parse(&format!(
                "[database]\nurl = \"sqlite::memory:\"\n[[source]]\nname = \"mail\"\n\
                 preset = \"imap\"\n[source.pull]\nurl = \"imaps://imap.example.com\"\n\
                 username = \"leads\"\n{pull}"
            ))
            .unwrap()
        };
        let env = |v: &str| (v == "IMAP_PW").then(|| "s3cr3t".to_owned());
        let err = |c: &Config| pullers(c, env).err().unwrap_or_default();
        assert_eq!(
            err(&config("password = \"env:NO_PW\"\n")),
            "source `mail`: pull.password: the environment variable `NO_PW` is not set"
        );
        let e = err(&config(
            "password = \"env:IMAP_PW\"\nca_file = \"/nonexistent/ca.pem\"\n",
        ));
        assert!(
            e.starts_with("source `mail`: pull.ca_file: /nonexistent/ca.pem"),
            "{e}"
        );
        let ok = pullers(&config("password = \"env:IMAP_PW\"\n"), env).unwrap();
        assert_eq!(ok[0].0, "mail");
        assert!(matches!(ok[0].1, Puller::Imap(_)));
    }
}
