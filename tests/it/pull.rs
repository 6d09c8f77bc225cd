//! Sources over their real protocols, on both backends: Bitrix24's offline-event queue (a
//! fake portal speaking `event.bind` / `event.offline.get` / `event.offline.clear`) and a
//! Telegram bot's updates (a fake Bot API: its webhook deliveries, `getUpdates`), each with
//! a gateway killed with SIGKILL between "recorded" and "acknowledged".

use std::process::Stdio;
use std::time::{Duration, Instant};

use leadgate::config::Config;
use leadgate_fakes::bitrix24::{FakeBitrix24, Fault};
use leadgate_fakes::telegram::{FakeTelegram, Fault as TgFault};
use serde_json::json;

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{config_toml, origin_ids, Gateway, CREATE};
use leadgate_testkit::process::{free_port, wait_healthy, GatewayFile, Process, SiteAuth};

const SOURCE: &str = "b24-offline";

/// The pulled source, on the portal at `webhook`.
fn offline_source(webhook: &str) -> String {
    format!(
        "[[source]]\nname = \"{SOURCE}\"\npreset = \"bitrix24-offline\"\n\
         [source.pull]\nurl = \"{webhook}\"\nevents = [\"ONCRMLEADADD\"]\n\
         every = \"50ms\"\nbatch = 2\ntimeout = \"1s\"\n"
    )
}

async fn until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `(new, duplicate)` deliveries journaled for the pulled source.
async fn journaled(store: &dyn leadgate::store::Store) -> (i64, i64) {
    let m = store
        .metrics(leadgate::store::local_now(), Duration::from_secs(60))
        .await
        .unwrap();
    let n = |outcome: &str| {
        m.deliveries
            .get(&(SOURCE.to_owned(), outcome.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    (n("new"), n("duplicate"))
}

/// Waits (15 s at most) until the operation `id` is completed, read from the database.
async fn wait_completed(store: &dyn leadgate::store::Store, id: &str) {
    let op_id: leadgate::domain::OperationId = id.parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let op = store.operation(&op_id).await.unwrap();
        if op.is_some_and(|o| o.status.as_str() == "completed") {
            return;
        }
        assert!(Instant::now() < deadline, "{id} never completed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn key(id: u64) -> String {
    format!("{SOURCE}:ONCRMLEADADD:{id}")
}

each_backend!(
    bitrix24_offline_events_are_cleared_only_once_recorded,
    |db| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let toml = format!(
            "{}\n{}",
            config_toml(&db.url, &fake.webhook_url()),
            offline_source(&fake.webhook_url())
        );
        let gw = Gateway::start_with(fake, Config::parse(&toml).unwrap()).await;
        until(
            "the event is bound offline",
            Duration::from_secs(10),
            || gw.fake.offline_bound() == ["ONCRMLEADADD"],
        )
        .await;
        // The first clear fails: that batch stays in the queue, is taken again and is
        // absorbed by its keys.
        gw.fake
            .push_fault("event.offline.clear", Fault::ServerError, 1);
        let ids: Vec<u64> = (1..=5)
            .map(|n| {
                gw.fake
                    .raise_offline("ONCRMLEADADD", json!({"FIELDS": {"ID": 100 + n}}))
                    .unwrap()
            })
            .collect();
        until("the queue is drained", Duration::from_secs(10), || {
            gw.fake.offline_queue().is_empty()
        })
        .await;
        for id in &ids {
            gw.wait_status(&key(*id), "completed").await;
        }
        let (new, duplicate) = journaled(gw.store().as_ref()).await;
        assert_eq!(new, 5, "one operation per queued event");
        // The batch whose clear failed (one or two events, as the poller found them)
        // came back once.
        assert!((1..=2).contains(&duplicate), "{duplicate} repeats");
        let mut origins = origin_ids(&gw.fake);
        origins.sort();
        let mut expected: Vec<String> = ids.iter().map(|id| key(*id)).collect();
        expected.sort();
        assert_eq!(origins, expected, "one CRM lead per event, none twice");
        assert_eq!(gw.fake.calls(CREATE), 5);
        // The payload is the queue record as the portal handed it out.
        let op = gw
            .store()
            .operation(&key(ids[0]).parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(op.source, SOURCE);
        // The intake URL of a pulled source takes nothing.
        let res = gw
            .http
            .post(gw.intake_url(SOURCE))
            .json(&json!({"EVENT_NAME": "ONCRMLEADADD", "ID": "999"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 401);
        gw.stop().await;
    }
);

/// Makes the database refuse (or, with `false`, take again) every delivery of the pulled
/// source: an outage of the operations database as the intake sees it.
async fn refuse_deliveries(db: &leadgate_testkit::TestDb, refuse: bool) {
    use leadgate_testkit::Backend;
    let statements: &[&str] = match (db.backend, refuse) {
        (Backend::Sqlite, true) => &["create trigger test_refuse before insert on deliveries \
              when new.source = 'b24-offline' begin select raise(abort, 'database refuses'); end"],
        (Backend::Sqlite, false) => &["drop trigger test_refuse"],
        (Backend::Postgres, true) => &[
            "create function test_refuse() returns trigger language plpgsql as \
             $$ begin raise exception 'database refuses'; end $$",
            "create trigger test_refuse before insert on deliveries for each row \
             when (new.source = 'b24-offline') execute function test_refuse()",
        ],
        (Backend::Postgres, false) => &["drop trigger test_refuse on deliveries"],
    };
    for sql in statements {
        match db.backend {
            Backend::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
                sqlx::query(sql).execute(&pool).await.unwrap();
            }
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
                sqlx::query(sql).execute(&pool).await.unwrap();
            }
        }
    }
}

each_backend!(
    bitrix24_offline_events_wait_in_the_queue_while_the_database_refuses_them,
    |db| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let toml = format!(
            "{}\n{}",
            config_toml(&db.url, &fake.webhook_url()),
            offline_source(&fake.webhook_url())
        );
        let gw = Gateway::start_with(fake, Config::parse(&toml).unwrap()).await;
        until(
            "the event is bound offline",
            Duration::from_secs(10),
            || gw.fake.offline_bound() == ["ONCRMLEADADD"],
        )
        .await;
        refuse_deliveries(&db, true).await;
        let ids: Vec<u64> = (1..=3)
            .map(|n| {
                gw.fake
                    .raise_offline("ONCRMLEADADD", json!({"FIELDS": {"ID": 500 + n}}))
                    .unwrap()
            })
            .collect();
        // The gateway takes the batch again and again, and clears nothing.
        let takes = gw.fake.calls("event.offline.get");
        until(
            "the gateway tried several times",
            Duration::from_secs(10),
            || gw.fake.calls("event.offline.get") >= takes + 4,
        )
        .await;
        assert_eq!(gw.fake.calls("event.offline.clear"), 0);
        assert_eq!(gw.fake.offline_queue().len(), 3, "nothing lost");
        assert_eq!(journaled(gw.store().as_ref()).await, (0, 0));
        // The database is back: every event is recorded once, then cleared.
        refuse_deliveries(&db, false).await;
        until("the queue is drained", Duration::from_secs(10), || {
            gw.fake.offline_queue().is_empty()
        })
        .await;
        for id in &ids {
            gw.wait_status(&key(*id), "completed").await;
        }
        assert_eq!(journaled(gw.store().as_ref()).await.0, 3);
        assert_eq!(gw.fake.calls(CREATE), 3);
        gw.stop().await;
    }
);

each_backend!(
    a_gateway_killed_between_recorded_and_cleared_loses_and_doubles_nothing,
    |db| async move {
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        // The clear is held back long enough for the kill to come first.
        fake.push_fault("event.offline.clear", Fault::LatencyMs { ms: 60_000 }, 1);
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let mut toml = GatewayFile {
            db_url: &db.url,
            webhook_url: &fake.webhook_url(),
            port,
            lease: "4s",
            concurrency: None,
            retry: None,
            read_token: None,
            site: SiteAuth::Token("site-token"),
            crm_timeout: "3s",
            settle: None,
        }
        .toml();
        toml += &offline_source(&fake.webhook_url());
        let config = dir.path().join("leadgate.toml");
        std::fs::write(&config, toml).unwrap();
        let config = config.display().to_string();
        let serve = || {
            Process(
                crate::process::leadgate(&["serve", "--config", &config])
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("spawn leadgate serve"),
            )
        };
        let mut first = serve();
        wait_healthy(&base, Duration::from_secs(20), None).await;
        until(
            "the event is bound offline",
            Duration::from_secs(10),
            || fake.offline_bound() == ["ONCRMLEADADD"],
        )
        .await;
        let ids: Vec<u64> = (1..=2)
            .map(|n| {
                fake.raise_offline("ONCRMLEADADD", json!({"FIELDS": {"ID": n}}))
                    .unwrap()
            })
            .collect();
        until("the gateway asks to clear", Duration::from_secs(10), || {
            fake.calls("event.offline.clear") >= 1
        })
        .await;
        // SIGKILL while the clear is on its way: recorded, never cleared.
        first.kill();
        let store = db.store().await;
        let queue = fake.offline_queue();
        assert_eq!(queue.len(), 2, "nothing was cleared: {queue:?}");
        let mark = store.pull_mark(SOURCE).await.unwrap();
        assert!(
            mark.is_some(),
            "the process id was saved before the batch was taken"
        );
        // The batch the killed gateway took (both events, or the first alone when the
        // second was raised after its take) is hidden under its mark, and all of it
        // was recorded before the clear went out.
        let taken = queue.iter().filter(|r| r.process_id == mark).count() as i64;
        assert!(taken >= 1, "{queue:?}");
        assert_eq!(
            journaled(store.as_ref()).await,
            (taken, 0),
            "recorded first"
        );

        let _second = serve();
        wait_healthy(&base, Duration::from_secs(20), None).await;
        until("the queue is drained", Duration::from_secs(15), || {
            fake.offline_queue().is_empty()
        })
        .await;
        for id in &ids {
            wait_completed(store.as_ref(), &key(*id)).await;
        }
        assert_eq!(
            journaled(store.as_ref()).await,
            (2, taken),
            "the re-read batch was absorbed by its keys"
        );
        let mut origins = origin_ids(&fake);
        origins.sort();
        assert_eq!(
            origins,
            vec![key(ids[0]), key(ids[1])],
            "no loss, no duplicate"
        );
    }
);

/// A user's message to the bot, sharing their contact.
fn telegram_message(message_id: u64, phone: &str) -> serde_json::Value {
    json!({
        "message_id": message_id,
        "from": {"id": 5550001, "is_bot": false, "first_name": "Olga"},
        "chat": {"id": 5550001, "type": "private", "first_name": "Olga"},
        "date": chrono::Utc::now().timestamp(),
        "text": "Хочу консультацию",
        "contact": {"phone_number": phone, "first_name": "Olga", "user_id": 5550001},
    })
}

each_backend!(
    telegram_webhook_updates_are_keyed_by_update_id_behind_the_secret_token,
    |db| async move {
        let tg = FakeTelegram::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let toml = format!(
            "{}\n[[source]]\nname = \"tg\"\npreset = \"telegram-webhook\"\ntoken = \"hook-Secret_1\"\n",
            config_toml(&db.url, &fake.webhook_url()),
        );
        let gw = Gateway::start_with(fake, Config::parse(&toml).unwrap()).await;
        let set_webhook = |secret: &'static str| {
            let http = gw.http.clone();
            let url = format!("{}/bot{}/setWebhook", tg.api_base(), tg.token());
            let hook = format!("{}/v1/intake/tg", gw.base);
            async move {
                let res = http
                    .post(url)
                    .json(&json!({"url": hook, "secret_token": secret}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 200);
            }
        };
        // A wrong secret: refused (and journaled), so Telegram keeps redelivering.
        set_webhook("wrong-secret").await;
        let message = telegram_message(11, "+7 (912) 000-11-22");
        let update_id = tg.user_sends(message.clone());
        until("Telegram tried twice", Duration::from_secs(10), || {
            tg.webhook_posts() >= 2
        })
        .await;
        assert_eq!(tg.pending_updates().len(), 1, "not confirmed while refused");
        // The right secret: the same update is recorded once and confirmed.
        set_webhook("hook-Secret_1").await;
        until("the update is confirmed", Duration::from_secs(10), || {
            tg.pending_updates().is_empty()
        })
        .await;
        let id = format!("tg:{update_id}");
        gw.wait_status(&id, "completed").await;
        let op = gw
            .store()
            .operation(&id.parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            op.contact.phone.as_deref(),
            Some("+79120001122"),
            "normalized for matching"
        );
        let m = gw
            .store()
            .metrics(leadgate::store::local_now(), Duration::from_secs(60))
            .await
            .unwrap();
        assert!(m.deliveries[&("tg".to_owned(), "rejected".to_owned())] >= 2);
        assert_eq!(m.deliveries[&("tg".to_owned(), "new".to_owned())], 1);
        // Telegram's redelivery of the same update is the duplicate it is.
        let update = json!({"update_id": update_id, "message": message});
        let res = gw
            .http
            .post(format!("{}/v1/intake/tg", gw.base))
            .header("X-Telegram-Bot-Api-Secret-Token", "hook-Secret_1")
            .json(&update)
            .send()
            .await
            .unwrap();
        let (status, body, replayed) = leadgate_testkit::gateway::answer(res).await;
        assert_eq!((status.as_u16(), replayed), (200, true), "{body}");
        // The token in the query string is not the Telegram secret's place.
        let res = gw
            .http
            .post(format!("{}/v1/intake/tg?token=hook-Secret_1", gw.base))
            .json(&update)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 401);
        gw.stop().await;
    }
);

each_backend!(
    telegram_polling_advances_the_offset_only_past_recorded_updates_even_across_kill_9,
    |db| async move {
        let tg = FakeTelegram::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        // The first getUpdates answers at once; the next one (which would confirm what the
        // first returned) is held back until the kill.
        tg.push_fault_on("getUpdates", TgFault::LatencyMs { ms: 0 }, 1);
        tg.push_fault_on("getUpdates", TgFault::LatencyMs { ms: 60_000 }, 1);
        let ids = [
            tg.user_sends(telegram_message(1, "+79120000001")),
            tg.user_sends(telegram_message(2, "+79120000002")),
        ];
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let mut toml = GatewayFile {
            db_url: &db.url,
            webhook_url: &fake.webhook_url(),
            port,
            lease: "4s",
            concurrency: None,
            retry: None,
            read_token: None,
            site: SiteAuth::Token("site-token"),
            crm_timeout: "3s",
            settle: None,
        }
        .toml();
        toml += &format!(
            "[[source]]\nname = \"tg-poll\"\npreset = \"telegram-updates\"\n\
             [source.pull]\nurl = \"{}\"\nbot_token = \"env:TEST_TG_BOT_TOKEN\"\nevery = \"50ms\"\n",
            tg.api_base()
        );
        let config = dir.path().join("leadgate.toml");
        std::fs::write(&config, toml).unwrap();
        let config = config.display().to_string();
        let serve = |token: Option<&str>| {
            let mut cmd = crate::process::leadgate(&["serve", "--config", &config]);
            cmd.stdout(Stdio::null()).stderr(Stdio::piped());
            if let Some(t) = token {
                cmd.env("TEST_TG_BOT_TOKEN", t);
            }
            cmd.spawn().expect("spawn leadgate serve")
        };
        // Without its credentials the source refuses to start, naming the variable.
        let out = serve(None).wait_with_output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("TEST_TG_BOT_TOKEN"), "{err}");
        assert!(err.contains("tg-poll"), "{err}");

        let mut first = Process(serve(Some(tg.token())));
        wait_healthy(&base, Duration::from_secs(20), None).await;
        until(
            "the confirming getUpdates is on its way",
            Duration::from_secs(10),
            || tg.calls_of("getUpdates") >= 2,
        )
        .await;
        let store = db.store().await;
        let count = |m: &leadgate::store::MetricsSnapshot, outcome: &str| {
            m.deliveries
                .get(&("tg-poll".to_owned(), outcome.to_owned()))
                .copied()
                .unwrap_or(0)
        };
        let m = store
            .metrics(leadgate::store::local_now(), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(count(&m, "new"), 2, "both recorded before the offset moved");
        first.kill();
        assert_eq!(tg.pending_updates().len(), 2, "never confirmed");

        let _second = Process(serve(Some(tg.token())));
        wait_healthy(&base, Duration::from_secs(20), None).await;
        until("the updates are confirmed", Duration::from_secs(15), || {
            tg.pending_updates().is_empty()
        })
        .await;
        for id in ids {
            wait_completed(store.as_ref(), &format!("tg-poll:{id}")).await;
        }
        let m = store
            .metrics(leadgate::store::local_now(), Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            (count(&m, "new"), count(&m, "duplicate")),
            (2, 2),
            "re-read, absorbed"
        );
        assert_eq!(fake.calls(CREATE), 2, "one lead per update");
    }
);

each_backend!(
    a_pulled_event_is_admitted_as_a_posted_one_would_be_keyed_journaled_and_redacted,
    |db| async move {
        // One admission for both (src/intake/admission.rs): a pulled event that cannot be
        // taken is journaled as a POSTed delivery of its source would be, without the
        // values its source redacts, and acknowledged; a good one is recorded.
        let tg = FakeTelegram::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        // One variable per backend: both run at once in this process.
        let var = match db.backend {
            leadgate_testkit::Backend::Sqlite => "TEST_TG_ADMISSION_SQLITE",
            leadgate_testkit::Backend::Postgres => "TEST_TG_ADMISSION_POSTGRES",
        };
        std::env::set_var(var, tg.token());
        let toml = format!(
            "{}\n[[source]]\nname = \"tg-pulled\"\npreset = \"telegram-updates\"\n\
             redact = [\"/message/contact/phone_number\"]\n\
             [source.pull]\nurl = \"{}\"\nbot_token = \"env:{var}\"\nevery = \"50ms\"\n",
            config_toml(&db.url, &fake.webhook_url()),
            tg.api_base(),
        );
        let gw = Gateway::start_with(fake, Config::parse(&toml).unwrap()).await;
        // PostgreSQL cannot store a NUL character: refused at admission, like a POST.
        let mut bad = telegram_message(21, "+7 912 000-77-66");
        bad["text"] = json!("a\u{0}b");
        tg.user_sends(bad);
        let good = tg.user_sends(telegram_message(22, "+7 912 000-88-99"));
        until(
            "both updates are confirmed",
            Duration::from_secs(15),
            || tg.pending_updates().is_empty(),
        )
        .await;
        gw.wait_status(&format!("tg-pulled:{good}"), "completed")
            .await;
        let body = match db.backend {
            leadgate_testkit::Backend::Sqlite => "cast(raw_body as text)",
            leadgate_testkit::Backend::Postgres => "convert_from(raw_body, 'UTF8')",
        };
        let rejected = db
            .texts(&format!(
                "select coalesce({body}, '') || ' | ' || reject_reason from deliveries \
                 where source = 'tg-pulled' and outcome = 'rejected'"
            ))
            .await;
        assert_eq!(rejected.len(), 1, "{rejected:?}");
        assert!(rejected[0].contains("NUL character"), "{}", rejected[0]);
        assert!(
            rejected[0].contains("[redacted]") && !rejected[0].contains("000-77-66"),
            "the redacted value is not kept: {}",
            rejected[0]
        );
        let kept = db
            .texts(&format!(
                "select {body} from deliveries where source = 'tg-pulled' and outcome = 'new'"
            ))
            .await;
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(!kept[0].contains("000-88-99"), "{}", kept[0]);
        gw.stop().await;
    }
);
