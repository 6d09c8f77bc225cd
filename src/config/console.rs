//! `[console]`: the operator console served by `leadgate serve` to browsers
//! (`crate::console_web`), on a listener of its own. Absent: no web console.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::domain::Secret;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Where the console listens: its own port, so the intake's can be public while the
    /// console stays on the office network.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// TLS: the certificate chain and its private key, PEM files. With them the console
    /// speaks HTTPS only, on any address, and its session cookie is `Secure`.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// A proxy in front terminates TLS: plain HTTP is accepted on any address, and
    /// `X-Forwarded-Proto: https` marks the session cookie `Secure`.
    #[serde(default)]
    pub behind_proxy: bool,
    /// A session unused this long ends (default 30 minutes).
    #[serde(default = "default_idle", with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// A session ends this long after sign-in whatever happens (default 12 hours).
    #[serde(default = "default_absolute", with = "humantime_serde")]
    pub absolute_timeout: Duration,
    /// SQLite (one operator): the login the web console accepts …
    pub operator: Option<String>,
    /// … and its password's Argon2id hash (`leadgate console password` prints one).
    pub operator_password_hash: Option<Secret>,
}

fn default_listen() -> String {
    "127.0.0.1:8090".into()
}

fn default_idle() -> Duration {
    Duration::from_secs(30 * 60)
}

fn default_absolute() -> Duration {
    Duration::from_secs(12 * 3600)
}

impl ConsoleConfig {
    /// Refuses what would expose sessions: plain HTTP off loopback without a proxy that
    /// terminates TLS, timeouts out of bounds, an operator without a hash.
    pub fn validate(&self) -> Result<(), String> {
        let addr: SocketAddr = self.listen.parse().map_err(|_| {
            format!(
                "[console] listen = {:?}: give an address and a port, e.g. \"127.0.0.1:8090\"",
                self.listen
            )
        })?;
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err("[console] tls_cert and tls_key go together (PEM files)".into());
        }
        if !addr.ip().is_loopback() && !self.behind_proxy && self.tls_cert.is_none() {
            return Err(format!(
                "[console] listen = {:?} is not a loopback address: the console's sessions \
                 would travel in plain HTTP. Give it tls_cert and tls_key, or put it behind a \
                 proxy that terminates TLS and set behind_proxy = true, or listen on 127.0.0.1",
                self.listen
            ));
        }
        let minute = Duration::from_secs(60);
        if self.idle_timeout < minute || self.absolute_timeout < self.idle_timeout {
            return Err(
                "[console] idle_timeout must be at least 1m and absolute_timeout at least idle_timeout"
                    .into(),
            );
        }
        if self.absolute_timeout > Duration::from_secs(7 * 24 * 3600) {
            return Err("[console] absolute_timeout must be at most 7 days".into());
        }
        if self.operator.is_some() != self.operator_password_hash.is_some() {
            return Err(
                "[console] operator and operator_password_hash go together: \
                 `leadgate console password` prints both"
                    .into(),
            );
        }
        Ok(())
    }
}
