//! People with PostgreSQL logins of their own, one per role (issue 17): made with
//! `LoginAdmin::add_user` (what `leadgate user add` runs) and dropped again when the value
//! goes, also when a test fails (logins are the cluster's, not the test database's).

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, PgConnection};

use leadgate::domain::roles::Role;
use leadgate::store::logins::{LoginAdmin, PersonTenants};
use leadgate::store::postgres::PgStore;
use leadgate::store::Store;

pub struct People {
    pub owner: PgStore,
    pub admin: LoginAdmin,
    logins: Vec<(Role, String, String)>,
}

impl People {
    /// One login per role in the database at `url`, whose login (the test server's
    /// superuser) is both the schema's owner and the administration login.
    pub async fn new(url: &str) -> People {
        People::with_admin(url, url).await
    }

    /// One login per role in the database at `url`, made by the administration login of
    /// `admin_url` (a login with CREATEROLE).
    pub async fn with_admin(url: &str, admin_url: &str) -> People {
        People::make(url, admin_url, &PersonTenants::Default).await
    }

    /// One login per role in the database at `url`, made by the administration login of
    /// `admin_url`, each belonging to `tenants` (fleet mode: `leadgate user add
    /// --tenants`).
    pub async fn in_tenants(url: &str, admin_url: &str, tenants: &PersonTenants) -> People {
        People::make(url, admin_url, tenants).await
    }

    async fn make(url: &str, admin_url: &str, tenants: &PersonTenants) -> People {
        let owner = PgStore::connect(url).await.unwrap();
        let admin = LoginAdmin::connect(admin_url).await.unwrap();
        let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let mut logins = vec![];
        for role in Role::ALL {
            let login = format!("lgt_{tag}_{role}");
            let password = admin
                .add_user_in(&owner, &login, *role, tenants)
                .await
                .unwrap();
            assert_eq!(password.len(), 24);
            logins.push((*role, login.clone(), url_as(url, &login, &password)));
        }
        People {
            owner,
            admin,
            logins,
        }
    }

    pub fn login(&self, role: Role) -> &str {
        &self.logins.iter().find(|l| l.0 == role).unwrap().1
    }

    /// The database URL with this role's login and password.
    pub fn url(&self, role: Role) -> &str {
        &self.logins.iter().find(|l| l.0 == role).unwrap().2
    }

    /// The password `leadgate user add` gave this role's login.
    pub fn password(&self, role: Role) -> String {
        reqwest::Url::parse(self.url(role))
            .unwrap()
            .password()
            .map(|p| {
                percent_encoding::percent_decode_str(p)
                    .decode_utf8_lossy()
                    .into_owned()
            })
            .unwrap()
    }

    /// Forgets this role's login, which the test dropped itself.
    pub fn forget(&mut self, role: Role) {
        self.logins.retain(|l| l.0 != role);
    }

    pub async fn sql(&self, role: Role) -> PgConnection {
        PgConnection::connect(self.url(role)).await.unwrap()
    }

    /// Drops every login through `LoginAdmin::remove_user`, checking each was there.
    pub async fn drop_all(mut self) {
        // One at a time: whatever a failure leaves is dropped by `Drop`.
        while let Some(login) = self.logins.first().map(|l| l.1.clone()) {
            assert!(self.admin.remove_user(&self.owner, &login).await.unwrap());
            self.logins.remove(0);
        }
    }
}

impl Drop for People {
    fn drop(&mut self) {
        let logins: Vec<String> = self.logins.drain(..).map(|l| l.1).collect();
        let Ok(server) = std::env::var("LEADGATE_TEST_DATABASE_URL") else {
            return;
        };
        if logins.is_empty() {
            return;
        }
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut admin = PgConnection::connect(&server).await.unwrap();
                for login in logins {
                    drop_login(&mut admin, &login).await;
                }
            });
        })
        .join()
        .ok();
    }
}

/// Drops `login` if it is there, with what it was granted on the server's databases
/// (`drop owned` revokes the CONNECT on shared objects too), as the server's superuser.
pub async fn drop_login(admin: &mut PgConnection, login: &str) {
    let _ = sqlx::raw_sql(&format!(
        "do $$ begin if exists (select 1 from pg_roles where rolname = '{login}') then \
         execute 'drop owned by \"{login}\"'; execute 'drop role \"{login}\"'; end if; end $$"
    ))
    .execute(admin)
    .await;
}

/// `url` with another login and password.
pub fn url_as(url: &str, login: &str, password: &str) -> String {
    let mut u = reqwest::Url::parse(url).unwrap();
    u.set_username(login).unwrap();
    u.set_password(Some(password)).unwrap();
    u.to_string()
}

/// A running gateway's request loop (`app::requests_loop`), as the schema's owner.
pub fn gateway(store: Arc<dyn Store>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match store.apply_next_request(store.now()).await {
                Ok(Some(_)) => continue,
                Ok(None) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => panic!("applying a request: {e}"),
            }
        }
    })
}
