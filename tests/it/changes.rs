//! The console's live updates under a NOTIFY storm (issue 32, point 8): any login may
//! NOTIFY the console's channel (PostgreSQL cannot restrict it), so the console
//! coalesces — at most a few refreshes every `REFRESH_EVERY`, however many arrive, and
//! the last change is still handed on.

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
use tokio::sync::broadcast::error::RecvError;

use leadgate::store::changes::{CHANGES_CHANNEL, NAMES_PER_BATCH, REFRESH_EVERY};
use leadgate_console_model::ConsoleState;
use leadgate_testkit::{run, Backend};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_notify_storm_is_a_bounded_number_of_refreshes() {
    run(Backend::Postgres, |db| async move {
        let _store = db.store().await;
        let dir = tempfile::tempdir().unwrap();
        let state = ConsoleState::new(dir.path().join("settings.json"), Some(db.url.clone()));
        let mut changes = state.subscribe();
        state.connect(None).await.unwrap();
        let started = Instant::now();
        // 5,000 notifications from a raw connection: five transactions of 1,000 distinct
        // payloads (PostgreSQL folds identical ones within a transaction), one of them a
        // table the console knows.
        let storm = {
            let url = db.url.clone();
            tokio::spawn(async move {
                let mut conn = PgConnection::connect(&url).await.unwrap();
                for round in 0..5 {
                    sqlx::query(
                        "select pg_notify($1, case when i = 1 then 'review_cases' \
                         else repeat('x', 100) || $2 || '-' || i end) \
                         from generate_series(1, 1000) i",
                    )
                    .bind(CHANGES_CHANNEL)
                    .bind(round.to_string())
                    .execute(&mut conn)
                    .await
                    .unwrap();
                }
            })
        };
        let mut received = 0usize;
        let mut names = vec![];
        let mut storm = Some(storm);
        loop {
            // Until the storm is over and a quiet spell shows everything was handed on.
            match tokio::time::timeout(REFRESH_EVERY * 6, changes.recv()).await {
                Ok(Ok(name)) => {
                    received += 1;
                    names.push(name);
                }
                Ok(Err(RecvError::Lagged(n))) => received += n as usize,
                Ok(Err(RecvError::Closed)) => panic!("closed"),
                Err(_) => {
                    if let Some(s) = storm.take() {
                        s.await.unwrap();
                    } else {
                        break;
                    }
                }
            }
            if storm.as_ref().is_some_and(|s| s.is_finished()) {
                storm.take().unwrap().await.unwrap();
            }
        }
        let elapsed = started.elapsed();
        let batches = (elapsed.as_secs_f64() / REFRESH_EVERY.as_secs_f64()).ceil() as usize + 1;
        eprintln!("{received} refreshes for 5,000 notifications in {elapsed:?}");
        assert!(received >= 1, "the storm was handed on at least once");
        assert!(
            received <= NAMES_PER_BATCH * batches,
            "{received} refreshes in {elapsed:?} (at most {} allowed)",
            NAMES_PER_BATCH * batches
        );
        assert!(names.iter().all(|n| n.len() <= 63), "{names:?}");
        // And the console still hears a real change after it.
        sqlx::query("select pg_notify($1, 'connectors')")
            .bind(CHANGES_CHANNEL)
            .execute(&mut PgConnection::connect(&db.url).await.unwrap())
            .await
            .unwrap();
        let next = tokio::time::timeout(Duration::from_secs(10), changes.recv())
            .await
            .expect("a refresh")
            .unwrap();
        assert_eq!(next, "connectors");
    })
    .await;
}
