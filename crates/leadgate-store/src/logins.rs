//! People's logins and the two logins of an installation (issue 32).
//!
//! The **runtime login** (the gateway's database URL: `serve`, `worker`, `migrate`) owns
//! the schema and the database and needs neither SUPERUSER nor CREATEROLE: at every start
//! it gives the people's group roles their table grants (`leadgate_install_roles`, once
//! the four roles exist) and keeps its database closed to the server's other logins
//! (CONNECT revoked from PUBLIC, granted to each person's login). It warns when its own
//! login may do more.
//!
//! The **administration login** ([`LoginAdmin`], `leadgate user add/remove --admin-url`,
//! never in the service's environment) has CREATEROLE and nothing else: it creates the
//! group roles and the people's logins, and drops them. Table grants and CONNECT stay the
//! owner's, so `user add` opens both connections: roles first (admin), then grants and
//! CONNECT (owner).
//!
//! The administration login's URL is given as `--admin-url` or
//! `LEADGATE_ADMIN_DATABASE_URL`, never in the service's environment. `create role`
//! carries a SCRAM-SHA-256 verifier, never the password. CONNECT goes to each person's
//! login and never to the group roles: those are the server's, shared by every Leadgate
//! database on it. A login in two Leadgate roles counts as the least of them
//! (`leadgate_role_of`, migration 0025: support < admin < sales_ops < manager) for its
//! requests, for the console and for `leadgate user list` alike. `tests/it/logins.rs`
//! makes both logins as README's "People and roles" says and attacks as each.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::postgres::{connect_options, PgStore};
use crate::StoreError;
use leadgate_domain::roles::Role;

type Result<T> = std::result::Result<T, StoreError>;

/// One process at a time changes this database's grants: concurrent GRANTs on one
/// object can fail ("tuple concurrently updated"). A row of `leadgate_locks` (made with
/// the migration lock's), which no person's login may lock — not an advisory lock, which
/// any login could take and hold.
const GRANTS_LOCK: &str = "select 1 from leadgate_locks where name = 'grants' for update";

/// Takes [`GRANTS_LOCK`] in `tx`, waiting 10 s at most (and as long for every lock the
/// transaction takes after it): false if another session held it that long — a start
/// must not hang on whoever holds it.
async fn grants_lock(tx: &mut sqlx::PgConnection) -> Result<bool> {
    sqlx::query("set local lock_timeout = '10s'")
        .execute(&mut *tx)
        .await?;
    match sqlx::query(GRANTS_LOCK).execute(&mut *tx).await {
        Ok(_) => Ok(true),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// What each person's login runs with by default (`LoginAdmin::limit_sessions`).
pub const PERSON_SESSION_LIMITS: [(&str, &str); 3] = [
    ("statement_timeout", "60s"),
    ("idle_in_transaction_session_timeout", "60s"),
    ("idle_session_timeout", "1h"),
];

/// The four group roles.
fn groups() -> Vec<String> {
    Role::ALL.iter().map(|r| r.group()).collect()
}

/// The tenants a person's login belongs to (fleet mode, migration 0039): it reads their
/// rows and no other tenant's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PersonTenants {
    /// The default tenant alone: every login before fleet mode, and a deployment without
    /// tenants.
    Default,
    /// Every tenant, present and future: an integrator's admin and support.
    All,
    /// These tenants, by slug: a client's people.
    Only(Vec<String>),
}

impl std::str::FromStr for PersonTenants {
    type Err = String;

    /// `all`, or slugs separated by commas (`acme,beta`).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if s.trim() == "all" {
            return Ok(PersonTenants::All);
        }
        let slugs: Vec<String> = s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        if slugs.is_empty() {
            return Err("name the tenants (`acme,beta`) or `all`".into());
        }
        for slug in &slugs {
            leadgate_domain::TenantSlug::new(slug).map_err(|e| e.to_string())?;
        }
        Ok(PersonTenants::Only(slugs))
    }
}

impl std::fmt::Display for PersonTenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PersonTenants::Default => f.write_str(leadgate_domain::TenantSlug::DEFAULT),
            PersonTenants::All => f.write_str("all"),
            PersonTenants::Only(slugs) => f.write_str(&slugs.join(",")),
        }
    }
}

/// A person's login (`leadgate user list`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub login: String,
    /// The role the database acts on (`leadgate_role_of`: the least privileged of the
    /// login's Leadgate roles).
    pub role: Role,
    /// Other Leadgate roles the login was given by hand (`leadgate user` gives one): its
    /// asks follow `role`, but PostgreSQL adds up the table grants of all of them.
    pub also: Vec<Role>,
}

fn role_of_group(group: &str) -> Result<Role> {
    group
        .trim_start_matches("leadgate_")
        .parse()
        .map_err(|e| StoreError::Corrupt(format!("{e}")))
}

impl PgStore {
    /// Run by the schema's owner at every start, after migrating: the people's roles get
    /// their table grants when the four exist (created by the administration login, never
    /// by this one), and the database is closed to the server's other logins. On the
    /// upgrade that first closes it (`upgraded`: from a schema with roles but before
    /// 0025), the people who could connect until then are given CONNECT one by one; a new
    /// database gives it to nobody, so a second Leadgate database on the server is closed
    /// to the first one's people.
    pub(crate) async fn secure_database(&self, upgraded: bool) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        if !grants_lock(&mut tx).await? {
            tracing::warn!(
                "the people's grants were not refreshed: another session held Leadgate's \
                 grants lock for 10 s (they are refreshed at the next start)"
            );
            return Ok(());
        }
        let groups_exist: bool =
            sqlx::query_scalar("select count(*) = 4 from pg_roles where rolname = any($1)")
                .bind(groups())
                .fetch_one(&mut *tx)
                .await?;
        if groups_exist {
            // With the four roles there, it creates nothing: table grants only, which the
            // tables' owner may give.
            sqlx::query("select leadgate_install_roles()")
                .execute(&mut *tx)
                .await?;
            // The event feed is the administrator's alone (migration 0031).
            sqlx::query("select leadgate_feed_grants()")
                .execute(&mut *tx)
                .await?;
        }
        let (database, owns, open): (String, bool, bool) = sqlx::query_as(
            "select d.datname::text, pg_has_role(current_user, d.datdba, 'usage'), \
                    has_database_privilege('public', d.oid, 'connect') \
             from pg_database d where d.datname = current_database()",
        )
        .fetch_one(&mut *tx)
        .await?;
        if open && owns {
            if upgraded {
                let people: Vec<String> = sqlx::query_scalar(
                    "select rolname::text from pg_roles \
                     where rolcanlogin and not rolsuper and leadgate_role_of(rolname) is not null",
                )
                .fetch_all(&mut *tx)
                .await?;
                for login in &people {
                    let grant: String = sqlx::query_scalar(
                        "select format('grant connect on database %I to %I', current_database(), $1)",
                    )
                    .bind(login)
                    .fetch_one(&mut *tx)
                    .await?;
                    sqlx::query(&grant).execute(&mut *tx).await?;
                }
                if !people.is_empty() {
                    tracing::warn!(
                        database,
                        people = people.len(),
                        "the people's logins that could connect to this database keep CONNECT \
                         on it; if one of them belongs to another Leadgate database on this \
                         server, `revoke connect on database {database} from …` them"
                    );
                }
            }
            let revoke: String = sqlx::query_scalar(
                "select format('revoke connect on database %I from public', current_database())",
            )
            .fetch_one(&mut *tx)
            .await?;
            sqlx::query(&revoke).execute(&mut *tx).await?;
            tracing::info!(
                database,
                "closed the database to the server's other logins (CONNECT revoked from \
                 PUBLIC); each person's login is given CONNECT by `leadgate user add`"
            );
        } else if open {
            tracing::warn!(
                database,
                "every login of the PostgreSQL server may connect to this database (CONNECT \
                 is granted to PUBLIC) and this login, not its owner, cannot change that: as \
                 its owner, `revoke connect on database {database} from public`"
            );
        }
        if groups_exist {
            let others: Option<String> = sqlx::query_scalar(
                "select string_agg(quote_ident(datname), ', ' order by datname) from pg_database d \
                 where not d.datistemplate and d.datallowconn \
                   and d.datname not in (current_database(), 'postgres') \
                   and has_database_privilege('public', d.oid, 'connect')",
            )
            .fetch_one(&mut *tx)
            .await?;
            if let Some(others) = others {
                tracing::warn!(
                    databases = %others,
                    "people's logins may connect to other databases of this PostgreSQL server \
                     (CONNECT granted to PUBLIC); another Leadgate database among them gives \
                     them its data through the shared roles: upgrade it (it closes itself) or \
                     `revoke connect on database … from public` there"
                );
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// Logs a warning when the runtime login may do more than it needs: SUPERUSER, or
    /// CREATEROLE (on PostgreSQL 15 a CREATEROLE login can grant itself
    /// `pg_execute_server_program` and run programs on the server).
    pub(crate) async fn warn_about_own_login(&self) -> Result<()> {
        let (login, superuser, createrole): (String, bool, bool) = sqlx::query_as(
            "select rolname::text, rolsuper, rolcreaterole from pg_roles where rolname = current_user",
        )
        .fetch_one(&self.pool)
        .await?;
        let what = match (superuser, createrole) {
            (true, _) => "SUPERUSER",
            (false, true) => "CREATEROLE",
            (false, false) => return Ok(()),
        };
        tracing::warn!(
            login,
            "WARNING: the gateway's database login `{login}` has {what}: whoever holds its \
             database URL (the service's environment, every worker host) can take over the \
             PostgreSQL server (on PostgreSQL 15 a CREATEROLE login can grant itself \
             pg_execute_server_program and run programs on it). The gateway needs neither: \
             give it a login without them (README, Install) and add people with \
             `leadgate user add … --admin-url`"
        );
        Ok(())
    }

    /// The people's logins of this database: logins in one of Leadgate's roles that may
    /// connect to it, with the role `leadgate_role_of` gives them — the same function the
    /// database decides a person's asks by, so the list and the database agree.
    pub async fn users(&self) -> Result<Vec<User>> {
        // leadgate_role_of (0025) looks the login up by name and answers null for one
        // that another session dropped meanwhile.
        let rows: Vec<(String, String, Vec<String>)> = sqlx::query_as(
            "select login, role, array(select g.rolname::text from pg_roles g \
                 where g.rolname = any($1) and g.rolname <> role \
                   and pg_has_role(m.oid, g.oid, 'usage') order by g.rolname) \
             from (select m.oid, m.rolname::text as login, leadgate_role_of(m.rolname) as role \
                   from pg_roles m, pg_database d \
                   where d.datname = current_database() and m.rolcanlogin and not m.rolsuper \
                     and has_database_privilege(m.oid, d.oid, 'connect')) m \
             where role is not null order by login",
        )
        .bind(groups())
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(login, role, also)| {
                Ok(User {
                    login,
                    role: role_of_group(&role)?,
                    also: also
                        .iter()
                        .map(|g| role_of_group(g))
                        .collect::<Result<_>>()?,
                })
            })
            .collect()
    }

    /// The tenant ids `tenants` names (`-1`: every tenant; none: the default one alone);
    /// a slug that is no tenant, or a removed one's, is refused.
    async fn tenant_ids(&self, tenants: &PersonTenants) -> Result<Vec<i32>> {
        let slugs = match tenants {
            PersonTenants::Default => return Ok(vec![]),
            PersonTenants::All => return Ok(vec![-1]),
            PersonTenants::Only(slugs) => slugs,
        };
        let found: Vec<(String, i32)> = sqlx::query_as(
            "select slug, id from tenants where slug = any($1) and state <> 'removed'",
        )
        .bind(slugs)
        .fetch_all(&self.pool)
        .await?;
        let missing: Vec<&str> = slugs
            .iter()
            .filter(|s| !found.iter().any(|(f, _)| f == *s))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(StoreError::NotApplied(format!(
                "no such tenant: {} (`leadgate tenant list`)",
                missing.join(", ")
            )));
        }
        Ok(found.into_iter().map(|(_, id)| id).collect())
    }

    /// Makes `login` belong to `tenants` (and to no other): what row-level security lets
    /// it read (migration 0039).
    pub async fn set_person_tenants(&self, login: &str, tenants: &PersonTenants) -> Result<()> {
        let ids = self.tenant_ids(tenants).await?;
        let mut tx = self.pool.begin().await?;
        sqlx::query("delete from tenant_members where login = $1")
            .bind(login)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "insert into tenant_members (login, member_of) select $1, unnest(cast($2 as integer[]))",
        )
        .bind(login)
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The tenants each person's login belongs to, by login (a login without a row: the
    /// default tenant alone).
    pub async fn people_tenants(
        &self,
    ) -> Result<std::collections::BTreeMap<String, PersonTenants>> {
        let rows: Vec<(String, bool, Vec<String>)> = sqlx::query_as(
            "select m.login, bool_or(m.member_of = -1), \
                    array_remove(array_agg(t.slug order by t.slug), null) \
             from tenant_members m left join tenants t on t.id = m.member_of \
             group by m.login",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(login, all, slugs)| {
                let t = if all {
                    PersonTenants::All
                } else {
                    PersonTenants::Only(slugs)
                };
                (login, t)
            })
            .collect())
    }

    /// Gives (`grant`) or takes back CONNECT on this database to a person's login. When
    /// this login does not own the database and the database is open to everyone, there
    /// is nothing to give; closed, that is the owner's to do.
    async fn person_connect(&self, login: &str, grant: bool) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        if !grants_lock(&mut tx).await? {
            return Err(StoreError::NotApplied(
                "another session held Leadgate's grants lock for 10 s: try again".into(),
            ));
        }
        let (database, owns, open): (String, bool, bool) = sqlx::query_as(
            "select d.datname::text, pg_has_role(current_user, d.datdba, 'usage'), \
                    has_database_privilege('public', d.oid, 'connect') \
             from pg_database d where d.datname = current_database()",
        )
        .fetch_one(&mut *tx)
        .await?;
        if !owns {
            if grant && !open {
                return Err(StoreError::NotApplied(format!(
                    "the gateway's login does not own the database `{database}`, so it cannot \
                     let `{login}` connect: as its owner, `grant connect on database \
                     {database} to \"{login}\"`"
                )));
            }
            return Ok(());
        }
        let sql: String = sqlx::query_scalar(if grant {
            "select format('grant connect on database %I to %I', current_database(), $1)"
        } else {
            "select format('revoke connect on database %I from %I', current_database(), $1)"
        })
        .bind(login)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::raw_sql(&sql).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The administration path: a connection under a login with CREATEROLE, for
/// `leadgate user add` and `remove` only (its URL is never in the gateway's
/// configuration or environment). It may name any database of the server (roles are the
/// server's), e.g. `postgres`.
pub struct LoginAdmin {
    pool: PgPool,
}

impl LoginAdmin {
    /// Connects, and refuses a login that may not create roles.
    pub async fn connect(url: &str) -> Result<LoginAdmin> {
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(connect_options(url)?)
            .await?;
        let (login, may): (String, bool) = sqlx::query_as(
            "select rolname::text, rolsuper or rolcreaterole from pg_roles where rolname = current_user",
        )
        .fetch_one(&pool)
        .await?;
        if !may {
            return Err(StoreError::NotApplied(format!(
                "the administration login `{login}` may not create roles: give `--admin-url` \
                 (or LEADGATE_ADMIN_DATABASE_URL) a login with CREATEROLE (README, People and roles)"
            )));
        }
        Ok(LoginAdmin { pool })
    }

    /// Creates the four group roles that are missing (NOLOGIN, no rights of their own;
    /// the schema's owner gives them their grants).
    async fn create_group_roles(&self) -> Result<()> {
        for group in groups() {
            let create: Option<String> = sqlx::query_scalar(
                "select format('create role %I nologin', $1::text) \
                 where not exists (select 1 from pg_roles where rolname = $1::text)",
            )
            .bind(&group)
            .fetch_optional(&self.pool)
            .await?;
            if let Some(create) = create {
                match sqlx::raw_sql(&create).execute(&self.pool).await {
                    // created by another session at the same moment
                    Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42710") => {}
                    other => {
                        other?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Creates the login of a person in `role` in the database of `owner` (the gateway's
    /// own login): the group roles first if missing, their grants by the owner, the login
    /// with a SCRAM-SHA-256 verifier of a generated password (the password itself is
    /// never sent to the server, so no statement log can show it), then CONNECT on the
    /// owner's database. Returns the password.
    pub async fn add_user(&self, owner: &PgStore, login: &str, role: Role) -> Result<String> {
        self.add_user_in(owner, login, role, &PersonTenants::Default)
            .await
    }

    /// [`LoginAdmin::add_user`], the login belonging to `tenants` (fleet mode, migration
    /// 0039): it reads those tenants' rows and no other's.
    pub async fn add_user_in(
        &self,
        owner: &PgStore,
        login: &str,
        role: Role,
        tenants: &PersonTenants,
    ) -> Result<String> {
        check_login(login)?;
        // Unknown tenants are refused before anything is made.
        owner.tenant_ids(tenants).await?;
        self.create_group_roles().await?;
        owner.secure_database(false).await?;
        let password = rand::distr::SampleString::sample_string(
            &rand::distr::Alphanumeric,
            &mut rand::rng(),
            24,
        );
        let verifier = postgres_protocol::password::scram_sha_256(password.as_bytes());
        let create: String = sqlx::query_scalar(
            "select format('create role %I login password %L in role %I', $1, $2, $3)",
        )
        .bind(login)
        .bind(&verifier)
        .bind(role.group())
        .fetch_one(&self.pool)
        .await?;
        match sqlx::raw_sql(&create).execute(&self.pool).await {
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42710") => {
                return Err(StoreError::NotApplied(format!(
                    "a login `{login}` exists already"
                )))
            }
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42501") => {
                return Err(StoreError::NotApplied(format!(
                    "the administration login may not make `{login}` a member of {group}: on \
                     PostgreSQL 16 and later a CREATEROLE login manages only the roles it \
                     created or holds with ADMIN OPTION (as a superuser: `grant {group} to \
                     <the administration login> with admin option`); the server said: {}",
                    e.message(),
                    group = role.group()
                )))
            }
            other => {
                other?;
            }
        }
        let made = async {
            self.limit_sessions(login).await?;
            owner.set_person_tenants(login, tenants).await?;
            owner.person_connect(login, true).await
        };
        if let Err(e) = made.await {
            // Not half made: a login that cannot connect is dropped again.
            let _ = self.drop_login(login).await;
            return Err(e);
        }
        Ok(password)
    }

    /// A person's sessions end what they leave hanging (issue 32): a statement after 60 s,
    /// a transaction left open for 60 s, a session idle for an hour (the console connects
    /// again by itself). Nothing the gateway waits on can be held by a person anyway
    /// (their roles lock no row intake, a migration or the grants serialize on); these
    /// end the accidental open transaction in psql that would hold a table against a
    /// migration. Defaults of the login: a person may `set` them otherwise in a session.
    async fn limit_sessions(&self, login: &str) -> Result<()> {
        for (setting, value) in PERSON_SESSION_LIMITS {
            let alter: String =
                sqlx::query_scalar("select format('alter role %I set %s = %L', $1, $2, $3)")
                    .bind(login)
                    .bind(setting)
                    .bind(value)
                    .fetch_one(&self.pool)
                    .await?;
            sqlx::query(&alter).execute(&self.pool).await?;
        }
        Ok(())
    }

    /// Drops a person's login of `owner`'s database; false if there is no such person (a
    /// login in none of Leadgate's roles, or of another database, is never dropped from
    /// here).
    pub async fn remove_user(&self, owner: &PgStore, login: &str) -> Result<bool> {
        if !owner.users().await?.iter().any(|u| u.login == login) {
            return Ok(false);
        }
        owner.person_connect(login, false).await?;
        owner
            .set_person_tenants(login, &PersonTenants::Default)
            .await?;
        match self.drop_login(login).await {
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("2BP01") => {
                Err(StoreError::NotApplied(format!(
                    "`{login}` can no longer connect here, but still holds rights elsewhere on \
                     this server and was not dropped: {}",
                    e.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                        .and_then(|pg| pg.detail())
                        .unwrap_or(e.message())
                )))
            }
            other => Ok(other.map(|()| true)?),
        }
    }

    /// The driver's error as it is: its DETAIL names where a login still holds rights.
    async fn drop_login(&self, login: &str) -> std::result::Result<(), sqlx::Error> {
        let drop: String = sqlx::query_scalar("select format('drop role %I', $1)")
            .bind(login)
            .fetch_one(&self.pool)
            .await?;
        sqlx::raw_sql(&drop).execute(&self.pool).await?;
        Ok(())
    }
}

/// What the PostgreSQL server said to a person's login and password.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordCheck {
    /// It let the login in with this password, and refuses it with another.
    Accepted,
    /// It refused the login with this password (or there is no such login).
    Refused,
    /// It lets the login in whatever the password (`trust` in pg_hba.conf): whoever
    /// connects could be anyone, so the web console signs nobody in on it.
    NotChecked,
}

/// Checks `login` and `password` against the PostgreSQL server of `url` (its host,
/// port, database and TLS; not its login): first that the server refuses a password
/// nobody has, then the one given. Two connections, each closed at once.
pub async fn check_password(url: &str, login: &str, password: &str) -> Result<PasswordCheck> {
    use sqlx::Connection;
    let options = connect_options(url)?.username(login);
    let nobodys = uuid::Uuid::new_v4().simple().to_string();
    let mut result = PasswordCheck::NotChecked;
    for (attempt, outcome) in [
        (nobodys.as_str(), PasswordCheck::NotChecked),
        (password, PasswordCheck::Accepted),
    ] {
        match sqlx::postgres::PgConnection::connect_with(&options.clone().password(attempt)).await {
            Ok(conn) => {
                let _ = conn.close().await;
                result = outcome;
                if outcome == PasswordCheck::NotChecked {
                    break;
                }
            }
            // 28P01: wrong password; 28000: no such login, or pg_hba.conf rejects it.
            Err(sqlx::Error::Database(e))
                if matches!(e.code().as_deref(), Some("28P01" | "28000")) =>
            {
                result = PasswordCheck::Refused;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(result)
}

/// A login name `leadgate user add` accepts: lower case, no room for confusion with
/// PostgreSQL's or Leadgate's own roles.
fn check_login(login: &str) -> Result<()> {
    let ok = (1..=63).contains(&login.len())
        && login.starts_with(|c: char| c.is_ascii_lowercase())
        && login
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c))
        && !login.starts_with("pg_")
        && !login.starts_with("leadgate")
        // the names the system itself acts under on timelines
        && !["gateway", "worker", "claim_api", "console", "cli", "reconciler", "retention", "system", "postgres"]
            .contains(&login);
    if ok {
        Ok(())
    } else {
        Err(StoreError::NotApplied(format!(
            "`{login}` is not a login name Leadgate creates: 1–63 of a–z, 0–9, `_`, `.`, `-`, \
             starting with a letter, not `pg_…` or `leadgate…`, and not a name the system acts \
             under (`gateway`, `worker`, `claim_api`, `console`, `cli`, …)"
        )))
    }
}
