//! The operator console for browsers: the same Svelte UI as the desktop app (`ui/`),
//! served by `leadgate serve` on a listener of its own (`[console]`), its calls run by
//! the same view model (`leadgate_console_model::Console::run`) the Tauri commands call.
//! Nothing here decides anything about a case; this module only signs people in, keeps
//! their sessions and carries calls.
//!
//! Who is acting is who the database says: on PostgreSQL a person signs in with the
//! login and password `leadgate user add` gave them and the session holds a connection
//! opened *as that person*, so the database's roles and row-level security decide every
//! call exactly as for the desktop app; the gateway's own login is never used for a
//! person. On SQLite (one operator) the login and password are `[console] operator` and
//! its Argon2id hash.
//!
//! Routes (all under the console's own listener):
//! - `POST /api/session` `{login, password}`: signs in; sets the `HttpOnly`,
//!   `SameSite=Strict` session cookie and answers the CSRF token and the connection;
//! - `GET /api/session`: the same answer for a signed-in browser (a reload);
//! - `DELETE /api/session`: signs out;
//! - `POST /api/call/{command}`: one console call, its arguments as the Tauri command's;
//! - `POST /api/export`: the tab's rows as a CSV download;
//! - anything else: the built UI (`ui/dist`, embedded at build time).
//!
//! Every `/api` request but sign-in needs the cookie, and every state-changing one the
//! `X-CSRF-Token` header: a page of another site can neither read nor forge a call.

mod assets;
pub mod password;
pub mod session;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use leadgate_console_model::{Call, Console, ConsoleError, ExportRequest};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::config::ConsoleConfig;
use session::{Lockout, Sessions, COOKIE};

/// How long a failed sign-in waits per failure before it answers (at most
/// [`MAX_SLOWDOWN`]): guessing is slow even before the lockout.
const SLOWDOWN: Duration = Duration::from_millis(250);
const MAX_SLOWDOWN: Duration = Duration::from_secs(2);

/// How people sign in.
pub enum SignIn {
    /// PostgreSQL: the person's own login, checked by the database itself.
    Database,
    /// SQLite: the one operator of `[console]`.
    Operator { login: String, hash: String },
}

/// What the console's routes share.
pub struct Web {
    /// The gateway's database URL: only its host, port, database and options are used
    /// for a person's connection, never its login.
    database_url: String,
    sign_in: SignIn,
    pub sessions: Sessions,
    lockout: Lockout,
    behind_proxy: bool,
    /// Served over TLS (`tls_cert`): the session cookie is always `Secure`.
    tls: bool,
    phone_region: crate::domain::contact::Region,
    stale_after: Duration,
    /// What changed in the database (a table name), pushed by PostgreSQL to
    /// [`relay_changes`] and on to every browser's `/api/events`.
    changes: tokio::sync::broadcast::Sender<String>,
}

impl Web {
    /// The console for `database_url` as `[console]` says, or why it cannot start.
    pub fn new(
        database_url: &str,
        config: &ConsoleConfig,
        phone_region: crate::domain::contact::Region,
        stale_after: Duration,
    ) -> Result<Web, String> {
        let shared = crate::store::Backend::of(database_url)
            .map_err(|e| e.to_string())?
            .is_shared();
        let sign_in =
            match (&config.operator, &config.operator_password_hash) {
                _ if shared => SignIn::Database,
                (Some(login), Some(hash)) => {
                    password::check_hash(hash.expose())?;
                    SignIn::Operator {
                        login: login.clone(),
                        hash: hash.expose().to_owned(),
                    }
                }
                _ => return Err(
                    "the web console on SQLite needs an operator account: run `leadgate console \
                     password --operator NAME` and put the two lines it prints in [console]"
                        .into(),
                ),
            };
        Ok(Web {
            database_url: database_url.to_owned(),
            sign_in,
            sessions: Sessions::new(config.idle_timeout, config.absolute_timeout),
            lockout: Lockout::new(),
            behind_proxy: config.behind_proxy,
            tls: config.tls_cert.is_some(),
            phone_region,
            stale_after,
            changes: tokio::sync::broadcast::channel(64).0,
        })
    }
}

/// The TLS acceptor of `[console] tls_cert` and `tls_key`, or `None` without them; a file
/// that cannot be read or parsed is refused with its name.
pub fn tls_acceptor(config: &ConsoleConfig) -> Result<Option<tokio_rustls::TlsAcceptor>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
        return Ok(None);
    };
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("[console] {}: {e}", p.display()))
    };
    let chain = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("[console] tls_cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "[console] tls_cert {}: no certificate in it",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(key)?)
        .map_err(|e| format!("[console] tls_key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("[console] TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("[console] tls_cert and tls_key: {e}"))?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(tokio_rustls::TlsAcceptor::from(Arc::new(tls))))
}

/// The console's routes.
pub fn router(web: Arc<Web>) -> Router {
    Router::new()
        .route("/api/session", post(sign_in).get(current).delete(sign_out))
        .route("/api/call/{command}", post(call))
        .route("/api/events", get(events))
        .route("/api/export", post(export))
        .fallback(get(assets::serve))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(web)
}

/// Headers on every answer: a strict Content-Security-Policy (the UI's own scripts and
/// styles only, calls to its own origin only), no framing, no sniffing, no caching of
/// API answers.
async fn security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
             img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
             base-uri 'none'; form-action 'self'; object-src 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    r
}

/// An error answer: the `ConsoleError` the UI switches on, with an HTTP status to match.
fn refuse(e: ConsoleError) -> Response {
    let status = match &e {
        ConsoleError::Invalid { .. } => StatusCode::BAD_REQUEST,
        ConsoleError::NotFound { .. } => StatusCode::NOT_FOUND,
        ConsoleError::Forbidden { .. } | ConsoleError::Refused { .. } => StatusCode::FORBIDDEN,
        ConsoleError::AlreadyResolved { .. } | ConsoleError::Changed { .. } => StatusCode::CONFLICT,
        ConsoleError::NotConnected => StatusCode::UNAUTHORIZED,
        ConsoleError::Unreachable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, Json(e)).into_response()
}

/// The session id the request's cookie carries.
fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, v)| v.to_owned())
}

/// The signed-in session of a request, checked against its CSRF header when `writes`.
fn authorized(
    web: &Web,
    headers: &HeaderMap,
    writes: bool,
) -> Result<(Arc<Console>, String), ConsoleError> {
    let id = session_id(headers).ok_or(ConsoleError::NotConnected)?;
    let (console, csrf) = web.sessions.touch(&id).ok_or(ConsoleError::NotConnected)?;
    if writes {
        let sent = headers.get("x-csrf-token").and_then(|v| v.to_str().ok());
        if !sent.is_some_and(|s| constant_time_eq(s.as_bytes(), csrf.as_bytes())) {
            return Err(ConsoleError::Forbidden {
                message: "this request lacks the console's CSRF token: reload the page".into(),
            });
        }
    }
    Ok((console, csrf))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The cookie that carries session `id` (empty and expired: the one that ends it).
fn cookie(web: &Web, headers: &HeaderMap, id: Option<&str>) -> HeaderValue {
    let https = web.tls
        || web.behind_proxy
            && headers
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    let secure = if https { "; Secure" } else { "" };
    let value = match id {
        Some(id) => format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{secure}"),
        None => format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    };
    HeaderValue::from_str(&value).expect("a cookie of token characters")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Credentials {
    login: String,
    password: String,
}

/// The client's address: the peer's, or with `behind_proxy` the first of
/// `X-Forwarded-For` (the proxy's client).
fn client(web: &Web, peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
    let forwarded = web
        .behind_proxy
        .then(|| headers.get("x-forwarded-for")?.to_str().ok())
        .flatten()
        .and_then(|v| v.split(',').next()?.trim().parse().ok());
    forwarded.unwrap_or(peer.ip())
}

async fn sign_in(
    State(web): State<Arc<Web>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Result<Json<Credentials>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(c)) = body else {
        return refuse(ConsoleError::Invalid {
            message: "sign in with a JSON body {\"login\": …, \"password\": …}".into(),
        });
    };
    let addr = client(&web, peer, &headers);
    let login = c.login.trim().to_owned();
    if web.lockout.locked(&login, addr) {
        tracing::warn!(target: "leadgate::console_web", login = %login, client = %addr, outcome = "locked", "console sign-in refused");
        return refuse(ConsoleError::Forbidden {
            message: format!(
                "too many failed sign-ins: try again in {} minutes",
                session::LOCK_FOR.as_secs() / 60
            ),
        });
    }
    match open_console(&web, &login, &c.password).await {
        Ok(console) => {
            web.lockout.succeeded(&login);
            tracing::info!(target: "leadgate::console_web", login = %login, client = %addr, outcome = "signed_in", "console sign-in");
            let connection = console.connection.clone();
            let (id, csrf) = web.sessions.open(&login, console);
            let mut r = Json(json!({"csrf": csrf, "connection": connection})).into_response();
            r.headers_mut()
                .insert(header::SET_COOKIE, cookie(&web, &headers, Some(&id)));
            r
        }
        Err(e) => {
            let failures = web.lockout.failures(&login, addr);
            web.lockout.failed(&login, addr);
            tracing::warn!(target: "leadgate::console_web", login = %login, client = %addr, outcome = "failed", "console sign-in refused");
            tokio::time::sleep((SLOWDOWN * (failures + 1)).min(MAX_SLOWDOWN)).await;
            refuse(e)
        }
    }
}

/// The gateway's database URL with a person's login and password instead of its own.
pub fn person_url(url: &str, login: &str, password: &str) -> Option<String> {
    let mut u = reqwest::Url::parse(url).ok()?;
    u.set_username(login).ok()?;
    u.set_password(Some(password)).ok()?;
    Some(u.to_string())
}

/// The person's own connection, or why not (one sentence, never which half was wrong).
async fn open_console(web: &Web, login: &str, password: &str) -> Result<Console, ConsoleError> {
    let wrong = || ConsoleError::Forbidden {
        message: "wrong login or password".into(),
    };
    let url = match &web.sign_in {
        SignIn::Operator { login: who, hash } => {
            // Argon2 takes tens of milliseconds of CPU by design: off the async threads.
            let (hash, attempt) = (hash.clone(), password.to_owned());
            let verified = tokio::task::spawn_blocking(move || password::verify(&attempt, &hash))
                .await
                .unwrap_or(false);
            if !(constant_time_eq(who.as_bytes(), login.as_bytes()) & verified) {
                return Err(wrong());
            }
            web.database_url.clone()
        }
        SignIn::Database => {
            if login.is_empty() || password.is_empty() {
                return Err(wrong());
            }
            // The database is what checks the password: it must check it.
            use crate::store::logins::{check_password, PasswordCheck};
            match check_password(&web.database_url, login, password).await? {
                PasswordCheck::Accepted => {}
                PasswordCheck::Refused => return Err(wrong()),
                PasswordCheck::NotChecked => {
                    return Err(ConsoleError::Forbidden {
                        message: "PostgreSQL lets this login in without checking its password \
                                  (`trust` in pg_hba.conf): the web console signs nobody in \
                                  until the database checks passwords (scram-sha-256)"
                            .into(),
                    })
                }
            }
            person_url(&web.database_url, login, password).ok_or_else(|| ConsoleError::Failed {
                message: "the gateway's database URL cannot carry a login".into(),
            })?
        }
    };
    let mut console = Console::open(&url).await?;
    if matches!(web.sign_in, SignIn::Database) && console.connection.mode != "person" {
        // The gateway's owner or a login in no role: the web console signs people in.
        return Err(ConsoleError::Forbidden {
            message: "this login is not a person's: add one with `leadgate user add`".into(),
        });
    }
    if let SignIn::Operator { login, .. } = &web.sign_in {
        console.connection.actor = login.clone();
    }
    console.phone_region = web.phone_region;
    console.stale_after = web.stale_after;
    Ok(console)
}

async fn current(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    match authorized(&web, &headers, false) {
        Ok((console, csrf)) => {
            Json(json!({"csrf": csrf, "connection": console.connection})).into_response()
        }
        Err(e) => refuse(e),
    }
}

async fn sign_out(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorized(&web, &headers, true) {
        return refuse(e);
    }
    if let Some(id) = session_id(&headers) {
        web.sessions.close(&id);
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, cookie(&web, &headers, None));
    r
}

async fn call(
    State(web): State<Arc<Web>>,
    Path(command): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    // Every call is checked for the CSRF token: reads too, so that a page elsewhere
    // cannot even time them.
    let (console, _) = match authorized(&web, &headers, true) {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    let args: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return refuse(ConsoleError::Invalid {
                    message: format!("the call's arguments are not JSON: {e}"),
                })
            }
        }
    };
    let call = match Call::parse(&command, args) {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    let operator = console.connection.actor.clone();
    match console.run(&operator, call, None).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => refuse(e),
    }
}

async fn export(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let (console, _) = match authorized(&web, &headers, true) {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    let request: ExportRequest = match body
        .map_err(|e| e.body_text())
        .and_then(|Json(v)| serde_json::from_value(v).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(message) => return refuse(ConsoleError::Invalid { message }),
    };
    match console.export_csv(&request).await {
        Ok((bytes, rows)) => (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"leadgate-export.csv\"".to_owned(),
                ),
                (
                    header::HeaderName::from_static("x-leadgate-rows"),
                    rows.to_string(),
                ),
            ],
            bytes,
        )
            .into_response(),
        Err(e) => refuse(e),
    }
}

/// How often `/api/events` says it is still there (proxies close silent streams).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Server-sent events: `refresh` whenever the database says a review case or a
/// connector changed (PostgreSQL; on SQLite none come and the UI polls). The stream ends
/// with the session. It carries no data, only that something changed.
async fn events(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    if let Err(e) = authorized(&web, &headers, false) {
        return refuse(e);
    }
    let id = session_id(&headers).unwrap_or_default();
    let rx = web.changes.subscribe();
    let stream = futures::stream::unfold((web, id, rx), |(web, id, mut rx)| async move {
        loop {
            let changed = tokio::select! {
                r = rx.recv() => !matches!(r, Err(tokio::sync::broadcast::error::RecvError::Closed)),
                _ = tokio::time::sleep(KEEP_ALIVE) => false,
            };
            if !web.sessions.alive(&id) {
                return None;
            }
            if changed {
                let event = Event::default().event("refresh").data("");
                return Some((Ok::<_, std::convert::Infallible>(event), (web, id, rx)));
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// Relays the database's change notifications to the browsers until shutdown (nothing
/// on SQLite, which pushes none).
pub async fn relay_changes(web: Arc<Web>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let feed = match crate::store::changes::subscribe(&web.database_url).await {
        Ok(Some(feed)) => feed,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "the console cannot listen for the database's changes: browsers poll");
            return;
        }
    };
    let changes = web.changes.clone();
    let task = feed.forward(crate::store::changes::REFRESH_EVERY, move |table| {
        let _ = changes.send(table);
    });
    let _ = shutdown.wait_for(|stop| *stop).await;
    task.abort();
}

/// How often sessions are swept: timed-out ones end, and on PostgreSQL those of a person
/// `leadgate user remove` dropped (or moved out of Leadgate's roles) end too.
pub const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// Sweeps the sessions until shutdown.
pub async fn sweep(web: Arc<Web>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let people = match web.sign_in {
        SignIn::Database => match crate::store::postgres::PgStore::connect(&web.database_url).await
        {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "the console's session sweeper cannot read the people's logins");
                None
            }
        },
        SignIn::Operator { .. } => None,
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        if web.sessions.is_empty() {
            continue;
        }
        let current: Option<std::collections::HashSet<String>> = match &people {
            Some(store) => match store.users().await {
                Ok(users) => Some(users.into_iter().map(|u| u.login).collect()),
                // The database is away: keep the sessions; their calls say so.
                Err(_) => continue,
            },
            None => None,
        };
        let ended = web
            .sessions
            .sweep(|login| current.as_ref().is_some_and(|c| !c.contains(login)));
        if ended > 0 {
            tracing::info!(target: "leadgate::console_web", ended, "console sessions ended");
        }
    }
}
