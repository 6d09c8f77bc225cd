//! What someone else holds must not hold intake (issue 32, points 1, 2 and 9).
//!
//! - A person's login — support, the weakest — takes every lock it can compute: the
//!   advisory locks the old intake and sqlx's migrations serialised on, and rows and
//!   tables of the locks that replaced them. Leads keep coming in and a gateway starts.
//! - A person's open transaction in front of a migration's `ALTER`: intake keeps flowing
//!   while the migration tries, and the migration gives up naming that login.
//! - A database connection that stops answering (a proxy that keeps the sockets open and
//!   forwards nothing): every sender hears "unavailable" within the intake's patience,
//!   and a delivery no writer took is never written.
//! - A phone that many leads share (a placeholder number, a switchboard) is neither
//!   matched nor waited on, on both backends, and holding its intake slot holds nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use serde_json::json;
use sqlx::migrate::{Migration, MigrationType};
use sqlx::{Connection, PgConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use leadgate::domain::roles::Role;
use leadgate::domain::{MatchRule, OperationId, Status};
use leadgate::store::postgres::{IntakePath, PgStore};
use leadgate::store::*;
use leadgate_testkit::db::{run, Backend, TestDb};
use leadgate_testkit::each_backend;
use leadgate_testkit::people::People;
use leadgate_testkit::seed::delivery;

/// Long enough for anything that waits on nothing someone else holds, on a busy machine;
/// far shorter than what the person holds it for.
const PROMPTLY: Duration = Duration::from_secs(20);

/// The intake's patience (`store::intake_queue::PATIENCE`), and room for a busy machine.
const PATIENCE_AND_SLACK: Duration = Duration::from_secs(10 + 15);

fn lead(key: &str) -> NewDelivery {
    delivery(key, json!({"k": key}))
}

/// A lead carrying `phone` (and `email`), matched by `rule` over the last day.
fn with_phone(key: &str, phone: &str, email: Option<&str>) -> NewDelivery {
    let mut d = delivery(key, json!({"k": key, "phone": phone, "email": email}));
    d.contact.phone = Some(phone.into());
    d.contact.email = email.map(Into::into);
    d.matching = Some(Matching {
        rule: MatchRule::Review,
        since: d.received_at - TimeDelta::days(1),
        same_channel: vec![],
        shared_after: Matching::SHARED_AFTER,
    });
    d
}

fn id(key: &str) -> OperationId {
    OperationId::new("site", key).unwrap()
}

async fn status(store: &dyn Store, key: &str) -> Status {
    store.operation(&id(key)).await.unwrap().unwrap().status
}

/// The SQLSTATE a statement failed with, or "ok".
async fn sqlstate(conn: &mut PgConnection, sql: &str) -> String {
    match sqlx::raw_sql(sql).execute(&mut *conn).await {
        Ok(_) => "ok".into(),
        Err(sqlx::Error::Database(e)) => e.code().unwrap_or_default().into_owned(),
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// sqlx's migration lock id for a database (sqlx-postgres `generate_lock_id`: a CRC-32
/// of its name times a constant), which the migrations of earlier versions took.
fn sqlx_migration_lock_id(database: &str) -> i64 {
    let mut crc = !0u32;
    for &b in database.as_bytes() {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    0x3d32_ad9e * i64::from(!crc)
}

/// A support login holds the advisory lock of a phone's contact key (what intake
/// serialised on: anyone can compute it) and sqlx's migration lock, for as long as it
/// likes. A lead with that phone is recorded, matched as before, and a gateway starts
/// (it migrates first) — neither waits for the person. Every lock that replaced them is
/// out of every role's reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_persons_advisory_locks_hold_no_lead_and_no_gateway() {
    const PHONE: &str = "+79991230001";
    run(Backend::Postgres, |db| async move {
        let people = People::new(&db.url).await;
        let store = db.store().await;
        store
            .record_delivery(with_phone("first", PHONE, None))
            .await
            .unwrap();
        let mut support = people.sql(Role::Support).await;
        let database: String = sqlx::query_scalar("select current_database()")
            .fetch_one(&mut support)
            .await
            .unwrap();
        sqlx::query(
            "select pg_advisory_lock(('x' || substr(encode(sha256(convert_to($1, 'UTF8')), \
             'hex'), 1, 16))::bit(64)::bigint), pg_advisory_lock($2)",
        )
        .bind(format!("leadgate contact phone:{PHONE}"))
        .bind(sqlx_migration_lock_id(&database))
        .execute(&mut support)
        .await
        .unwrap();

        let second = tokio::time::timeout(
            PROMPTLY,
            store.record_delivery(with_phone("second", PHONE, None)),
        )
        .await
        .expect("a lead does not wait for a person's advisory lock")
        .unwrap();
        assert!(matches!(second.outcome, DeliveryOutcome::New { .. }));
        assert_eq!(status(&*store, "second").await, Status::NeedsReview);
        tokio::time::timeout(PROMPTLY, PgStore::connect(&db.url))
            .await
            .expect("a gateway starts while a person holds sqlx's migration lock")
            .unwrap();

        // What a person leaves hanging ends by itself (PERSON_SESSION_LIMITS).
        let mut shown = vec![];
        for setting in [
            "statement_timeout",
            "idle_in_transaction_session_timeout",
            "idle_session_timeout",
        ] {
            let v: String = sqlx::query_scalar(&format!("show {setting}"))
                .fetch_one(&mut support)
                .await
                .unwrap();
            shown.push(v);
        }
        assert_eq!(shown, ["1min", "1min", "1h"]);
        for role in Role::ALL {
            let mut conn = people.sql(*role).await;
            for sql in [
                "select 1 from intake_contact_slots where slot = 1 for update",
                "select 1 from intake_contact_slots where slot = 1 for key share",
                "select 1 from leadgate_locks for update",
                "lock table intake_contact_slots in share mode",
                "lock table leadgate_locks in access exclusive mode",
                "select count(*) from human_request_logins",
            ] {
                sqlx::raw_sql("begin").execute(&mut conn).await.unwrap();
                assert_eq!(sqlstate(&mut conn, sql).await, "42501", "{role} {sql}");
                sqlx::raw_sql("rollback").execute(&mut conn).await.unwrap();
            }
        }
        drop(support);
        people.drop_all().await;
    })
    .await
}

/// A person's transaction left open on `operations` (a plain SELECT, then nothing) in
/// front of a migration that alters the table: the migration waits a second at a time
/// for the table and lets intake through in between, so leads keep being recorded; after
/// about a minute it gives up, rolled back, naming the person's login. Once the person's
/// transaction ends, the same migration goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_migration_behind_a_persons_open_transaction_neither_stalls_intake_nor_waits_for_ever() {
    run(Backend::Postgres, |db| async move {
        let people = People::new(&db.url).await;
        let store = Arc::new(PgStore::connect(&db.url).await.unwrap());
        let mut person = people.sql(Role::SalesOps).await;
        sqlx::raw_sql("begin; select operation_id from operations limit 1")
            .execute(&mut person)
            .await
            .unwrap();
        let with_an_alter = || {
            let mut m = sqlx::migrate!("crates/leadgate-store/migrations/postgres");
            m.migrations.to_mut().push(Migration::new(
                9_000,
                "a test's alter".into(),
                MigrationType::Simple,
                "alter table operations add column lg_test integer".into(),
                false,
            ));
            m
        };
        let migration = {
            let (store, url, m) = (store.clone(), db.url.clone(), with_an_alter());
            tokio::spawn(async move { store.migrate_with(&url, m).await })
        };
        for i in 0..5 {
            let recorded =
                tokio::time::timeout(PROMPTLY, store.record_delivery(lead(&format!("k{i}"))))
                    .await
                    .expect("intake is not stalled behind the migration")
                    .unwrap();
            assert!(matches!(recorded.outcome, DeliveryOutcome::New { .. }));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let blocked = tokio::time::timeout(Duration::from_secs(180), migration)
            .await
            .expect("the migration gives up")
            .unwrap();
        match blocked {
            Err(StoreError::MigrationBlocked(who)) => {
                assert!(who.contains(people.login(Role::SalesOps)), "{who}")
            }
            other => panic!("{other:?}"),
        }
        sqlx::raw_sql("rollback")
            .execute(&mut person)
            .await
            .unwrap();
        store.migrate_with(&db.url, with_an_alter()).await.unwrap();
        let mut c = PgConnection::connect(&db.url).await.unwrap();
        let added: bool = sqlx::query_scalar(
            "select exists (select 1 from information_schema.columns \
             where table_name = 'operations' and column_name = 'lg_test')",
        )
        .fetch_one(&mut c)
        .await
        .unwrap();
        assert!(added);
        drop(person);
        people.drop_all().await;
    })
    .await
}

/// A TCP proxy to PostgreSQL that can stop forwarding while keeping every socket open: a
/// database (or a network) that stopped answering without closing anything.
pub(crate) struct Freezer {
    pub(crate) addr: String,
    frozen: Arc<AtomicBool>,
}

impl Freezer {
    pub(crate) async fn to(upstream: String) -> Freezer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let frozen = Arc::new(AtomicBool::new(false));
        let f = frozen.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pump(cr, sw, f.clone()));
                tokio::spawn(pump(sr, cw, f.clone()));
            }
        });
        Freezer { addr, frozen }
    }

    pub(crate) fn freeze(&self, on: bool) {
        self.frozen.store(on, Ordering::SeqCst);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let held = || async {
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    loop {
        held().await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // what was read while it froze is held too
        held().await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The database stops answering on every connection of the gateway's pool, without
/// closing them. Two deliveries take both intake writers, a third waits for one: each
/// sender hears "unavailable" within the intake's patience (before, the first ones waited
/// as long as the connection stayed silent: 610 s in the review). Once the database
/// answers again, the gateway records leads again, and each sender's next attempt makes
/// one operation of its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_sender_hears_unavailable_in_time_when_the_database_stops_answering() {
    run(Backend::Postgres, |db| async move {
        let upstream = "127.0.0.1:5432";
        assert!(db.url.contains(upstream), "{}", db.url);
        let proxy = Freezer::to(upstream.into()).await;
        let url = db.url.replace(upstream, &proxy.addr);
        let store: Arc<dyn Store> = Arc::new(PgStore::connect(&url).await.unwrap());
        store.record_delivery(lead("before")).await.unwrap();

        proxy.freeze(true);
        let mut senders = vec![];
        for key in ["held1", "held2", "queued"] {
            let store = store.clone();
            senders.push(tokio::spawn(async move {
                tokio::time::timeout(PATIENCE_AND_SLACK, store.record_delivery(lead(key))).await
            }));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        for (key, sender) in ["held1", "held2", "queued"].iter().zip(senders) {
            let answer = sender
                .await
                .unwrap()
                .unwrap_or_else(|_| panic!("{key}: no answer while the database is silent"));
            assert!(answer.is_err(), "{key}: {answer:?}");
        }
        proxy.freeze(false);

        tokio::time::timeout(Duration::from_secs(90), async {
            while store.record_delivery(lead("after")).await.is_err() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await
        .expect("the gateway records again once the database answers");
        // Each sender sends again: one operation per key, whether its first delivery was
        // written after all (a group already running commits) or not.
        for key in ["held1", "held2", "queued"] {
            let again = store.record_delivery(lead(key)).await.unwrap();
            assert!(
                matches!(
                    again.outcome,
                    DeliveryOutcome::New { .. } | DeliveryOutcome::Duplicate { .. }
                ),
                "{key}: {again:?}"
            );
        }
        let mut c = PgConnection::connect(&db.url).await.unwrap();
        let operations: i64 = sqlx::query_scalar(
            "select count(*) from operations where operation_id in ('site:held1', 'site:held2', 'site:queued')",
        )
        .fetch_one(&mut c)
        .await
        .unwrap();
        assert_eq!(operations, 3);
    })
    .await
}

/// SQLite's one writer waits for the database file's write lock, held here by another
/// connection (as a second process on the file would) for longer than the intake's
/// patience: each sender hears "unavailable" within it while the file is still held; the
/// delivery the writer had taken is written once the file is free (its sender's next
/// attempt is a duplicate), and the one queued behind it never is.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_sqlite_every_sender_hears_unavailable_in_time_while_the_file_is_held() {
    use sqlx::SqliteConnection;
    run(Backend::Sqlite, |db| async move {
        let store: Arc<dyn Store> = Arc::new(
            leadgate::store::sqlite::SqliteStore::connect(&db.url)
                .await
                .unwrap(),
        );
        let mut other = SqliteConnection::connect(&db.url).await.unwrap();
        sqlx::query("begin immediate")
            .execute(&mut other)
            .await
            .unwrap();
        let mut senders = vec![];
        for key in ["first", "queued"] {
            let store = store.clone();
            senders.push(tokio::spawn(async move {
                tokio::time::timeout(PATIENCE_AND_SLACK, store.record_delivery(lead(key))).await
            }));
            // the writer takes the first at once and waits for the file's lock
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        for sender in senders {
            let answer = sender
                .await
                .unwrap()
                .expect("answered while the file is held");
            assert!(answer.is_err(), "{answer:?}");
        }
        sqlx::query("commit").execute(&mut other).await.unwrap();
        let again = tokio::time::timeout(PROMPTLY, store.record_delivery(lead("first")))
            .await
            .expect("recorded once the file is free")
            .unwrap();
        assert!(
            matches!(again.outcome, DeliveryOutcome::Duplicate { .. }),
            "{again:?}"
        );
        let written: i64 = sqlx::query_scalar(
            "select count(*) from deliveries where operation_id = 'site:queued'",
        )
        .fetch_one(&mut other)
        .await
        .unwrap();
        assert_eq!(written, 0);
    })
    .await
}

/// The delivery event's `shared_contact`, if any.
async fn shared_contact(store: &dyn Store, key: &str) -> Option<serde_json::Value> {
    let events = store.timeline(&id(key)).await.unwrap();
    let delivery = events.iter().find(|e| e.kind == "delivery").unwrap();
    delivery.detail.get("shared_contact").cloned()
}

// A phone that twenty other leads of the window carry already is shared: the 21st lead
// with it is neither matched nor put in review (a placeholder number would otherwise
// link or queue every visitor who typed it), and its timeline says why. Its e-mail is
// still matched. The same on both backends, through either PostgreSQL path.
each_backend!(
    a_phone_twenty_leads_share_is_no_longer_matched,
    |db: TestDb| async move {
        const PHONE: &str = "+79990000777";
        let store = db.store().await;
        for i in 0..Matching::SHARED_AFTER {
            let d = with_phone(&format!("s{i}"), PHONE, None);
            store.record_delivery(d).await.unwrap();
        }
        assert_eq!(status(&*store, "s0").await, Status::Received);
        let last = format!("s{}", Matching::SHARED_AFTER - 1);
        assert_eq!(status(&*store, &last).await, Status::NeedsReview);
        assert_eq!(shared_contact(&*store, &last).await, None);

        store
            .record_delivery(with_phone("shared", PHONE, None))
            .await
            .unwrap();
        assert_eq!(status(&*store, "shared").await, Status::Received);
        assert_eq!(
            shared_contact(&*store, "shared").await,
            Some(json!(["phone"]))
        );
        // Its own e-mail, carried by one earlier lead, still matches.
        store
            .record_delivery(with_phone("mail1", "+79990000001", Some("a@example.com")))
            .await
            .unwrap();
        store
            .record_delivery(with_phone("mail2", PHONE, Some("a@example.com")))
            .await
            .unwrap();
        assert_eq!(status(&*store, "mail2").await, Status::NeedsReview);
        assert_eq!(
            shared_contact(&*store, "mail2").await,
            Some(json!(["phone"]))
        );
    }
);

/// PostgreSQL's steps decide as its grouped intake does, and a shared phone is never
/// waited on: with its intake slot held by another transaction (as a concurrent intake
/// of a person's phone would hold it), leads with the shared phone are recorded through
/// both paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shared_phone_is_nobodys_queue() {
    const PHONE: &str = "+79990000778";
    run(Backend::Postgres, |db| async move {
        let store = PgStore::connect(&db.url).await.unwrap();
        for i in 0..Matching::SHARED_AFTER {
            store
                .record_delivery(with_phone(&format!("s{i}"), PHONE, None))
                .await
                .unwrap();
        }
        let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
        let mut holder = pool.begin().await.unwrap();
        let locked: i64 = sqlx::query_scalar(
            "select count(*) from (select 1 from intake_contact_slots where slot = \
             ((('x' || substr(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint) \
             & 65535)::integer for update) s",
        )
        .bind(format!("leadgate contact phone:{PHONE}"))
        .fetch_one(&mut *holder)
        .await
        .unwrap();
        assert_eq!(locked, 1);
        for (key, path) in [("grouped", IntakePath::Grouped), ("steps", IntakePath::Steps)] {
            let (record, took) = tokio::time::timeout(
                PROMPTLY,
                store.record_delivery_by(with_phone(key, PHONE, None), path),
            )
            .await
            .unwrap_or_else(|_| panic!("{key} waited for the shared phone's slot"))
            .unwrap();
            assert_eq!(took, path);
            assert!(matches!(record.outcome, DeliveryOutcome::New { status: Status::Received }));
            assert_eq!(shared_contact(&store, key).await, Some(json!(["phone"])));
        }
        holder.rollback().await.unwrap();
    })
    .await
}

/// Gateways started together on a new database make the migration lock's table at once:
/// PostgreSQL's `create table if not exists` is not safe against itself, and the one that
/// loses says "duplicate key" or "type … already exists" depending on where it lost. It
/// finds the table made and goes on; every start comes up (eight at once, three fresh
/// databases: the race was seen in the chaos run).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gateways_starting_together_on_a_new_database_all_come_up() {
    for _ in 0..3 {
        run(Backend::Postgres, |db| async move {
            let starts = (0..8).map(|_| {
                let url = db.url.clone();
                tokio::spawn(async move { PgStore::connect(&url).await.map(|_| ()) })
            });
            for (i, start) in futures::future::join_all(starts)
                .await
                .into_iter()
                .enumerate()
            {
                let started = start.unwrap();
                assert!(started.is_ok(), "start {i}: {:?}", started.err());
            }
        })
        .await;
    }
}
