//! Fleet mode's isolation on PostgreSQL (issue 35, migration 0039): every person's login
//! reads its own tenants' rows and no other's, whatever its role, through raw SQL as
//! through the console; it writes nothing of another tenant's and asks nothing about one;
//! the gateway's login serves every tenant. SQLite has no logins (one operator).

use sqlx::{Connection, PgConnection};

use leadgate::domain::roles::Role;
use leadgate::store::logins::PersonTenants;
use leadgate_testkit::people::People;
use leadgate_testkit::seed::seed;
use leadgate_testkit::{run, Backend, TestDb};

use crate::tenants::TENANT_OWNED;

/// The tenant whose rows the people below must not see.
const BETA: i32 = 2;

/// A database whose every tenant-owned row is beta's: the seeded history (a day of
/// leads, a case of each kind, a paused connector, business rules) moved to beta as its
/// owner, past the timeline's append-only triggers; acme (tenant 1) has no row.
async fn betas_history(db: &TestDb) {
    let store = db.store().await;
    seed(&*store).await.unwrap();
    let site = leadgate::store::SourceRules {
        source: "site".into(),
        rule: leadgate::domain::MatchRule::Create,
        window_secs: 86400,
        channel: "site".into(),
    };
    store.seed_rules(&[site], store.now()).await.unwrap();
    db.execute(
        "insert into tenants (id, slug, name) values (1, 'acme', 'ACME'), (2, 'beta', 'Beta')",
    )
    .await;
    for t in TENANT_OWNED {
        db.execute(&format!(
            "alter table {t} disable trigger user; update {t} set tenant_id = {BETA}; \
             alter table {t} enable trigger user"
        ))
        .await;
    }
}

/// An open case any resolving role may resolve (not a cross-channel match), and the
/// version of its operation, as the gateway's login reads them.
async fn resolvable_case(owner: &mut PgConnection) -> (i64, i64) {
    sqlx::query_as(
        "select c.id, o.version from review_cases c join operations o using (operation_id) \
         where c.resolved_at is null and c.reason <> 'cross_channel_match' order by c.id limit 1",
    )
    .fetch_one(owner)
    .await
    .unwrap()
}

/// What `sql` did as `c`'s login: refused by the database, or the rows it returned or
/// touched.
async fn try_sql(c: &mut PgConnection, sql: &str) -> Result<u64, String> {
    if sql.trim_start().starts_with("select") {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(&mut *c)
            .await
            .map(|n| n as u64)
            .map_err(|e| e.to_string())
    } else {
        sqlx::query(sql)
            .execute(&mut *c)
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| e.to_string())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_is_refused_every_other_tenant() {
    run(Backend::Postgres, |db| async move {
        betas_history(&db).await;
        // What beta holds, as the gateway's login sees it: every tenant.
        let mut owner = PgConnection::connect(&db.url).await.unwrap();
        let mut held = vec![];
        for t in TENANT_OWNED {
            let n: i64 = sqlx::query_scalar(&format!(
                "select count(*) from {t} where tenant_id = {BETA}"
            ))
            .fetch_one(&mut owner)
            .await
            .unwrap();
            held.push((*t, n));
        }
        for core in [
            "operations",
            "deliveries",
            "timeline",
            "review_cases",
            "operation_names",
            "metric_counters",
            "metric_series",
            "connectors",
            "business_rules",
        ] {
            assert!(
                held.iter().any(|(t, n)| *t == core && *n > 0),
                "the gateway's login sees none of beta's {core}: {held:?}"
            );
        }

        // acme's people, one per role, and an integrator's people in every tenant.
        let acme =
            People::in_tenants(&db.url, &db.url, &PersonTenants::Only(vec!["acme".into()])).await;
        let all = People::in_tenants(&db.url, &db.url, &PersonTenants::All).await;
        // A request about this case is right in every way but its tenant.
        let (case, version) = resolvable_case(&mut owner).await;
        let ask = |tenant: i32| {
            format!(
                "insert into human_requests (kind, case_id, expected_version, body, tenant_id) \
                 values ('resolve', {case}, {version}, \
                 '{{\"resolution\":\"confirmed_crm_result\",\"crm_id\":\"1\"}}', {tenant})"
            )
        };
        let phone: String = sqlx::query_scalar(
            "select contact_phone from operations where contact_phone is not null limit 1",
        )
        .fetch_one(&mut owner)
        .await
        .unwrap();

        let mut table = String::from(
            "role        table                    read     insert   update   delete\n",
        );
        let mut leaks = vec![];
        for role in Role::ALL {
            let mut c = acme.sql(*role).await;
            for (t, _) in &held {
                let mut row = format!("{:<11} {:<24}", role.to_string(), t);
                for (what, sql) in [
                    ("read", format!("select count(*) from {t}")),
                    (
                        "insert",
                        format!("insert into {t} (tenant_id) values ({BETA})"),
                    ),
                    ("update", format!("update {t} set tenant_id = tenant_id")),
                    ("delete", format!("delete from {t}")),
                ] {
                    // Refused, or nothing of beta's returned or touched.
                    let cell = match try_sql(&mut c, &sql).await {
                        Err(_) => "refused",
                        Ok(0) => "none",
                        Ok(n) => {
                            leaks.push(format!("{role} {what} {t}: {n} rows"));
                            "LEAK"
                        }
                    };
                    row += &format!(" {cell:<8}");
                }
                table += row.trim_end();
                table += "\n";
            }
            // A request about beta's case: under beta's name, under acme's, under the
            // default tenant's — none is written.
            for tenant in [BETA, 1, 0] {
                if let Ok(n) = try_sql(&mut c, &ask(tenant)).await {
                    leaks.push(format!(
                        "{role} asked about beta's case as tenant {tenant}: {n}"
                    ));
                }
            }
            // "Did my lead arrive?" with beta's phone: nothing.
            let found = try_sql(
                &mut c,
                &format!("select count(*) from leadgate_lookup('{phone}', null, 50)"),
            )
            .await;
            if found != Ok(0) {
                leaks.push(format!("{role} looked up beta's phone: {found:?}"));
            }
        }
        // What spans tenants is for people in every tenant: the event feed (its events are
        // every tenant's) and the web console's sign-ins.
        let feed_remove = |tenant: i32| {
            format!(
                "insert into human_requests (kind, body, tenant_id) \
                 values ('feed_remove', '{{\"id\":1}}', {tenant})"
            )
        };
        sqlx::query(
            "insert into console_sign_ins (at, login, client, outcome) \
             values (now(), 'someone', '192.0.2.1', 'signed_in')",
        )
        .execute(&mut owner)
        .await
        .unwrap();
        let mut c = acme.sql(Role::Admin).await;
        if let Ok(n) = try_sql(&mut c, &feed_remove(1)).await {
            leaks.push(format!("acme's admin asked about the event feed: {n}"));
        }
        if let Ok(n) = try_sql(&mut c, "select count(*) from console_sign_ins").await {
            if n > 0 {
                leaks.push(format!("acme's admin read {n} sign-ins"));
            }
        }
        let mut c = all.sql(Role::Admin).await;
        assert_eq!(try_sql(&mut c, &feed_remove(0)).await, Ok(1));
        assert_eq!(
            try_sql(&mut c, "select count(*) from console_sign_ins").await,
            Ok(1)
        );
        // Beta's own registry row is not acme's either.
        let mut c = acme.sql(Role::Manager).await;
        assert_eq!(
            try_sql(&mut c, "select count(*) from tenants where id <> 1").await,
            Ok(0)
        );
        eprintln!("{table}");
        assert!(leaks.is_empty(), "{leaks:#?}\n{table}");
        assert!(!table.contains("LEAK"), "{table}");

        // The integrator's people see beta's rows their role may read: the refusals above
        // are the tenant's, not the role's.
        for (role, t) in [
            (Role::Manager, "operations"),
            (Role::SalesOps, "review_cases"),
            (Role::Support, "metric_counters"),
            (Role::Admin, "connectors"),
        ] {
            let mut c = all.sql(role).await;
            let n = try_sql(&mut c, &format!("select count(*) from {t}")).await;
            assert!(
                matches!(n, Ok(n) if n > 0),
                "{role} in every tenant reads {t}: {n:?}"
            );
        }
        let mut c = all.sql(Role::Support).await;
        let found = try_sql(
            &mut c,
            &format!("select count(*) from leadgate_lookup('{phone}', null, 50)"),
        )
        .await;
        assert!(matches!(found, Ok(n) if n > 0), "{found:?}");
        // ... and may ask about beta's case, under beta's name only.
        let mut c = all.sql(Role::Manager).await;
        assert!(try_sql(&mut c, &ask(1)).await.is_err());
        assert_eq!(try_sql(&mut c, &ask(BETA)).await, Ok(1));
        // A gateway applies it as beta's: the case is resolved, by that person.
        let gateway = leadgate_testkit::people::gateway(db.store().await);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let outcome = loop {
            let outcome: Option<String> = sqlx::query_scalar(
                "select outcome from human_requests where actor = $1 order by id desc limit 1",
            )
            .bind(all.login(Role::Manager))
            .fetch_one(&mut owner)
            .await
            .unwrap();
            if let Some(o) = outcome {
                break o;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the request was never applied"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        gateway.abort();
        let (resolved_by, tenant): (Option<String>, i32) =
            sqlx::query_as("select resolved_by, tenant_id from review_cases where id = $1")
                .bind(case)
                .fetch_one(&mut owner)
                .await
                .unwrap();
        assert_eq!(
            (resolved_by.as_deref(), tenant),
            (Some(all.login(Role::Manager)), BETA),
            "{outcome}"
        );
        acme.drop_all().await;
        all.drop_all().await;
    })
    .await;
}

/// A table of a tenant's rows without its policy would be read whole by every person: the
/// schema says every one has row-level security and a policy on its tenant (a table added
/// later must get them in its migration).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tenant_owned_table_has_row_level_security() {
    run(Backend::Postgres, |db| async move {
        db.store().await;
        let guarded = db
            .texts(
                "select c.relname::text from pg_class c \
                 join pg_namespace n on n.oid = c.relnamespace and n.nspname = 'public' \
                 where c.relrowsecurity and exists (select 1 from pg_policies p \
                   where p.schemaname = 'public' and p.tablename = c.relname \
                   and p.cmd = 'SELECT' and p.qual like '%leadgate_my_tenants()%') \
                 order by 1",
            )
            .await;
        for t in TENANT_OWNED.iter().chain(&["tenants"]) {
            if *t == "human_requests" {
                // A person reads their own requests; what they may ask is the tenant's.
                assert_eq!(
                    db.texts(
                        "select policyname::text from pg_policies where tablename = 'human_requests' \
                         and permissive = 'RESTRICTIVE' and with_check like '%leadgate_request_in_tenant%'"
                    )
                    .await,
                    ["human_requests_in_tenant"]
                );
                continue;
            }
            assert!(guarded.contains(&t.to_string()), "{t} has no tenant policy: {guarded:?}");
        }
    })
    .await;
}

/// The console asks under the case's tenant (`Review::ask` takes it from the case or the
/// operation in SQL), so a person of one tenant resolves that tenant's cases, and a person
/// of another tenant still cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_resolves_their_tenants_case_from_the_console() {
    use leadgate_console_model::{Action, ActionRequest, Console};
    run(Backend::Postgres, |db| async move {
        betas_history(&db).await;
        let mut owner = PgConnection::connect(&db.url).await.unwrap();
        let (case, version) = resolvable_case(&mut owner).await;
        let request = || ActionRequest {
            case_id: case,
            expected_version: version,
            comment: None,
            action: Action::Confirm {
                crm_id: "77".into(),
            },
        };
        let gateway = leadgate_testkit::people::gateway(db.store().await);
        let console_of = |people: &People| {
            let url = people.url(Role::Manager).to_owned();
            async move {
                let store = leadgate::store::open(&url).await.unwrap();
                let console = Console::on(store, "test".into()).await.unwrap();
                assert_eq!(console.connection.mode, "person");
                console
            }
        };

        // acme's manager does not see beta's case, and asking about it changes nothing.
        let acme =
            People::in_tenants(&db.url, &db.url, &PersonTenants::Only(vec!["acme".into()])).await;
        let refused = console_of(&acme).await.act("acme", request()).await;
        assert!(refused.is_err(), "{refused:?}");

        let beta =
            People::in_tenants(&db.url, &db.url, &PersonTenants::Only(vec!["beta".into()])).await;
        let done = console_of(&beta).await.act("beta", request()).await;
        gateway.abort();
        assert!(
            done.is_ok(),
            "beta's manager resolving beta's case: {done:?}"
        );
        let (resolved_by, resolution, tenant): (Option<String>, Option<String>, i32) =
            sqlx::query_as(
                "select resolved_by, resolution, tenant_id from review_cases where id = $1",
            )
            .bind(case)
            .fetch_one(&mut owner)
            .await
            .unwrap();
        assert_eq!(
            (resolved_by.as_deref(), resolution.as_deref(), tenant),
            (
                Some(beta.login(Role::Manager)),
                Some("confirmed_crm_result"),
                BETA
            )
        );
        let asked: Vec<i32> = sqlx::query_scalar(
            "select tenant_id from human_requests where case_id = $1 order by id",
        )
        .bind(case)
        .fetch_all(&mut owner)
        .await
        .unwrap();
        assert_eq!(asked, [BETA], "acme's attempt wrote no request");
        acme.drop_all().await;
        beta.drop_all().await;
    })
    .await;
}

/// A person's console offers their own tenants only and opens on the first; one in every
/// tenant switches between them all, each list the tenant's own, "did my lead arrive?"
/// too (0041's lookup in one tenant).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_console_offers_their_tenants_only() {
    use leadgate_console_model::{Console, QueueQuery, Tab};
    run(Backend::Postgres, |db| async move {
        betas_history(&db).await;
        let mut owner = PgConnection::connect(&db.url).await.unwrap();
        let betas_open: i64 = sqlx::query_scalar(
            "select count(*) from review_cases where resolved_at is null \
             and reason <> 'payload_conflict' and tenant_id = $1",
        )
        .bind(BETA)
        .fetch_one(&mut owner)
        .await
        .unwrap();
        assert!(betas_open > 0);
        let phone: String = sqlx::query_scalar(
            "select contact_phone from operations where contact_phone is not null limit 1",
        )
        .fetch_one(&mut owner)
        .await
        .unwrap();
        let console_of = |url: String| async move {
            let store = leadgate::store::open(&url).await.unwrap();
            Console::on(store, "test".into()).await.unwrap()
        };
        let slugs = |c: &Console| {
            c.connection
                .tenants
                .iter()
                .map(|t| t.slug.clone())
                .collect::<Vec<_>>()
        };

        for role in Role::ALL {
            let acme =
                People::in_tenants(&db.url, &db.url, &PersonTenants::Only(vec!["acme".into()]))
                    .await;
            let console = console_of(acme.url(*role).to_owned()).await;
            assert_eq!(slugs(&console), ["acme"], "{role}");
            assert_eq!(console.connection.tenant, "acme", "{role}");
            assert!(console.with_tenant("beta").is_err(), "{role}");
            if console.connection.may.read_cases {
                assert_eq!(console.counts().await.unwrap().needs_review, 0, "{role}");
            }
            assert!(
                console.lookup(&phone).await.unwrap().rows.is_empty(),
                "{role}"
            );
            acme.drop_all().await;

            let all = People::in_tenants(&db.url, &db.url, &PersonTenants::All).await;
            let console = console_of(all.url(*role).to_owned()).await;
            assert_eq!(slugs(&console), ["default", "acme", "beta"], "{role}");
            assert_eq!(console.connection.tenant, "default", "{role}");
            let beta = console.with_tenant("beta").unwrap();
            if beta.connection.may.read_cases {
                assert_eq!(
                    beta.counts().await.unwrap().needs_review,
                    betas_open,
                    "{role}"
                );
                let page = beta
                    .queue(Tab::NeedsReview, QueueQuery::default())
                    .await
                    .unwrap();
                assert_eq!(page.rows.len() as i64, betas_open, "{role}");
                assert_eq!(console.counts().await.unwrap().needs_review, 0, "{role}");
            }
            assert!(
                !beta.lookup(&phone).await.unwrap().rows.is_empty(),
                "{role}"
            );
            assert!(
                console.lookup(&phone).await.unwrap().rows.is_empty(),
                "{role}"
            );
            all.drop_all().await;
        }
    })
    .await;
}

/// How many leads `leadgate_lookup` finds for `phone` in beta, as `c`'s login.
async fn looked_up(c: &mut PgConnection, phone: &str) -> i64 {
    sqlx::query_scalar("select count(*) from leadgate_lookup($1, null, 50, $2)")
        .bind(phone)
        .bind(BETA)
        .fetch_one(c)
        .await
        .unwrap()
}

/// "Did my lead arrive?" in a named tenant (0041's `leadgate_lookup(…, p_tenant)`) runs as
/// the tables' owner: called by hand for a tenant that is not the caller's, it finds
/// nothing, also when the caller's temporary schema holds a forged `pg_class` or
/// `operations` that would make the caller look like the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_in_another_tenant_finds_nothing_even_with_a_forged_catalog() {
    run(Backend::Postgres, |db| async move {
        betas_history(&db).await;
        let mut owner = PgConnection::connect(&db.url).await.unwrap();
        let phone: String = sqlx::query_scalar(
            "select contact_phone from operations where contact_phone is not null limit 1",
        )
        .fetch_one(&mut owner)
        .await
        .unwrap();
        // The gateway's login finds beta's lead.
        assert!(looked_up(&mut owner, &phone).await > 0);
        let acme =
            People::in_tenants(&db.url, &db.url, &PersonTenants::Only(vec!["acme".into()])).await;
        for role in Role::ALL {
            let mut c = acme.sql(*role).await;
            assert_eq!(looked_up(&mut c, &phone).await, 0, "{role}");
            for forged in [
                "create temp table pg_class (oid oid, relowner oid)",
                "insert into pg_temp.pg_class select 'public.operations'::regclass, \
                 (select oid from pg_catalog.pg_roles where rolname = current_user)",
                "create temp table operations as select * from pg_temp.pg_class",
            ] {
                sqlx::query(forged).execute(&mut c).await.unwrap();
            }
            assert_eq!(
                looked_up(&mut c, &phone).await,
                0,
                "{role}, with a forged pg_class"
            );
        }
        acme.drop_all().await;
    })
    .await;
}
