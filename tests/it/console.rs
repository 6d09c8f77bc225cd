//! The console's commands (`leadgate_console_model`, which every Tauri command delegates
//! to in one line) against both backends. The freshness of the generated TypeScript is
//! the model crate's own unit test.

use leadgate::domain::OperationId;
use leadgate::store;
use leadgate_console_model::*;

use leadgate_testkit::each_backend;

async fn seeded(db: &leadgate_testkit::TestDb) -> (Console, leadgate_testkit::seed::Seeded) {
    let store = db.store().await;
    let seeded = leadgate_testkit::seed::seed(&*store).await.unwrap();
    (Console::open(&db.url).await.unwrap(), seeded)
}

async fn open_case_of(console: &Console, id: &OperationId) -> CaseView {
    console
        .case_detail(id.as_str(), None, None)
        .await
        .unwrap()
        .case
        .expect("an open case")
}

each_backend!(
    console_refuses_a_database_without_the_schema,
    |db| async move {
        let err = Console::open(&db.url).await.err().unwrap();
        assert_eq!(err, ConsoleError::SchemaMissing);
        drop(db.store().await);
        let console = Console::open(&db.url).await.unwrap();
        assert_eq!(
            console.connection.schema_version,
            store::known_schema_version()
        );
    }
);

#[tokio::test]
async fn an_unreachable_database_is_a_clear_error() {
    let err = Console::open("postgres://nobody@127.0.0.1:1/none")
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ConsoleError::Unreachable { .. }), "{err:?}");
    let err = Console::open("mysql://x").await.err().unwrap();
    assert!(matches!(err, ConsoleError::Invalid { .. }), "{err:?}");
}

each_backend!(queue_tabs_and_counts, |db| async move {
    let (console, s) = seeded(&db).await;
    let counts = console.counts().await.unwrap();
    assert_eq!(counts.payload_conflict, 1);
    assert_eq!(counts.needs_review, 3, "{counts:?}");
    assert_eq!(counts.failed_terminal, 1);
    assert_eq!(counts.stale, 1);
    assert_eq!(counts.paused_connectors, 1);
    let ids = |p: QueuePage| {
        p.rows
            .into_iter()
            .map(|r| r.operation_id.unwrap_or(r.source))
            .collect::<Vec<_>>()
    };
    let review = console
        .queue(Tab::NeedsReview, QueueQuery::default())
        .await
        .unwrap();
    assert_eq!(
        ids(review),
        [
            s.uncertain.to_string(),
            s.cross_channel.to_string(),
            s.exhausted.to_string()
        ]
    );
    // Keyset paging: one row per page.
    let first = console
        .queue(
            Tab::NeedsReview,
            QueueQuery {
                limit: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let second = console
        .queue(
            Tab::NeedsReview,
            QueueQuery {
                limit: Some(1),
                cursor: first.next.clone(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(second), [s.cross_channel.to_string()]);
    let by_reason = console
        .queue(
            Tab::NeedsReview,
            QueueQuery {
                reason: Some("retries_exhausted".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(by_reason), [s.exhausted.to_string()]);
    let by_source = console
        .queue(
            Tab::NeedsReview,
            QueueQuery {
                source: Some("calls".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ids(by_source), [s.cross_channel.to_string()]);
    let conflicts = console
        .queue(Tab::PayloadConflict, QueueQuery::default())
        .await
        .unwrap();
    assert_eq!(ids(conflicts), [s.conflict.to_string()]);
    let failed = console
        .queue(Tab::FailedTerminal, QueueQuery::default())
        .await
        .unwrap();
    assert_eq!(ids(failed), [s.failed.to_string()]);
    let stale = console
        .queue(Tab::Stale, QueueQuery::default())
        .await
        .unwrap();
    assert_eq!(ids(stale), [s.stale.to_string()]);
    let connectors = console
        .queue(Tab::Connectors, QueueQuery::default())
        .await
        .unwrap();
    assert_eq!(connectors.rows[0].status, "paused");
    // Without a case to start after: the newest open case alone, where notifications
    // start; after it, nothing yet; after the oldest, the three newer.
    let newest = console.cases_after(None).await.unwrap();
    assert_eq!(newest.len(), 1);
    let newest_id = newest[0].case_id.unwrap();
    assert!(console
        .cases_after(Some(newest_id))
        .await
        .unwrap()
        .is_empty());
    let all = console.cases_after(Some(0)).await.unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(all.last().unwrap().case_id, Some(newest_id));
});

each_backend!(
    case_detail_has_timeline_diff_and_candidates,
    |db| async move {
        let (console, s) = seeded(&db).await;
        let d = console
            .case_detail(
                s.conflict.as_str(),
                None,
                Some("https://crm.example/lead/{id}/"),
            )
            .await
            .unwrap();
        let conflict = d.conflict.expect("both sides of the conflict");
        assert_eq!(conflict.original.as_ref().unwrap()["name"], "Gleb");
        assert_eq!(
            conflict.incoming.payload.as_ref().unwrap()["name"],
            "Gleb Petrov"
        );
        let kinds: Vec<_> = d.timeline.iter().map(|e| e.kind.as_str()).collect();
        for k in [
            "delivery",
            "claimed",
            "crm_request",
            "crm_response",
            "review_opened",
        ] {
            assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
        }
        let cross = console
            .case_detail(
                s.cross_channel.as_str(),
                None,
                Some("https://crm.example/lead/{id}/"),
            )
            .await
            .unwrap();
        assert_eq!(cross.candidates.len(), 1);
        assert_eq!(cross.candidates[0].crm_id.as_deref(), Some("7001"));
        assert_eq!(
            cross.candidates[0].crm_url.as_deref(),
            Some("https://crm.example/lead/7001/")
        );
        assert!(console.case_detail("site:none", None, None).await.is_err());
        // The actions offered are the rules' own: a conflict is kept or accepted (or
        // settled by id); a cross-channel match that never went out may also be created.
        let allowed = |d: &CaseDetail| d.allowed.join(" ");
        let conflict_detail = console
            .case_detail(s.conflict.as_str(), None, None)
            .await
            .unwrap();
        assert!(
            allowed(&conflict_detail).contains("kept_original"),
            "{}",
            allowed(&conflict_detail)
        );
        assert!(!allowed(&conflict_detail).contains("retry_authorized"));
        assert!(
            allowed(&cross).contains("created_new"),
            "{}",
            allowed(&cross)
        );
        assert!(!allowed(&cross).contains("kept_original"));
    }
);

each_backend!(actions_resolve_through_the_store, |db| async move {
    let (console, s) = seeded(&db).await;
    // Confirm.
    let case = open_case_of(&console, &s.uncertain).await;
    let req = |case: &CaseView, action: Action| ActionRequest {
        case_id: case.id,
        expected_version: case.version,
        comment: Some("checked in Bitrix24".into()),
        action,
    };
    let done = console
        .act(
            "Olga",
            req(
                &case,
                Action::Confirm {
                    crm_id: "5555".into(),
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(done.operation.status, "completed");
    assert_eq!(done.operation.crm_id.as_deref(), Some("5555"));
    let again = console
        .act(
            "Ivan",
            req(
                &case,
                Action::Confirm {
                    crm_id: "6666".into(),
                },
            ),
        )
        .await
        .unwrap_err();
    assert_eq!(
        again,
        ConsoleError::AlreadyResolved {
            case_id: case.id,
            by: "Olga".into()
        }
    );
    let timeline = console
        .case_detail(s.uncertain.as_str(), None, None)
        .await
        .unwrap()
        .timeline;
    let human = timeline.iter().find(|e| e.kind == "human_action").unwrap();
    assert_eq!(human.actor, "Olga");
    assert_eq!(human.detail["comment"], "checked in Bitrix24");

    // Link to the candidate's entity.
    let case = open_case_of(&console, &s.cross_channel).await;
    let linked = console
        .act(
            "Olga",
            req(
                &case,
                Action::Link {
                    crm_id: s.linked_crm_id.clone(),
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(linked.operation.crm_link.as_deref(), Some("linked"));

    // Authorize one retry, twice: one grant.
    let case = open_case_of(&console, &s.exhausted).await;
    let (a, b) = tokio::join!(
        console.act("Olga", req(&case, Action::AuthorizeRetry)),
        console.act("Ivan", req(&case, Action::AuthorizeRetry)),
    );
    assert_eq!([a.is_ok(), b.is_ok()].iter().filter(|ok| **ok).count(), 1);
    let op = console
        .store()
        .operation(&s.exhausted)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(op.retry_grants, 1);
    assert_eq!(op.status.as_str(), "received");

    // Keep the original payload.
    let case = open_case_of(&console, &s.conflict).await;
    let kept = console
        .act("Olga", req(&case, Action::KeepOriginal))
        .await
        .unwrap();
    assert_eq!(kept.operation.status, "received");
    assert_eq!(kept.new_operation, None);

    // A stale operation can be sent to review, then acted on.
    let case_id = console
        .open_case("Olga", s.stale.as_str(), None)
        .await
        .unwrap();
    assert!(case_id > 0);

    // Resume the paused connector.
    assert!(console
        .resume_connector("Olga", leadgate_testkit::seed::CONNECTOR)
        .await
        .unwrap());
    assert!(!console
        .resume_connector("Olga", leadgate_testkit::seed::CONNECTOR)
        .await
        .unwrap());
    assert_eq!(console.counts().await.unwrap().paused_connectors, 0);
    let connectors = console.connectors().await.unwrap();
    let c = connectors
        .iter()
        .find(|c| c.name == leadgate_testkit::seed::CONNECTOR)
        .unwrap();
    assert!(!c.paused);
    assert_eq!(c.changed_by, "Olga");

    // Paused by hand for a maintenance window: said why, or refused; once.
    let e = console
        .pause_connector("Olga", leadgate_testkit::seed::CONNECTOR, " ")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ConsoleError::Refused { code, .. } if code == "pause_reason_required"),
        "{e:?}"
    );
    assert!(console
        .pause_connector("Olga", leadgate_testkit::seed::CONNECTOR, "CRM maintenance")
        .await
        .unwrap());
    assert!(!console
        .pause_connector("Ivan", leadgate_testkit::seed::CONNECTOR, "again")
        .await
        .unwrap());
    assert_eq!(console.counts().await.unwrap().paused_connectors, 1);
    let c = console
        .connectors()
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.name == leadgate_testkit::seed::CONNECTOR)
        .unwrap();
    assert!(c.paused && c.by_hand, "{c:?}");
    assert_eq!(
        (c.changed_by.as_str(), c.reason.as_deref()),
        ("Olga", Some("CRM maintenance"))
    );
});

each_backend!(dashboard_has_cards_and_series, |db| async move {
    let (console, _) = seeded(&db).await;
    let d = console.dashboard(Range::Day).await.unwrap();
    assert!(d.unique_operations >= 40, "{}", d.unique_operations);
    assert!(d.crm_entities_created <= d.unique_operations);
    assert_eq!(d.series.len(), 48);
    let deliveries: i64 = d.series.iter().map(|p| p.deliveries).sum();
    assert!(deliveries >= 40);
    let retries: i64 = d
        .series
        .iter()
        .flat_map(|p| p.retries_by_class.values())
        .sum();
    assert!(retries >= 1);
    assert_eq!(d.paused_connectors, [leadgate_testkit::seed::CONNECTOR]);
});

each_backend!(
    settings_remember_the_connection_and_the_actor_is_who_the_database_says,
    |db| async move {
        drop(db.store().await);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.json");
        let state = ConsoleState::new(path.clone(), None);
        assert_eq!(
            state.connect(None).await.unwrap_err(),
            ConsoleError::NotConnected
        );
        assert_eq!(
            state.operator().await.unwrap_err(),
            ConsoleError::NotConnected
        );
        // An older console's settings file named the operator: the name is not read.
        std::fs::write(
            &path,
            serde_json::json!({"database_url": db.url, "operator": "Somebody Else"}).to_string(),
        )
        .unwrap();
        let again = ConsoleState::new(path, None);
        assert_eq!(
            again.settings().await.database_url.as_deref(),
            Some(db.url.as_str())
        );
        let connection = again.connect(None).await.unwrap();
        let (mode, actor) = if db.url.starts_with("sqlite") {
            ("local", leadgate_console_model::os_user())
        } else {
            // The test database's login owns the schema.
            ("owner", "postgres".to_owned())
        };
        assert_eq!(
            (connection.mode.as_str(), connection.actor.as_str()),
            (mode, actor.as_str())
        );
        assert_eq!(connection.role, None);
        assert!(
            connection.may.read_cases && connection.may.cross_channel && connection.may.connectors
        );
        assert_eq!(again.operator().await.unwrap(), actor);
    }
);

each_backend!(
    accept_as_new_makes_an_operation_of_its_own,
    |db| async move {
        let store = db.store().await;
        let d =
            |name: &str| leadgate_testkit::seed::delivery("x", serde_json::json!({"name": name}));
        store.record_delivery(d("Ann")).await.unwrap();
        store.record_delivery(d("Anna")).await.unwrap();
        let console = Console::open(&db.url).await.unwrap();
        let id = OperationId::new("site", "x").unwrap();
        let case = open_case_of(&console, &id).await;
        let detail = console
            .case_detail(id.as_str(), Some(case.id), None)
            .await
            .unwrap();
        assert_eq!(
            detail.conflict.unwrap().incoming.payload.unwrap()["name"],
            "Anna"
        );
        let done = console
            .act(
                "Olga",
                ActionRequest {
                    case_id: case.id,
                    expected_version: case.version,
                    comment: None,
                    action: Action::AcceptAsNew,
                },
            )
            .await
            .unwrap();
        let new_id = done.new_operation.expect("a new operation");
        let new_op = console
            .case_detail(&new_id, None, None)
            .await
            .unwrap()
            .operation;
        assert_eq!(new_op.payload.unwrap()["name"], "Anna");
        assert_eq!(new_op.status, "received");
    }
);

each_backend!(a_stale_version_is_refused, |db| async move {
    let (console, s) = seeded(&db).await;
    let case = open_case_of(&console, &s.uncertain).await;
    let err = console
        .act(
            "Olga",
            ActionRequest {
                case_id: case.id,
                expected_version: case.version - 1,
                comment: None,
                action: Action::Confirm { crm_id: "1".into() },
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ConsoleError::Changed { .. }), "{err:?}");
});

each_backend!(
    create_new_and_reject_resolve_review_cases,
    |db| async move {
        let (console, s) = seeded(&db).await;
        // The manager decides a cross-channel match is a new lead after all.
        let case = open_case_of(&console, &s.cross_channel).await;
        let created = console
            .act(
                "Marina",
                ActionRequest {
                    case_id: case.id,
                    expected_version: case.version,
                    comment: Some("different person, same office phone".into()),
                    action: Action::CreateNew,
                },
            )
            .await
            .unwrap();
        assert_eq!(created.operation.status, "received", "back to the worker");
        assert_eq!(created.operation.crm_id, None);
        let timeline = console
            .case_detail(s.cross_channel.as_str(), None, None)
            .await
            .unwrap()
            .timeline;
        let human = timeline.iter().find(|e| e.kind == "human_action").unwrap();
        assert_eq!(
            (human.actor.as_str(), &human.detail["action"]),
            ("Marina", &serde_json::json!("created_new"))
        );
        // Create new is refused where it makes no sense (the create was attempted).
        let uncertain = open_case_of(&console, &s.uncertain).await;
        let refused = console
            .act(
                "Marina",
                ActionRequest {
                    case_id: uncertain.id,
                    expected_version: uncertain.version,
                    comment: None,
                    action: Action::CreateNew,
                },
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, ConsoleError::Refused { code, detail, .. }
                if code == "create_new_not_applicable" && detail.as_deref() == Some("uncertain_outcome")),
            "{refused:?}"
        );
        // Reject needs a reason: the store's rule, refused with its code.
        let reject = |comment: Option<&str>| ActionRequest {
            case_id: uncertain.id,
            expected_version: uncertain.version,
            comment: comment.map(str::to_owned),
            action: Action::Reject,
        };
        let no_reason = console.act("Marina", reject(Some("  "))).await.unwrap_err();
        assert!(
            matches!(&no_reason, ConsoleError::Refused { code, .. } if code == "comment_required"),
            "{no_reason:?}"
        );
        let rejected = console
            .act("Marina", reject(Some("test lead from the agency")))
            .await
            .unwrap();
        assert_eq!(rejected.operation.status, "failed_terminal");
        assert_eq!(
            rejected.operation.last_error.as_deref(),
            Some("rejected by Marina: test lead from the agency")
        );
        let failed = console
            .queue(Tab::FailedTerminal, QueueQuery::default())
            .await
            .unwrap();
        let row = failed
            .rows
            .iter()
            .find(|r| r.operation_id.as_deref() == Some(s.uncertain.as_str()))
            .expect("the rejected lead is in the failed tab");
        assert_eq!(
            row.note.as_deref(),
            Some("rejected by Marina: test lead from the agency")
        );
    }
);

each_backend!(
    the_queue_sorts_newest_first_with_full_pages,
    |db| async move {
        let (console, s) = seeded(&db).await;
        let mut seen = vec![];
        let mut cursor = None;
        loop {
            let page = console
                .queue(
                    Tab::NeedsReview,
                    QueueQuery {
                        newest_first: true,
                        limit: Some(1),
                        cursor: cursor.clone(),
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            // Payload conflicts are left out by the query, not by the page: no short pages.
            assert!(page.rows.len() == 1 || page.next.is_none(), "{page:?}");
            seen.extend(page.rows.into_iter().filter_map(|r| r.operation_id));
            if page.next.is_none() {
                break;
            }
            cursor = page.next;
        }
        assert_eq!(
            seen,
            [
                s.exhausted.to_string(),
                s.cross_channel.to_string(),
                s.uncertain.to_string()
            ]
        );
    }
);

each_backend!(
    desktop_notifications_are_recorded_on_the_timeline,
    |db| async move {
        let (console, s) = seeded(&db).await;
        console
            .record_notification("Olga", "review_opened", &[s.uncertain.to_string()])
            .await
            .unwrap();
        let timeline = console
            .case_detail(s.uncertain.as_str(), None, None)
            .await
            .unwrap()
            .timeline;
        let note = timeline.last().unwrap();
        assert_eq!(
            (note.kind.as_str(), note.actor.as_str()),
            ("notification", "Olga")
        );
        assert_eq!(note.detail["what"], "review_opened");
        assert_eq!(note.detail["to"], "Olga");
        let unknown = console
            .record_notification("Olga", "review_opened", &["site:nope".into()])
            .await
            .unwrap_err();
        assert!(
            matches!(unknown, ConsoleError::NotFound { .. }),
            "{unknown:?}"
        );
    }
);

each_backend!(
    postgres_pushes_changes_and_sqlite_is_polled,
    |db| async move {
        let store = db.store().await;
        let dir = tempfile::tempdir().unwrap();
        let state = ConsoleState::new(dir.path().join("settings.json"), Some(db.url.clone()));
        let mut changes = state.subscribe();
        let connection = state.connect(None).await.unwrap();
        let is_pg = db.backend == leadgate_testkit::Backend::Postgres;
        assert_eq!(connection.live, is_pg);
        // A review case opened by the gateway (another connection, as in production).
        store
            .record_delivery(leadgate_testkit::seed::delivery(
                "c",
                serde_json::json!({"v": 1}),
            ))
            .await
            .unwrap();
        store
            .record_delivery(leadgate_testkit::seed::delivery(
                "c",
                serde_json::json!({"v": 2}),
            ))
            .await
            .unwrap();
        let wait = std::time::Duration::from_millis(if is_pg { 5000 } else { 300 });
        let pushed = tokio::time::timeout(wait, changes.recv()).await;
        if is_pg {
            assert_eq!(pushed.expect("a notification").unwrap(), "review_cases");
        } else {
            assert!(pushed.is_err(), "SQLite pushes nothing: the console polls");
            assert_eq!(
                state
                    .console()
                    .await
                    .unwrap()
                    .counts()
                    .await
                    .unwrap()
                    .payload_conflict,
                1
            );
        }
        store
            .pause_connector("bitrix24", "token revoked", "worker", store::local_now())
            .await
            .unwrap();
        if is_pg {
            let next = tokio::time::timeout(std::time::Duration::from_secs(5), changes.recv())
                .await
                .expect("a notification")
                .unwrap();
            assert_eq!(next, "connectors");
        }
    }
);

/// Every refusal the rules can give has a sentence in both console languages.
#[test]
fn every_refusal_is_translated_in_the_console() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/src/lib/i18n");
    for lang in ["en.ts", "ru.ts"] {
        let text = std::fs::read_to_string(dir.join(lang)).unwrap();
        let refusals = &text[text.find("refusals: {").expect("a refusals table")..];
        let table = &refusals[..refusals.find("\n  },").unwrap()];
        for code in leadgate::domain::Refusal::CODES {
            assert!(
                table.contains(&format!("    {code}: ")),
                "{lang} has no sentence for the refusal `{code}`"
            );
        }
    }
}

/// Polls a bulk run until it is over.
async fn finished(console: &Console, id: &str) -> BulkProgress {
    for _ in 0..600 {
        let p = console.bulk_progress(id).await.unwrap();
        if p.finished {
            return p;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!(
        "bulk run {id} did not finish: {:?}",
        console.bulk_progress(id).await
    );
}

fn exhausted_cases() -> Selection {
    Selection {
        tab: Tab::NeedsReview,
        query: QueueQuery {
            reason: Some("retries_exhausted".into()),
            ..Default::default()
        },
        search: None,
    }
}

each_backend!(
    a_bulk_retry_over_an_outage_resolves_each_case_once_and_skips_one_resolved_meanwhile,
    |db| async move {
        let store = db.store().await;
        let ids = leadgate_testkit::seed::outage(&*store, 50).await.unwrap();
        let console = Console::open(&db.url).await.unwrap();

        let preview = console
            .bulk_preview(exhausted_cases(), BulkAction::AuthorizeRetry)
            .await
            .unwrap();
        assert_eq!(preview.matched, 50);
        assert_eq!(preview.items.len(), 50);
        assert!(preview.refused.is_empty(), "{:?}", preview.refused);
        assert!(preview.comment_required && !preview.truncated);

        // Meanwhile someone resolves one of them alone.
        let alone = open_case_of(&console, &ids[17]).await;
        console
            .act(
                "Ivan",
                ActionRequest {
                    case_id: alone.id,
                    expected_version: alone.version,
                    comment: None,
                    action: Action::AuthorizeRetry,
                },
            )
            .await
            .unwrap();

        // A bulk action needs a comment: refused before anything is touched.
        let request = |comment: Option<&str>| BulkRequest {
            action: BulkAction::AuthorizeRetry,
            comment: comment.map(str::to_owned),
            items: preview.items.clone(),
        };
        let refused = console.bulk_start("Olga", request(Some(" "))).await;
        assert!(
            matches!(&refused, Err(ConsoleError::Refused { code, .. }) if code == "comment_required"),
            "{refused:?}"
        );

        let run = console
            .bulk_start("Olga", request(Some("CRM outage of 1 Dec is over")))
            .await
            .unwrap();
        let p = finished(&console, &run).await;
        assert_eq!((p.total, p.done, p.succeeded), (50, 50, 49), "{p:?}");
        assert_eq!(p.skipped.len(), 1, "{:?}", p.skipped);
        assert_eq!(p.skipped[0].case_id, alone.id);
        assert!(
            matches!(&p.skipped[0].error, ConsoleError::AlreadyResolved { by, .. } if by == "Ivan"),
            "{:?}",
            p.skipped[0]
        );

        // Each case was decided once, on its own timeline, naming the run.
        for (i, id) in ids.iter().enumerate() {
            let op = store.operation(id).await.unwrap().unwrap();
            assert_eq!(op.status, leadgate::domain::Status::Received, "{id}");
            assert_eq!(op.retry_grants, 1, "{id}");
            let decisions: Vec<_> = store
                .timeline(id)
                .await
                .unwrap()
                .into_iter()
                .filter(|e| e.kind == "human_action")
                .collect();
            assert_eq!(decisions.len(), 1, "{id}: {decisions:?}");
            let d = &decisions[0];
            if i == 17 {
                assert_eq!(d.actor, "Ivan");
                assert!(d.detail["bulk"].is_null());
            } else {
                assert_eq!(d.actor, "Olga");
                assert_eq!(d.detail["bulk"]["id"], run.as_str());
                assert_eq!(d.detail["bulk"]["of"], 50);
                assert_eq!(d.detail["comment"], "CRM outage of 1 Dec is over");
            }
        }
        assert_eq!(console.counts().await.unwrap().needs_review, 0);
        assert!(matches!(
            console.bulk_progress("bulk-unknown").await,
            Err(ConsoleError::NotFound { .. })
        ));

        // The run reports what the worker makes of its 49 leads as it does: first all
        // waiting; then 30 found in the CRM by their key, 18 created, 1 uncertain again.
        let outcomes = |p: BulkProgress| p.outcomes.expect("a re-check counts outcomes");
        let o = outcomes(console.bulk_progress(&run).await.unwrap());
        assert_eq!(
            (o.found, o.created, o.back_for_review, o.waiting),
            (0, 0, 0, 49)
        );
        let at = leadgate::store::local_now() + chrono::TimeDelta::minutes(10);
        // All 50 are due (Ivan's grant too, which is not the run's).
        let mut i = 0;
        for _ in 0..50 {
            let c = store
                .claim_due(
                    leadgate_testkit::seed::CONNECTOR,
                    "worker:1",
                    std::time::Duration::from_secs(30),
                    at,
                )
                .await
                .unwrap()
                .expect("a granted lead is due");
            if c.operation.operation_id == ids[17] {
                let created = store::AttemptOutcome::Created {
                    crm_id: "8999".into(),
                };
                store
                    .finish_attempt(&c.lease, created, vec![], at)
                    .await
                    .unwrap();
                continue;
            }
            i += 1;
            let outcome = match i - 1 {
                0..30 => store::AttemptOutcome::Recovered {
                    crm_id: format!("{}", 9000 + i),
                },
                30..48 => store::AttemptOutcome::Created {
                    crm_id: format!("{}", 9000 + i),
                },
                _ => store::AttemptOutcome::Review {
                    reason: leadgate::domain::ReviewReason::UncertainOutcome,
                    failure: Some(leadgate::store::Failure {
                        class: leadgate::domain::ErrorClass::Uncertain,
                        message: "timed out".into(),
                    }),
                    detail: serde_json::json!({}),
                },
            };
            store
                .finish_attempt(&c.lease, outcome, vec![], at)
                .await
                .unwrap();
        }
        let o = outcomes(console.bulk_progress(&run).await.unwrap());
        assert_eq!(
            (o.found, o.created, o.back_for_review, o.waiting),
            (30, 18, 1, 0)
        );
    }
);

each_backend!(
    a_bulk_preview_counts_the_cases_the_rules_refuse,
    |db| async move {
        let (console, s) = seeded(&db).await;
        let all = Selection {
            tab: Tab::NeedsReview,
            query: QueueQuery::default(),
            search: None,
        };
        // Nobody typed a CRM id: a bulk confirm applies only where the operation holds one.
        let confirm = console
            .bulk_preview(all.clone(), BulkAction::Confirm)
            .await
            .unwrap();
        assert_eq!(confirm.matched, 3);
        assert!(confirm.items.is_empty(), "{:?}", confirm.items);
        assert_eq!(confirm.refused.get("crm_id_required"), Some(&3));
        // A conflict is never decided in bulk (nor retried at all).
        let conflicts = console
            .bulk_preview(
                Selection {
                    tab: Tab::PayloadConflict,
                    query: QueueQuery::default(),
                    search: None,
                },
                BulkAction::AuthorizeRetry,
            )
            .await
            .unwrap();
        assert_eq!(conflicts.refused.get("not_in_bulk"), Some(&1));
        // A re-check over every reason: where an attempt was made it looks the key up
        // first and applies; the cross-channel match was never sent, so a retry would
        // create it — not in bulk. The preview says so reason by reason, and that the
        // connector is paused (the re-checks would wait).
        let recheck = console
            .bulk_preview(all.clone(), BulkAction::AuthorizeRetry)
            .await
            .unwrap();
        assert_eq!(recheck.items.len(), 2, "{:?}", recheck.items);
        assert_eq!(recheck.refused.get("bulk_would_create"), Some(&1));
        let groups: Vec<_> = recheck
            .by_reason
            .iter()
            .map(|g| (g.reason.as_str(), g.applies, g.refused))
            .collect();
        assert_eq!(
            groups,
            [
                ("uncertain_outcome", 1, 0),
                ("retries_exhausted", 1, 0),
                ("cross_channel_match", 0, 1)
            ]
        );
        assert_eq!(recheck.paused, [leadgate_testkit::seed::CONNECTOR]);
        // A run asked for without the preview is refused the same way by the store.
        let cross = open_case_of(&console, &s.cross_channel).await;
        let run = console
            .bulk_start(
                "Olga",
                BulkRequest {
                    action: BulkAction::AuthorizeRetry,
                    comment: Some("all of them".into()),
                    items: vec![BulkItem {
                        case_id: cross.id,
                        operation_id: s.cross_channel.to_string(),
                        version: cross.version,
                        crm_id: None,
                    }],
                },
            )
            .await
            .unwrap();
        let p = finished(&console, &run).await;
        assert!(
            matches!(&p.skipped[..], [skip] if matches!(&skip.error, ConsoleError::Refused { code, .. } if code == "bulk_would_create")),
            "{p:?}"
        );
        // Rejects apply to every open case of the tab.
        let reject = console.bulk_preview(all, BulkAction::Reject).await.unwrap();
        let mut ids: Vec<_> = reject
            .items
            .iter()
            .map(|i| i.operation_id.clone())
            .collect();
        ids.sort();
        let mut want = vec![
            s.uncertain.to_string(),
            s.cross_channel.to_string(),
            s.exhausted.to_string(),
        ];
        want.sort();
        assert_eq!(ids, want);
        let stale = console
            .bulk_preview(
                Selection {
                    tab: Tab::Stale,
                    query: QueueQuery::default(),
                    search: None,
                },
                BulkAction::Reject,
            )
            .await;
        assert!(
            matches!(stale, Err(ConsoleError::Invalid { .. })),
            "{stale:?}"
        );
    }
);

each_backend!(
    an_export_is_a_csv_excel_reads_with_cyrillic_names_and_local_times,
    |db| async move {
        let store = db.store().await;
        let ids = leadgate_testkit::seed::outage(&*store, 4).await.unwrap();
        let console = Console::open(&db.url).await.unwrap();
        let labels = [
            ("col.name", "Имя"),
            ("col.since", "Ждёт с"),
            ("status.needs_review", "на проверке"),
            ("reason.retries_exhausted", "попытки исчерпаны"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let req = ExportRequest {
            selection: Selection {
                tab: Tab::NeedsReview,
                query: QueueQuery::default(),
                search: None,
            },
            labels,
            utc_offset_minutes: 180,
            // In Russian, as Excel in a Russian locale reads it.
            semicolons: Some(true),
        };
        let dir = tempfile::tempdir().unwrap();
        let (path, n) = console.export_to(dir.path(), &req).await.unwrap();
        assert_eq!(n, 4);
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"\xEF\xBB\xBF"), "no BOM");
        assert!(
            bytes.split(|b| *b == b'\n').next().unwrap().contains(&b';'),
            "separated by semicolons"
        );
        let mut reader = csv::ReaderBuilder::new()
            .delimiter(b';')
            .from_reader(&bytes[3..]);
        let header: Vec<String> = reader
            .headers()
            .unwrap()
            .iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(header[2], "Имя");
        assert_eq!(header[9], "Ждёт с (UTC+3)");
        assert_eq!(
            header[0], "Case",
            "an untranslated header falls back to English"
        );
        let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 4);
        for (row, id) in rows.iter().zip(&ids) {
            let op = store.operation(id).await.unwrap().unwrap();
            assert_eq!(&row[1], id.as_str());
            assert!(["Ольга", "Olga"].contains(&&row[2]), "{row:?}");
            assert_eq!(
                &row[3],
                op.payload.as_ref().unwrap()["phone"].as_str().unwrap()
            );
            assert_eq!(&row[7], "на проверке");
            assert_eq!(&row[8], "попытки исчерпаны");
            // The wait, in Moscow time.
            let case = open_case_of(&console, id).await;
            let opened = chrono::DateTime::parse_from_rfc3339(&case.opened_at).unwrap();
            let moscow = chrono::FixedOffset::east_opt(3 * 3600).unwrap();
            assert_eq!(
                &row[9],
                opened
                    .with_timezone(&moscow)
                    .format("%Y-%m-%d %H:%M:%S")
                    .to_string()
            );
        }
        assert!(rows.iter().any(|r| &r[2] == "Ольга"));
        let bad = console
            .export_csv(&ExportRequest {
                utc_offset_minutes: 100_000,
                ..req
            })
            .await;
        assert!(matches!(bad, Err(ConsoleError::Invalid { .. })), "{bad:?}");
    }
);

each_backend!(
    a_lead_the_crm_holds_is_never_rejected_and_conflicts_are_never_decided_in_bulk,
    |db| async move {
        use leadgate::store::AttemptOutcome;
        let store = db.store().await;
        // A changed delivery opens a payload conflict while the create is in flight; the
        // create then lands: the operation holds crm_id 77 and waits in review.
        store
            .record_delivery(leadgate_testkit::seed::delivery(
                "x",
                serde_json::json!({"name": "Ivan"}),
            ))
            .await
            .unwrap();
        let claim = store
            .claim_due(
                "bitrix24",
                "w",
                std::time::Duration::from_secs(30),
                store.now(),
            )
            .await
            .unwrap()
            .unwrap();
        store
            .record_delivery(leadgate_testkit::seed::delivery(
                "x",
                serde_json::json!({"name": "Petr"}),
            ))
            .await
            .unwrap();
        store
            .finish_attempt(
                &claim.lease,
                AttemptOutcome::Created {
                    crm_id: "77".into(),
                },
                vec![],
                store.now(),
            )
            .await
            .unwrap();
        let id = OperationId::new("site", "x").unwrap();
        let console = Console::open(&db.url).await.unwrap();
        let conflicts = Selection {
            tab: Tab::PayloadConflict,
            query: QueueQuery::default(),
            search: None,
        };
        for action in [
            BulkAction::Reject,
            BulkAction::Confirm,
            BulkAction::AuthorizeRetry,
        ] {
            let p = console
                .bulk_preview(conflicts.clone(), action)
                .await
                .unwrap();
            assert!(p.items.is_empty(), "{action:?}: {:?}", p.items);
            assert_eq!(p.refused.get("not_in_bulk"), Some(&1), "{action:?}");
        }
        // Alone, the conflict is not rejected either (it is kept or accepted).
        let case = open_case_of(&console, &id).await;
        let alone = console
            .act(
                "Olga",
                ActionRequest {
                    case_id: case.id,
                    expected_version: case.version,
                    comment: Some("spam".into()),
                    action: Action::Reject,
                },
            )
            .await;
        assert!(
            matches!(&alone, Err(ConsoleError::Refused { code, .. }) if code == "reject_on_conflict"),
            "{alone:?}"
        );
        // A bulk request made by hand around the preview is refused by the store.
        let run = console
            .bulk_start(
                "Olga",
                BulkRequest {
                    action: BulkAction::Confirm,
                    comment: Some("all fine".into()),
                    items: vec![BulkItem {
                        case_id: case.id,
                        operation_id: id.to_string(),
                        version: case.version,
                        crm_id: Some("77".into()),
                    }],
                },
            )
            .await
            .unwrap();
        let p = finished(&console, &run).await;
        assert_eq!(p.succeeded, 0);
        assert!(
            matches!(&p.skipped[0].error, ConsoleError::Refused { code, .. } if code == "not_in_bulk"),
            "{:?}",
            p.skipped
        );
        let op = store.operation(&id).await.unwrap().unwrap();
        assert_eq!(op.status, leadgate::domain::Status::NeedsReview);
        assert_eq!(op.crm_id.as_deref(), Some("77"));
        // An uncertain case whose create landed meanwhile is confirmed, not rejected.
        store
            .open_review(
                &id,
                leadgate::domain::ReviewReason::UncertainOutcome,
                "worker:1",
                serde_json::json!({}),
                store.now(),
            )
            .await
            .ok();
        let uncertain = console
            .bulk_preview(
                Selection {
                    tab: Tab::NeedsReview,
                    query: QueueQuery::default(),
                    search: None,
                },
                BulkAction::Reject,
            )
            .await
            .unwrap();
        assert!(uncertain.items.is_empty(), "{:?}", uncertain.items);
        assert_eq!(
            uncertain.refused.get("reject_over_known_result"),
            Some(&1),
            "{:?}",
            uncertain.refused
        );
    }
);

each_backend!(search_finds_operations_of_any_status, |db| async move {
    let (console, s) = seeded(&db).await;
    // By name (the seeded leads' `name`), with the open case to jump to.
    let found = console.search("boris", None, None).await.unwrap();
    assert_eq!(
        (found.kind.as_str(), found.normalized.as_str()),
        ("text", "boris")
    );
    assert_eq!(found.rows.len(), 1, "{found:?}");
    let row = &found.rows[0];
    assert_eq!(row.operation_id, s.uncertain.to_string());
    assert_eq!(
        (row.status.as_str(), row.matched.as_str()),
        ("needs_review", "name")
    );
    assert_eq!(row.name.as_deref(), Some("Boris"));
    let case = open_case_of(&console, &s.uncertain).await;
    assert_eq!(row.open_case_id, Some(case.id));
    assert_eq!(row.review_reason.as_deref(), Some("uncertain_outcome"));
    // A phone in another format than stored; every hit carries it normalized.
    let found = console
        .search("8 (916) 123-45-67", None, None)
        .await
        .unwrap();
    assert_eq!(
        (found.kind.as_str(), found.normalized.as_str()),
        ("phone", "+79161234567")
    );
    assert!(!found.rows.is_empty());
    for r in &found.rows {
        assert_eq!(
            (r.phone.as_deref(), r.matched.as_str()),
            (Some("+79161234567"), "phone")
        );
    }
    // Pages, newest first, however the statuses differ.
    let all = console.search("site:", None, Some(200)).await.unwrap();
    assert!(all.rows.len() > 3 && all.next.is_none());
    let statuses: std::collections::BTreeSet<&str> =
        all.rows.iter().map(|r| r.status.as_str()).collect();
    assert!(statuses.len() >= 3, "{statuses:?}");
    let mut paged = vec![];
    let mut cursor = None;
    loop {
        let page = console.search("site:", cursor, Some(2)).await.unwrap();
        assert!(page.rows.len() <= 2);
        paged.extend(page.rows);
        match page.next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(paged, all.rows);
    assert!(all
        .rows
        .windows(2)
        .all(|w| w[0].created_at >= w[1].created_at));
    // Bad input is the operator's to fix.
    for (q, cursor) in [
        ("", None),
        ("x@", None),
        ("boris", Some("nonsense".to_string())),
    ] {
        let err = console.search(q, cursor, None).await.err().unwrap();
        assert!(matches!(err, ConsoleError::Invalid { .. }), "{q}: {err:?}");
    }
});

each_backend!(
    a_search_is_a_selection_for_bulk_actions_and_exports,
    |db| async move {
        let store = db.store().await;
        let ids = leadgate_testkit::seed::outage(&*store, 6).await.unwrap();
        let console = Console::open(&db.url).await.unwrap();
        // The phone of outage-4 written as a person types it.
        let phone = store
            .operation(&ids[3])
            .await
            .unwrap()
            .unwrap()
            .payload
            .unwrap()["phone"]
            .as_str()
            .unwrap()
            .to_owned();
        let typed = format!(
            "8 ({}) {}-{}-{}",
            &phone[2..5],
            &phone[5..8],
            &phone[8..10],
            &phone[10..]
        );
        let by_phone = Selection {
            tab: Tab::Stale,
            query: QueueQuery::default(),
            search: Some(typed.clone()),
        };
        let preview = console
            .bulk_preview(by_phone.clone(), BulkAction::AuthorizeRetry)
            .await
            .unwrap();
        assert_eq!(preview.matched, 1, "{typed}");
        assert_eq!(preview.items[0].operation_id, ids[3].as_str());
        let dir = tempfile::tempdir().unwrap();
        let (path, n) = console
            .export_to(
                dir.path(),
                &ExportRequest {
                    selection: by_phone,
                    labels: Default::default(),
                    utc_offset_minutes: 0,
                    semicolons: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
        assert!(path.display().to_string().contains("leadgate-search-"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(ids[3].as_str()) && text.contains(&phone),
            "{text}"
        );
        // A name search selects every lead of that name that has an open case.
        let olgas = console
            .bulk_preview(
                Selection {
                    tab: Tab::Stale,
                    query: QueueQuery::default(),
                    search: Some("ольга".into()),
                },
                BulkAction::Reject,
            )
            .await
            .unwrap();
        assert_eq!(olgas.matched, 3, "{:?}", olgas.items);
    }
);

each_backend!(
    a_contact_and_a_deal_show_as_two_entities_with_their_crm_pages,
    |db| async move {
        let (console, s) = seeded(&db).await;
        let store = db.store().await;
        let now = store.now();
        store
            .publish_crm_links(
                &store::CrmLinks {
                    connector: "bitrix24".into(),
                    entity_url: "https://acme.bitrix24.ru/crm/deal/details/{id}/".into(),
                    search_url: None,
                    contact_url: Some("https://acme.bitrix24.ru/crm/contact/details/{id}/".into()),
                },
                now,
            )
            .await
            .unwrap();
        // What a stepped create commits (`WorkQueue::record_step`): the contact, found again by
        // its key after a lost answer, then the deal.
        for (entity, crm_id, how) in [
            ("contact", "70", "created"),
            ("contact", "77", "recovered"),
            ("deal", "88", "created"),
        ] {
            store
                .note(
                    &s.uncertain,
                    "worker",
                    store::NewEvent::new(
                        leadgate::domain::EventKind::CrmStep,
                        serde_json::json!({"entity": entity, "crm_id": crm_id, "how": how}),
                    ),
                    now,
                )
                .await
                .unwrap();
        }
        let d = console
            .case_detail(s.uncertain.as_str(), None, None)
            .await
            .unwrap();
        let view = |entity: &str, crm_id: &str, how: &str, url: &str| CrmEntityView {
            entity: entity.into(),
            crm_id: crm_id.into(),
            how: how.into(),
            url: Some(url.into()),
        };
        assert_eq!(
            d.crm_entities,
            [
                view(
                    "contact",
                    "77",
                    "recovered",
                    "https://acme.bitrix24.ru/crm/contact/details/77/"
                ),
                view(
                    "deal",
                    "88",
                    "created",
                    "https://acme.bitrix24.ru/crm/deal/details/88/"
                ),
            ]
        );
        let dash = console.dashboard(Range::Day).await.unwrap();
        assert_eq!(
            (
                dash.crm_steps.get("contact:created"),
                dash.crm_steps.get("contact:recovered"),
                dash.crm_steps.get("deal:created")
            ),
            (Some(&1), Some(&1), Some(&1))
        );
        // An operation without steps has none.
        let plain = console
            .case_detail(s.exhausted.as_str(), None, None)
            .await
            .unwrap();
        assert!(plain.crm_entities.is_empty());
    }
);

each_backend!(
    the_console_says_whether_a_gateway_is_running,
    |db| async move {
        use leadgate::store::Spooled;
        let store = db.store().await;
        let console = Console::open(&db.url).await.unwrap();
        let running = |c: &TabCounts| (c.gateway_running, c.gateway_last_beat.is_some());
        let last = || async { store.beats().await.unwrap().last };
        assert_eq!(
            running(&console.counts().await.unwrap()),
            (false, false),
            "never"
        );
        // A gateway that stopped beating a minute ago is gone.
        let now = store.now();
        let minute_ago = now - chrono::TimeDelta::minutes(1);
        let none = Spooled::default();
        store
            .beat("serve:host:1", "serve", minute_ago, minute_ago, none)
            .await
            .unwrap();
        let c = console.counts().await.unwrap();
        assert_eq!(running(&c), (false, true));
        assert_eq!(last().await, Some(minute_ago));
        // One that beats now runs; beats of a process gone for a day are removed.
        let ancient = now - chrono::TimeDelta::days(2);
        store
            .beat("worker:host:2", "worker", ancient, ancient, none)
            .await
            .unwrap();
        store
            .beat("serve:host:3", "serve", now, now, none)
            .await
            .unwrap();
        assert_eq!(running(&console.counts().await.unwrap()), (true, true));
        store
            .beat("serve:host:3", "serve", now, now, none)
            .await
            .unwrap();
        assert_eq!(last().await, Some(now));
    }
);

// What the gateways' spools hold, as their beats say: summed over the gateways, the
// oldest of their oldest, a gateway that stopped with deliveries spooled still counted,
// and nothing once each has drained.
each_backend!(
    the_console_counts_what_the_gateways_spools_hold,
    |db| async move {
        use leadgate::store::Spooled;
        let store = db.store().await;
        let console = Console::open(&db.url).await.unwrap();
        let c = console.counts().await.unwrap();
        assert_eq!((c.spooled, c.spooled_since.as_deref()), (0, None));
        let now = store.now();
        let at = |mins: i64| now - chrono::TimeDelta::minutes(mins);
        let spooled = |records, oldest| Spooled {
            records,
            oldest: Some(oldest),
        };
        store
            .beat("serve:a:1", "serve", at(60), now, spooled(3, at(5)))
            .await
            .unwrap();
        // Stopped ten minutes ago, with two deliveries it never drained.
        store
            .beat("serve:b:2", "serve", at(60), at(10), spooled(2, at(12)))
            .await
            .unwrap();
        store
            .beat("worker:c:3", "worker", at(60), now, Spooled::default())
            .await
            .unwrap();
        let beats = store.beats().await.unwrap();
        assert_eq!(beats.spooled, spooled(5, at(12)));
        let c = console.counts().await.unwrap();
        assert_eq!(c.spooled, 5);
        assert_eq!(
            c.spooled_since
                .as_deref()
                .map(|t| t.parse::<chrono::DateTime<chrono::Utc>>().unwrap()),
            Some(at(12))
        );
        store
            .beat("serve:b:2", "serve", at(60), now, Spooled::default())
            .await
            .unwrap();
        store
            .beat("serve:a:1", "serve", at(60), now, Spooled::default())
            .await
            .unwrap();
        let c = console.counts().await.unwrap();
        assert_eq!((c.spooled, c.spooled_since.as_deref()), (0, None));
    }
);
