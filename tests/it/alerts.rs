//! Team alerts (src/alerts): a real gateway against the fake Telegram Bot API and the fake
//! webhook over real HTTP — grouping, a paused connector, each threshold, retries after
//! failures and outages, Telegram's `retry_after`, restarts, the rate limit, no personal
//! data, several gateways on one PostgreSQL database — and the store's part on both
//! backends.

use std::time::{Duration, Instant};

use leadgate::config::Config;
use leadgate::store::{AlertOutcome, PendingAlert, StoreError};
use leadgate_fakes::bitrix24::{FakeBitrix24, Fault as CrmFault};
use leadgate_fakes::telegram::{self, FakeTelegram, Fault as TgFault};
use leadgate_fakes::webhook::{FakeWebhook, Fault as HookFault};
use leadgate_testkit::gateway::*;
use leadgate_testkit::{each_backend, Backend, TestDb};
use reqwest::StatusCode;
use serde_json::{json, Value};

const CHAT: i64 = -1001234;

struct Fakes {
    tg: FakeTelegram,
    hook: FakeWebhook,
}

impl Fakes {
    async fn new() -> Fakes {
        Fakes::with_telegram(telegram::FakeConfig::default()).await
    }

    async fn with_telegram(config: telegram::FakeConfig) -> Fakes {
        Fakes {
            tg: FakeTelegram::spawn_with("127.0.0.1:0".parse().unwrap(), config)
                .await
                .unwrap(),
            hook: FakeWebhook::spawn("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap(),
        }
    }

    fn texts(&self) -> Vec<String> {
        self.tg.messages().into_iter().map(|m| m.text).collect()
    }

    fn hook_texts(&self) -> Vec<String> {
        self.hook
            .bodies()
            .into_iter()
            .map(|b| b["text"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// `[alerts]` for both fakes: fast test settings, with `overrides` replacing them.
    fn toml(&self, overrides: &[(&str, &str)]) -> String {
        let mut settings = vec![
            ("interval", "\"1500ms\""),
            ("poll_interval", "\"50ms\""),
            ("settle", "\"200ms\""),
            ("min_spacing", "\"100ms\""),
            ("timeout", "\"1s\""),
            ("retry_delay", "\"200ms\""),
            ("max_retry_delay", "\"1s\""),
            ("review_older_than", "\"1h\""),
        ];
        for (k, v) in overrides {
            settings.retain(|(key, _)| key != k);
            settings.push((k, v));
        }
        let mut t = String::from("[alerts]\n");
        for (k, v) in settings {
            t.push_str(&format!("{k} = {v}\n"));
        }
        t.push_str(&format!(
            "[[alerts.channel]]\nkind = \"telegram\"\nname = \"team\"\nchat_id = {CHAT}\n\
             token = \"{}\"\napi_base = \"{}\"\n\
             [[alerts.channel]]\nkind = \"webhook\"\nname = \"slack\"\nurl = \"{}\"\nblocks = true\n",
            self.tg.token(),
            self.tg.api_base(),
            self.hook.url()
        ));
        t
    }

    async fn gateway(&self, db: &TestDb, overrides: &[(&str, &str)], extra: &str) -> Gateway {
        Gateway::start_extended(db, &format!("{extra}\n{}", self.toml(overrides))).await
    }
}

/// Waits for `cond`: `secs` is what the settings need, and the deadline is generous
/// beyond it (at least a minute), so that a busy machine is only slower, never failing.
async fn wait_until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs.max(60));
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A lead of `site` whose second delivery with other data opens a payload conflict.
async fn conflict<F>(gw: &Gateway<F>, key: &str, body: Value) {
    let (status, answer, _) = gw.post_json("site", &body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let mut changed = body.clone();
    changed["comment"] = json!("changed");
    let (status, answer, _) = gw.post_json("site", &changed).await;
    assert_eq!(
        (status, answer["outcome"].as_str()),
        (StatusCode::ACCEPTED, Some("conflict")),
        "{key}: {answer}"
    );
}

/// A lead whose own event time is long past (a late duplicate): it opens a case at once.
async fn late<F>(gw: &Gateway<F>, mut body: Value) {
    body["created_at"] = json!("2020-01-01T00:00:00Z");
    let (status, answer, _) = gw.post_json("site", &body).await;
    assert!(status.is_success(), "{status} {answer}");
}

/// The review cases `texts` announce: the sum of their "N new review case(s)" headlines.
fn announced_cases(texts: &[String]) -> i64 {
    texts
        .iter()
        .flat_map(|t| t.split("Leadgate: ").skip(1))
        .filter_map(|rest| {
            let (n, tail) = rest.split_once(' ')?;
            if tail.starts_with("new review case") {
                n.parse::<i64>().ok()
            } else {
                None
            }
        })
        .sum()
}

fn count(texts: &[String], needle: &str) -> usize {
    texts.iter().filter(|t| t.contains(needle)).count()
}

each_backend!(
    thirty_new_cases_make_one_message_per_channel,
    |db| async move {
        let f = Fakes::new().await;
        // The window is long enough for the thirty to arrive on a loaded machine (6 s
        // was not always: posting 50 deliveries beside a full test run can take longer).
        let gw = f.gateway(&db, &[("interval", "\"15s\"")], "").await;
        for i in 0..20 {
            conflict(&gw, &format!("c{i}"), lead(&format!("c{i}"))).await;
        }
        for i in 0..10 {
            late(&gw, lead(&format!("l{i}"))).await;
        }
        wait_until("the group", 45, || {
            !f.texts().is_empty() && !f.hook.bodies().is_empty()
        })
        .await;
        // Nothing more comes: one message for the thirty.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let texts = f.texts();
        assert_eq!(texts.len(), 1, "{texts:#?}");
        let text = &texts[0];
        assert!(
            text.starts_with("<b>Leadgate: 30 new review cases</b>\n"),
            "{text}"
        );
        assert!(
            text.contains("By reason: payload_conflict 20, late_duplicate 10"),
            "{text}"
        );
        assert!(text.contains("By source: site 30"), "{text}");
        assert!(text.contains("and 20 more"), "{text}");
        let m = &f.tg.messages()[0];
        assert_eq!(
            (m.chat_id.clone(), m.parse_mode.as_deref()),
            (json!(CHAT), Some("HTML"))
        );
        let bodies = f.hook.bodies();
        assert_eq!(bodies.len(), 1, "{bodies:#?}");
        assert!(bodies[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Leadgate: 30 new review cases\n"));
        assert_eq!(bodies[0]["blocks"][0]["type"], "section");
        gw.stop().await;
    }
);

each_backend!(
    a_paused_connector_is_announced_with_what_to_do_and_so_is_its_resume,
    |db| async move {
        let f = Fakes::new().await;
        let gw = f.gateway(&db, &[], "").await;
        gw.fake.push_fault(CREATE, CrmFault::ExpiredToken, 1000);
        gw.post_json("site", &lead("p1")).await;
        gw.wait_paused_and_idle("bitrix24").await;
        wait_until("the pause alert", 10, || {
            f.texts().len() == 1 && f.hook.bodies().len() == 1
        })
        .await;
        let text = &f.hook_texts()[0];
        assert!(
            text.starts_with("Leadgate: connector bitrix24 is paused\n"),
            "{text}"
        );
        assert!(
            text.contains("`leadgate connector resume bitrix24`"),
            "{text}"
        );
        assert!(text.contains("Connectors tab"), "{text}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(f.texts().len(), 1, "announced once, not on every check");
        gw.fake.clear_faults();
        let store = gw.store();
        assert!(store
            .resume_connector("bitrix24", "ops", store.now())
            .await
            .unwrap());
        wait_until("the resume alert", 10, || {
            f.texts().len() == 2 && f.hook.bodies().len() == 2
        })
        .await;
        assert!(
            f.hook_texts()[1].starts_with("Leadgate: connector bitrix24 resumed"),
            "{:?}",
            f.hook_texts()
        );
        assert!(f.texts()[1].starts_with("<b>Leadgate: connector bitrix24 resumed</b>"));
        gw.stop().await;
    }
);

each_backend!(
    review_cases_older_than_t_fire_once_clear_and_fire_again,
    |db| async move {
        let f = Fakes::new().await;
        let gw = f
            .gateway(
                &db,
                &[("review_older_than", "\"1s\""), ("interval", "\"1h\"")],
                "",
            )
            .await;
        let store = gw.store();
        conflict(&gw, "old1", lead("old1")).await;
        let age = "open review case older than 1s";
        wait_until("the age alert", 10, || count(&f.texts(), age) == 1).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(
            count(&f.texts(), age),
            1,
            "not on every check: {:?}",
            f.texts()
        );
        let case = store
            .review_cases(&Default::default(), Default::default())
            .await
            .unwrap()
            .remove(0);
        store
            .resolve(leadgate::store::Resolve {
                case_id: case.id,
                expected_version: case.version,
                actor: "ops".into(),
                comment: None,
                action: leadgate::store::HumanAction::KeepOriginal,
                now: store.now(),
                bulk: None,
            })
            .await
            .unwrap();
        let cleared = "no open review case is older than 1s any more";
        wait_until("the clear", 10, || count(&f.texts(), cleared) == 1).await;
        conflict(&gw, "old2", lead("old2")).await;
        // Each channel has a loop of its own: wait for both.
        wait_until("the age alert again", 10, || {
            count(&f.texts(), age) == 2 && count(&f.hook_texts(), age) == 2
        })
        .await;
        assert_eq!(count(&f.hook_texts(), cleared), 1);
        gw.stop().await;
    }
);

/// Writes a journal entry behind the store's back whose operation does not exist: the
/// database's own check counts it as lost.
async fn lose_a_lead(db: &TestDb) {
    let sql =
        "insert into deliveries (source, operation_id, received_at, outcome, transform_version) \
               values ('site', 'site:ghost', '2026-01-01T00:00:00Z', 'new', 1)";
    match db.backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            sqlx::query(&sql.replace("'2026-01-01T00:00:00Z'", "now()"))
                .execute(&pool)
                .await
                .unwrap();
        }
    }
}

each_backend!(
    lost_above_zero_fires_and_repeats_only_after_the_repeat_interval,
    |db| async move {
        let f = Fakes::new().await;
        let gw = f.gateway(&db, &[("repeat", "\"2s\"")], "").await;
        lose_a_lead(&db).await;
        wait_until("the lost alert", 10, || {
            count(&f.texts(), "Leadgate: lost = 1") == 1
        })
        .await;
        wait_until("the repeat", 10, || {
            count(&f.texts(), "lost = 1 (still)") == 1
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        // Judged by when the fake received each message, not by when this test, on a
        // busy machine, got to look: every message of the condition came at least the
        // repeat interval (2 s) after the one before.
        let lost: Vec<u64> =
            f.tg.messages()
                .into_iter()
                .filter(|m| m.text.contains("Leadgate: lost = 1"))
                .map(|m| m.at_ms)
                .collect();
        assert!(lost.len() >= 2, "{:?}", f.texts());
        for pair in lost.windows(2) {
            assert!(pair[1] - pair[0] >= 1900, "repeated too soon: {lost:?}");
        }
        gw.stop().await;
    }
);

each_backend!(
    stale_in_progress_above_n_fires_and_clears,
    |db| async move {
        // A worker that claimed two leads and hung (its lease is long): nobody takes them over.
        let store = db.store().await;
        let mut leases = Vec::new();
        for key in ["s1", "s2"] {
            store
                .record_delivery(leadgate_testkit::seed::delivery(key, lead(key)))
                .await
                .unwrap();
            let claim = store
                .claim_due(
                    "bitrix24",
                    "worker:hung",
                    Duration::from_secs(3600),
                    store.now(),
                )
                .await
                .unwrap()
                .unwrap();
            leases.push(claim.lease);
        }
        let f = Fakes::new().await;
        let gw = f
            .gateway(
                &db,
                &[("stale_above", "1")],
                "[review]\nstale_after = \"1s\"\n",
            )
            .await;
        let fired = "Leadgate: 2 operations stale in_progress";
        wait_until("the stale alert", 10, || count(&f.texts(), fired) == 1).await;
        assert!(
            f.texts()[0].contains("threshold: more than 1"),
            "{:?}",
            f.texts()
        );
        // One of them answers: 1 is not above 1.
        store
            .finish_attempt(
                &leases[0],
                leadgate::store::AttemptOutcome::Created {
                    crm_id: "77".into(),
                },
                vec![],
                store.now(),
            )
            .await
            .unwrap();
        let cleared = "stale in_progress is back to 1 or fewer";
        wait_until("the clear", 10, || count(&f.texts(), cleared) == 1).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(f.texts().len(), 2, "{:?}", f.texts());
        gw.stop().await;
    }
);

each_backend!(
    a_failing_channel_gets_the_same_message_once_it_is_back,
    |db| async move {
        let f = Fakes::new().await;
        // The webhook fails three times, then is slow past the timeout once.
        f.hook.push_fault(
            HookFault::Fail {
                status: 503,
                retry_after_secs: None,
            },
            3,
        );
        f.hook.push_fault(HookFault::LatencyMs { ms: 1500 }, 1);
        f.tg.go_down();
        let gw = f.gateway(&db, &[], "").await;
        for i in 0..3 {
            conflict(&gw, &format!("f{i}"), lead(&format!("f{i}"))).await;
        }
        wait_until("the webhook's tries", 20, || f.hook.bodies().len() == 1).await;
        assert_eq!(f.hook.calls(), 5, "3 failures, 1 too slow, 1 accepted");
        // Telegram is down meanwhile; the message waits, retried with backoff.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(f.texts().is_empty());
        f.tg.come_back().await.unwrap();
        wait_until("telegram after the outage", 10, || f.texts().len() == 1).await;
        tokio::time::sleep(Duration::from_millis(2000)).await;
        assert_eq!(f.texts().len(), 1, "{:?}", f.texts());
        assert_eq!(f.hook.bodies().len(), 1);
        assert!(f.texts()[0].contains("3 new review cases"));
        assert!(f.hook_texts()[0].contains("3 new review cases"));
        gw.stop().await;
    }
);

each_backend!(telegram_429_retry_after_is_honoured, |db| async move {
    let f = Fakes::new().await;
    // Longer than the channel's own longest backoff (`max_retry_delay`, 1 s): a wait of
    // more than that can only be Telegram's.
    f.tg.push_fault(TgFault::TooManyRequests { retry_after: 3 }, 1);
    let gw = f.gateway(&db, &[], "").await;
    lose_a_lead(&db).await;
    wait_until("the refused call", 10, || f.tg.calls() == 1).await;
    // Seen after the refusal came (the test may look late on a busy machine, which only
    // shortens what it measures): the wait that follows is at least this long.
    let refused = Instant::now();
    wait_until("the message", 10, || f.texts().len() == 1).await;
    let waited = refused.elapsed();
    assert!(
        waited > Duration::from_secs(1),
        "retry_after 3 s, longer than any backoff of the channel's own; waited {waited:?}"
    );
    // Nothing was tried in between: the second call carried the message.
    assert_eq!(f.tg.calls(), 2);
    gw.stop().await;
});

each_backend!(
    a_restart_neither_loses_nor_repeats_a_group,
    |db| async move {
        let f = Fakes::new().await;
        let mut gw = f.gateway(&db, &[], "").await;
        conflict(&gw, "r1", lead("r1")).await;
        wait_until("the first group", 10, || f.texts().len() == 1).await;
        gw.restart().await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(
            f.texts().len(),
            1,
            "not repeated after a restart: {:?}",
            f.texts()
        );
        // A message pending when the gateway stops is the one sent after it starts again.
        f.tg.go_down();
        conflict(&gw, "r2", lead("r2")).await;
        conflict(&gw, "r3", lead("r3")).await;
        wait_until("the webhook's second group", 10, || {
            f.hook.bodies().len() == 2
        })
        .await;
        let pending = f.hook_texts()[1].clone();
        gw.running.take().unwrap().stop().await;
        f.tg.come_back().await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            f.texts().len(),
            1,
            "nobody sends while the gateway is stopped"
        );
        let gw = Gateway::start_with(gw.fake, gw.config).await;
        wait_until("the pending group", 10, || f.texts().len() == 2).await;
        tokio::time::sleep(Duration::from_millis(2000)).await;
        let texts = f.texts();
        assert_eq!(texts.len(), 2, "{texts:?}");
        assert!(texts[1].contains("2 new review cases"), "{texts:?}");
        assert!(pending.contains("2 new review cases"));
        assert_eq!(f.hook.bodies().len(), 2);
        gw.stop().await;
    }
);

each_backend!(the_rate_limit_holds_per_channel, |db| async move {
    // The fake enforces Telegram's flood limits: nothing may be refused.
    let f = Fakes::with_telegram(telegram::FakeConfig {
        enforce_limits: true,
        ..Default::default()
    })
    .await;
    let gw = f
        .gateway(
            &db,
            &[("max_per_minute", "3"), ("min_spacing", "\"1s\"")],
            "",
        )
        .await;
    let store = gw.store();
    // Twelve connectors paused one after another, 250 ms apart.
    for i in 0..12 {
        store
            .pause_connector(&format!("x{i}"), "test", "ops", store.now())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let messages = f.tg.messages();
    assert_eq!(messages.len(), 3, "the cap: 3 a minute: {messages:#?}");
    for pair in messages.windows(2) {
        assert!(
            pair[1].at_ms - pair[0].at_ms >= 950,
            "spacing: {messages:#?}"
        );
    }
    let announced = messages
        .iter()
        .map(|m| m.text.matches(" is paused").count())
        .sum::<usize>();
    assert!(
        (3..12).contains(&announced),
        "grouped into the messages the cap allows, the rest waits: {announced}"
    );
    assert_eq!(f.tg.refused(), 0, "Telegram's limits were kept");
    assert_eq!(f.hook.bodies().len(), 3, "per channel");
    gw.stop().await;
});

each_backend!(no_personal_data_reaches_any_message, |db| async move {
    let f = Fakes::new().await;
    let gw = f.gateway(&db, &[("review_older_than", "\"1s\"")], "").await;
    let person = |key: &str| {
        json!({"submission_id": key, "name": "Zebediah Quartermaine",
               "phone": "+7 912 345-67-89", "email": "zebediah.q@example.org",
               "comment": "call me at +79123456789", "sent_at": "2026-01-01T00:00:00Z"})
    };
    // Keys carry the phone too, as keys sometimes do.
    conflict(&gw, "zq-79123456789", person("zq-79123456789")).await;
    late(&gw, person("zq-late-79123456789")).await;
    gw.fake.push_fault(CREATE, CrmFault::ExpiredToken, 1000);
    gw.post_json("site", &person("zq-pause-79123456789")).await;
    lose_a_lead(&db).await;
    // Both channels: each has a loop of its own, and the webhook's may come later.
    wait_until("every kind of alert", 15, || {
        let t = f.texts().join("\n");
        t.contains("new review case")
            && t.contains("is paused")
            && t.contains("lost = 1")
            && t.contains("older than 1s")
            && f.hook.bodies().len() >= 2
    })
    .await;
    let mut everything: Vec<String> =
        f.tg.messages()
            .iter()
            .map(|m| serde_json::to_string(m).unwrap())
            .collect();
    everything.extend(f.hook.bodies().iter().map(Value::to_string));
    assert!(f.hook.bodies().len() >= 2);
    for text in &everything {
        for pii in [
            "Zebediah",
            "Quartermaine",
            "zebediah.q@example.org",
            "example.org",
            "912 345",
            "9123456789",
            "zq-",
            "site:zq",
            "call me",
        ] {
            assert!(!text.contains(pii), "{pii:?} reached a message: {text}");
        }
    }
    gw.stop().await;
});

each_backend!(
    a_channel_that_refuses_a_message_for_good_is_not_asked_again,
    |db| async move {
        let f = Fakes::new().await;
        f.tg.push_fault(
            TgFault::BadRequest {
                description: "Bad Request: chat not found".into(),
            },
            1,
        );
        let gw = f.gateway(&db, &[], "").await;
        lose_a_lead(&db).await;
        wait_until("the refused call", 10, || f.tg.calls() == 1).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(f.tg.calls(), 1, "a 400 is permanent for that message");
        assert!(f.texts().is_empty());
        assert_eq!(
            count(&f.hook_texts(), "lost = 1"),
            1,
            "the other channel is not held back"
        );
        gw.stop().await;
    }
);

/// Two gateways (two stores, two alert loops per channel) on one PostgreSQL database.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_on_postgres_send_each_alert_once() {
    leadgate_testkit::run(Backend::Postgres, |db| async move {
        let f = Fakes::new().await;
        let toml = |fake: &FakeBitrix24| {
            let alerts = f.toml(&[("interval", "\"6s\"")]);
            format!("{}\n{alerts}", config_toml(&db.url, &fake.webhook_url()))
        };
        let fake1 = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let fake2 = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let (c1, c2) = (
            Config::parse(&toml(&fake1)).unwrap(),
            Config::parse(&toml(&fake2)).unwrap(),
        );
        let gw1 = Gateway::start_with(fake1, c1).await;
        let gw2 = Gateway::start_with(fake2, c2).await;
        for i in 0..12 {
            let gw = if i % 2 == 0 { &gw1 } else { &gw2 };
            conflict(gw, &format!("two{i}"), lead(&format!("two{i}"))).await;
        }
        let store = gw1.store();
        store
            .pause_connector("shared", "test", "ops", store.now())
            .await
            .unwrap();
        // Twelve cases announced, in one message or (when the conflicts took longer
        // than the 6 s interval to arrive, on a busy machine) in more.
        wait_until("the alerts", 30, || {
            announced_cases(&f.texts()) == 12
                && announced_cases(&f.hook_texts()) == 12
                && count(&f.texts(), "connector shared is paused") == 1
        })
        .await;
        tokio::time::sleep(Duration::from_millis(3000)).await;
        // Each once, though two gateways share the channels.
        let texts = f.texts();
        assert_eq!(announced_cases(&texts), 12, "{texts:#?}");
        assert_eq!(count(&texts, "connector shared is paused"), 1, "{texts:#?}");
        let hook = f.hook_texts();
        assert_eq!(announced_cases(&hook), 12, "{hook:#?}");
        assert_eq!(count(&hook, "connector shared is paused"), 1, "{hook:#?}");
        gw1.stop().await;
        gw2.stop().await;
    })
    .await;
}

// The store's part, on both backends.

fn pending(body: &str, cursor: Option<i64>, conditions: &[(&str, bool)]) -> PendingAlert {
    PendingAlert {
        body: body.into(),
        cursor,
        conditions: conditions
            .iter()
            .map(|(k, f)| ((*k).to_owned(), *f))
            .collect(),
    }
}

each_backend!(
    an_alert_turn_is_exclusive_and_only_an_accepted_message_advances,
    |db| async move {
        let store = db.store().await;
        let now = store.now();
        let lease = Duration::from_secs(5);
        let a = store
            .alert_turn("team", "a", lease, now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((a.case_cursor, a.pending.clone(), a.failures), (0, None, 0));
        assert!(
            store
                .alert_turn("team", "b", lease, now)
                .await
                .unwrap()
                .is_none(),
            "held"
        );
        assert!(
            store
                .alert_turn("other", "b", lease, now)
                .await
                .unwrap()
                .is_some(),
            "per channel"
        );
        let p = pending("{\"items\":[]}", Some(7), &[("lost", true)]);
        store
            .alert_arm("team", &a.token, Some(&p), lease, now)
            .await
            .unwrap();
        let retry_at = now + chrono::TimeDelta::seconds(3);
        store
            .alert_done("team", &a.token, AlertOutcome::Retry { at: retry_at }, now)
            .await
            .unwrap();
        // The message is kept, nothing is advanced yet.
        let b = store
            .alert_turn("team", "b", lease, now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(b.pending, Some(p.clone()));
        assert_eq!(
            (b.case_cursor, b.failures, b.next_try_at),
            (0, 1, Some(retry_at))
        );
        assert!(b.conditions.is_empty());
        assert!(
            matches!(
                store
                    .alert_done("team", &a.token, AlertOutcome::Accepted, now)
                    .await,
                Err(StoreError::LeaseLost(_))
            ),
            "an old turn records nothing"
        );
        store
            .alert_arm("team", &b.token, None, lease, now)
            .await
            .unwrap();
        store
            .alert_done("team", &b.token, AlertOutcome::Accepted, now)
            .await
            .unwrap();
        let c = store
            .alert_turn("team", "c", lease, now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((c.case_cursor, c.pending.clone(), c.failures), (7, None, 0));
        assert_eq!(c.last_group_at, Some(now));
        assert_eq!(c.recent_sends.len(), 1);
        assert_eq!(
            c.conditions
                .iter()
                .map(|x| (x.key.as_str(), x.firing))
                .collect::<Vec<_>>(),
            vec![("lost", true)]
        );
        // A turn that ran out may be taken; its holder can no longer arm a message.
        let later = now + chrono::TimeDelta::seconds(6);
        let d = store
            .alert_turn("team", "d", lease, later)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(
            store
                .alert_arm("team", &c.token, Some(&p), lease, later)
                .await,
            Err(StoreError::LeaseLost(_))
        ));
        // Dropped (refused for good) advances too, but counts as no send.
        let q = pending("{}", None, &[("lost", false)]);
        store
            .alert_arm("team", &d.token, Some(&q), lease, later)
            .await
            .unwrap();
        store
            .alert_done("team", &d.token, AlertOutcome::Dropped, later)
            .await
            .unwrap();
        let e = store
            .alert_turn("team", "e", lease, later)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((e.case_cursor, e.last_group_at), (7, Some(now)));
        assert_eq!(e.recent_sends.len(), 1);
        assert!(!e.conditions[0].firing);
        store.alert_release("team", &e.token).await.unwrap();
        assert!(store
            .alert_turn("team", "f", lease, later)
            .await
            .unwrap()
            .is_some());
    }
);

each_backend!(
    alert_facts_group_new_cases_after_the_cursor,
    |db| async move {
        let store = db.store().await;
        let first = store
            .alert_turn("team", "a", Duration::from_secs(5), store.now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(first.case_cursor, 0);
        for key in ["k1", "k2", "k3"] {
            store
                .record_delivery(leadgate_testkit::seed::delivery(key, json!({"n": 1})))
                .await
                .unwrap();
            store
                .record_delivery(leadgate_testkit::seed::delivery(key, json!({"n": 2})))
                .await
                .unwrap();
        }
        let now = store.now();
        let far = now + chrono::TimeDelta::hours(1);
        let f = store.alert_facts(0, now, now, far).await.unwrap();
        assert_eq!(f.new_cases.len(), 1);
        assert_eq!(
            (
                f.new_cases[0].reason.as_str(),
                f.new_cases[0].source.as_str(),
                f.new_cases[0].count
            ),
            ("payload_conflict", "site", 3)
        );
        assert_eq!(f.new_case_ids.len(), 3);
        assert_eq!(f.new_cases_max_id, f.new_case_ids.last().copied());
        assert_eq!(f.old_open_cases, 3, "all opened before `far`");
        // Not yet settled: cases opened after `cases_until` are not counted.
        let before = now - chrono::TimeDelta::hours(1);
        assert!(store
            .alert_facts(0, before, now, before)
            .await
            .unwrap()
            .new_cases
            .is_empty());
        // After the cursor: only newer ones.
        let f = store
            .alert_facts(f.new_case_ids[1], now, now, before)
            .await
            .unwrap();
        assert_eq!(f.new_cases[0].count, 1);
        assert_eq!((f.lost, f.stale_in_progress, f.old_open_cases), (0, 0, 0));
        // A channel seen for the first time does not announce cases from before.
        let fresh = store
            .alert_turn("new", "a", Duration::from_secs(5), now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(Some(fresh.case_cursor), f.new_cases_max_id);
    }
);

each_backend!(concurrent_alert_turns_give_one_turn, |db| async move {
    let store = db.store().await;
    for round in 0..5 {
        let channel = format!("c{round}");
        let now = store.now();
        let tries = (0..8).map(|i| {
            let store = std::sync::Arc::clone(&store);
            let channel = channel.clone();
            tokio::spawn(async move {
                store
                    .alert_turn(&channel, &format!("p{i}"), Duration::from_secs(30), now)
                    .await
            })
        });
        let got = futures::future::join_all(tries).await;
        let won = got
            .into_iter()
            .filter(|r| r.as_ref().unwrap().as_ref().unwrap().is_some())
            .count();
        assert_eq!(won, 1, "round {round}");
    }
});

/// PostgreSQL, forced: two turns queue on the channel row's lock held by a third
/// session; when it commits, one gets the turn, the other sees it taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_turns_queued_on_the_row_lock_give_one_turn() {
    use sqlx::Connection;
    leadgate_testkit::run(Backend::Postgres, |db| async move {
        let store = db.store().await;
        let t = store
            .alert_turn("team", "setup", Duration::from_secs(5), store.now())
            .await
            .unwrap()
            .unwrap();
        store.alert_release("team", &t.token).await.unwrap();
        let mut blocker = sqlx::PgConnection::connect(&db.url).await.unwrap();
        sqlx::query("begin").execute(&mut blocker).await.unwrap();
        sqlx::query("select * from alert_channels where channel = 'team' for update")
            .execute(&mut blocker)
            .await
            .unwrap();
        let now = store.now();
        let spawn = |owner: &'static str| {
            let store = std::sync::Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .alert_turn("team", owner, Duration::from_secs(30), now)
                    .await
            })
        };
        let (a, b) = (spawn("a"), spawn("b"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !a.is_finished() && !b.is_finished(),
            "both wait on the row lock"
        );
        sqlx::query("commit").execute(&mut blocker).await.unwrap();
        let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
        assert_eq!(a.is_some() as u8 + b.is_some() as u8, 1, "{a:?} {b:?}");
    })
    .await;
}
