//! The two logins of an installation (issue 32, point 3, and the role-related parts of
//! point 8): the gateway's login owns the schema without CREATEROLE or SUPERUSER (and
//! warns when it has either), people's logins are made by an administration login, a
//! login in two roles is the lesser one everywhere, `leadgate user add` sends no password,
//! a second Leadgate database on the server is closed to the first one's people, and the
//! gateway's commits are synchronous whatever the database's settings say.
//! Each attack is made as a real login, through raw SQL.

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};

use leadgate::domain::roles::Role;
use leadgate::store::postgres::{with_database, PgStore};
use leadgate_testkit::people::{drop_login, url_as, People};
use leadgate_testkit::process::{command, free_port, GatewayFile, Process, SiteAuth};
use leadgate_testkit::{run, Backend};

fn server() -> String {
    std::env::var("LEADGATE_TEST_DATABASE_URL").expect("LEADGATE_TEST_DATABASE_URL")
}

fn tag() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..10].to_owned()
}

/// The SQLSTATE a statement failed with, or "ok".
async fn sqlstate(conn: &mut PgConnection, sql: &str) -> String {
    match sqlx::raw_sql(sql).execute(&mut *conn).await {
        Ok(_) => "ok".into(),
        Err(sqlx::Error::Database(e)) => e.code().unwrap_or_default().into_owned(),
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// The SQLSTATE a connection attempt failed with, or "ok".
async fn connects(url: &str) -> String {
    match PgConnection::connect(url).await {
        Ok(c) => {
            c.close().await.ok();
            "ok".into()
        }
        Err(sqlx::Error::Database(e)) => e.code().unwrap_or_default().into_owned(),
        Err(e) => panic!("connecting: {e}"),
    }
}

/// An installation as README's *Install* makes it: a runtime login (no CREATEROLE) owning
/// a database of its own, and an administration login with CREATEROLE. Dropped with
/// everything it holds when the value goes, also when a test fails.
struct Install {
    runtime: String,
    admin: String,
    database: String,
    /// A database a test may create, open to every login (dropped with the rest).
    open: String,
    /// The runtime login's URL of its database.
    url: String,
    /// The administration login's URL (of the server's own database: roles are the
    /// server's).
    admin_url: String,
}

impl Install {
    async fn new() -> Install {
        let t = tag();
        let (runtime, admin, database) = (
            format!("lgt_rt_{t}"),
            format!("lgt_adm_{t}"),
            format!("lgt_db_{t}"),
        );
        let mut su = PgConnection::connect(&server()).await.unwrap();
        sqlx::raw_sql(&format!(
            "create role {runtime} login password 'rt-{t}'; \
             create role {admin} login createrole password 'adm-{t}'"
        ))
        .execute(&mut su)
        .await
        .unwrap();
        sqlx::raw_sql(&format!("create database {database} owner {runtime}"))
            .execute(&mut su)
            .await
            .unwrap();
        let url = url_as(
            &with_database(&server(), &database),
            &runtime,
            &format!("rt-{t}"),
        );
        let admin_url = url_as(&server(), &admin, &format!("adm-{t}"));
        Install {
            runtime,
            admin,
            database,
            open: format!("lgt_open_{t}"),
            url,
            admin_url,
        }
    }
}

impl Drop for Install {
    fn drop(&mut self) {
        let (databases, logins) = (
            [self.database.clone(), self.open.clone()],
            [self.runtime.clone(), self.admin.clone()],
        );
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut su = PgConnection::connect(&server()).await.unwrap();
                for database in databases {
                    let _ =
                        sqlx::raw_sql(&format!("drop database if exists {database} with (force)"))
                            .execute(&mut su)
                            .await;
                }
                for login in logins {
                    drop_login(&mut su, &login).await;
                }
            });
        })
        .join()
        .ok();
    }
}

/// `leadgate args…` with `env`; its exit status, stdout and stderr.
fn leadgate(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = command(env!("CARGO_BIN_EXE_leadgate"), args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gateway_needs_no_createrole_and_people_come_through_the_administration_login() {
    let install = Install::new().await;
    // The runtime login migrates its database from nothing and owns it.
    let store = PgStore::connect(&install.url).await.unwrap();
    // It can neither make logins nor give itself the server's programs.
    let mut rt = PgConnection::connect(&install.url).await.unwrap();
    for denied in [
        "create role lgt_nobody_here login",
        "grant pg_execute_server_program to current_user",
        "copy (select 1) to program 'id'",
    ] {
        assert_eq!(
            sqlstate(&mut rt, denied).await,
            "42501",
            "runtime: {denied}"
        );
    }
    // People come through the administration login, their grants from the owner.
    let people = People::with_admin(&install.url, &install.admin_url).await;
    let mut sales = people.sql(Role::SalesOps).await;
    assert_eq!(
        sqlstate(&mut sales, "select payload from operations").await,
        "ok"
    );
    assert_eq!(
        sqlstate(&mut sales, "select access_token from crm_tokens").await,
        "42501"
    );
    let mut support = people.sql(Role::Support).await;
    assert_eq!(
        sqlstate(&mut support, "select payload from operations").await,
        "42501"
    );
    let listed: Vec<(String, Role)> = store
        .users()
        .await
        .unwrap()
        .into_iter()
        .map(|u| (u.login, u.role))
        .collect();
    for role in Role::ALL {
        assert!(
            listed.contains(&(people.login(*role).to_owned(), *role)),
            "{listed:?}"
        );
    }
    // A gateway starting again (serve, worker, migrate) keeps the grants it gives.
    drop(store);
    let _again = PgStore::connect(&install.url).await.unwrap();
    assert_eq!(
        sqlstate(&mut sales, "select payload from operations").await,
        "ok"
    );
    // The administration login is refused as a gateway would be refused as one: it may
    // not create roles without CREATEROLE.
    let not_admin = leadgate::store::logins::LoginAdmin::connect(&install.url)
        .await
        .err()
        .expect("the runtime login is no administration login");
    assert!(not_admin.to_string().contains("CREATEROLE"), "{not_admin}");
    drop((sales, support, rt));
    people.drop_all().await;
}

/// Starts `leadgate <what> --config <config>` with its stderr in a file, until `done` is
/// true of that log (within 60 s), then kills it and returns the log.
async fn started_log(
    what: &str,
    config: &str,
    dir: &std::path::Path,
    done: impl Fn(&str) -> bool,
) -> String {
    let log = dir.join(format!("{what}.log"));
    let mut cmd = command(env!("CARGO_BIN_EXE_leadgate"), &[what, "--config", config]);
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut process = Process(cmd.spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if done(&text) || Instant::now() > deadline {
            process.kill();
            return std::fs::read_to_string(&log).unwrap_or_default();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_worker_and_migrate_warn_when_their_login_has_superuser_or_createrole() {
    let install = Install::new().await;
    let warning = "WARNING: the gateway's database login";
    // The runtime login of README: no warning.
    let (ok, _, err) = leadgate(&["migrate"], &[("LEADGATE_DATABASE_URL", &install.url)]);
    assert!(ok, "{err}");
    assert!(!err.contains(warning), "{err}");
    // A database of the server still open to every login is named at start, once people's
    // roles exist.
    let people = People::with_admin(&install.url, &install.admin_url).await;
    let mut su = PgConnection::connect(&server()).await.unwrap();
    sqlx::raw_sql(&format!("create database {}", install.open))
        .execute(&mut su)
        .await
        .unwrap();
    let (ok, _, err) = leadgate(&["migrate"], &[("LEADGATE_DATABASE_URL", &install.url)]);
    assert!(ok, "{err}");
    assert!(!err.contains(warning), "{err}");
    assert!(
        err.contains("people's logins may connect to other databases")
            && err.contains(&install.open),
        "{err}"
    );
    people.drop_all().await;
    // The test server's superuser, on a database of its own: migrate, serve and worker.
    run(Backend::Postgres, |db| async move {
        let (ok, _, err) = leadgate(&["migrate"], &[("LEADGATE_DATABASE_URL", &db.url)]);
        assert!(ok, "{err}");
        assert!(
            err.contains("WARN") && err.contains(warning) && err.contains("has SUPERUSER"),
            "{err}"
        );
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = GatewayFile {
            db_url: &db.url,
            webhook_url: "http://127.0.0.1:9/rest/1/nothing/",
            port,
            lease: "4s",
            concurrency: None,
            retry: None,
            read_token: None,
            site: SiteAuth::Secret("logins-site-key"),
            crm_timeout: "3s",
            settle: None,
        }
        .write(dir.path(), "leadgate");
        for what in ["serve", "worker"] {
            let log = started_log(what, &config, dir.path(), |l| l.contains("has SUPERUSER")).await;
            assert!(
                log.contains(warning) && log.contains("has SUPERUSER"),
                "{what}: {log}"
            );
        }
    })
    .await;
    // A login with CREATEROLE owning the database (README's old `create role … createrole`).
    sqlx::raw_sql(&format!("alter role {} createrole", install.runtime))
        .execute(&mut su)
        .await
        .unwrap();
    let (ok, _, err) = leadgate(&["migrate"], &[("LEADGATE_DATABASE_URL", &install.url)]);
    assert!(ok, "{err}");
    assert!(
        err.contains(warning) && err.contains("has CREATEROLE"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_login_in_two_roles_is_the_lesser_one_for_the_database_and_for_user_list() {
    run(Backend::Postgres, |db| async move {
        let people = People::new(&db.url).await;
        let mut su = PgConnection::connect(&db.url).await.unwrap();
        // Given a second role by hand: support + manager, and sales_ops + admin.
        let (support, sales) = (people.login(Role::Support), people.login(Role::SalesOps));
        sqlx::raw_sql(&format!(
            "grant leadgate_manager to \"{support}\"; grant leadgate_admin to \"{sales}\""
        ))
        .execute(&mut su)
        .await
        .unwrap();
        let users = people.owner.users().await.unwrap();
        let of = |login: &str| users.iter().find(|u| u.login == login).unwrap().clone();
        assert_eq!((of(support).role, of(support).also), (Role::Support, vec![Role::Manager]));
        assert_eq!((of(sales).role, of(sales).also), (Role::Admin, vec![Role::SalesOps]));
        // The database asks as the same role: support may ask nothing a manager may …
        let mut sql = people.sql(Role::Support).await;
        assert_eq!(
            sqlstate(
                &mut sql,
                "insert into human_requests (kind, operation_id) values ('notified', 'site:x')"
            )
            .await,
            "42501"
        );
        let role: Option<String> = sqlx::query_scalar("select leadgate_role_of(session_user)")
            .fetch_one(&mut sql)
            .await
            .unwrap();
        assert_eq!(role.as_deref(), Some("leadgate_support"));
        // … and sales_ops + admin asks as admin: a connector, not a case.
        let mut sql = people.sql(Role::SalesOps).await;
        assert_eq!(
            sqlstate(
                &mut sql,
                "begin; insert into human_requests (kind, connector) values ('resume_connector', 'bitrix24'); rollback"
            )
            .await,
            "ok"
        );
        assert_eq!(
            sqlstate(
                &mut sql,
                "insert into human_requests (kind, operation_id) values ('notified', 'site:x')"
            )
            .await,
            "42501"
        );
        // The console says the same.
        let console = leadgate_console_model::Console::open(people.url(Role::Support))
            .await
            .unwrap();
        assert_eq!(console.connection.role.as_deref(), Some("support"));
        // A login dropped meanwhile is in no role (no error for the whole list).
        let none: Option<String> = sqlx::query_scalar("select leadgate_role_of('lgt_no_such_login')")
            .fetch_one(&mut su)
            .await
            .unwrap();
        assert_eq!(none, None);
        people.drop_all().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn user_add_sends_a_scram_verifier_and_no_password_reaches_the_logs() {
    run(Backend::Postgres, |db| async move {
        let login = format!("lgt_pw_{}", tag());
        // Without the administration login: a clear error, nothing created.
        let (ok, _, err) = leadgate(
            &["user", "add", &login, "--role", "support"],
            &[("LEADGATE_DATABASE_URL", &db.url)],
        );
        assert!(!ok && err.contains("--admin-url"), "{err}");
        let (ok, out, err) = leadgate(
            &["user", "add", &login, "--role", "support"],
            &[
                ("LEADGATE_DATABASE_URL", &db.url),
                ("LEADGATE_ADMIN_DATABASE_URL", &db.url),
                // every statement sqlx sends, at debug level
                ("RUST_LOG", "debug"),
            ],
        );
        let mut su = PgConnection::connect(&db.url).await.unwrap();
        let cleanup = || async {
            let mut su = PgConnection::connect(&server()).await.unwrap();
            drop_login(&mut su, &login).await;
        };
        if !ok {
            cleanup().await;
            panic!("{err}");
        }
        let password = out
            .lines()
            .skip_while(|l| !l.contains("its password"))
            .nth(1)
            .map(|l| l.trim().to_owned())
            .unwrap_or_default();
        let stored: Option<String> =
            sqlx::query_scalar("select rolpassword from pg_authid where rolname = $1")
                .bind(&login)
                .fetch_one(&mut su)
                .await
                .unwrap();
        cleanup().await;
        assert_eq!(password.len(), 24, "{out}");
        // The statement was logged (with the verifier), the password nowhere.
        assert!(
            err.contains("create role") && err.contains("SCRAM-SHA-256$"),
            "{err}"
        );
        assert!(
            !err.contains(&password),
            "the password reached the log:\n{err}"
        );
        let stored = stored.unwrap_or_default();
        assert!(stored.starts_with("SCRAM-SHA-256$4096:"), "{stored}");
        assert!(err.contains(&stored), "the verifier sent is the one stored");
        // The test server trusts every local connection, so logging in proves nothing:
        // the stored verifier is checked against the printed password instead.
        assert!(scram_verifies(&stored, &password), "{stored}");
        assert!(!scram_verifies(&stored, "not-the-password"));
    })
    .await;
}

/// Whether a SCRAM-SHA-256 verifier (`SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:
/// <ServerKey>`, RFC 5802/7677) was made from `password` (ASCII: SASLprep leaves it).
fn scram_verifies(verifier: &str, password: &str) -> bool {
    use base64::Engine;
    use hmac::{Hmac, Mac};
    use sha2::{Digest, Sha256};
    let b64 = base64::engine::general_purpose::STANDARD;
    let hmac = |key: &[u8], data: &[u8]| {
        let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
        m.update(data);
        m.finalize().into_bytes().to_vec()
    };
    let Some((iterations, salt, stored_key)) = verifier
        .strip_prefix("SCRAM-SHA-256$")
        .and_then(|v| v.split_once('$'))
        .and_then(|(params, keys)| {
            let (i, salt) = params.split_once(':')?;
            Some((
                i.parse::<u32>().ok()?,
                b64.decode(salt).ok()?,
                keys.split_once(':')?.0,
            ))
        })
    else {
        return false;
    };
    // PBKDF2-HMAC-SHA-256, one block.
    let mut u = hmac(
        password.as_bytes(),
        &[salt.as_slice(), &1u32.to_be_bytes()].concat(),
    );
    let mut salted = u.clone();
    for _ in 1..iterations {
        u = hmac(password.as_bytes(), &u);
        salted.iter_mut().zip(&u).for_each(|(s, x)| *s ^= x);
    }
    let client_key = hmac(&salted, b"Client Key");
    b64.encode(Sha256::digest(&client_key)) == stored_key
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn people_of_one_leadgate_database_cannot_connect_to_another_on_the_server() {
    run(Backend::Postgres, |a| async move {
        let people = People::new(&a.url).await;
        run(Backend::Postgres, |b| async move {
            // A second Leadgate database on the same server, migrated by its gateway.
            let second = PgStore::connect(&b.url).await.unwrap();
            let b_name = &b.url[b.url.rfind('/').unwrap() + 1..];
            for role in Role::ALL {
                // Refused for the database (the server's trust or password aside).
                let into_b = with_database(people.url(*role), b_name);
                assert_eq!(connects(&into_b).await, "42501", "{role} into B");
                assert_eq!(connects(people.url(*role)).await, "ok", "{role} into A");
            }
            // B's list of people has none of A's.
            let listed = second.users().await.unwrap();
            for role in Role::ALL {
                let login = people.login(*role);
                assert!(!listed.iter().any(|u| u.login == login), "{listed:?}");
            }
            // Nor may any other login of the server connect to B.
            let t = tag();
            let mut su = PgConnection::connect(&server()).await.unwrap();
            sqlx::raw_sql(&format!("create role lgt_other_{t} login password 'o'"))
                .execute(&mut su)
                .await
                .unwrap();
            let other = connects(&url_as(&b.url, &format!("lgt_other_{t}"), "o")).await;
            drop_login(&mut su, &format!("lgt_other_{t}")).await;
            assert_eq!(other, "42501");
            people.drop_all().await;
        })
        .await;
    })
    .await;
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upgrade_closes_the_database_and_its_people_keep_their_way_in() {
    run(Backend::Postgres, |db| async move {
        let _store = PgStore::connect(&db.url).await.unwrap();
        // The database as 0024 left it: open to PUBLIC, and a person made then (no
        // CONNECT of their own).
        let t = tag();
        let (person, stranger) = (format!("lgt_old_{t}"), format!("lgt_str_{t}"));
        let name = &db.url[db.url.rfind('/').unwrap() + 1..];
        let mut su = PgConnection::connect(&db.url).await.unwrap();
        sqlx::raw_sql(&format!(
            "grant connect on database {name} to public; \
             delete from _sqlx_migrations where version = 25; \
             create role {person} login in role leadgate_support; \
             create role {stranger} login"
        ))
        .execute(&mut su)
        .await
        .unwrap();
        let before = (
            connects(&url_as(&db.url, &person, "x")).await,
            connects(&url_as(&db.url, &stranger, "x")).await,
        );
        let upgraded = PgStore::connect(&db.url).await;
        let after = (
            connects(&url_as(&db.url, &person, "x")).await,
            connects(&url_as(&db.url, &stranger, "x")).await,
        );
        let mut server_su = PgConnection::connect(&server()).await.unwrap();
        drop(su);
        // (the database goes with the test; the logins are the server's)
        let listed = upgraded.as_ref().unwrap().users().await.unwrap();
        drop(upgraded);
        for login in [&person, &stranger] {
            sqlx::raw_sql(&format!("revoke connect on database {name} from {login}"))
                .execute(&mut server_su)
                .await
                .ok();
            drop_login(&mut server_su, login).await;
        }
        assert_eq!(before, ("ok".into(), "ok".into()));
        assert_eq!(
            after,
            ("ok".into(), "42501".into()),
            "the person stays, the stranger is out"
        );
        assert!(
            listed
                .iter()
                .any(|u| u.login == person && u.role == Role::Support),
            "{listed:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_start_does_not_hang_on_whoever_holds_the_grants_lock() {
    run(Backend::Postgres, |db| async move {
        let _first = PgStore::connect(&db.url).await.unwrap();
        // Another session holds the grants lock (its row of `leadgate_locks`) and does
        // not let go.
        let mut holder = PgConnection::connect(&db.url).await.unwrap();
        let mut held = holder.begin().await.unwrap();
        sqlx::query("select 1 from leadgate_locks where name = 'grants' for update")
            .execute(&mut *held)
            .await
            .unwrap();
        // The grants wait 10 s at most; the start goes on (and says so).
        let began = Instant::now();
        let started = tokio::time::timeout(Duration::from_secs(120), PgStore::connect(&db.url))
            .await
            .expect("a start that does not hang");
        assert!(started.is_ok(), "{:?}", started.err());
        // It did wait for the lock (a lower bound holds on a busy machine too).
        assert!(
            began.elapsed() >= Duration::from_secs(9),
            "the start did not meet the held lock: {:?}",
            began.elapsed()
        );
        held.rollback().await.unwrap();
        holder.close().await.unwrap();
    })
    .await;
}

/// Fleet mode (migration 0039): the gateway's own login — no superuser, no BYPASSRLS —
/// owns the tables and reads every tenant's rows; a person's login reads its tenants'
/// (the default tenant's without `--tenants`), and `user tenants` moves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_login_reads_every_tenant_and_a_persons_login_its_own() {
    use leadgate::store::logins::PersonTenants;
    let install = Install::new().await;
    let store = PgStore::connect(&install.url).await.unwrap();
    let mut rt = PgConnection::connect(&install.url).await.unwrap();
    let (superuser, bypass): (bool, bool) =
        sqlx::query_as("select rolsuper, rolbypassrls from pg_roles where rolname = current_user")
            .fetch_one(&mut rt)
            .await
            .unwrap();
    assert!(!superuser && !bypass);
    sqlx::raw_sql(
        "insert into tenants (id, slug, name) values (1, 'acme', 'ACME'), (2, 'beta', 'Beta'); \
         insert into operations (operation_id, source, status, payload_hash, created_at, updated_at, tenant_id) \
         values ('site:d', 'site', 'received', 'h', now(), now(), 0), \
                ('acme/site:a', 'site', 'received', 'h', now(), now(), 1), \
                ('beta/site:b', 'site', 'received', 'h', now(), now(), 2)",
    )
    .execute(&mut rt)
    .await
    .unwrap();
    let ids = |sql: &'static str| {
        let url = install.url.clone();
        async move {
            let mut c = PgConnection::connect(&url).await.unwrap();
            sqlx::query_scalar::<_, String>(sql)
                .fetch_all(&mut c)
                .await
                .unwrap()
        }
    };
    let all_ops = "select operation_id from operations order by operation_id";
    assert_eq!(
        ids(all_ops).await,
        ["acme/site:a", "beta/site:b", "site:d"],
        "the gateway's login serves every tenant"
    );

    let acme = People::in_tenants(
        &install.url,
        &install.admin_url,
        &PersonTenants::Only(vec!["acme".into()]),
    )
    .await;
    let plain = People::with_admin(&install.url, &install.admin_url).await;
    let read = |people: &People, role: Role| {
        let url = people.url(role).to_owned();
        async move {
            let mut c = PgConnection::connect(&url).await.unwrap();
            sqlx::query_scalar::<_, String>(all_ops)
                .fetch_all(&mut c)
                .await
                .unwrap()
        }
    };
    assert_eq!(read(&acme, Role::Manager).await, ["acme/site:a"]);
    assert_eq!(read(&acme, Role::Support).await, ["acme/site:a"]);
    // A login without tenants: the default tenant's, as before fleet mode.
    assert_eq!(read(&plain, Role::Manager).await, ["site:d"]);
    let listed = store.people_tenants().await.unwrap();
    assert_eq!(
        listed.get(acme.login(Role::Manager)),
        Some(&PersonTenants::Only(vec!["acme".into()]))
    );
    assert_eq!(listed.get(plain.login(Role::Manager)), None);
    // `leadgate user tenants … --tenants all`, then `beta`.
    let login = acme.login(Role::Manager).to_owned();
    store
        .set_person_tenants(&login, &PersonTenants::All)
        .await
        .unwrap();
    assert_eq!(
        read(&acme, Role::Manager).await,
        ["acme/site:a", "beta/site:b", "site:d"]
    );
    store
        .set_person_tenants(&login, &PersonTenants::Only(vec!["beta".into()]))
        .await
        .unwrap();
    assert_eq!(read(&acme, Role::Manager).await, ["beta/site:b"]);
    // A tenant that does not exist is refused, and nothing changes.
    let err = store
        .set_person_tenants(&login, &PersonTenants::Only(vec!["zeta".into()]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no such tenant: zeta"), "{err}");
    assert_eq!(read(&acme, Role::Manager).await, ["beta/site:b"]);
    acme.drop_all().await;
    plain.drop_all().await;
    // Removed logins leave no membership behind.
    assert!(store.people_tenants().await.unwrap().is_empty());
}
