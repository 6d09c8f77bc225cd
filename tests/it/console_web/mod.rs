//! The web console (issue 34): the view model's calls over HTTP from a real listener, a
//! person signed in with their own database login, sessions, CSRF, the lockout, and the
//! database (not the web layer) refusing what a role may not do. On SQLite the one
//! operator of `[console]` signs in with the Argon2id-hashed password; on PostgreSQL a
//! private cluster that checks passwords (scram-sha-256), as a deployment's must, since
//! the shared test server trusts every login (and the console refuses to sign anyone in
//! on it: proven below too).

use std::sync::Arc;
use std::time::Duration;

use leadgate::config::{Config, ConsoleConfig};
use leadgate::console_web::{self, password, Web};
use leadgate::domain::roles::Role;
use leadgate::store::Store;
use leadgate_testkit::cluster::Cluster;
use leadgate_testkit::people::{gateway, People};
use leadgate_testkit::seed::{seed, Seeded};
use leadgate_testkit::{run, Backend, TestDb};
use reqwest::StatusCode;
use serde_json::{json, Value};

const OPERATOR: &str = "anna";
const OPERATOR_PASSWORD: &str = "a long operator password";

/// `[console]` as a deployment would write it, on loopback, with the SQLite operator.
fn console_config(extra: &str) -> ConsoleConfig {
    let hash = password::hash(OPERATOR_PASSWORD).unwrap();
    let text = format!(
        "[database]\nurl = \"sqlite::memory:\"\n[console]\nlisten = \"127.0.0.1:0\"\n\
         operator = \"{OPERATOR}\"\noperator_password_hash = \"{hash}\"\n{extra}"
    );
    Config::parse(&text).unwrap().console.unwrap()
}

/// A web console on its own listener (the intake's listener code, real HTTP), with its
/// session sweeper.
struct Site {
    base: String,
    client: reqwest::Client,
    web: Arc<Web>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Site {
    async fn start(url: &str, config: &ConsoleConfig) -> Site {
        Site::start_with(url, config, reqwest::Client::new()).await
    }

    /// With `client` (a TLS test's trusts its CA).
    async fn start_with(url: &str, config: &ConsoleConfig, client: reqwest::Client) -> Site {
        let (stop, rx) = tokio::sync::watch::channel(false);
        // The sign-in journal goes to the database as the gateway's own login writes it.
        let journal = leadgate::store::open(url).await.unwrap();
        let web = Web::new(
            url,
            config,
            journal,
            Default::default(),
            Duration::from_secs(600),
            rx.clone(),
        );
        let web = Arc::new(web.await.unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tls = console_web::tls_acceptor(config).unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let host = if tls.is_some() {
            "localhost"
        } else {
            "127.0.0.1"
        };
        let base = format!(
            "{scheme}://{host}:{}",
            listener.local_addr().unwrap().port()
        );
        let limits = leadgate::intake::listen::Limits {
            max_connections: 64,
            header_timeout: Duration::from_secs(10),
        };
        tokio::spawn(leadgate::intake::listen::serve_tls(
            listener,
            console_web::router(Arc::clone(&web)),
            limits,
            tls,
            rx.clone(),
        ));
        tokio::spawn(console_web::sweep(Arc::clone(&web), rx.clone()));
        tokio::spawn(console_web::relay_changes(Arc::clone(&web), rx));
        Site {
            base,
            client,
            web,
            stop,
        }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// One browser: its cookie (name and value) and the CSRF token its page holds.
#[derive(Clone, Default)]
struct Browser {
    cookie: Option<String>,
    /// The cookie's name as the console set it (`__Host-` over HTTPS).
    cookie_name: Option<String>,
    csrf: Option<String>,
}

impl Browser {
    /// The `Cookie` header it sends.
    fn cookie_header(&self) -> Option<String> {
        let name = self
            .cookie_name
            .as_deref()
            .unwrap_or(console_web::session::COOKIE);
        self.cookie.as_ref().map(|c| format!("{name}={c}"))
    }
}

struct Answer {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Answer {
    fn kind(&self) -> &str {
        self.body["kind"].as_str().unwrap_or("")
    }
}

async fn send(
    site: &Site,
    b: &Browser,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Answer {
    let mut req = site.client.request(method, format!("{}{path}", site.base));
    if let Some(c) = b.cookie_header() {
        req = req.header("Cookie", c);
    }
    if let Some(t) = &b.csrf {
        req = req.header("X-CSRF-Token", t);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    let text = r.text().await.unwrap();
    Answer {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
    }
}

async fn sign_in(site: &Site, login: &str, password: &str) -> (Answer, Browser) {
    let a = send(
        site,
        &Browser::default(),
        reqwest::Method::POST,
        "/api/session",
        Some(json!({"login": login, "password": password})),
    )
    .await;
    let set = a
        .headers
        .get("set-cookie")
        .and_then(|c| c.to_str().ok())
        .and_then(|c| c.split(';').next())
        .and_then(|c| c.split_once('='));
    let csrf = a.body["csrf"].as_str().map(str::to_owned);
    let browser = Browser {
        cookie: set.map(|(_, v)| v.to_owned()),
        cookie_name: set.map(|(n, _)| n.to_owned()),
        csrf,
    };
    (a, browser)
}

async fn call(site: &Site, b: &Browser, command: &str, args: Value) -> Answer {
    send(
        site,
        b,
        reqwest::Method::POST,
        &format!("/api/call/{command}"),
        Some(args),
    )
    .await
}

/// A deployment the web console serves: its database, and on PostgreSQL one person per
/// role made as `leadgate user add` makes them.
struct Deployment {
    url: String,
    store: Arc<dyn Store>,
    seeded: Seeded,
    people: Option<People>,
}

impl Deployment {
    /// Who signs in, in which role: on PostgreSQL each role's own login, on SQLite the
    /// one operator.
    fn logins(&self) -> Vec<(Option<Role>, String, String)> {
        match &self.people {
            Some(p) => Role::ALL
                .iter()
                .map(|r| (Some(*r), p.login(*r).to_owned(), p.password(*r)))
                .collect(),
            None => vec![(None, OPERATOR.into(), OPERATOR_PASSWORD.into())],
        }
    }

    async fn done(self) {
        if let Some(p) = self.people {
            p.drop_all().await;
        }
    }
}

const OWNER_PASSWORD: &str = "gateway-owner-password";

/// A private cluster that checks passwords (scram-sha-256), as a deployment's must.
fn checked_cluster() -> (Cluster, String) {
    Cluster::checking_passwords(OWNER_PASSWORD)
}

async fn deployment(url: &str, backend: Backend) -> Deployment {
    let store = leadgate::store::connect(url).await.unwrap();
    let seeded = seed(&*store).await.unwrap();
    let people = match backend {
        Backend::Postgres => Some(People::new(url).await),
        Backend::Sqlite => None,
    };
    Deployment {
        url: url.to_owned(),
        store,
        seeded,
        people,
    }
}

/// How many database sessions `login` holds on the server of `url` a moment from now (a
/// closed connection's backend takes a moment to go).
async fn sessions_of(url: &str, login: &str) -> i64 {
    use sqlx::Connection;
    let mut owner = sqlx::PgConnection::connect(url).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = sqlx::query_scalar("select count(*) from pg_stat_activity where usename = $1")
            .bind(login)
            .fetch_one(&mut owner)
            .await
            .unwrap();
        if n == 0 || tokio::time::Instant::now() > deadline {
            owner.close().await.unwrap();
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One test per backend: SQLite with its operator, PostgreSQL on a cluster that checks
/// passwords, with a person per role.
macro_rules! web_test {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                run(Backend::Sqlite, |db: TestDb| async move {
                    let d = deployment(&db.url, Backend::Sqlite).await;
                    ($body)(d).await;
                })
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                let (cluster, url) = checked_cluster();
                let d = deployment(&url, Backend::Postgres).await;
                ($body)(d).await;
                drop(cluster);
            }
        }
    };
}

mod routes;
mod sessions;
mod tenants;
