//! One login must not flood the request queue (issue 32, point 7): the database caps a
//! login's waiting requests and takes only the shapes a console writes (migration 0026),
//! a gateway applies them in turn per login, and a timeline of any length is read a page
//! at a time. The role attacks as real logins through raw SQL on PostgreSQL; the
//! timeline's pages on both backends.

use std::time::Duration;

use serde_json::json;
use sqlx::{Connection, PgConnection};

use leadgate::domain::roles::Role;
use leadgate::domain::OperationId;
use leadgate::store::{self, Ask, StoreError, TIMELINE_PAGE_MAX};
use leadgate_console_model::{Console, ConsoleError, TIMELINE_PAGE};
use leadgate_testkit::each_backend;
use leadgate_testkit::people::People;
use leadgate_testkit::seed::{delivery, seed, CONNECTOR};
use leadgate_testkit::{run, Backend};

/// The cap of migration 0026.
const CAP: i64 = 100;

/// The SQLSTATE and message a statement failed with, or ("ok", "").
async fn refusal(conn: &mut PgConnection, sql: &str) -> (String, String) {
    match sqlx::raw_sql(sql).execute(&mut *conn).await {
        Ok(_) => ("ok".into(), String::new()),
        Err(sqlx::Error::Database(e)) => (
            e.code().unwrap_or_default().into_owned(),
            e.message().to_owned(),
        ),
        Err(e) => panic!("{sql}: {e}"),
    }
}

fn flood(operation_id: &OperationId, n: i64) -> String {
    format!(
        "insert into human_requests (kind, operation_id, body) \
         select 'notified', '{operation_id}', '{{\"detail\": {{\"what\": \"flood\"}}}}' \
         from generate_series(1, {n})"
    )
}

async fn waiting(conn: &mut PgConnection, login: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from human_requests where actor = $1 and applied_at is null",
    )
    .bind(login)
    .fetch_one(&mut *conn)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_from_one_login_is_capped_and_waits_its_turn() {
    run(Backend::Postgres, |db| async move {
        let store = db.store().await;
        let s = seed(&*store).await.unwrap();
        store
            .pause_connector(CONNECTOR, "auth failed", "test", store.now())
            .await
            .unwrap();
        let people = People::new(&db.url).await;
        let flooder = people.login(Role::SalesOps).to_owned();
        let mut owner = PgConnection::connect(&db.url).await.unwrap();

        // A sales-ops login fills its share by raw SQL, in one statement...
        let mut sql = people.sql(Role::SalesOps).await;
        assert_eq!(refusal(&mut sql, &flood(&s.stale, CAP)).await.0, "ok");
        assert_eq!(waiting(&mut owner, &flooder).await, CAP);
        // ... and not one request more, however it asks.
        let (code, message) = refusal(&mut sql, &flood(&s.stale, 1)).await;
        assert_eq!(code, "P0001", "{message}");
        assert!(
            message.contains("you have 100 requests no gateway has applied yet"),
            "{message}"
        );
        let (code, _) = refusal(&mut sql, &flood(&s.failed, 50)).await;
        assert_eq!(code, "P0001");
        assert_eq!(waiting(&mut owner, &flooder).await, CAP);
        // Through the store and the console, the database's sentence is the answer.
        let person = store::open(people.url(Role::SalesOps)).await.unwrap();
        let ask = Ask::Notified {
            operation_id: s.stale.clone(),
            detail: json!({"what": "review_opened"}),
        };
        match person.ask(&ask).await {
            Err(StoreError::RequestRefused(m)) => {
                assert!(m.starts_with("you have 100 requests"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        let console = Console::open(people.url(Role::SalesOps)).await.unwrap();
        match console
            .record_notification("x", "review_opened", &[s.stale.to_string()])
            .await
        {
            Err(ConsoleError::Invalid { message }) => {
                assert!(message.contains("wait until they are applied"), "{message}")
            }
            other => panic!("{other:?}"),
        }

        // The admin asks to resume the connector and a manager notes a notification,
        // both after the whole flood.
        let mut admin = people.sql(Role::Admin).await;
        let admin_id: i64 = sqlx::query_scalar(
            "insert into human_requests (kind, connector) values ('resume_connector', $1) returning id",
        )
        .bind(CONNECTOR)
        .fetch_one(&mut admin)
        .await
        .unwrap();
        let mut manager = people.sql(Role::Manager).await;
        let manager_id: i64 = sqlx::query_scalar(
            "insert into human_requests (kind, operation_id) values ('notified', $1) returning id",
        )
        .bind(s.stale.as_str())
        .fetch_one(&mut manager)
        .await
        .unwrap();

        // A gateway takes one request per login in turn: theirs come before the flood's
        // second, not after its hundredth.
        let mut order = vec![];
        for _ in 0..4 {
            order.push(store.apply_next_request(store.now()).await.unwrap().unwrap());
        }
        let admin_at = order.iter().position(|id| *id == admin_id);
        let manager_at = order.iter().position(|id| *id == manager_id);
        assert!(
            admin_at.is_some_and(|i| i < 3) && manager_at.is_some_and(|i| i < 3),
            "applied in the order {order:?}; the admin's is #{admin_id}, the manager's #{manager_id}"
        );
        assert_eq!(waiting(&mut owner, &flooder).await, CAP - 2);
        assert!(!store.connector(CONNECTOR).await.unwrap().unwrap().paused);
        let outcome: String =
            sqlx::query_scalar("select outcome from human_requests where id = $1")
                .bind(admin_id)
                .fetch_one(&mut admin)
                .await
                .unwrap();
        assert!(outcome.contains("\"resumed\":true"), "{outcome}");
        // A request applied frees its place: the flooder may ask again, up to the cap.
        assert_eq!(refusal(&mut sql, &flood(&s.stale, 2)).await.0, "ok");
        assert_eq!(refusal(&mut sql, &flood(&s.stale, 1)).await.0, "P0001");

        // The flood drains, still in turn, each request once.
        while store.apply_next_request(store.now()).await.unwrap().is_some() {}
        assert_eq!(waiting(&mut owner, &flooder).await, 0);
        people.drop_all().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_sessions_of_one_login_cannot_pass_the_cap_together() {
    run(Backend::Postgres, |db| async move {
        let store = db.store().await;
        let s = seed(&*store).await.unwrap();
        let people = People::new(&db.url).await;
        let login = people.login(Role::SalesOps).to_owned();
        let mut first = people.sql(Role::SalesOps).await;
        let mut second = people.sql(Role::SalesOps).await;
        // The first session asks 60 and has not committed when the second asks 60 more:
        // the second waits for the first, then counts its 60.
        let mut tx = first.begin().await.unwrap();
        sqlx::raw_sql(&flood(&s.stale, 60))
            .execute(&mut *tx)
            .await
            .unwrap();
        let sixty = flood(&s.stale, 60);
        let other = tokio::spawn(async move {
            let r = sqlx::query(&sixty).execute(&mut second).await;
            let refused = match r {
                Ok(_) => ("ok".to_owned(), String::new()),
                Err(sqlx::Error::Database(e)) => (
                    e.code().unwrap_or_default().into_owned(),
                    e.message().to_owned(),
                ),
                Err(e) => panic!("{e}"),
            };
            (refused, second)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        tx.commit().await.unwrap();
        let ((code, message), _second) = other.await.unwrap();
        assert_eq!(code, "P0001", "{message}");
        let mut owner = PgConnection::connect(&db.url).await.unwrap();
        assert_eq!(waiting(&mut owner, &login).await, 60);
        people.drop_all().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_known_shapes_of_request_are_taken() {
    run(Backend::Postgres, |db| async move {
        let store = db.store().await;
        let s = seed(&*store).await.unwrap();
        let people = People::new(&db.url).await;
        let mut sql = people.sql(Role::Manager).await;
        let case_id: i64 = store.cases_of(&s.uncertain).await.unwrap()[0].id;
        let op = s.stale.as_str();
        let resolve = |body: &str| {
            format!(
                "insert into human_requests (kind, case_id, expected_version, body) \
                 values ('resolve', {case_id}, 1, '{body}')"
            )
        };
        let big = "x".repeat(5000);
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let feed = |body: &str| {
            format!("insert into human_requests (kind, body) values ('feed_subscribe', '{body}')")
        };
        for bad in [
            format!("insert into human_requests (kind, operation_id) values ('drop_table', '{op}')"),
            format!("insert into human_requests (kind, operation_id, body) values ('notified', '{op}', 'not json')"),
            format!("insert into human_requests (kind, operation_id, body) values ('notified', '{op}', '[1, 2]')"),
            format!("insert into human_requests (kind, operation_id, body) values ('notified', '{op}', '{{\"detail\": {{\"x\": \"{big}\"}}}}')"),
            format!("insert into human_requests (kind, operation_id, body) values ('notified', '{op}', '{{\"detail\": {{}}, \"payload\": 1}}')"),
            format!("insert into human_requests (kind, operation_id, body) values ('notified', '{op}', '{{\"detail\": \"text\"}}')"),
            "insert into human_requests (kind) values ('notified')".into(),
            format!("insert into human_requests (kind, operation_id, case_id) values ('open_review', '{op}', 5)"),
            resolve(&format!("{{\"resolution\": \"linked_existing\", \"crm_id\": \"{}\"}}", "9".repeat(300))),
            resolve("{\"resolution\": \"linked_existing\", \"crm_id\": \"55\\u001b[2J\"}"),
            resolve("{\"resolution\": \"superseded\"}"),
            resolve("{\"resolution\": \"rejected\", \"comment\": 5}"),
            resolve("{\"resolution\": \"rejected\", \"extra\": true}"),
            resolve("{\"resolution\": \"rejected\", \"bulk\": {\"id\": \"b\", \"of\": 2, \"x\": 1}}"),
            format!("insert into human_requests (kind, operation_id, body) values ('resolve', '{op}', '{{\"resolution\": \"rejected\"}}')"),
            "insert into human_requests (kind, expected_version, body) values ('set_rules', 1, '{\"source\": \"site\"}')".into(),
            "insert into human_requests (kind, body) values ('set_rules', '{\"source\": \"site\", \"rule\": \"link\", \"window_secs\": 60, \"channel\": \"site\"}')".into(),
            // A pause by hand (migration 0030): a connector and a reason said, short and
            // printable, nothing else (a good one is an admin's: `roles.rs`).
            "insert into human_requests (kind, body) values ('pause_connector', '{\"reason\": \"maintenance\"}')".into(),
            "insert into human_requests (kind, connector) values ('pause_connector', 'bitrix24')".into(),
            "insert into human_requests (kind, connector, body) values ('pause_connector', 'bitrix24', '{\"reason\": \" \\n \"}')".into(),
            format!("insert into human_requests (kind, connector, body) values ('pause_connector', 'bitrix24', '{{\"reason\": \"{}\"}}')", "x".repeat(501)),
            "insert into human_requests (kind, connector, body) values ('pause_connector', 'bitrix24', '{\"reason\": \"bell\\u0007\"}')".into(),
            "insert into human_requests (kind, connector, body) values ('pause_connector', 'bitrix24', '{\"reason\": \"m\", \"until\": 5}')".into(),
            "insert into human_requests (kind, connector, body) values ('pause_connector', 'bitrix24', '{\"reason\": 5}')".into(),
            // The feed's subscribers (migration 0032): a bounded printable http(s) URL,
            // known event types or `all`, a `whsec_` base64 secret; an id > 0; only these.
            format!(r#"insert into human_requests (kind, connector, body) values ('feed_subscribe', 'bitrix24', '{{"url": "https://h/x", "events": ["all"], "secret": "{secret}"}}')"#),
            feed(r#"{"url": "https://h/x", "events": ["all"]}"#),
            feed(&format!(r#"{{"url": "https://h/x", "events": ["all"], "secret": "{secret}", "extra": 1}}"#)),
            feed(&format!(r#"{{"url": "ftp://h/x", "events": ["all"], "secret": "{secret}"}}"#)),
            feed(&format!(r#"{{"url": "https://h/a b", "events": ["all"], "secret": "{secret}"}}"#)),
            feed(&format!(r#"{{"url": "https://h/x\u0007", "events": ["all"], "secret": "{secret}"}}"#)),
            feed(&format!(r#"{{"url": "https://h/{}", "events": ["all"], "secret": "{secret}"}}"#, "x".repeat(2048))),
            feed(&format!(r#"{{"url": 5, "events": ["all"], "secret": "{secret}"}}"#)),
            feed(&format!(r#"{{"url": "https://h/x", "events": "all", "secret": "{secret}"}}"#)),
            feed(&format!(r#"{{"url": "https://h/x", "events": [], "secret": "{secret}"}}"#)),
            feed(&format!(r#"{{"url": "https://h/x", "events": ["review.open"], "secret": "{secret}"}}"#)),
            feed(&format!(r#"{{"url": "https://h/x", "events": [5], "secret": "{secret}"}}"#)),
            feed(r#"{"url": "https://h/x", "events": ["all"], "secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}"#),
            feed(r#"{"url": "https://h/x", "events": ["all"], "secret": "whsec_a b"}"#),
            feed(&format!(r#"{{"url": "https://h/x", "events": ["all"], "secret": "whsec_{}"}}"#, "A".repeat(200))),
            "insert into human_requests (kind, body) values ('feed_remove', '{}')".into(),
            "insert into human_requests (kind, body) values ('feed_remove', '{\"id\": 0}')".into(),
            "insert into human_requests (kind, body) values ('feed_remove', '{\"id\": -3}')".into(),
            "insert into human_requests (kind, body) values ('feed_remove', '{\"id\": 1.5}')".into(),
            "insert into human_requests (kind, body) values ('feed_enable', '{\"id\": \"1\"}')".into(),
            "insert into human_requests (kind, body) values ('feed_enable', '{\"id\": 1, \"url\": \"https://h\"}')".into(),
            "insert into human_requests (kind, connector, body) values ('feed_enable', 'bitrix24', '{\"id\": 1}')".into(),
        ] {
            let (code, message) = refusal(&mut sql, &bad).await;
            assert_eq!(code, "23514", "{bad}: {message}");
            assert!(message.starts_with("leadgate: this request was refused: "), "{message}");
        }
        // What the console writes is taken.
        for good in [
            format!("insert into human_requests (kind, operation_id, body) values ('notified', '{op}', '{{\"detail\": {{\"what\": \"review_opened\", \"channel\": \"desktop\", \"to\": \"me\"}}}}')"),
            format!("insert into human_requests (kind, operation_id) values ('open_review', '{op}')"),
            resolve(&format!("{{\"resolution\": \"linked_existing\", \"crm_id\": \"{}\", \"comment\": \"same client\", \"bulk\": null}}", "9".repeat(256))),
            resolve("{\"resolution\": \"rejected\", \"crm_id\": null, \"comment\": \"spam\", \"bulk\": {\"id\": \"b1\", \"of\": 3}}"),
            "insert into human_requests (kind, expected_version, body) values ('set_rules', 1, '{\"source\": \"site\", \"rule\": \"link\", \"window_secs\": 60, \"channel\": \"site\"}')".into(),
        ] {
            assert_eq!(refusal(&mut sql, &good).await, ("ok".into(), String::new()), "{good}");
        }
        people.drop_all().await;
    })
    .await;
}

each_backend!(a_timeline_is_read_a_page_at_a_time, |db| async move {
    let store = db.store().await;
    store
        .record_delivery(delivery("long-timeline", json!({"name": "Ivan"})))
        .await
        .unwrap();
    let id = OperationId::new("site", "long-timeline").unwrap();
    for n in 0..260 {
        let note = Ask::Notified {
            operation_id: id.clone(),
            detail: json!({"what": "flood", "n": n}),
        };
        store.perform("anna", note, store.now()).await.unwrap();
    }
    let all = store.timeline(&id).await.unwrap();
    let total = all.len() as i64;
    assert!(total > TIMELINE_PAGE + 50);

    // The newest page, oldest first, and how many are older; then the rest.
    let newest = store.timeline_page(&id, None, TIMELINE_PAGE).await.unwrap();
    assert_eq!(newest.events.len() as i64, TIMELINE_PAGE);
    assert_eq!(newest.older, total - TIMELINE_PAGE);
    assert_eq!(newest.events.last(), all.last());
    let before = newest.events[0].id;
    let rest = store
        .timeline_page(&id, Some(before), TIMELINE_PAGE)
        .await
        .unwrap();
    assert_eq!(rest.older, 0);
    let joined: Vec<_> = rest.events.iter().chain(&newest.events).cloned().collect();
    assert_eq!(joined, all);
    // No read returns more than a page, whatever it asks for.
    let asked_for_all = store.timeline_page(&id, None, i64::MAX).await.unwrap();
    assert_eq!(
        asked_for_all.events.len() as i64,
        total.min(TIMELINE_PAGE_MAX)
    );

    // The console shows the newest page and reads older events on demand.
    let console = Console::open(&db.url).await.unwrap();
    let detail = console.case_detail(id.as_str(), None, None).await.unwrap();
    assert_eq!(detail.timeline.len() as i64, TIMELINE_PAGE);
    assert_eq!(detail.older_events, total - TIMELINE_PAGE);
    assert_eq!(detail.timeline.last().unwrap().id, all.last().unwrap().id);
    let older = console
        .older_events(id.as_str(), detail.timeline[0].id)
        .await
        .unwrap();
    assert_eq!(older.events.len() as i64, total - TIMELINE_PAGE);
    assert_eq!(older.older, 0);
    assert_eq!(older.events[0].id, all[0].id);

    // `ops show` prints a page and says how to read the older ones.
    let shown = leadgate::report::operation(&*store, &id, None, 20)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(shown.matches("notification").count(), 20, "{shown}");
    assert!(
        shown.contains(&format!(
            "… {} older events: leadgate ops show 'site:long-timeline' --before ",
            total - 20
        )),
        "{shown}"
    );
});
