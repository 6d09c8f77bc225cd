//! The event feed managed from the console (`leadgate_console_model::Console::feed_*`, the
//! dashboard's Feed panel): subscribe, list, deliveries to a real verifying receiver,
//! disabled → re-enabled, remove, bad input refused with a sentence — on both backends;
//! and on PostgreSQL an admin's personal login, whose requests a gateway applies and
//! whose subscriber's secret does not stay in the request's row.

use leadgate::domain::roles::Role;
use leadgate_console_model::{Console, ConsoleError};
use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::*;
use leadgate_testkit::process::free_port;

use crate::feed::{feed_toml, received, receiver, wait_until};

each_backend!(
    the_console_subscribes_shows_deliveries_re_enables_and_removes,
    |db| async move {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let gw = Gateway::start_extended(
            &db,
            &feed_toml("disable_after_failures = 2\ndisable_after = \"100ms\""),
        )
        .await;
        let console = Console::open(&db.url).await.unwrap();
        assert!(console.connection.may.feed);

        // Bad input: refused with a sentence, nothing added.
        let e = console
            .feed_subscribe("Olga", "ftp://example.com/x", vec!["all".into()])
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ConsoleError::Invalid { message } if message.contains("http:// or https://")),
            "{e:?}"
        );
        let e = console
            .feed_subscribe("Olga", "https://example.com/x", vec!["review.open".into()])
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ConsoleError::Invalid { message } if message.contains("`review.open` is not an event type")),
            "{e:?}"
        );
        assert!(console.feed_subscribers().await.unwrap().is_empty());

        // Subscribed: a secret answered once; the URL listed without its query.
        let url = format!("http://127.0.0.1:{port}/hook?token=abc");
        let sub = console
            .feed_subscribe("Olga", &url, vec!["operation.completed".into()])
            .await
            .unwrap();
        assert!(
            sub.secret.starts_with("whsec_"),
            "a Standard Webhooks secret"
        );
        let list = console.feed_subscribers().await.unwrap();
        assert_eq!(list.len(), 1);
        let s = &list[0];
        assert_eq!(
            (s.id, s.url.as_str(), s.state.as_str()),
            (
                sub.id,
                format!("http://127.0.0.1:{port}/hook").as_str(),
                "active"
            )
        );
        assert_eq!(s.events, ["operation.completed"]);
        assert!(!format!("{list:?}").contains("token=abc"));

        // Nobody listens yet: failed attempts, then disabled, said why.
        gw.post_json("site", &lead("k1")).await;
        gw.wait_status("site:k1", "completed").await;
        wait_until("the subscriber disabled", || async {
            console.feed_subscribers().await.unwrap()[0].state == "disabled"
        })
        .await;
        let s = console.feed_subscribers().await.unwrap().remove(0);
        assert!(
            s.disabled_reason.is_some() && s.disabled_at.is_some(),
            "{s:?}"
        );
        assert_eq!(s.pending, 1);
        let attempts = console.feed_attempts(sub.id).await.unwrap();
        assert!(!attempts.is_empty());
        assert!(
            attempts
                .iter()
                .all(|a| !a.ok && a.error.is_some() && a.kind == "operation.completed"),
            "{attempts:?}"
        );

        // The receiver verifies with the secret the console showed; re-enabled, it gets
        // what it missed.
        let log = dir.path().join("received.jsonl");
        let _receiver = receiver(port, &sub.secret, &log).await;
        assert!(console.feed_enable("Olga", sub.id).await.unwrap());
        wait_until("the delivery", || async {
            console
                .feed_attempts(sub.id)
                .await
                .unwrap()
                .first()
                .is_some_and(|a| a.ok)
        })
        .await;
        let newest = console.feed_attempts(sub.id).await.unwrap().remove(0);
        assert_eq!(newest.status, Some(204), "{newest:?}");
        let s = console.feed_subscribers().await.unwrap().remove(0);
        assert_eq!((s.state.as_str(), s.pending, s.failures), ("active", 0, 0));
        let got = received(&log);
        assert!(
            got.iter()
                .any(|m| m["body"]["type"] == "operation.completed"
                    && m["id"] == newest.event_id.as_str()),
            "{got:?}"
        );
        assert!(got.iter().all(|m| m.get("invalid").is_none()), "{got:?}");

        // Removed, once.
        assert!(console.feed_remove("Olga", sub.id).await.unwrap());
        assert!(!console.feed_remove("Olga", sub.id).await.unwrap());
        assert!(!console.feed_enable("Olga", sub.id).await.unwrap());
        assert!(console.feed_subscribers().await.unwrap().is_empty());
        gw.stop().await;
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_admins_subscription_is_applied_by_a_gateway_and_its_secret_leaves_the_request() {
    leadgate_testkit::run(leadgate_testkit::Backend::Postgres, |db| async move {
        let gw = Gateway::start_extended(&db, &feed_toml("")).await;
        let people = leadgate_testkit::people::People::new(&db.url).await;
        let admin = Console::open(people.url(Role::Admin)).await.unwrap();
        assert!(admin.connection.may.feed);
        let sub = admin
            .feed_subscribe(
                "ignored: the login acts",
                "https://hooks.example.com/in?key=k",
                vec!["review.opened".into(), "connector.paused".into()],
            )
            .await
            .unwrap();
        let list = admin.feed_subscribers().await.unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].url, "https://hooks.example.com/in");
        assert_eq!(list[0].events, ["review.opened", "connector.paused"]);

        // The subscriber keeps the secret; the answered request does not.
        let owner = db.store().await;
        let pg = sqlx::PgPool::connect(&db.url).await.unwrap();
        let (stored,): (String,) = sqlx::query_as("select secret from feed_subscribers where id = $1")
            .bind(sub.id)
            .fetch_one(&pg)
            .await
            .unwrap();
        assert_eq!(stored, sub.secret);
        let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(
            "select actor, body, outcome from human_requests where kind = 'feed_subscribe'",
        )
        .fetch_all(&pg)
        .await
        .unwrap();
        assert_eq!(rows.len(), 1);
        let (actor, body, outcome) = &rows[0];
        assert_eq!(actor, people.login(Role::Admin));
        assert!(outcome.is_some());
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["url"], "https://hooks.example.com/in?key=k");
        assert!(body.get("secret").is_none(), "{body}");
        assert!(!rows[0].1.contains(&sub.secret));

        // A bad URL: the database's own sentence, nothing added.
        let e = admin
            .feed_subscribe("x", "ftp://hooks.example.com", vec!["all".into()])
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ConsoleError::Invalid { message } if message.contains("http:// or https://")),
            "{e:?}"
        );
        // Other roles neither see nor change the feed.
        let manager = Console::open(people.url(Role::Manager)).await.unwrap();
        assert!(!manager.connection.may.feed);
        assert!(manager.feed_subscribers().await.is_err());
        let e = manager.feed_remove("x", sub.id).await.unwrap_err();
        assert!(matches!(e, ConsoleError::Forbidden { .. }), "{e:?}");

        assert!(admin.feed_remove("x", sub.id).await.unwrap());
        assert!(owner.feed_subscribers().await.unwrap().is_empty());
        pg.close().await;
        drop((admin, manager));
        people.drop_all().await;
        gw.stop().await;
    })
    .await
}
