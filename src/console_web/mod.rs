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
//! - `POST /api/session/tenant` `{slug}`: shows another of the person's tenants (fleet
//!   mode); answers the connection;
//! - `POST /api/call/{command}`: one console call, its arguments as the Tauri command's;
//! - `POST /api/export`: the tab's rows as a CSV download;
//! - anything else: the built UI (`ui/dist`, embedded at build time).
//!
//! Every `/api` request but sign-in needs the cookie, and every state-changing one the
//! `X-CSRF-Token` header: a page of another site can neither read nor forge a call.

mod assets;
pub mod password;
pub mod session;
mod sign_in;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use leadgate_console_model::{Call, Console, ConsoleError, ExportRequest};
use serde_json::{json, Value};

use crate::config::ConsoleConfig;
use session::{cookie_name, Lockout, Sessions};

/// How people sign in.
pub enum SignIn {
    /// PostgreSQL: the person's own login, checked by the database itself; `people` is
    /// the gateway's own connection, which lists who is a person.
    Database {
        people: crate::store::postgres::PgStore,
    },
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
    /// Sign-ins being checked now ([`sign_in::CHECKS_AT_ONCE`] at most).
    checks: tokio::sync::Semaphore,
    /// The gateway stops: event streams end.
    shutdown: tokio::sync::watch::Receiver<bool>,
    behind_proxy: bool,
    /// Served over TLS (`tls_cert`): the session cookie is always `Secure`.
    tls: bool,
    phone_region: crate::domain::contact::Region,
    stale_after: Duration,
    /// What changed in the database (a table name), pushed by PostgreSQL to
    /// [`relay_changes`] and on to every browser's `/api/events`.
    changes: tokio::sync::broadcast::Sender<String>,
    /// Sign-in attempts on their way to the database's journal ([`sign_in::journal`]).
    journal: tokio::sync::mpsc::Sender<sign_in::Attempt>,
}

impl Web {
    /// The console for `database_url` as `[console]` says, or why it cannot start; sign-in
    /// attempts are journaled in `journal` (the gateway's own store).
    pub async fn new(
        database_url: &str,
        config: &ConsoleConfig,
        journal: Arc<dyn crate::store::SignIns>,
        phone_region: crate::domain::contact::Region,
        stale_after: Duration,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Result<Web, String> {
        let shared = crate::store::Backend::of(database_url)
            .map_err(|e| e.to_string())?
            .is_shared();
        let sign_in =
            match (&config.operator, &config.operator_password_hash) {
                _ if shared => SignIn::Database {
                    people: crate::store::postgres::PgStore::open_few(
                        database_url,
                        sign_in::PERSON_CONNECTIONS,
                        sign_in::PERSON_IDLE,
                    )
                    .await
                    .map_err(|e| format!("the console cannot read the people's logins: {e}"))?,
                },
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
            checks: tokio::sync::Semaphore::new(sign_in::CHECKS_AT_ONCE),
            shutdown,
            behind_proxy: config.behind_proxy,
            tls: config.tls_cert.is_some(),
            phone_region,
            stale_after,
            changes: tokio::sync::broadcast::channel(64).0,
            journal: sign_in::journal(journal),
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
        .route(
            "/api/session",
            post(sign_in::sign_in).get(current).delete(sign_out),
        )
        .route("/api/session/tenant", post(select_tenant))
        .route("/api/call/{command}", post(call))
        .route("/api/events", get(events))
        .route("/api/export", post(export))
        .fallback(get(assets::serve))
        .layer(axum::middleware::from_fn(body_within))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(web)
}

/// A request's body must arrive within this …
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// … and be at most this long (a rules edit or a bulk request is a few KiB).
const MAX_BODY: usize = 256 * 1024;

/// Reads every request's body within [`BODY_TIMEOUT`] and [`MAX_BODY`] before a route
/// sees it: a client that sends a body a byte at a time holds no connection for long.
async fn body_within(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(bytes)) => {
            next.run(axum::extract::Request::from_parts(
                parts,
                axum::body::Body::from(bytes),
            ))
            .await
        }
        Ok(Err(_)) => refuse(ConsoleError::Invalid {
            message: format!("a request's body is at most {} KiB", MAX_BODY / 1024),
        }),
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            Json(ConsoleError::Failed {
                message: "the request's body did not arrive in time".into(),
            }),
        )
            .into_response(),
    }
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

/// Whether the browser reached the console over HTTPS: its own TLS, or a proxy that says
/// so when `behind_proxy` is set.
fn https(web: &Web, headers: &HeaderMap) -> bool {
    web.tls
        || web.behind_proxy
            && headers
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

/// The session id the request's cookie carries (the `__Host-` one over HTTPS).
fn session_id(web: &Web, headers: &HeaderMap) -> Option<String> {
    let name = cookie_name(https(web, headers));
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.to_owned())
}

/// A request's signed-in session.
struct Signed {
    id: String,
    console: Arc<Console>,
    csrf: String,
}

/// The signed-in session of a request, checked against its CSRF header when `writes`.
fn authorized(web: &Web, headers: &HeaderMap, writes: bool) -> Result<Signed, ConsoleError> {
    let id = session_id(web, headers).ok_or(ConsoleError::NotConnected)?;
    // The UI's own polling says so: it does not keep an unattended session alive.
    let person = headers.get("x-leadgate-background").is_none();
    let (console, csrf) = web
        .sessions
        .get(&id, person)
        .ok_or(ConsoleError::NotConnected)?;
    if writes {
        let sent = headers.get("x-csrf-token").and_then(|v| v.to_str().ok());
        if !sent.is_some_and(|s| constant_time_eq(s.as_bytes(), csrf.as_bytes())) {
            return Err(ConsoleError::Forbidden {
                message: "this request lacks the console's CSRF token: reload the page".into(),
            });
        }
    }
    Ok(Signed { id, console, csrf })
}

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The cookie that carries session `id` (empty and expired: the one that ends it).
fn cookie(web: &Web, headers: &HeaderMap, id: Option<&str>) -> HeaderValue {
    let https = https(web, headers);
    let (name, secure) = (cookie_name(https), if https { "; Secure" } else { "" });
    let value = match id {
        Some(id) => format!("{name}={id}; Path=/; HttpOnly; SameSite=Strict{secure}"),
        None => format!("{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    };
    HeaderValue::from_str(&value).expect("a cookie of token characters")
}

/// The gateway's database URL with a person's login and password instead of its own
/// (what `leadgate user add` prints, and what the console shows with `***`).
pub fn person_url(url: &str, login: &str, password: &str) -> Option<String> {
    let mut u = reqwest::Url::parse(url).ok()?;
    u.set_username(login).ok()?;
    u.set_password(Some(password)).ok()?;
    Some(u.to_string())
}

async fn current(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    match authorized(&web, &headers, false) {
        Ok(s) => Json(json!({"csrf": s.csrf, "connection": s.console.connection})).into_response(),
        Err(e) => refuse(e),
    }
}

async fn sign_out(State(web): State<Arc<Web>>, headers: HeaderMap) -> Response {
    match authorized(&web, &headers, true) {
        Ok(s) => web.sessions.close(&s.id),
        Err(e) => return refuse(e),
    };
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, cookie(&web, &headers, None));
    r
}

/// The session's console showing another of the person's tenants: the same connection,
/// scoped to that tenant, from the next call on.
async fn select_tenant(
    State(web): State<Arc<Web>>,
    headers: HeaderMap,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let signed = match authorized(&web, &headers, true) {
        Ok(s) => s,
        Err(e) => return refuse(e),
    };
    let slug = match body {
        Ok(Json(v)) => match v.get("slug").and_then(Value::as_str) {
            Some(s) => s.to_owned(),
            None => {
                return refuse(ConsoleError::Invalid {
                    message: "say which tenant: {\"slug\": \"…\"}".into(),
                })
            }
        },
        Err(e) => {
            return refuse(ConsoleError::Invalid {
                message: e.body_text(),
            })
        }
    };
    let console = match signed.console.with_tenant(&slug) {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    let connection = console.connection.clone();
    if !web.sessions.replace(&signed.id, console) {
        return refuse(ConsoleError::NotConnected);
    }
    Json(connection).into_response()
}

async fn call(
    State(web): State<Arc<Web>>,
    Path(command): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    // Every call is checked for the CSRF token: reads too, so that a page elsewhere
    // cannot even time them.
    let console = match authorized(&web, &headers, true) {
        Ok(s) => s.console,
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
    let console = match authorized(&web, &headers, true) {
        Ok(s) => s.console,
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
    let id = match authorized(&web, &headers, false) {
        Ok(s) => s.id,
        Err(e) => return refuse(e),
    };
    let rx = web.changes.subscribe();
    let stop = web.shutdown.clone();
    let stream = futures::stream::unfold(
        (web, id, rx, stop),
        |(web, id, mut rx, mut stop)| async move {
            loop {
                let changed = tokio::select! {
                    r = rx.recv() => !matches!(r, Err(tokio::sync::broadcast::error::RecvError::Closed)),
                    _ = tokio::time::sleep(KEEP_ALIVE) => false,
                    _ = stop.wait_for(|s| *s) => return None,
                };
                // The stream ends with the session.
                web.sessions.get(&id, false)?;
                if changed {
                    let event = Event::default().event("refresh").data("");
                    return Some((
                        Ok::<_, std::convert::Infallible>(event),
                        (web, id, rx, stop),
                    ));
                }
            }
        },
    );
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
    let task = feed.relay(web.changes.clone());
    let _ = shutdown.wait_for(|stop| *stop).await;
    task.abort();
}

/// How often sessions are swept: timed-out ones end, and on PostgreSQL those of a person
/// `leadgate user remove` dropped (or moved out of Leadgate's roles) end too.
pub const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// Sweeps the sessions until shutdown.
pub async fn sweep(web: Arc<Web>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        if web.sessions.is_empty() {
            continue;
        }
        let current: Option<std::collections::HashSet<String>> = match &web.sign_in {
            SignIn::Database { people } => match people.users().await {
                Ok(users) => Some(users.into_iter().map(|u| u.login).collect()),
                // The database is away: keep the sessions; their calls say so.
                Err(_) => continue,
            },
            SignIn::Operator { .. } => None,
        };
        let ended = web
            .sessions
            .sweep(|login| current.as_ref().is_some_and(|c| !c.contains(login)));
        if ended > 0 {
            tracing::info!(target: "leadgate::console_web", ended, "console sessions ended");
        }
    }
}
