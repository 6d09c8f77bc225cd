//! The gateway's own connections to PostgreSQL (issue 32, point 8): its commits are
//! synchronous whatever the database's settings say.

use sqlx::{Connection, PgConnection};

use leadgate::store::postgres::PgStore;
use leadgate_testkit::{run, Backend};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gateways_commits_are_synchronous_whatever_the_database_says() {
    run(Backend::Postgres, |db| async move {
        let name = &db.url[db.url.rfind('/').unwrap() + 1..];
        let mut su = PgConnection::connect(&db.url).await.unwrap();
        // The database is dropped after the test: nothing to restore.
        sqlx::raw_sql(&format!(
            "alter database {name} set synchronous_commit = off"
        ))
        .execute(&mut su)
        .await
        .unwrap();
        let mut plain = PgConnection::connect(&db.url).await.unwrap();
        let said: String = sqlx::query_scalar("show synchronous_commit")
            .fetch_one(&mut plain)
            .await
            .unwrap();
        assert_eq!(
            said, "off",
            "the database's setting applies to other connections"
        );
        let store = PgStore::connect(&db.url).await.unwrap();
        for _ in 0..3 {
            let ours: String = sqlx::query_scalar("show synchronous_commit")
                .fetch_one(store.pool())
                .await
                .unwrap();
            assert_eq!(ours, "on");
        }
    })
    .await;
}
