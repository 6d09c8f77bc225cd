//! `[feed]`: how `serve` delivers the signed event feed (src/feed). The subscribers
//! themselves live in the operations database (`leadgate feed`, the console).

use std::time::Duration;

use serde::Deserialize;

/// `[feed]`, all optional: the loop runs in every `serve`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FeedConfig {
    /// How often the loop looks for events owed.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// One call to a subscriber.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// The alert channels' retry schedule (the same defaults as `[alerts]`): after a
    /// failed delivery a subscriber waits this long, doubled per failure up to
    /// `max_retry_delay` (a `Retry-After` in seconds wins).
    #[serde(with = "humantime_serde")]
    pub retry_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub max_retry_delay: Duration,
    /// A subscriber is disabled (and the alert channels told) after this many failed
    /// deliveries in a row…
    pub disable_after_failures: i32,
    /// …the first of them at least this long ago.
    #[serde(with = "humantime_serde")]
    pub disable_after: Duration,
}

impl Default for FeedConfig {
    fn default() -> Self {
        FeedConfig {
            poll_interval: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
            retry_delay: Duration::from_secs(1),
            max_retry_delay: Duration::from_secs(300),
            disable_after_failures: 10,
            disable_after: Duration::from_secs(3600),
        }
    }
}

impl FeedConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        let positive = [
            ("poll_interval", self.poll_interval),
            ("timeout", self.timeout),
            ("retry_delay", self.retry_delay),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, d)| d.is_zero()) {
            return Err(format!("feed.{field} must be more than 0"));
        }
        if self.max_retry_delay < self.retry_delay {
            return Err("feed.max_retry_delay must be at least feed.retry_delay".into());
        }
        if self.disable_after_failures < 1 {
            return Err("feed.disable_after_failures must be at least 1".into());
        }
        Ok(())
    }
}
