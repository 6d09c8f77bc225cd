//! People with PostgreSQL logins of their own, one per role (issue 17): made with
//! `PgStore::add_user` (what `leadgate user add` runs) and dropped again when the value
//! goes, also when a test fails (logins are the cluster's, not the test database's).

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, PgConnection};

use leadgate::domain::roles::Role;
use leadgate::store::postgres::PgStore;
use leadgate::store::Store;

pub struct People {
    pub owner: PgStore,
    logins: Vec<(Role, String, String)>,
}

impl People {
    /// One login per role in the database at `url` (whose login may create roles).
    pub async fn new(url: &str) -> People {
        let owner = PgStore::connect(url).await.unwrap();
        let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let mut logins = vec![];
        for role in Role::ALL {
            let login = format!("lgt_{tag}_{role}");
            let password = owner.add_user(&login, *role).await.unwrap();
            assert_eq!(password.len(), 24);
            logins.push((*role, login.clone(), url_as(url, &login, &password)));
        }
        People { owner, logins }
    }

    pub fn login(&self, role: Role) -> &str {
        &self.logins.iter().find(|l| l.0 == role).unwrap().1
    }

    /// The database URL with this role's login and password.
    pub fn url(&self, role: Role) -> &str {
        &self.logins.iter().find(|l| l.0 == role).unwrap().2
    }

    pub async fn sql(&self, role: Role) -> PgConnection {
        PgConnection::connect(self.url(role)).await.unwrap()
    }

    /// Drops every login through `PgStore::remove_user`, checking each was there.
    pub async fn drop_all(mut self) {
        // One at a time: whatever a failure leaves is dropped by `Drop`.
        while let Some(login) = self.logins.first().map(|l| l.1.clone()) {
            assert!(self.owner.remove_user(&login).await.unwrap());
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
                    let _ = sqlx::raw_sql(&format!("drop role if exists \"{login}\""))
                        .execute(&mut admin)
                        .await;
                }
            });
        })
        .join()
        .ok();
    }
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
