//! The signed event feed (src/feed) against a real receiver: a Python process verifying
//! every message with PyPI's `standardwebhooks` (tests/fixtures/feed_receiver.py,
//! installed by scripts/install-standardwebhooks.sh), over real HTTP, with a real gateway
//! and the `leadgate feed` command line — every event type, a receiver that is down for
//! a while, a subscriber that keeps failing disabled and announced — and the store's part
//! on both backends.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use leadgate::domain::outage::OutageConfig;
use leadgate::domain::{HumanAction, Secret};
use leadgate::store::{FeedOutcome, Resolve, StoreError};
use leadgate_fakes::bitrix24::Fault as CrmFault;
use leadgate_fakes::webhook::FakeWebhook;
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::*;
use leadgate_testkit::process::{command, free_port, Process};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// `[feed]` with fast test settings; never disabled unless `disable` says.
pub(crate) fn feed_toml(disable: &str) -> String {
    format!(
        "[feed]\npoll_interval = \"50ms\"\ntimeout = \"2s\"\nretry_delay = \"100ms\"\n\
         max_retry_delay = \"400ms\"\n{disable}\n"
    )
}

/// The receiver's Python (a virtualenv with standardwebhooks), installed when missing.
fn receiver_python() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("scripts/install-standardwebhooks.sh"))
        .output()
        .expect("scripts/install-standardwebhooks.sh runs");
    assert!(
        out.status.success(),
        "installing standardwebhooks failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The receiver on `port`, verifying with `secret`, logging to `log`; running once it
/// listens.
pub(crate) async fn receiver(port: u16, secret: &str, log: &Path) -> Process {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/feed_receiver.py");
    let mut child = std::process::Command::new(receiver_python())
        .arg(script)
        .arg(port.to_string())
        .arg(log)
        .env("FEED_SECRET", secret)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the receiver exited: {status}");
        }
        assert!(Instant::now() < deadline, "the receiver never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Process(child)
}

/// What the receiver logged, one JSON value a line.
pub(crate) fn received(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub(crate) use leadgate_testkit::wait_until;

/// `leadgate feed …` on the database at `db_url`: exit code, stdout, stderr.
fn cli(dir: &Path, db_url: &str, args: &[&str]) -> (i32, String, String) {
    let config = dir.join("leadgate.toml");
    if !config.exists() {
        std::fs::write(&config, config_toml(db_url, "http://127.0.0.1:9/rest/1/x/")).unwrap();
    }
    let mut all = vec!["feed"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--config", config.to_str().unwrap()]);
    let out = command(env!("CARGO_BIN_EXE_leadgate"), &all)
        .env_remove("LEADGATE_FEED_SECRET")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

each_backend!(
    every_event_reaches_a_verifying_receiver_that_was_down_for_a_while_once_per_webhook_id,
    |db| async move {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}/leadgate");
        db.store().await; // migrated, as `leadgate migrate` would

        // Bad input is refused with a clear sentence and adds nothing.
        let (code, _, err) = cli(
            dir.path(),
            &db.url,
            &["subscribe", &url, "--events", "review.open"],
        );
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("`review.open` is not an event type"), "{err}");
        let (code, _, err) = cli(
            dir.path(),
            &db.url,
            &["subscribe", "ftp://x", "--events", "all"],
        );
        assert_eq!(code, 2, "{err}");
        // The subscriber, through the command line: its secret is shown once.
        let (code, out, err) = cli(dir.path(), &db.url, &["subscribe", &url]);
        assert_eq!(code, 0, "{err}");
        let id: i64 = out
            .strip_prefix("subscriber ")
            .and_then(|r| r.split(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{out}"));
        let secret = out
            .lines()
            .find(|l| l.starts_with("whsec_"))
            .unwrap_or_else(|| panic!("{out}"))
            .to_owned();
        let (_, list, _) = cli(dir.path(), &db.url, &["list"]);
        assert_eq!(list.lines().count(), 1, "{list}");
        assert!(list.contains(&url) && list.contains("active"), "{list}");
        assert!(!list.contains(&secret), "the secret is shown once: {list}");

        let gw = Gateway::start_extended(&db, &feed_toml("disable_after_failures = 100000")).await;
        let store = gw.store();
        // Every kind of event while the receiver is not listening.
        gw.post_json("site", &lead("ok1")).await;
        gw.wait_status("site:ok1", "completed").await;
        gw.fake.push_fault(CREATE, CrmFault::Validation, 1);
        gw.post_json("site", &lead("bad1")).await;
        gw.wait_status("site:bad1", "failed_terminal").await;
        let (status, _, _) = gw.post_json("site", &lead("c1")).await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let mut changed = lead("c1");
        changed["comment"] = json!("changed");
        let (_, answer, _) = gw.post_json("site", &changed).await;
        assert_eq!(answer["outcome"], "conflict", "{answer}");
        let case = store
            .cases_of(&"site:c1".parse().unwrap())
            .await
            .unwrap()
            .into_iter()
            .find(|c| c.resolved_at.is_none())
            .expect("the conflict's case");
        let mut version = case.version;
        loop {
            let resolved = store
                .resolve(Resolve {
                    case_id: case.id,
                    expected_version: version,
                    actor: "anna".into(),
                    comment: None,
                    action: HumanAction::KeepOriginal,
                    now: store.now(),
                    bulk: None,
                })
                .await;
            match resolved {
                Ok(_) => break,
                // The worker moved the operation on meanwhile: read the version again.
                Err(StoreError::StaleVersion { .. }) => {
                    version = store.cases_of(&"site:c1".parse().unwrap()).await.unwrap()[0].version;
                }
                Err(e) => panic!("{e}"),
            }
        }
        gw.fake.push_fault(CREATE, CrmFault::ExpiredToken, 1000);
        gw.post_json("site", &lead("p1")).await;
        wait_until("the connector paused", || async {
            store
                .connector("bitrix24")
                .await
                .unwrap()
                .is_some_and(|c| c.paused)
        })
        .await;
        gw.fake.clear_faults();
        assert!(store
            .resume_connector("bitrix24", "ops", store.now())
            .await
            .unwrap());
        gw.wait_status("site:p1", "completed").await;
        let outage = OutageConfig {
            after_failures: 1,
            ..OutageConfig::default()
        };
        store
            .connector_failed("amocrm-b", &outage, store.now())
            .await
            .unwrap();
        assert!(store
            .connector_answered("amocrm-b", store.now())
            .await
            .unwrap());

        // The receiver is down: the feed tries, fails, and keeps every event owed.
        wait_until("failed attempts while the receiver is down", || async {
            store
                .feed_attempts(id, 100)
                .await
                .unwrap()
                .iter()
                .filter(|a| !a.ok)
                .count()
                >= 3
        })
        .await;
        let first_failed = store
            .feed_attempts(id, 500)
            .await
            .unwrap()
            .last()
            .cloned()
            .unwrap();
        assert!(
            !first_failed.ok && first_failed.status.is_none(),
            "{first_failed:?}"
        );
        let log = dir.path().join("received.jsonl");
        let _receiver = receiver(port, &secret, &log).await;
        wait_until("every event delivered", || async {
            store
                .feed_subscribers()
                .await
                .unwrap()
                .iter()
                .all(|s| s.pending == 0 && s.failures == 0)
        })
        .await;

        let got = received(&log);
        assert!(
            got.iter().all(|m| m.get("invalid").is_none()),
            "every signature verifies with standardwebhooks: {got:?}"
        );
        // Duplicates, if any, only with the same webhook-id and the same body.
        let mut by_id: BTreeMap<String, Value> = BTreeMap::new();
        for m in &got {
            let id = m["id"].as_str().unwrap().to_owned();
            assert!(id.starts_with("evt_"), "{id}");
            if let Some(before) = by_id.insert(id.clone(), m["body"].clone()) {
                assert_eq!(before, m["body"], "{id} was sent again with another body");
            }
        }
        // Each change once, by its own id.
        let events: Vec<(String, Value)> = by_id
            .values()
            .map(|b| (b["type"].as_str().unwrap().to_owned(), b["data"].clone()))
            .collect();
        let count = |kind: &str, key: &str, value: &str| {
            events
                .iter()
                .filter(|(k, d)| k == kind && d[key] == value)
                .count()
        };
        assert_eq!(
            count("operation.completed", "operation_id", "site:ok1"),
            1,
            "{events:?}"
        );
        assert_eq!(
            count("operation.completed", "operation_id", "site:p1"),
            1,
            "{events:?}"
        );
        assert_eq!(
            count("operation.failed", "operation_id", "site:bad1"),
            1,
            "{events:?}"
        );
        assert_eq!(
            count("review.opened", "operation_id", "site:c1"),
            1,
            "{events:?}"
        );
        assert_eq!(
            count("review.resolved", "resolution", "kept_original"),
            1,
            "{events:?}"
        );
        assert_eq!(
            count("connector.paused", "connector", "bitrix24"),
            1,
            "{events:?}"
        );
        assert_eq!(
            count("connector.resumed", "connector", "bitrix24"),
            1,
            "{events:?}"
        );
        assert_eq!(
            count("connector.unreachable", "connector", "amocrm-b"),
            1,
            "{events:?}"
        );
        assert_eq!(
            count("connector.resumed", "connector", "amocrm-b"),
            1,
            "{events:?}"
        );
        let kinds: BTreeSet<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds.len(), 7, "every event type: {kinds:?}");
        // What failed while the receiver was down arrived under the same webhook-id.
        assert!(
            by_id.contains_key(&first_failed.event_id),
            "{first_failed:?}"
        );
        let (_, deliveries, _) = cli(dir.path(), &db.url, &["deliveries", &id.to_string()]);
        assert!(
            deliveries.contains("delivered operation.completed"),
            "{deliveries}"
        );
        assert!(
            deliveries.contains(&format!(
                "failed    {:<22} {}",
                first_failed.kind, first_failed.event_id
            )),
            "{deliveries}"
        );
        assert!(deliveries.contains("HTTP 204"), "{deliveries}");
        // The attempts are counted.
        let m = db
            .texts(
                "select label || '=' || cast(sum(value) as text) from metric_counters \
                 where metric = 'feed_deliveries' group by label order by label",
            )
            .await;
        assert!(
            m.len() == 2 && m[0].starts_with("delivered=") && m[1].starts_with("failed="),
            "{m:?}"
        );
        let (code, out, _) = cli(dir.path(), &db.url, &["remove", &id.to_string()]);
        assert_eq!(code, 0, "{out}");
        assert!(store.feed_subscribers().await.unwrap().is_empty());
        gw.stop().await;
    }
);

each_backend!(
    a_subscriber_that_keeps_failing_is_disabled_and_the_alert_channels_told,
    |db| async move {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = dir.path().join("received.jsonl");
        let good = leadgate::feed::sign::new_secret();
        let _receiver = receiver(port, good.expose(), &log).await;
        let hook = FakeWebhook::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let alerts = format!(
            "[alerts]\npoll_interval = \"50ms\"\ninterval = \"1h\"\nsettle = \"100ms\"\n\
             min_spacing = \"50ms\"\nretry_delay = \"100ms\"\nmax_retry_delay = \"1s\"\n\
             [[alerts.channel]]\nkind = \"webhook\"\nname = \"slack\"\nurl = \"{}\"\n",
            hook.url()
        );
        let gw = Gateway::start_extended(
            &db,
            &format!(
                "{alerts}\n{}",
                feed_toml("disable_after_failures = 3\ndisable_after = \"300ms\"")
            ),
        )
        .await;
        let store = gw.store();
        // Signed with another secret than the receiver's: it refuses every message.
        let wrong = leadgate::feed::sign::new_secret();
        let url = format!("http://127.0.0.1:{port}/hook");
        let events = vec!["operation.completed".to_owned()];
        let id = store
            .feed_subscribe(&url, &wrong, &events, store.now())
            .await
            .unwrap();
        gw.post_json("site", &lead("k1")).await;
        gw.wait_status("site:k1", "completed").await;
        wait_until("the subscriber disabled", || async {
            store.feed_subscribers().await.unwrap()[0].state == "disabled"
        })
        .await;
        let s = store.feed_subscribers().await.unwrap().remove(0);
        let reason = s.disabled_reason.clone().unwrap();
        assert!(s.failures >= 3, "{s:?}");
        assert!(
            reason.contains("in a row failed since") && reason.contains("HTTP 400"),
            "{reason}"
        );
        // The independent implementation did refuse the signature.
        assert!(
            received(&log).iter().all(|m| m.get("invalid").is_some()),
            "{:?}",
            received(&log)
        );
        let attempts = store.feed_attempts(id, 100).await.unwrap();
        let tried = attempts.len();
        assert!(
            attempts.iter().all(|a| !a.ok && a.status == Some(400)),
            "{attempts:?}"
        );
        wait_until("the alert", || async {
            hook.bodies().iter().any(|b| {
                b["text"].as_str().is_some_and(|t| {
                    t.contains(&format!("event-feed subscriber #{id} is disabled"))
                })
            })
        })
        .await;
        let text = hook
            .bodies()
            .iter()
            .map(|b| b["text"].to_string())
            .collect::<String>();
        assert!(
            text.contains(&format!("leadgate feed enable {id}")),
            "{text}"
        );
        assert!(
            !text.contains(&url) && !text.contains(wrong.expose()),
            "{text}"
        );
        // Disabled: nothing more is sent, and what happens meanwhile is kept for it.
        gw.post_json("site", &lead("k2")).await;
        gw.wait_status("site:k2", "completed").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(store.feed_attempts(id, 100).await.unwrap().len(), tried);
        assert_eq!(store.feed_subscribers().await.unwrap()[0].pending, 2);
        gw.stop().await;
    }
);

each_backend!(
    the_store_hands_out_one_turn_records_attempts_and_disables_and_enables,
    |db| async move {
        let store = db.store().await;
        let secret = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let only_paused = vec!["connector.unreachable".to_owned()];
        let all: Vec<String> = leadgate::store::FEED_EVENT_TYPES.map(String::from).to_vec();
        let a = store
            .feed_subscribe("http://127.0.0.1:9/a", &secret, &only_paused, store.now())
            .await
            .unwrap();
        let b = store
            .feed_subscribe("http://127.0.0.1:9/b", &secret, &all, store.now())
            .await
            .unwrap();
        let outage = OutageConfig {
            after_failures: 1,
            ..OutageConfig::default()
        };
        store
            .connector_failed("x", &outage, store.now())
            .await
            .unwrap();
        store.connector_answered("x", store.now()).await.unwrap();
        let subs = store.feed_subscribers().await.unwrap();
        assert_eq!(
            subs.iter().map(|s| (s.id, s.pending)).collect::<Vec<_>>(),
            vec![(a, 1), (b, 2)],
            "each is owed the events of its types"
        );
        let now = store.now();
        assert_eq!(store.feed_due(now).await.unwrap(), vec![a, b]);
        let lease = Duration::from_secs(30);
        let turn = store.feed_turn(b, "g1", lease, now).await.unwrap().unwrap();
        assert_eq!(turn.event.kind, "connector.unreachable");
        assert_eq!(turn.secret.expose(), secret.expose());
        assert!(
            store
                .feed_turn(b, "g2", lease, now)
                .await
                .unwrap()
                .is_none(),
            "one turn at a time"
        );
        assert_eq!(store.feed_due(now).await.unwrap(), vec![a]);
        let failed = FeedOutcome::Failed {
            status: Some(503),
            error: "the webhook answered HTTP 503".into(),
            retry_at: now + chrono::TimeDelta::seconds(60),
            disable: None,
        };
        assert!(matches!(
            store
                .feed_done(b, "not-the-token", turn.event.seq, &failed, now)
                .await,
            Err(StoreError::LeaseLost(_))
        ));
        store
            .feed_done(b, &turn.token, turn.event.seq, &failed, now)
            .await
            .unwrap();
        // Waiting for its retry time; the same event then, under the same id.
        assert!(store
            .feed_turn(b, "g2", lease, now)
            .await
            .unwrap()
            .is_none());
        let later = now + chrono::TimeDelta::seconds(61);
        let again = store
            .feed_turn(b, "g2", lease, later)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again.event, turn.event);
        assert_eq!(again.failures, 1);
        let disable = FeedOutcome::Failed {
            status: Some(503),
            error: "the webhook answered HTTP 503".into(),
            retry_at: later + chrono::TimeDelta::seconds(60),
            disable: Some("2 deliveries in a row failed".into()),
        };
        store
            .feed_done(b, &again.token, again.event.seq, &disable, later)
            .await
            .unwrap();
        let s = &store.feed_subscribers().await.unwrap()[1];
        assert_eq!(
            (s.state.as_str(), s.failures, s.pending),
            ("disabled", 2, 2)
        );
        let far = later + chrono::TimeDelta::days(1);
        assert!(
            store
                .feed_turn(b, "g2", lease, far)
                .await
                .unwrap()
                .is_none(),
            "disabled"
        );
        assert!(store.feed_enable(b).await.unwrap());
        let t = store.feed_turn(b, "g2", lease, far).await.unwrap().unwrap();
        assert_eq!(t.event, turn.event, "what it missed, oldest first");
        store
            .feed_done(
                b,
                &t.token,
                t.event.seq,
                &FeedOutcome::Delivered { status: 204 },
                far,
            )
            .await
            .unwrap();
        let attempts = store.feed_attempts(b, 10).await.unwrap();
        assert_eq!(
            attempts
                .iter()
                .map(|x| (x.ok, x.status))
                .collect::<Vec<_>>(),
            vec![(true, Some(204)), (false, Some(503)), (false, Some(503))]
        );
        assert!(attempts.iter().all(|x| x.event_id == turn.event.event_id));
        let s = &store.feed_subscribers().await.unwrap()[1];
        assert_eq!((s.state.as_str(), s.failures, s.pending), ("active", 0, 1));
        assert!(store.feed_remove(b).await.unwrap());
        assert!(!store.feed_remove(b).await.unwrap());
        assert!(!store.feed_enable(b).await.unwrap());
        assert_eq!(store.feed_subscribers().await.unwrap().len(), 1);
    }
);

async fn sqlstate(conn: &mut sqlx::PgConnection, sql: &str) -> String {
    match sqlx::raw_sql(sql).execute(&mut *conn).await {
        Ok(_) => "ok".into(),
        Err(sqlx::Error::Database(e)) => e.code().unwrap_or_default().into_owned(),
        Err(e) => panic!("{sql}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_an_admin_reads_the_feed_and_nobody_reads_a_secret() {
    leadgate_testkit::run(leadgate_testkit::Backend::Postgres, |db| async move {
        use leadgate::domain::roles::Role;
        let store = db.store().await;
        let secret = leadgate::feed::sign::new_secret();
        let events = vec!["review.opened".to_owned()];
        store
            .feed_subscribe("http://127.0.0.1:9/x", &secret, &events, store.now())
            .await
            .unwrap();
        let people = leadgate_testkit::people::People::new(&db.url).await;
        let mut admin = people.sql(Role::Admin).await;
        for allowed in [
            "select id, url, events, state, disabled_reason, failures from feed_subscribers",
            "select * from feed_attempts",
            "select * from feed_deliveries",
            "select * from feed_events",
        ] {
            assert_eq!(sqlstate(&mut admin, allowed).await, "ok", "admin: {allowed}");
        }
        for denied in [
            "select secret from feed_subscribers",
            "insert into feed_subscribers (url, secret, events, created_at) values ('http://x', 'whsec_x', 'review.opened', now())",
            "update feed_subscribers set state = 'active'",
            "delete from feed_attempts",
        ] {
            assert_eq!(sqlstate(&mut admin, denied).await, "42501", "admin: {denied}");
        }
        // The admin's own connection lists the subscribers through the store, secret unread.
        let as_admin = leadgate::store::open(people.url(Role::Admin)).await.unwrap();
        assert_eq!(as_admin.feed_subscribers().await.unwrap().len(), 1);
        for role in [Role::Support, Role::SalesOps, Role::Manager] {
            let mut sql = people.sql(role).await;
            for denied in [
                "select id from feed_subscribers",
                "select secret from feed_subscribers",
                "select * from feed_events",
                "select * from feed_attempts",
            ] {
                assert_eq!(sqlstate(&mut sql, denied).await, "42501", "{role}: {denied}");
            }
        }
        drop(admin);
        people.drop_all().await;
    })
    .await
}

/// Pauses connector `x` in a transaction of its own, straight in the database, then
/// commits it or lets the connection go without a commit (as a process killed would).
async fn pause_x(db: &leadgate_testkit::TestDb, commit: bool) {
    use sqlx::Connection;
    let sql = "update connectors set state = 'paused', reason = 'auth' where name = 'x'";
    match db.backend {
        leadgate_testkit::Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            let mut tx = c.begin().await.unwrap();
            sqlx::query(sql).execute(&mut *tx).await.unwrap();
            if commit {
                tx.commit().await.unwrap();
            }
        }
        leadgate_testkit::Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&db.url).await.unwrap();
            let mut tx = c.begin().await.unwrap();
            sqlx::query(sql).execute(&mut *tx).await.unwrap();
            if commit {
                tx.commit().await.unwrap();
            }
        }
    }
}

each_backend!(
    an_event_is_written_with_its_change_or_not_at_all,
    |db| async move {
        let store = db.store().await;
        let all: Vec<String> = leadgate::store::FEED_EVENT_TYPES.map(String::from).to_vec();
        let secret = leadgate::feed::sign::new_secret();
        store
            .feed_subscribe("http://127.0.0.1:9/a", &secret, &all, store.now())
            .await
            .unwrap();
        let outage = OutageConfig {
            after_failures: 1,
            ..OutageConfig::default()
        };
        store
            .connector_failed("x", &outage, store.now())
            .await
            .unwrap();
        let owed = || async { store.feed_subscribers().await.unwrap()[0].pending };
        assert_eq!(owed().await, 1, "connector.unreachable");
        // A change that never commits (rolled back, or its process gone) has no event.
        pause_x(&db, false).await;
        assert_eq!(owed().await, 1);
        assert!(!store.connector("x").await.unwrap().unwrap().paused);
        // One that commits has exactly one, whoever wrote it.
        pause_x(&db, true).await;
        assert!(store.connector("x").await.unwrap().unwrap().paused);
        assert_eq!(owed().await, 2);
        let now = store.now();
        let id = store.feed_subscribers().await.unwrap()[0].id;
        let turn = store
            .feed_turn(id, "t", Duration::from_secs(30), now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(turn.event.kind, "connector.unreachable", "oldest first");
    }
);

/// The feed never fails the change it reports (review finding): a subscriber an admin
/// removes while the worker records a create is waited for and skipped, two connections
/// stepped by hand on PostgreSQL — a foreign-key error there would throw away the record
/// of a create the CRM made.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscriber_removed_while_a_create_is_recorded_fails_nothing() {
    use sqlx::Connection;
    leadgate_testkit::run(leadgate_testkit::Backend::Postgres, |db| async move {
        use leadgate_testkit::seed::{delivery, CONNECTOR};
        let store = db.store().await;
        let secret = leadgate::feed::sign::new_secret();
        let events = vec!["operation.completed".to_owned()];
        let id = store
            .feed_subscribe("http://127.0.0.1:9/x", &secret, &events, store.now())
            .await
            .unwrap();
        store
            .record_delivery(delivery("removed-1", json!({"name": "A"})))
            .await
            .unwrap();
        let claim = store
            .claim_due(
                CONNECTOR,
                "w",
                std::time::Duration::from_secs(30),
                store.now(),
            )
            .await
            .unwrap()
            .unwrap();
        // The admin's removal, not committed yet.
        let mut admin = sqlx::PgConnection::connect(&db.url).await.unwrap();
        let mut tx = admin.begin().await.unwrap();
        sqlx::query("delete from feed_subscribers where id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await
            .unwrap();
        let worker = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .finish_attempt(
                        &claim.lease,
                        leadgate::store::AttemptOutcome::Created {
                            crm_id: "77".into(),
                        },
                        vec![],
                        store.now(),
                    )
                    .await
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert!(!worker.is_finished(), "the worker waits for the removal");
        tx.commit().await.unwrap();
        worker.await.unwrap().expect("the create is recorded");
        let op = store
            .operation(&"site:removed-1".parse().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (op.status.as_str(), op.crm_id.as_deref()),
            ("completed", Some("77"))
        );
        let mut sql = sqlx::PgConnection::connect(&db.url).await.unwrap();
        let kept: i64 = sqlx::query_scalar("select count(*) from feed_events")
            .fetch_one(&mut sql)
            .await
            .unwrap();
        assert_eq!(kept, 0, "an event nobody is owed is not kept");
    })
    .await;
}

each_backend!(
    // A disabled subscriber's queue does not grow for ever: what is still owed of events
    // older than retention is forgotten by the purge, with those events; newer ones stay.
    what_a_subscriber_is_owed_is_kept_as_long_as_retention_keeps_a_lead,
    |db| async move {
        let store = db.store().await;
        let secret = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let all: Vec<String> = leadgate::store::FEED_EVENT_TYPES.map(String::from).to_vec();
        let a = store
            .feed_subscribe("http://127.0.0.1:9/a", &secret, &all, store.now())
            .await
            .unwrap();
        let outage = OutageConfig {
            after_failures: 1,
            ..OutageConfig::default()
        };
        // An event of 40 days ago (the connector unreachable since then), and one of now.
        let long_ago = store.now() - chrono::TimeDelta::days(40);
        store
            .connector_failed("x", &outage, long_ago)
            .await
            .unwrap();
        store.connector_answered("x", store.now()).await.unwrap();
        let pending = |store: std::sync::Arc<dyn leadgate::store::Store>| async move {
            store.feed_subscribers().await.unwrap()[0].pending
        };
        assert_eq!(pending(store.clone()).await, 2);
        let cutoff = store.now() - chrono::TimeDelta::days(30);
        let report = leadgate::store::purge(store.as_ref(), cutoff, 100)
            .await
            .unwrap();
        assert_eq!(report.feed_owed, 1, "{report:?}");
        assert_eq!(pending(store.clone()).await, 1);
        let turn = store
            .feed_turn(a, "g", Duration::from_secs(30), store.now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(turn.event.kind, "connector.resumed");
        // The forgotten event itself is gone; nothing else was touched.
        let again = leadgate::store::purge(store.as_ref(), cutoff, 100)
            .await
            .unwrap();
        assert_eq!(again.feed_owed, 0);
        assert_eq!(
            db.texts("select type from feed_events").await,
            vec!["connector.resumed".to_owned()]
        );
    }
);
