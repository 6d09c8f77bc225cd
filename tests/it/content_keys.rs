//! Content keys (issue 38, point 5) for senders whose deliveries carry no id: a real
//! gateway and the fake Bitrix24 over real HTTP, on both backends. The same content within
//! the window is one operation however its JSON is laid out and however many deliveries
//! race; other content, or the same after the window, is a new one; a delivery without
//! any of the fields is refused with a sentence.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{origin_ids, Gateway};

const SOURCES: &str = r#"
[[source]]
name = "form"
key = "content:/form+/phone+/email+/message"
ignore = ["/sent_at"]
token = "form-token"

[[source]]
name = "quick"
key = "content:/phone+/message"
content_window = "1s"
token = "quick-token"
"#;

async fn post(gw: &Gateway, source: &str, body: &Value) -> (StatusCode, Value) {
    let (status, answer, _) = gw.post_json(source, body).await;
    (status, answer)
}

fn submission(message: &str) -> Value {
    json!({"form": "Contact us", "phone": "+7 999 123-45-67", "email": "olga@example.com",
           "message": message, "name": "Olga", "sent_at": "2026-12-06T10:00:00Z"})
}

each_backend!(
    the_same_content_within_the_window_is_one_operation,
    |db| async move {
        let gw = Gateway::start_extended(&db, SOURCES).await;
        let (status, first) = post(&gw, "form", &submission("Call me back")).await;
        assert_eq!(
            (status, first["outcome"].as_str()),
            (StatusCode::ACCEPTED, Some("new")),
            "{first}"
        );
        let id = first["operation_id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("form:c"), "a content key: {id}");

        // A redelivery: other key order, another send time (ignored): a duplicate.
        let again = json!({"sent_at": "2026-12-06T10:00:05Z", "message": "Call me back",
                           "email": "olga@example.com", "phone": "+7 999 123-45-67",
                           "form": "Contact us", "name": "Olga"});
        let (status, answer) = post(&gw, "form", &again).await;
        assert!(status.is_success(), "{answer}");
        assert_eq!(
            (answer["operation_id"].as_str(), answer["outcome"].as_str()),
            (Some(id.as_str()), Some("duplicate")),
            "{answer}"
        );
        // The keyed text with other white space (a form builder that pads or wraps) is
        // the same content and the same delivery: a duplicate, not a case for a person.
        let mut spaced = submission("Call me back");
        spaced["message"] = json!("  Call me\n back ");
        spaced["phone"] = json!("+7 999  123-45-67");
        let (status, answer) = post(&gw, "form", &spaced).await;
        assert!(status.is_success(), "{answer}");
        assert_eq!(
            (answer["operation_id"].as_str(), answer["outcome"].as_str()),
            (Some(id.as_str()), Some("duplicate")),
            "{answer}"
        );
        // Same content, other data outside the keyed fields: the same operation, whose
        // changed data a person looks at (a payload conflict), never a second lead.
        let mut renamed = submission("Call me back");
        renamed["name"] = json!("Olga Petrova");
        let (_, answer) = post(&gw, "form", &renamed).await;
        assert_eq!(
            (answer["operation_id"].as_str(), answer["outcome"].as_str()),
            (Some(id.as_str()), Some("conflict")),
            "{answer}"
        );

        // Eight deliveries of new content at once: one operation.
        let racing = submission("Racing");
        let answers = futures::future::join_all((0..8).map(|_| post(&gw, "form", &racing))).await;
        let ids: std::collections::BTreeSet<String> = answers
            .iter()
            .map(|(s, a)| {
                assert!(s.is_success(), "{a}");
                a["operation_id"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(ids.len(), 1, "{answers:?}");
        let news = answers
            .iter()
            .filter(|(_, a)| a["outcome"] == "new")
            .count();
        assert_eq!(news, 1, "{answers:?}");

        // Other content is another lead.
        let (_, other) = post(&gw, "form", &submission("A different question")).await;
        assert_eq!(other["outcome"], "new");
        assert_ne!(other["operation_id"], id.as_str());

        // None of the fields: refused with a sentence naming them, nothing created.
        let (status, refused) = post(&gw, "form", &json!({"name": "Olga"})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert_eq!(refused["error"], "missing_key");
        let message = refused["message"].as_str().unwrap();
        assert!(
            message.contains("/phone") && message.contains("/message"),
            "{message}"
        );

        // Each lead at most once in the CRM: the racing one and the other are created;
        // the first one was either created before its conflict or waits in review.
        let racing_id = ids.first().unwrap().clone();
        let other_id = other["operation_id"].as_str().unwrap().to_owned();
        gw.wait_status(&racing_id, "completed").await;
        gw.wait_status(&other_id, "completed").await;
        let sent = origin_ids(&gw.fake);
        for op in [&racing_id, &other_id] {
            assert_eq!(
                sent.iter().filter(|o| *o == op).count(),
                1,
                "{op}: {sent:?}"
            );
        }
        assert!(sent.iter().filter(|o| **o == id).count() <= 1, "{sent:?}");
        gw.stop().await;
    }
);

each_backend!(
    the_same_content_after_the_window_is_a_new_operation,
    |db| async move {
        let gw = Gateway::start_extended(&db, SOURCES).await;
        let body = json!({"phone": "+7 999 000-00-01", "message": "hello"});
        let (_, first) = post(&gw, "quick", &body).await;
        let (_, second) = post(&gw, "quick", &body).await;
        assert_eq!(first["operation_id"], second["operation_id"]);
        assert_eq!(second["outcome"], "duplicate");
        // The window (1 s) is over: the same words are a new submission.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (_, later) = post(&gw, "quick", &body).await;
        assert_eq!(later["outcome"], "new", "{later}");
        assert_ne!(later["operation_id"], first["operation_id"]);
        // ... and its own window keeps its redeliveries together.
        let (_, again) = post(&gw, "quick", &body).await;
        assert_eq!(again["operation_id"], later["operation_id"]);
        gw.stop().await;
    }
);

each_backend!(
    racing_gateways_agree_on_one_window_and_an_ended_one_is_taken_over,
    |db| async move {
        let store = db.store().await;
        let now = store.now();
        let until = leadgate::store::after(now, Duration::from_secs(60));
        // Sixteen gateways at once, each with its own candidate (their clocks' seconds
        // differ): all get the same one, and it is one of theirs.
        let calls = (0..16).map(|i| {
            let store = store.clone();
            async move {
                store
                    .use_content_key("form", "h1", &format!("form:c-{i}"), until, now)
                    .await
                    .unwrap()
            }
        });
        let got: std::collections::BTreeSet<String> =
            futures::future::join_all(calls).await.into_iter().collect();
        assert_eq!(got.len(), 1, "{got:?}");
        let first = got.into_iter().next().unwrap();
        assert!(first.starts_with("form:c-"), "{first}");
        // Within the window it holds; another source's same hash is its own.
        let later = leadgate::store::after(now, Duration::from_secs(59));
        let again = store
            .use_content_key("form", "h1", "form:c-late", until, later)
            .await
            .unwrap();
        assert_eq!(again, first);
        let other = store
            .use_content_key("chat", "h1", "chat:c-1", until, now)
            .await
            .unwrap();
        assert_eq!(other, "chat:c-1");
        // Once it ended, the next delivery opens a new window.
        let after = leadgate::store::after(now, Duration::from_secs(61));
        let next_until = leadgate::store::after(after, Duration::from_secs(60));
        let new = store
            .use_content_key("form", "h1", "form:c-next", next_until, after)
            .await
            .unwrap();
        assert_eq!(new, "form:c-next");
    }
);

each_backend!(
    // Review of content keys: a slow delivery arrived inside its window, and reaches the
    // database after the window ended and after a quicker delivery of other content —
    // arriving later — tidied up ended windows. It must still find its window's operation;
    // forgetting it there made the redelivered lead a second one.
    a_slow_delivery_finds_its_window_after_a_later_one_tidied_up,
    |db| async move {
        let store = db.store().await;
        let now = store.now();
        let until = leadgate::store::after(now, Duration::from_secs(60));
        let first = store
            .use_content_key("form", "slow", "form:c-first", until, now)
            .await
            .unwrap();
        assert_eq!(first, "form:c-first");
        // A minute and a half later, another content arrives and tidies up.
        let quick = leadgate::store::after(now, Duration::from_secs(90));
        store
            .use_content_key(
                "form",
                "other",
                "form:c-other",
                leadgate::store::after(quick, Duration::from_secs(60)),
                quick,
            )
            .await
            .unwrap();
        // The slow one, which arrived 59 s into the window, gets its window's operation.
        let arrived = leadgate::store::after(now, Duration::from_secs(59));
        let slow = store
            .use_content_key(
                "form",
                "slow",
                "form:c-slow",
                leadgate::store::after(arrived, Duration::from_secs(60)),
                arrived,
            )
            .await
            .unwrap();
        assert_eq!(slow, "form:c-first");
        // A signature used once is remembered alike.
        store
            .use_signature("form", "sig", "form:a", until, now)
            .await
            .unwrap();
        store
            .use_signature("form", "sig2", "form:b", until, quick)
            .await
            .unwrap();
        let again = store
            .use_signature("form", "sig", "form:c", until, arrived)
            .await
            .unwrap();
        assert_eq!(
            again, "form:a",
            "a replayed signature would name another key"
        );
        // Rows over for longer than any request takes are forgotten.
        let much_later = leadgate::store::after(now, Duration::from_secs(3 * 3600));
        store
            .use_content_key("form", "third", "form:c-third", much_later, much_later)
            .await
            .unwrap();
        let gone = store
            .use_content_key("form", "slow", "form:c-new", much_later, now)
            .await
            .unwrap();
        assert_eq!(gone, "form:c-new", "an ended window was never forgotten");
    }
);

/// Two gateways stepped by hand on PostgreSQL: the first has written its window and not
/// committed; the second waits for it, then takes the first's operation (not its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgresql_the_second_gateway_waits_for_the_first_window_and_takes_it() {
    use sqlx::Connection;
    leadgate_testkit::db::run(leadgate_testkit::Backend::Postgres, |db| async move {
        let store = db.store().await;
        let now = store.now();
        let until = leadgate::store::after(now, Duration::from_secs(60));
        let mut first = sqlx::PgConnection::connect(&db.url).await.unwrap();
        let mut tx = first.begin().await.unwrap();
        sqlx::query(
            "insert into content_keys (source, content_sha256, operation_id, expires_at) \
             values ('form', 'h2', 'form:c-first', $1)",
        )
        .bind(until)
        .execute(&mut *tx)
        .await
        .unwrap();
        let second = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .use_content_key("form", "h2", "form:c-second", until, now)
                    .await
                    .unwrap()
            }
        });
        // It waits on the first's row.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !second.is_finished(),
            "the second did not wait for the first"
        );
        tx.commit().await.unwrap();
        assert_eq!(second.await.unwrap(), "form:c-first");
    })
    .await;
}
