//! Team alerts sent by `leadgate serve`: new review cases (grouped), a connector paused
//! or resumed, and thresholds (lost > 0, stale `in_progress` above a count, open review
//! cases older than an age), to Telegram chats and Slack-compatible webhooks.
//!
//! Each channel has one row in the operations database (migration 0011): the cursor of
//! cases already announced, the conditions as last announced, the message waiting to be
//! accepted, its failures, and the sending turn. A channel's loop, every poll interval:
//!
//! 1. takes the turn (`Alerts::alert_turn`, a lease under the row's lock: of several
//!    gateways on one database one sends, so each alert goes out once);
//! 2. if the rate allows a message now ([`send_gate`]: the retry time, the spacing, the
//!    per-minute cap), takes the pending message, or composes one from the figures
//!    ([`compose`], pure) — new cases only once per `interval`, a condition when it
//!    changes or after `repeat`;
//! 3. stores it and extends the turn to cover the call (`Alerts::alert_arm`), sends it,
//!    and records the answer (`Alerts::alert_done`): only an accepted message advances the
//!    cursor and the conditions, so a failure or a restart neither loses nor repeats a
//!    group; a failing channel gets the same message again after a backoff (Telegram's
//!    `retry_after`, a webhook's `Retry-After` honoured).
//!
//! Messages are built from counts, reasons, sources, case ids, connector names and
//! thresholds only ([`message`]): no lead's data or key can reach them.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::config::AlertsConfig;
use crate::store::{self, AlertFacts, AlertOutcome, AlertTurn, PendingAlert, StoreError};

pub mod channel;
pub mod message;

pub use channel::{post_webhook, Channel, Sent};
pub use message::{CaseGroup, Digest, HandPause, Item, Phase};

/// What a turn must cover beyond the call itself: arming it before, recording after
/// (`done` retries a transient database error for up to 3 s: another gateway must not
/// take the turn and send the message again meanwhile).
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// Condition keys.
pub const LOST: &str = "lost";
pub const STALE: &str = "stale";
pub const REVIEW_AGE: &str = "review_age";
pub const SPOOL: &str = "spool";
const CONNECTOR_PREFIX: &str = "connector:";
const FEED_PREFIX: &str = "feed:";

/// The alert rules, from `[alerts]` and `[review] stale_after`.
#[derive(Debug, Clone)]
pub struct Rules {
    pub interval: Duration,
    pub settle: Duration,
    pub stale_above: i64,
    pub stale_after: Duration,
    pub review_older_than: Duration,
    pub spool_older_than: Duration,
    pub repeat: Duration,
    pub max_per_minute: u32,
    pub min_spacing: Duration,
    pub retry_delay: Duration,
    pub max_retry_delay: Duration,
}

impl Rules {
    pub fn new(config: &AlertsConfig, stale_after: Duration) -> Rules {
        Rules {
            interval: config.interval,
            settle: config.settle,
            stale_above: config.stale_above,
            stale_after,
            review_older_than: config.review_older_than,
            spool_older_than: config.spool_older_than,
            repeat: config.repeat,
            max_per_minute: config.max_per_minute,
            min_spacing: config.min_spacing,
            retry_delay: config.retry_delay,
            max_retry_delay: config.max_retry_delay,
        }
    }

    /// The wait after the `failures`-th failed try: `retry_delay` doubled per failure,
    /// at most `max_retry_delay`.
    pub fn backoff(&self, failures: i32) -> Duration {
        backoff(self.retry_delay, self.max_retry_delay, failures)
    }
}

/// The retry schedule alerts and the event feed share: the wait after the
/// `failures`-th failed try is `retry_delay` doubled per failure, at most `max_retry_delay`.
/// The time it gives is stored (the message's or subscriber's `next_try_at`), so a
/// restart keeps it.
pub fn backoff(retry_delay: Duration, max_retry_delay: Duration, failures: i32) -> Duration {
    let factor = 2u32.saturating_pow(failures.clamp(0, 30) as u32);
    retry_delay.saturating_mul(factor).min(max_retry_delay)
}

/// The loop alerts and the event feed share: one `pass`, then `poll_interval` or the
/// shutdown, whichever comes first; a failed pass is logged and the next one comes.
pub async fn poll_loop<F, Fut, T>(
    what: &str,
    name: &str,
    poll_interval: Duration,
    mut shutdown: watch::Receiver<bool>,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = store::Result<T>>,
{
    loop {
        if let Err(e) = pass().await {
            tracing::error!(loop = what, name, error = %e, "pass failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(poll_interval) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// Records an outcome through transient database errors (up to 5 tries, about 3 s): an
/// answer the receiver gave and the store forgot would make the message go out again.
pub async fn through_transient<F, Fut>(mut record: F) -> store::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = store::Result<()>>,
{
    let mut tries = 0;
    loop {
        match record().await {
            Err(e) if e.is_transient() && tries < 5 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200 * tries)).await;
            }
            other => return other,
        }
    }
}

fn plus(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    store::after(t, d)
}

/// When the channel may get its next message: `None` now, else the time. Waits for the
/// pending message's retry time, `min_spacing` after the last accepted message, and
/// while `max_per_minute` messages were accepted in the last minute, until the oldest
/// of them is a minute old.
pub fn send_gate(rules: &Rules, turn: &AlertTurn, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let minute = Duration::from_secs(60);
    let recent: Vec<DateTime<Utc>> = turn
        .recent_sends
        .iter()
        .copied()
        .filter(|t| plus(*t, minute) > now)
        .collect();
    let mut at = now;
    if let Some(t) = turn.next_try_at {
        at = at.max(t);
    }
    if let Some(last) = recent.iter().max() {
        at = at.max(plus(*last, rules.min_spacing));
    }
    if recent.len() >= rules.max_per_minute as usize {
        let mut sorted = recent.clone();
        sorted.sort();
        let nth = sorted[sorted.len() - rules.max_per_minute as usize];
        at = at.max(plus(nth, minute));
    }
    (at > now).then_some(at)
}

/// Makes a condition's item for the phase it is announced in.
type ItemOf = Box<dyn Fn(Phase) -> Item>;

/// The spool condition: deliveries have waited in the gateways' spools (as their beats
/// say) longer than `older_than`.
fn spool_condition(
    spooled: store::Spooled,
    older_than: Duration,
    now: DateTime<Utc>,
) -> (String, bool, ItemOf) {
    let firing = spooled.records > 0 && spooled.oldest.is_some_and(|t| plus(t, older_than) <= now);
    let (count, since, older_than_secs) = (spooled.records, spooled.oldest, older_than.as_secs());
    (
        SPOOL.into(),
        firing,
        Box::new(move |phase| Item::Spooled {
            phase,
            count,
            since,
            older_than_secs,
        }),
    )
}

/// What a condition's change means for a message: it started, it ended, or it still
/// holds a `repeat` after it was last announced. `None`: nothing to say.
pub fn step(
    announced: Option<&store::AlertCondition>,
    firing: bool,
    now: DateTime<Utc>,
    repeat: Duration,
) -> Option<Phase> {
    match (announced.map(|a| (a.firing, a.notified_at)), firing) {
        (None | Some((false, _)), true) => Some(Phase::Fired),
        (Some((true, _)), false) => Some(Phase::Cleared),
        (Some((true, at)), true) if plus(at, repeat) <= now => Some(Phase::Still),
        _ => None,
    }
}

/// The message the channel should get now, from the figures and what it was told
/// before; `None`: nothing to say. New cases are announced when the oldest of them has
/// waited `interval` and the last group is `interval` old; conditions when they change
/// (see [`step`]).
pub fn compose(
    rules: &Rules,
    turn: &AlertTurn,
    facts: &AlertFacts,
    now: DateTime<Utc>,
) -> Option<(Digest, PendingAlert)> {
    let mut digest = Digest::default();
    let mut cursor = None;
    let window_passed = |t: Option<DateTime<Utc>>| t.is_none_or(|t| plus(t, rules.interval) <= now);
    if let (Some(max_id), Some(first_at)) = (facts.new_cases_max_id, facts.new_cases_first_at) {
        if window_passed(Some(first_at)) && window_passed(turn.last_group_at) {
            let mut by_reason = std::collections::BTreeMap::<&str, i64>::new();
            let mut by_source = std::collections::BTreeMap::<&str, i64>::new();
            for g in &facts.new_cases {
                *by_reason.entry(&g.reason).or_default() += g.count;
                *by_source.entry(&g.source).or_default() += g.count;
            }
            let sorted = |m: std::collections::BTreeMap<&str, i64>| {
                let mut v: Vec<(String, i64)> =
                    m.into_iter().map(|(k, n)| (k.to_owned(), n)).collect();
                v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                v
            };
            digest.cases = Some(CaseGroup {
                total: facts.new_cases.iter().map(|g| g.count).sum(),
                by_reason: sorted(by_reason),
                by_source: sorted(by_source),
                ids: facts.new_case_ids.clone(),
            });
            cursor = Some(max_id);
        }
    }

    let stale_after_secs = rules.stale_after.as_secs();
    let older_than_secs = rules.review_older_than.as_secs();
    let (lost, stale, above, old, oldest) = (
        facts.lost,
        facts.stale_in_progress,
        rules.stale_above,
        facts.old_open_cases,
        facts.oldest_open_case_at,
    );
    let mut current: Vec<(String, bool, ItemOf)> = vec![
        (
            LOST.into(),
            lost > 0,
            Box::new(move |phase| Item::Lost { phase, lost }),
        ),
        (
            STALE.into(),
            stale > above,
            Box::new(move |phase| Item::Stale {
                phase,
                count: stale,
                above,
                stale_after_secs,
            }),
        ),
        (
            REVIEW_AGE.into(),
            old > 0,
            Box::new(move |phase| Item::ReviewAge {
                phase,
                count: old,
                older_than_secs,
                oldest,
            }),
        ),
        spool_condition(facts.spooled, rules.spool_older_than, now),
    ];
    for c in &facts.connectors {
        let (connector, since) = (c.name.clone(), c.since);
        let by_hand = c.by_hand.then(|| HandPause {
            by: c.changed_by.clone(),
            reason: c.reason.clone().unwrap_or_default(),
        });
        current.push((
            format!("{CONNECTOR_PREFIX}{}", c.name),
            c.paused,
            Box::new(move |phase| Item::Connector {
                connector: connector.clone(),
                phase,
                since,
                by_hand: by_hand.clone(),
            }),
        ));
    }
    for f in &facts.feeds {
        let (subscriber, reason) = (f.id, f.disabled_reason.clone());
        current.push((
            format!("{FEED_PREFIX}{}", f.id),
            f.state == "disabled",
            Box::new(move |phase| Item::FeedSubscriber {
                subscriber,
                phase,
                reason: reason.clone(),
            }),
        ));
    }
    let mut conditions = Vec::new();
    for (key, firing, item) in current {
        let announced = turn.conditions.iter().find(|c| c.key == key);
        if let Some(phase) = step(announced, firing, now, rules.repeat) {
            digest.items.push(item(phase));
            conditions.push((key, firing));
        }
    }
    if digest.cases.is_none() && digest.items.is_empty() {
        return None;
    }
    let body = serde_json::to_string(&digest).expect("a digest serializes");
    Some((
        digest,
        PendingAlert {
            body,
            cursor,
            conditions,
        },
    ))
}

/// One channel's loop.
pub struct Alerter {
    pub store: Arc<dyn store::Alerts>,
    pub channel: Channel,
    pub rules: Rules,
    pub poll_interval: Duration,
    /// One call's limit (the HTTP client cuts it there too).
    pub timeout: Duration,
    /// Holds the turn (`serve:<host>:<pid>`).
    pub owner: String,
}

/// What one pass did (for tests and logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pass {
    /// Another process holds the turn.
    NotOurTurn,
    /// The rate or a retry time holds the next message back.
    Waiting,
    Nothing,
    Sent(Sent),
}

impl Alerter {
    pub async fn run(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let name = self.channel.name.clone();
        poll_loop("alerts", &name, self.poll_interval, shutdown, || {
            self.pass()
        })
        .await
    }

    fn lease_for(&self) -> Duration {
        self.timeout + LEASE_MARGIN
    }

    /// One look at the figures, and at most one message.
    pub async fn pass(&self) -> store::Result<Pass> {
        let name = self.channel.name.as_str();
        let now = self.store.now();
        let Some(turn) = self
            .store
            .alert_turn(name, &self.owner, self.lease_for(), now)
            .await?
        else {
            return Ok(Pass::NotOurTurn);
        };
        let token = turn.token.clone();
        let result = self.with_turn(&turn, now).await;
        if !matches!(result, Ok(Pass::Sent(_))) {
            // Sent passes gave the turn back with their outcome.
            if let Err(e) = self.store.alert_release(name, &token).await {
                tracing::warn!(channel = name, error = %e, "giving the alert turn back failed");
            }
        }
        result
    }

    async fn with_turn(&self, turn: &AlertTurn, now: DateTime<Utc>) -> store::Result<Pass> {
        let name = self.channel.name.as_str();
        if send_gate(&self.rules, turn, now).is_some() {
            return Ok(Pass::Waiting);
        }
        let (digest, new_pending) = match &turn.pending {
            Some(p) => match serde_json::from_str::<Digest>(&p.body) {
                Ok(d) => (d, None),
                Err(_) => {
                    tracing::error!(
                        channel = name,
                        "the pending alert is unreadable (written by another version?); dropped"
                    );
                    self.done(&turn.token, AlertOutcome::Dropped).await?;
                    return Ok(Pass::Sent(Sent::Refused {
                        error: "unreadable".into(),
                    }));
                }
            },
            None => {
                let facts = self
                    .store
                    .alert_facts(
                        turn.case_cursor,
                        store::before(now, self.rules.settle),
                        store::before(now, self.rules.stale_after),
                        store::before(now, self.rules.review_older_than),
                    )
                    .await?;
                match compose(&self.rules, turn, &facts, now) {
                    None => return Ok(Pass::Nothing),
                    Some((d, p)) => (d, Some(p)),
                }
            }
        };
        match self
            .store
            .alert_arm(
                name,
                &turn.token,
                new_pending.as_ref(),
                self.lease_for(),
                self.store.now(),
            )
            .await
        {
            Err(StoreError::LeaseLost(_)) => return Ok(Pass::NotOurTurn),
            other => other?,
        }
        let sent = match tokio::time::timeout(self.timeout, self.channel.send(&digest)).await {
            Ok(sent) => sent,
            Err(_) => Sent::Retry {
                after: None,
                error: "the channel did not answer in time".into(),
            },
        };
        let outcome = match &sent {
            Sent::Accepted => {
                tracing::info!(channel = name, "alert sent");
                AlertOutcome::Accepted
            }
            Sent::Refused { error } => {
                tracing::error!(channel = name, %error,
                    "the channel refused the alert for good; it is dropped (check the channel's settings)");
                AlertOutcome::Dropped
            }
            Sent::Retry { after, error } => {
                let wait = after.unwrap_or_else(|| self.rules.backoff(turn.failures));
                tracing::warn!(channel = name, %error, retry_in = ?wait, failures = turn.failures + 1,
                    "the alert was not accepted; sent again later");
                AlertOutcome::Retry {
                    at: plus(self.store.now(), wait),
                }
            }
        };
        self.done(&turn.token, outcome).await?;
        Ok(Pass::Sent(sent))
    }

    /// Records the outcome, through transient database errors (a message the channel
    /// accepted and the store forgot would go out again).
    async fn done(&self, token: &str, outcome: AlertOutcome) -> store::Result<()> {
        through_transient(|| {
            self.store
                .alert_done(&self.channel.name, token, outcome, self.store.now())
        })
        .await
    }
}

/// The alert loops of `config` (one per channel), with their `env:` secrets read.
pub fn alerters(
    store: &Arc<dyn store::Alerts>,
    config: &AlertsConfig,
    stale_after: Duration,
    owner: &str,
) -> Result<Vec<Arc<Alerter>>, String> {
    config
        .channels
        .iter()
        .map(|c| {
            Ok(Arc::new(Alerter {
                store: Arc::clone(store),
                channel: Channel::new(c, config.timeout, |k| std::env::var(k).ok())?,
                rules: Rules::new(config, stale_after),
                poll_interval: config.poll_interval,
                timeout: config.timeout,
                owner: owner.to_owned(),
            }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{AlertCondition, Connector, NewCaseCount};
    use chrono::TimeDelta;

    fn t(secs: i64) -> DateTime<Utc> {
        "2026-03-01T10:00:00Z".parse::<DateTime<Utc>>().unwrap() + TimeDelta::seconds(secs)
    }

    fn rules() -> Rules {
        Rules {
            interval: Duration::from_secs(60),
            settle: Duration::from_secs(5),
            stale_above: 2,
            stale_after: Duration::from_secs(120),
            review_older_than: Duration::from_secs(3600),
            spool_older_than: Duration::from_secs(300),
            repeat: Duration::from_secs(3600),
            max_per_minute: 3,
            min_spacing: Duration::from_secs(1),
            retry_delay: Duration::from_secs(1),
            max_retry_delay: Duration::from_secs(30),
        }
    }

    fn turn() -> AlertTurn {
        AlertTurn {
            token: "x".into(),
            lease_until: t(100),
            case_cursor: 0,
            last_group_at: None,
            recent_sends: vec![],
            pending: None,
            failures: 0,
            next_try_at: None,
            conditions: vec![],
        }
    }

    fn cases(first_at: DateTime<Utc>) -> AlertFacts {
        AlertFacts {
            new_cases: vec![
                NewCaseCount {
                    reason: "payload_conflict".into(),
                    source: "site".into(),
                    count: 20,
                },
                NewCaseCount {
                    reason: "late_duplicate".into(),
                    source: "site".into(),
                    count: 5,
                },
                NewCaseCount {
                    reason: "payload_conflict".into(),
                    source: "chat".into(),
                    count: 5,
                },
            ],
            new_case_ids: (11..=20).collect(),
            new_cases_max_id: Some(40),
            new_cases_first_at: Some(first_at),
            ..AlertFacts::default()
        }
    }

    #[test]
    fn new_cases_wait_for_the_window_then_go_as_one_group() {
        let r = rules();
        assert!(compose(&r, &turn(), &cases(t(0)), t(59)).is_none());
        let (d, p) = compose(&r, &turn(), &cases(t(0)), t(60)).unwrap();
        let g = d.cases.unwrap();
        assert_eq!(g.total, 30);
        assert_eq!(
            g.by_reason,
            vec![
                ("payload_conflict".into(), 25),
                ("late_duplicate".into(), 5)
            ]
        );
        assert_eq!(g.by_source, vec![("site".into(), 25), ("chat".into(), 5)]);
        assert_eq!(p.cursor, Some(40));
        assert!(p.conditions.is_empty());
        // Within `interval` of the last group, nothing even if the cases are old.
        let mut recent = turn();
        recent.last_group_at = Some(t(30));
        assert!(compose(&r, &recent, &cases(t(0)), t(89)).is_none());
        assert!(compose(&r, &recent, &cases(t(0)), t(90)).is_some());
    }

    #[test]
    fn conditions_fire_once_clear_once_and_repeat_after_the_interval() {
        let r = rules();
        let announced = |firing: bool, at: i64| AlertCondition {
            key: LOST.into(),
            firing,
            since: t(at),
            notified_at: t(at),
        };
        assert_eq!(step(None, true, t(0), r.repeat), Some(Phase::Fired));
        assert_eq!(step(None, false, t(0), r.repeat), None);
        let on = announced(true, 0);
        assert_eq!(step(Some(&on), true, t(3599), r.repeat), None);
        assert_eq!(step(Some(&on), true, t(3600), r.repeat), Some(Phase::Still));
        assert_eq!(
            step(Some(&on), false, t(10), r.repeat),
            Some(Phase::Cleared)
        );
        let off = announced(false, 0);
        assert_eq!(step(Some(&off), false, t(99999), r.repeat), None);
        assert_eq!(step(Some(&off), true, t(1), r.repeat), Some(Phase::Fired));
    }

    #[test]
    fn thresholds_and_connectors_are_composed_from_the_figures() {
        let r = rules();
        let facts = AlertFacts {
            lost: 1,
            stale_in_progress: 2, // not above 2
            old_open_cases: 4,
            oldest_open_case_at: Some(t(-7200)),
            connectors: vec![
                Connector {
                    name: "bitrix24".into(),
                    paused: true,
                    reason: Some("auth".into()),
                    since: t(-5),
                    changed_by: "worker".into(),
                    unreachable_since: None,
                    by_hand: false,
                },
                Connector {
                    name: "n8n".into(),
                    paused: false,
                    reason: None,
                    since: t(-5),
                    changed_by: "x".into(),
                    unreachable_since: None,
                    by_hand: false,
                },
            ],
            ..AlertFacts::default()
        };
        let (d, p) = compose(&r, &turn(), &facts, t(0)).unwrap();
        assert!(d.cases.is_none());
        assert_eq!(p.cursor, None);
        assert_eq!(
            p.conditions,
            vec![
                (LOST.to_owned(), true),
                (REVIEW_AGE.to_owned(), true),
                ("connector:bitrix24".to_owned(), true)
            ]
        );
        assert_eq!(
            d.items,
            vec![
                Item::Lost {
                    phase: Phase::Fired,
                    lost: 1
                },
                Item::ReviewAge {
                    phase: Phase::Fired,
                    count: 4,
                    older_than_secs: 3600,
                    oldest: Some(t(-7200))
                },
                Item::Connector {
                    connector: "bitrix24".into(),
                    phase: Phase::Fired,
                    since: t(-5),
                    by_hand: None,
                },
            ]
        );
        // Once announced, the same figures say nothing.
        let mut told = turn();
        told.conditions = p
            .conditions
            .iter()
            .map(|(key, firing)| AlertCondition {
                key: key.clone(),
                firing: *firing,
                since: t(0),
                notified_at: t(0),
            })
            .collect();
        assert!(compose(&r, &told, &facts, t(10)).is_none());
        // Above the stale threshold: that alone.
        let more = AlertFacts {
            stale_in_progress: 3,
            ..facts.clone()
        };
        let (d, _) = compose(&r, &told, &more, t(10)).unwrap();
        assert!(matches!(
            d.items[..],
            [Item::Stale {
                phase: Phase::Fired,
                count: 3,
                above: 2,
                ..
            }]
        ));
    }

    #[test]
    fn deliveries_spooled_longer_than_the_threshold_fire_and_a_drained_spool_clears() {
        let r = rules();
        let spooled = |records, oldest: i64| AlertFacts {
            spooled: store::Spooled {
                records,
                oldest: Some(t(oldest)),
            },
            ..AlertFacts::default()
        };
        // Spooled for 299 s of a 300 s threshold: nothing yet.
        assert!(compose(&r, &turn(), &spooled(7, -299), t(0)).is_none());
        let (d, p) = compose(&r, &turn(), &spooled(7, -300), t(0)).unwrap();
        assert_eq!(p.conditions, vec![(SPOOL.to_owned(), true)]);
        assert_eq!(
            d.items,
            vec![Item::Spooled {
                phase: Phase::Fired,
                count: 7,
                since: Some(t(-300)),
                older_than_secs: 300,
            }]
        );
        let mut told = turn();
        told.conditions = vec![AlertCondition {
            key: SPOOL.into(),
            firing: true,
            since: t(0),
            notified_at: t(0),
        }];
        assert!(compose(&r, &told, &spooled(3, -400), t(10)).is_none());
        let (d, p) = compose(&r, &told, &AlertFacts::default(), t(20)).unwrap();
        assert_eq!(p.conditions, vec![(SPOOL.to_owned(), false)]);
        assert!(matches!(
            d.items[..],
            [Item::Spooled {
                phase: Phase::Cleared,
                ..
            }]
        ));
    }

    #[test]
    fn the_gate_keeps_the_spacing_the_cap_and_the_retry_time() {
        let r = rules();
        let mut tr = turn();
        assert_eq!(send_gate(&r, &tr, t(0)), None);
        tr.recent_sends = vec![t(0)];
        assert_eq!(send_gate(&r, &tr, t(0)), Some(t(1)));
        assert_eq!(send_gate(&r, &tr, t(1)), None);
        tr.recent_sends = vec![t(0), t(10), t(20)];
        assert_eq!(send_gate(&r, &tr, t(30)), Some(t(60)), "3 a minute");
        assert_eq!(send_gate(&r, &tr, t(60)), None);
        tr.recent_sends = vec![];
        tr.next_try_at = Some(t(5));
        assert_eq!(send_gate(&r, &tr, t(0)), Some(t(5)));
        assert_eq!(send_gate(&r, &tr, t(5)), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let r = rules();
        let waits: Vec<u64> = (0..7).map(|f| r.backoff(f).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(r.backoff(1000), Duration::from_secs(30));
    }
}
