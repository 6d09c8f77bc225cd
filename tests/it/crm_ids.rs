//! A CRM id a person types is bounded and printable (issue 32, point 8), and stored text
//! reaches a terminal with its control characters escaped, on both backends. The claim
//! API's half is in `claim_api.rs`; a person's raw SQL request in `requests.rs`.

use serde_json::json;

use leadgate::domain::OperationId;
use leadgate::store::Ask;
use leadgate_console_model::{Action, ActionRequest, Console, ConsoleError};
use leadgate_testkit::seed::seed;
use leadgate_testkit::{each_backend, Backend, TestDb};

async fn execute(db: &TestDb, sql: &str) {
    match db.backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
            sqlx::raw_sql(sql).execute(&pool).await.unwrap();
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            sqlx::raw_sql(sql).execute(&pool).await.unwrap();
        }
    }
}

each_backend!(
    a_crm_id_too_long_or_unprintable_is_refused_and_nothing_changes,
    |db| async move {
        let store = db.store().await;
        let s = seed(&*store).await.unwrap();
        let console = Console::open(&db.url).await.unwrap();
        let detail = console
            .case_detail(s.uncertain.as_str(), None, None)
            .await
            .unwrap();
        let case = detail.case.unwrap();
        for crm_id in [
            "9".repeat(500_000),
            "55\u{1b}[2J".into(),
            "55\u{202e}1".into(),
        ] {
            for action in [
                Action::Link {
                    crm_id: crm_id.clone(),
                },
                Action::Confirm {
                    crm_id: crm_id.clone(),
                },
            ] {
                let refused = console
                    .act(
                        "anna",
                        ActionRequest {
                            case_id: case.id,
                            expected_version: case.version,
                            comment: None,
                            action,
                        },
                    )
                    .await;
                match refused {
                    Err(ConsoleError::Refused { code, message, .. }) => {
                        assert_eq!(code, "crm_id_invalid", "{message}");
                        assert!(message.contains("at most 256 printable characters"));
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
        let op = store.operation(&s.uncertain).await.unwrap().unwrap();
        assert_eq!(op.crm_id, None);
        assert!(store
            .case(case.id)
            .await
            .unwrap()
            .unwrap()
            .resolved_at
            .is_none());
    }
);

each_backend!(
    ops_show_prints_stored_control_characters_as_escapes,
    |db| async move {
        let store = db.store().await;
        store
            .record_delivery(leadgate_testkit::seed::delivery(
                "terminal",
                json!({"name": "Ivan"}),
            ))
            .await
            .unwrap();
        let id = OperationId::new("site", "terminal").unwrap();
        // What a CRM answered (not typed by a person, so not refused at input), and a
        // timeline event whose detail carries a C1 control and a bidirectional override.
        let chr = match db.backend {
            Backend::Sqlite => "char",
            Backend::Postgres => "chr",
        };
        execute(
            &db,
            &format!(
                "update operations set crm_id = '77' || {chr}(27) || '[2J' || {chr}(7), \
                 last_error = 'gone' || {chr}(27) || ']0;pwned' || {chr}(7) \
                 where operation_id = 'site:terminal'"
            ),
        )
        .await;
        let note = Ask::Notified {
            operation_id: id.clone(),
            detail: json!({"what": "x\u{9b}2J\u{202e}y"}),
        };
        store.perform("anna", note, store.now()).await.unwrap();
        let shown = leadgate::report::operation(&*store, &id, None, 200)
            .await
            .unwrap()
            .unwrap();
        assert!(
            !shown
                .chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{shown:?}"
        );
        assert!(shown.contains("crm_id      77\\u{1b}[2J\\u{7}"), "{shown}");
        assert!(shown.contains("gone\\u{1b}]0;pwned\\u{7}"), "{shown}");
        assert!(shown.contains("x\\u{9b}2J\\u{202e}y"), "{shown}");
    }
);
