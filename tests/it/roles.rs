//! Who may do what (issue 17): people connect with PostgreSQL logins of their own, in
//! one of Leadgate's roles (migration 0017). Each role is tried twice, through the
//! console and through raw SQL with the same login, and the database must answer both
//! the same way: a person who opens psql can do no more than the console lets them. The
//! recorded actor is the login as PostgreSQL knows it.
//!
//! Roles are PostgreSQL's: on SQLite the console is in local single-operator mode
//! (`tests/it/console.rs`, `settings_remember_the_connection_and_the_actor_is_who_the_database_says`).

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, PgConnection};

use leadgate::domain::roles::{may_ask, AskKind, Role};
use leadgate::domain::{Resolution, ReviewReason};
use leadgate::store::logins::LoginAdmin;
use leadgate::store::postgres::PgStore;
use leadgate::store::{self, Ask, Store, StoreError};
use leadgate_console_model::*;
use leadgate_testkit::people::{gateway, url_as, People};
use leadgate_testkit::seed::{seed, Seeded, CONNECTOR};
use leadgate_testkit::{run, Backend, TestDb};

async fn console(people: &People, role: Role) -> Console {
    Console::open(people.url(role)).await.unwrap()
}

/// The SQLSTATE a statement failed with, or "ok".
async fn sqlstate(conn: &mut PgConnection, sql: &str) -> String {
    match sqlx::raw_sql(sql).execute(&mut *conn).await {
        Ok(_) => "ok".into(),
        Err(sqlx::Error::Database(e)) => e.code().unwrap_or_default().into_owned(),
        Err(e) => panic!("{sql}: {e}"),
    }
}

async fn case_of(console: &Console, id: &leadgate::domain::OperationId) -> CaseView {
    console
        .case_detail(id.as_str(), None, None)
        .await
        .unwrap()
        .case
        .expect("an open case")
}

fn forbidden<T: std::fmt::Debug>(r: ApiResult<T>) -> bool {
    matches!(r, Err(ConsoleError::Forbidden { .. }))
}

async fn seeded(db: &TestDb) -> (Arc<dyn Store>, Seeded) {
    let store = db.store().await;
    let s = seed(&*store).await.unwrap();
    // The business rules of one source, as a gateway seeds them from its TOML.
    let site = leadgate::store::SourceRules {
        source: "site".into(),
        rule: leadgate::domain::MatchRule::Create,
        window_secs: 86400,
        channel: "site".into(),
    };
    store.seed_rules(&[site], store.now()).await.unwrap();
    (store, s)
}

/// Sets the site's rule through the console: every role reads the rules, only a
/// manager's edit is applied.
async fn set_site_rule(console: &Console, rule: &str) -> ApiResult<RulesView> {
    let view = console.rules().await?;
    let site = view.sources.iter().find(|s| s.source == "site").unwrap();
    console
        .set_rules(
            "a name the client sends",
            RulesEdit {
                source: "site".into(),
                expected_version: site.version,
                rule: rule.into(),
                window_secs: site.window_secs,
                channel: site.channel.clone(),
            },
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_role_may_do_through_the_console_what_it_may_through_sql_and_no_more() {
    run(Backend::Postgres, |db| async move {
        let (store, s) = seeded(&db).await;
        let people = People::new(&db.url).await;
        let gw = gateway(store.clone());
        let owner_console = Console::open(&db.url).await.unwrap();

        // support: the figures, nothing a lead said, no action.
        let support = console(&people, Role::Support).await;
        let c = &support.connection;
        assert_eq!(
            (c.mode.as_str(), c.actor.as_str(), c.role.as_deref()),
            ("person", people.login(Role::Support), Some("support"))
        );
        assert!(!c.may.read_cases && !c.may.resolve && !c.may.connectors && !c.may.rules);
        assert!(forbidden(set_site_rule(&support, "link").await));
        assert!(support.counts().await.unwrap().needs_review > 0);
        let d = support.dashboard(Range::Day).await.unwrap();
        assert!(d.unique_operations > 0 && !d.open_cases_by_reason.is_empty());
        assert!(!support.connectors().await.unwrap().is_empty());
        assert!(forbidden(support.queue(Tab::NeedsReview, QueueQuery::default()).await));
        assert!(forbidden(support.case_detail(s.uncertain.as_str(), None, None).await));
        let case = case_of(&owner_console, &s.uncertain).await;
        let confirm = |case: &CaseView| ActionRequest {
            case_id: case.id,
            expected_version: case.version,
            comment: None,
            action: Action::Confirm {
                crm_id: "5555".into(),
            },
        };
        assert!(forbidden(support.act("anyone", confirm(&case)).await));
        assert!(forbidden(support.resume_connector("anyone", CONNECTOR).await));
        let mut sql = people.sql(Role::Support).await;
        for denied in [
            "select payload from operations",
            "select * from deliveries",
            "select detail from timeline",
            "select detail from review_cases",
            "select access_token from crm_tokens",
            "select sealed from tenant_specs",
            "update operations set status = 'completed'",
            "alter table timeline disable trigger timeline_append_only",
        ] {
            assert_eq!(sqlstate(&mut sql, denied).await, "42501", "support: {denied}");
        }
        assert_eq!(
            sqlstate(&mut sql, "select count(*) from operations where status = 'completed'").await,
            "ok"
        );

        // sales_ops: the cases and their actions, but not cross-channel matches.
        let sales = console(&people, Role::SalesOps).await;
        assert!(sales.connection.may.read_cases && !sales.connection.may.cross_channel);
        assert!(!sales.queue(Tab::NeedsReview, QueueQuery::default()).await.unwrap().rows.is_empty());
        let cross = sales.case_detail(s.cross_channel.as_str(), None, None).await.unwrap();
        assert!(cross.allowed.is_empty(), "{:?}", cross.allowed);
        let owner_cross = owner_console
            .case_detail(s.cross_channel.as_str(), None, None)
            .await
            .unwrap();
        assert!(owner_cross.allowed.contains(&"linked_existing".to_owned()));
        let cross_case = owner_cross.case.unwrap();
        let link = ActionRequest {
            case_id: cross_case.id,
            expected_version: cross_case.version,
            comment: None,
            action: Action::Link {
                crm_id: s.linked_crm_id.clone(),
            },
        };
        assert!(forbidden(sales.act("a name the client sends", link.clone()).await));
        assert!(forbidden(sales.resume_connector("x", CONNECTOR).await));
        assert!(!sales.connection.may.rules && !sales.rules().await.unwrap().may_edit);
        assert!(forbidden(set_site_rule(&sales, "link").await));
        // Confirm goes through a gateway, under the login, whatever name is passed.
        let done = sales.act("a name the client sends", confirm(&case)).await.unwrap();
        assert_eq!(done.operation.status, "completed");
        let detail = owner_console
            .case_detail(s.uncertain.as_str(), Some(case.id), None)
            .await
            .unwrap();
        assert_eq!(
            detail.cases.iter().find(|c| c.id == case.id).unwrap().resolved_by.as_deref(),
            Some(people.login(Role::SalesOps))
        );
        let human = detail.timeline.iter().rev().find(|e| e.kind == "human_action").unwrap();
        assert_eq!(human.actor, people.login(Role::SalesOps));
        // A refusal comes back as the rules' refusal.
        let again = sales.act("x", confirm(&case)).await.unwrap_err();
        assert!(matches!(again, ConsoleError::AlreadyResolved { .. } | ConsoleError::Changed { .. }), "{again:?}");

        let mut sql = people.sql(Role::SalesOps).await;
        assert_eq!(sqlstate(&mut sql, "select payload from operations").await, "ok");
        for denied in [
            // no token a worker or an integration reports under
            "select lease_token from operations".to_owned(),
            "select finished_token from operations".into(),
            "select lease_token from crm_updates".into(),
            "select lease_token from alert_channels".into(),
            "select token_sha256 from lease_grants".into(),
            "select access_token from crm_tokens".into(),
            "select sealed from tenant_specs".into(),
            "update operations set status = 'completed'".into(),
            "delete from timeline".into(),
            "insert into review_cases (operation_id, reason, opened_at) values ('x', 'uncertain_outcome', now())".into(),
            "alter table timeline disable trigger timeline_append_only".into(),
            // asking as someone else
            format!(
                "insert into human_requests (actor, kind, case_id, expected_version, body) values \
                 ('{}', 'resolve', {}, 1, '{{\"resolution\":\"rejected\"}}')",
                people.login(Role::Manager),
                cross_case.id
            ),
            // asking what the role may not
            format!(
                "insert into human_requests (kind, case_id, expected_version, body) values \
                 ('resolve', {}, {}, '{{\"resolution\":\"linked_existing\",\"crm_id\":\"1\"}}')",
                cross_case.id, cross_case.version
            ),
            "insert into human_requests (kind, connector) values ('resume_connector', 'bitrix24')".into(),
            "insert into human_requests (kind, expected_version, body) values ('set_rules', 1, \
             '{\"source\":\"site\",\"rule\":\"link\",\"window_secs\":60,\"channel\":\"site\"}')".into(),
            "update business_rules set rule = 'link'".into(),
            "delete from business_rule_history".into(),
            // a request that looks applied already
            "insert into human_requests (kind, operation_id, applied_at) values ('notified', 'site:x', now())".into(),
        ] {
            assert_eq!(sqlstate(&mut sql, &denied).await, "42501", "sales_ops: {denied}");
        }
        for denied in [
            "insert into human_requests (id, kind, operation_id) values (-5, 'notified', 'site:x')",
            "insert into human_requests (kind, operation_id, requested_at) values ('notified', 'site:x', '1970-01-01')",
            "delete from human_requests",
            "update human_requests set outcome = '{}'",
        ] {
            assert_eq!(sqlstate(&mut sql, denied).await, "42501", "sales_ops: {denied}");
        }
        // No stalling every gateway with a lock, and no temporary table standing in for
        // review_cases in the role check (each on a connection of its own: a failed
        // statement inside BEGIN leaves that connection's transaction aborted).
        let mut locker = people.sql(Role::SalesOps).await;
        assert_eq!(
            sqlstate(&mut locker, "begin; lock table human_requests in share mode").await,
            "42501"
        );
        let mut spoof = people.sql(Role::SalesOps).await;
        sqlx::raw_sql(&format!(
            "create temp table review_cases (id bigint, reason text); \
             insert into review_cases values ({}, 'uncertain_outcome'); \
             grant select on review_cases to public",
            cross_case.id
        ))
        .execute(&mut spoof)
        .await
        .unwrap();
        assert_eq!(
            sqlstate(
                &mut spoof,
                &format!(
                    "insert into public.human_requests (kind, case_id, expected_version, body) values \
                     ('resolve', {}, {}, '{{\"resolution\":\"linked_existing\",\"crm_id\":\"1\"}}')",
                    cross_case.id, cross_case.version
                )
            )
            .await,
            "42501",
            "a temporary review_cases must not pass for the real one"
        );
        // Their temporary table goes with the session (a login owning one cannot be dropped).
        spoof.close().await.unwrap();
        locker.close().await.ok();
        // What the console may, psql may too: a retry asked for by hand is applied by the
        // gateway, under the login.
        let exhausted = case_of(&owner_console, &s.exhausted).await;
        let id: i64 = sqlx::query_scalar(
            "insert into human_requests (kind, case_id, expected_version, body) \
             values ('resolve', $1, $2, '{\"resolution\":\"retry_authorized\"}') returning id",
        )
        .bind(exhausted.id)
        .bind(exhausted.version)
        .fetch_one(&mut sql)
        .await
        .unwrap();
        let answered = loop {
            let outcome: Option<String> =
                sqlx::query_scalar("select outcome from human_requests where id = $1")
                    .bind(id)
                    .fetch_one(&mut sql)
                    .await
                    .unwrap();
            if let Some(o) = outcome {
                break o;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(answered.contains("\"ok\""), "{answered}");
        let timeline = store.timeline(&s.exhausted).await.unwrap();
        let human = timeline.iter().rev().find(|e| e.kind == "human_action").unwrap();
        assert_eq!(human.actor, people.login(Role::SalesOps));
        // Each sees their own requests only.
        let theirs: i64 = sqlx::query_scalar("select count(*) from human_requests where actor <> session_user")
            .fetch_one(&mut sql)
            .await
            .unwrap();
        assert_eq!(theirs, 0);

        // manager: cross-channel matches too.
        let manager = console(&people, Role::Manager).await;
        assert!(manager
            .case_detail(s.cross_channel.as_str(), None, None)
            .await
            .unwrap()
            .allowed
            .contains(&"linked_existing".to_owned()));
        let linked = manager.act("x", link).await.unwrap();
        assert_eq!(linked.operation.crm_id.as_deref(), Some(s.linked_crm_id.as_str()));
        // ... and the business rules, applied by the gateway under the manager's login.
        assert!(manager.connection.may.rules);
        let rules = set_site_rule(&manager, "review").await.unwrap();
        let site = rules.sources.iter().find(|r| r.source == "site").unwrap();
        assert_eq!((site.rule.as_str(), site.version), ("review", 2));
        assert_eq!(rules.history[0].actor, people.login(Role::Manager));
        assert_eq!(site.changed_by, people.login(Role::Manager));
        assert!(forbidden(manager.resume_connector("x", CONNECTOR).await));

        // admin: the connectors and the figures.
        let admin = console(&people, Role::Admin).await;
        assert!(admin.connection.may.connectors && !admin.connection.may.read_cases);
        assert!(forbidden(set_site_rule(&admin, "link").await));
        assert_eq!(admin.rules().await.unwrap().sources[0].rule, "review", "read, not changed");
        assert!(forbidden(admin.queue(Tab::NeedsReview, QueueQuery::default()).await));
        assert!(admin.resume_connector("x", CONNECTOR).await.unwrap());
        let c = store.connector(CONNECTOR).await.unwrap().unwrap();
        assert!(!c.paused);
        assert_eq!(c.changed_by, people.login(Role::Admin));
        let exhausted_now = case_of(&owner_console, &s.conflict).await;
        assert!(forbidden(
            admin
                .act(
                    "x",
                    ActionRequest {
                        case_id: exhausted_now.id,
                        expected_version: exhausted_now.version,
                        comment: None,
                        action: Action::KeepOriginal,
                    }
                )
                .await
        ));
        let mut sql = people.sql(Role::Admin).await;
        assert_eq!(sqlstate(&mut sql, "select payload from operations").await, "42501");
        assert_eq!(sqlstate(&mut sql, "select access_token from crm_tokens").await, "42501");

        gw.abort();
        people.drop_all().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_database_refuses_exactly_the_requests_the_role_table_refuses() {
    run(Backend::Postgres, |db| async move {
        let (_store, s) = seeded(&db).await;
        let people = People::new(&db.url).await;
        let owner = Console::open(&db.url).await.unwrap();
        let mut cases = vec![];
        for id in [&s.uncertain, &s.cross_channel, &s.exhausted, &s.conflict] {
            let c = case_of(&owner, id).await;
            cases.push((c.id, c.reason.parse::<ReviewReason>().unwrap()));
        }
        let resolutions = Resolution::ALL
            .iter()
            .copied()
            .filter(|r| *r != Resolution::Superseded);
        let mut tried = 0;
        for role in Role::ALL {
            let mut sql = people.sql(*role).await;
            for (case_id, reason) in &cases {
                for resolution in resolutions.clone() {
                    let mut body = serde_json::json!({"resolution": resolution, "crm_id": "1"});
                    // Fix and resend carries the edited data (and only it does).
                    if resolution == Resolution::ResentEdited {
                        body["payload"] = serde_json::json!({"phone": "+79001234567"});
                    }
                    let body = body.to_string();
                    let mut tx = sql.begin().await.unwrap();
                    let allowed = sqlx::query(
                        "insert into human_requests (kind, case_id, expected_version, body) \
                         values ('resolve', $1, 1, $2)",
                    )
                    .bind(case_id)
                    .bind(&body)
                    .execute(&mut *tx)
                    .await
                    .is_ok();
                    tx.rollback().await.ok();
                    let want = may_ask(*role, AskKind::Resolve(*reason, resolution));
                    assert_eq!(
                        allowed, want,
                        "{role} asking {resolution} on a {reason} case"
                    );
                    tried += 1;
                }
            }
            for (kind, column, value, ask) in [
                (
                    "open_review",
                    "operation_id",
                    s.stale.to_string(),
                    AskKind::OpenReview,
                ),
                (
                    "notified",
                    "operation_id",
                    s.stale.to_string(),
                    AskKind::Notified,
                ),
                (
                    "resume_connector",
                    "connector",
                    CONNECTOR.to_owned(),
                    AskKind::ResumeConnector,
                ),
                (
                    "pause_connector",
                    "connector",
                    CONNECTOR.to_owned(),
                    AskKind::PauseConnector,
                ),
                (
                    "set_rules",
                    "body",
                    serde_json::json!({"source": "site", "rule": "link", "window_secs": 60,
                                       "channel": "site"})
                    .to_string(),
                    AskKind::EditRules,
                ),
                // The event feed's subscribers (migration 0032): the id in the body.
                (
                    "feed_subscribe",
                    "body",
                    serde_json::json!({"url": "https://hooks.example.com/in?k=1",
                                       "events": ["review.opened", "operation.failed"],
                                       "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
                    .to_string(),
                    AskKind::ManageFeed,
                ),
                (
                    "feed_remove",
                    "body",
                    serde_json::json!({"id": 1}).to_string(),
                    AskKind::ManageFeed,
                ),
                (
                    "feed_enable",
                    "body",
                    serde_json::json!({"id": 1}).to_string(),
                    AskKind::ManageFeed,
                ),
            ] {
                // Rules are edited at the version seen (migration 0026 refuses an edit
                // without one).
                let version = (kind == "set_rules").then_some(1_i64);
                // A pause by hand says why (migration 0030); every other body here is
                // the column's default or the value itself.
                let body = match kind {
                    "pause_connector" => {
                        ", body) values ($1, $2, $3, '{\"reason\": \"CRM maintenance\"}')"
                    }
                    _ => ") values ($1, $2, $3)",
                };
                let mut tx = sql.begin().await.unwrap();
                let allowed = sqlx::query(&format!(
                    "insert into human_requests (kind, {column}, expected_version{body}"
                ))
                .bind(kind)
                .bind(&value)
                .bind(version)
                .execute(&mut *tx)
                .await
                .is_ok();
                tx.rollback().await.ok();
                assert_eq!(allowed, may_ask(*role, ask), "{role} asking {kind}");
                tried += 1;
            }
        }
        assert_eq!(tried, 4 * (4 * 9 + 8));
        people.drop_all().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_no_gateway_applies_is_withdrawn_and_changes_nothing() {
    run(Backend::Postgres, |db| async move {
        let (store, s) = seeded(&db).await;
        let people = People::new(&db.url).await;
        let owner = Console::open(&db.url).await.unwrap();
        let case = case_of(&owner, &s.uncertain).await;
        // No gateway runs: the person's store asks, waits, and takes the request back.
        let person = store::open(people.url(Role::SalesOps)).await.unwrap();
        let ask = Ask::Resolve {
            case_id: case.id,
            expected_version: case.version,
            action: leadgate::domain::HumanAction::ConfirmCrmResult {
                crm_id: "5555".into(),
            },
            comment: None,
            bulk: None,
        };
        let err = store::ask_and_wait(&*person, &ask, Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::NotApplied(m) if m.contains("no gateway")),
            "{err}"
        );
        let waiting: i64 = sqlx::query_scalar("select count(*) from human_requests")
            .fetch_one(&mut PgConnection::connect(&db.url).await.unwrap())
            .await
            .unwrap();
        assert_eq!(waiting, 0, "the withdrawn request is gone");
        // A gateway that starts later finds nothing to do: the case is still open.
        assert_eq!(store.apply_next_request(store.now()).await.unwrap(), None);
        assert!(case_of(&owner, &s.uncertain).await.resolved_at.is_none());
        people.drop_all().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_role_lowered_after_asking_is_refused_when_the_gateway_applies() {
    run(Backend::Postgres, |db| async move {
        let (store, s) = seeded(&db).await;
        let people = People::new(&db.url).await;
        let owner = Console::open(&db.url).await.unwrap();
        let case = case_of(&owner, &s.uncertain).await;
        let mut sql = people.sql(Role::SalesOps).await;
        let id: i64 = sqlx::query_scalar(
            "insert into human_requests (kind, case_id, expected_version, body) values \
             ('resolve', $1, $2, '{\"resolution\":\"confirmed_crm_result\",\"crm_id\":\"5555\"}') returning id",
        )
        .bind(case.id)
        .bind(case.version)
        .fetch_one(&mut sql)
        .await
        .unwrap();
        // The administrator makes them support before any gateway got to it.
        let login = people.login(Role::SalesOps);
        let mut admin = PgConnection::connect(&db.url).await.unwrap();
        sqlx::raw_sql(&format!(
            "revoke leadgate_sales_ops from \"{login}\"; grant leadgate_support to \"{login}\""
        ))
        .execute(&mut admin)
        .await
        .unwrap();
        assert_eq!(store.apply_next_request(store.now()).await.unwrap(), Some(id));
        let outcome: String = sqlx::query_scalar("select outcome from human_requests where id = $1")
            .bind(id)
            .fetch_one(&mut admin)
            .await
            .unwrap();
        assert!(outcome.contains("forbidden"), "{outcome}");
        assert!(case_of(&owner, &s.uncertain).await.resolved_at.is_none());
        people.drop_all().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_apply_each_request_once() {
    run(Backend::Postgres, |db| async move {
        let (store, s) = seeded(&db).await;
        let people = People::new(&db.url).await;
        let second = store::connect(&db.url).await.unwrap();
        let (a, b) = (gateway(store.clone()), gateway(second));
        // Many people at once: each authorizes a retry on the one exhausted case, and
        // notes a notification; every request gets one answer, and one retry is granted.
        let owner = Console::open(&db.url).await.unwrap();
        let case = case_of(&owner, &s.exhausted).await;
        let mut asks = vec![];
        for role in [Role::SalesOps, Role::Manager] {
            for _ in 0..5 {
                let person = console(&people, role).await;
                let req = ActionRequest {
                    case_id: case.id,
                    expected_version: case.version,
                    comment: None,
                    action: Action::AuthorizeRetry,
                };
                asks.push(tokio::spawn(async move { person.act("x", req).await }));
            }
        }
        let mut granted = 0;
        for a in asks {
            match a.await.unwrap() {
                Ok(_) => granted += 1,
                Err(ConsoleError::AlreadyResolved { .. } | ConsoleError::Changed { .. }) => {}
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(granted, 1);
        let timeline = store.timeline(&s.exhausted).await.unwrap();
        assert_eq!(
            timeline.iter().filter(|e| e.kind == "human_action").count(),
            1
        );
        let mut conn = PgConnection::connect(&db.url).await.unwrap();
        let (all, answered): (i64, i64) =
            sqlx::query_as("select count(*), count(outcome) from human_requests")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!((all, answered), (10, 10));
        a.abort();
        b.abort();
        people.drop_all().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn users_are_added_listed_and_removed_and_bad_names_are_refused() {
    run(Backend::Postgres, |db| async move {
        let owner = PgStore::connect(&db.url).await.unwrap();
        let admin = LoginAdmin::connect(&db.url).await.unwrap();
        let login = format!("lgt_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let password = admin.add_user(&owner, &login, Role::Manager).await.unwrap();
        let again = admin
            .add_user(&owner, &login, Role::Support)
            .await
            .unwrap_err();
        assert!(again.to_string().contains("exists already"), "{again}");
        for bad in [
            "Anna",
            "pg_monitor",
            "leadgate_admin",
            "a;drop role postgres",
            "",
        ] {
            let e = admin
                .add_user(&owner, bad, Role::Support)
                .await
                .unwrap_err();
            assert!(e.to_string().contains("not a login name"), "{bad}: {e}");
        }
        let users = owner.users().await.unwrap();
        assert!(
            users
                .iter()
                .any(|u| u.login == login && u.role == Role::Manager),
            "{users:?}"
        );
        let console = Console::open(&url_as(&db.url, &login, &password))
            .await
            .unwrap();
        assert_eq!(console.connection.role.as_deref(), Some("manager"));
        drop(console);
        assert!(admin.remove_user(&owner, &login).await.unwrap());
        assert!(!admin.remove_user(&owner, &login).await.unwrap());
        // A login in none of Leadgate's roles is never dropped from here.
        assert!(!admin.remove_user(&owner, "postgres").await.unwrap());
        let gone = Console::open(&url_as(&db.url, &login, &password))
            .await
            .err()
            .unwrap();
        assert!(matches!(gone, ConsoleError::Unreachable { .. }), "{gone:?}");
    })
    .await;
}

/// Issue 37, point 3: each role's queue holds the work it may do. Sales ops count the
/// cross-channel match apart (it waits for a manager) and a bulk preview tells them, in
/// the console's words, that it is not theirs — before the database would refuse it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_role_counts_and_previews_only_what_it_decides() {
    run(Backend::Postgres, |db: TestDb| async move {
        let (_store, _s) = seeded(&db).await;
        let people = People::new(&db.url).await;
        let all = Selection {
            tab: Tab::NeedsReview,
            query: QueueQuery::default(),
            search: None,
        };
        for (role, others, refused) in [
            (Role::SalesOps, 1, Some("not_your_role")),
            (Role::Manager, 0, None),
        ] {
            let c = console(&people, role).await;
            let counts = c.counts().await.unwrap();
            assert_eq!(
                (counts.needs_review, counts.others_decide),
                (3, others),
                "{role:?}"
            );
            let preview = c
                .bulk_preview(all.clone(), BulkAction::Reject)
                .await
                .unwrap();
            match refused {
                Some(code) => {
                    assert_eq!(preview.refused.get(code), Some(&1), "{role:?}: {preview:?}");
                    assert_eq!(preview.items.len(), 2);
                }
                None => assert_eq!(preview.items.len(), 3, "{role:?}: {preview:?}"),
            }
        }
        people.drop_all().await;
    })
    .await;
}
