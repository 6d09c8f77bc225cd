//! Signing in: who may, how a guess is slowed and locked out, and the person's own
//! connection a session then holds. What the browser hears is one sentence for every
//! refused sign-in ("wrong login or password"), whichever half was wrong and whatever
//! the login is; the log says the real cause, never the password.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use leadgate_console_model::{Console, ConsoleError};
use serde::Deserialize;
use serde_json::json;

use super::{cookie, password, refuse, session, session_id, SignIn, Web};
use crate::store::logins::{check_password, PasswordCheck};
use crate::store::{SignInAttempt, SignIns};

/// How long a refused sign-in waits per earlier attempt before it answers (at most
/// [`MAX_SLOWDOWN`]): guessing is slow even before the lockout.
const SLOWDOWN: Duration = Duration::from_millis(250);
const MAX_SLOWDOWN: Duration = Duration::from_secs(2);

/// Sign-ins checked at once, everyone's together (Argon2 takes memory and CPU, a
/// PostgreSQL check two connections): more at once are told to try again.
pub const CHECKS_AT_ONCE: usize = 4;

/// A person's session holds at most this many connections of their own, closed after
/// [`PERSON_IDLE`] unused: one, so 50 people need 50 of the server's connections, not 100
/// (`make bench`, `web_console`: with two, sqlx opened the second as soon as a call came
/// while the first was on its way back to the pool). A person's calls take turns on it.
pub const PERSON_CONNECTIONS: u32 = 1;
pub const PERSON_IDLE: Duration = Duration::from_secs(60);

/// Sign-in attempts waiting for the journal: beyond this many, an attempt is only logged
/// (a flood of sign-ins never becomes a flood of database writes).
const JOURNAL_BACKLOG: usize = 1024;

/// A sign-in attempt for the journal: the login (`None` when it was not plausible), the
/// client's address, the outcome.
pub(super) type Attempt = (Option<String>, IpAddr, &'static str);

/// Starts the journal's writer, one insert at a time into `store`'s `console_sign_ins`;
/// the sender to hand attempts to. The writer ends when the console does.
pub(super) fn journal(store: Arc<dyn SignIns>) -> tokio::sync::mpsc::Sender<Attempt> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Attempt>(JOURNAL_BACKLOG);
    tokio::spawn(async move {
        while let Some((login, client, outcome)) = rx.recv().await {
            let attempt = SignInAttempt {
                at: store.now(),
                login,
                client: client.to_string(),
                outcome: outcome.to_owned(),
            };
            if let Err(e) = store.record_sign_in(&attempt).await {
                tracing::warn!(target: "leadgate::console_web", error = %e, "a console sign-in was not journaled");
            }
        }
    });
    tx
}

/// Logs a sign-in attempt and hands it to the journal. Never the password.
fn record(web: &Web, login: Option<&str>, client: IpAddr, outcome: &'static str, cause: &str) {
    let shown = login.unwrap_or("(not a login)");
    if outcome == "signed_in" {
        tracing::info!(target: "leadgate::console_web", login = shown, %client, outcome, "console sign-in");
    } else {
        tracing::warn!(target: "leadgate::console_web", login = shown, %client, outcome, cause, "console sign-in refused");
    }
    if web
        .journal
        .try_send((login.map(str::to_owned), client, outcome))
        .is_err()
    {
        tracing::warn!(target: "leadgate::console_web", "the sign-in journal is behind: this attempt is only logged");
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Credentials {
    login: String,
    password: String,
}

/// The client's address: the peer's, or with `behind_proxy` the last of
/// `X-Forwarded-For` (what the proxy itself appended; the client writes the others).
fn client(web: &Web, peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
    let forwarded = web
        .behind_proxy
        .then(|| headers.get("x-forwarded-for")?.to_str().ok())
        .flatten()
        .and_then(|v| v.rsplit(',').next()?.trim().parse().ok());
    forwarded.unwrap_or(peer.ip())
}

/// A login worth asking about: 1–63 characters, no spaces or control characters (a
/// password typed into the login field is never looked up, counted or logged).
fn plausible(login: &str) -> bool {
    (1..=63).contains(&login.chars().count())
        && !login.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn wrong() -> ConsoleError {
    ConsoleError::Forbidden {
        message: "wrong login or password".into(),
    }
}

/// Why a sign-in did not open a session.
enum Refusal {
    /// A guess that failed; the cause is for the log only.
    Wrong(&'static str),
    /// The database lets this login in without its password.
    NotChecked,
    /// The database or the gateway could not answer: no guess was made.
    Unavailable(ConsoleError),
}

pub(super) async fn sign_in(
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
    let login = c.login.trim();
    if !plausible(login) {
        record(&web, None, addr, "failed", "not a plausible login");
        tokio::time::sleep(SLOWDOWN).await;
        return refuse(wrong());
    }
    let Ok(permit) = web.checks.try_acquire() else {
        record(&web, Some(login), addr, "busy", "too many sign-ins at once");
        return refuse(ConsoleError::Unreachable {
            message: "too many sign-ins at once: try again in a moment".into(),
        });
    };
    let Some(before) = web.lockout.begin(login, addr) else {
        drop(permit);
        record(
            &web,
            Some(login),
            addr,
            "locked",
            "too many failed sign-ins",
        );
        return refuse(ConsoleError::Forbidden {
            message: format!(
                "too many failed sign-ins: try again in {} minutes",
                session::LOCK_FOR.as_secs() / 60
            ),
        });
    };
    let opened = open_console(&web, login, &c.password).await;
    drop(permit);
    let console = match opened {
        Ok(console) => console,
        Err(Refusal::Unavailable(e)) => {
            web.lockout.release(login, addr);
            record(
                &web,
                Some(login),
                addr,
                "unavailable",
                "the database did not answer",
            );
            return refuse(e);
        }
        Err(Refusal::NotChecked) => {
            record(
                &web,
                Some(login),
                addr,
                "password_not_checked",
                "PostgreSQL does not check this login's password",
            );
            return refuse(ConsoleError::Forbidden {
                message: "PostgreSQL lets this login in without checking its password \
                          (`trust` in pg_hba.conf): the web console signs nobody in until the \
                          database checks passwords (scram-sha-256)"
                    .into(),
            });
        }
        Err(Refusal::Wrong(cause)) => {
            record(&web, Some(login), addr, "failed", cause);
            tokio::time::sleep((SLOWDOWN * (before + 1)).min(MAX_SLOWDOWN)).await;
            return refuse(wrong());
        }
    };
    web.lockout.succeeded(login, addr);
    // The browser's earlier session, if it sent one, ends: a sign-in is a new session.
    if let Some(old) = session_id(&web, &headers) {
        web.sessions.close(&old);
    }
    let connection = console.connection.clone();
    let Some((id, csrf)) = web.sessions.open(login, console) else {
        record(
            &web,
            Some(login),
            addr,
            "too_many_sessions",
            "as many sessions as allowed",
        );
        return refuse(ConsoleError::Unreachable {
            message: "the console has as many sessions open as it may: try again later".into(),
        });
    };
    record(&web, Some(login), addr, "signed_in", "");
    let mut r = Json(json!({"csrf": csrf, "connection": connection})).into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, cookie(&web, &headers, Some(&id)));
    r
}

/// The person's own connection, or why not.
async fn open_console(web: &Web, login: &str, password: &str) -> Result<Console, Refusal> {
    let unavailable = |e: ConsoleError| Refusal::Unavailable(e);
    let mut console = match &web.sign_in {
        SignIn::Operator { login: who, hash } => {
            // Argon2 takes tens of milliseconds of CPU by design: off the async threads.
            let (hash, attempt) = (hash.clone(), password.to_owned());
            let verified = tokio::task::spawn_blocking(move || password::verify(&attempt, &hash))
                .await
                .unwrap_or(false);
            if !(super::constant_time_eq(who.as_bytes(), login.as_bytes()) & verified) {
                return Err(Refusal::Wrong("not the operator's login and password"));
            }
            let mut console = Console::open(&web.database_url)
                .await
                .map_err(unavailable)?;
            console.connection.actor = who.clone();
            console
        }
        SignIn::Database { people } => {
            // Only a person's login is tried: never the gateway's or another of the
            // server's, whose password the console must not confirm.
            let users = people.users().await.map_err(|e| unavailable(e.into()))?;
            if !users.iter().any(|u| u.login == login) {
                return Err(Refusal::Wrong("not a person's login"));
            }
            // The database is what checks the password: it must check it.
            match check_password(&web.database_url, login, password)
                .await
                .map_err(|e| unavailable(e.into()))?
            {
                PasswordCheck::Accepted => {}
                PasswordCheck::Refused => return Err(Refusal::Wrong("wrong password")),
                PasswordCheck::NotChecked => return Err(Refusal::NotChecked),
            }
            let store = crate::store::postgres::PgStore::open_as(
                &web.database_url,
                login,
                password,
                PERSON_CONNECTIONS,
                PERSON_IDLE,
            )
            .await
            .map_err(|e| unavailable(e.into()))?;
            let shown = super::person_url(&web.database_url, login, "***")
                .unwrap_or_else(|| login.to_owned());
            let console = match Console::on(Arc::new(store), shown).await {
                Ok(c) => c,
                Err(ConsoleError::Forbidden { .. }) => return Err(Refusal::Wrong("no CONNECT")),
                Err(e) => return Err(unavailable(e)),
            };
            if console.connection.mode != "person" {
                return Err(Refusal::Wrong("not a person's login"));
            }
            console
        }
    };
    console.phone_region = web.phone_region;
    console.stale_after = web.stale_after;
    Ok(console)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plausible_login_is_looked_up() {
        for ok in ["anna", "anna.petrova", "lgt_1234_sales_ops", "Анна"] {
            assert!(plausible(ok), "{ok}");
        }
        let long = "a".repeat(64);
        for bad in [
            "",
            "anna petrova",
            "anna\nforged log line",
            "tab\there",
            long.as_str(),
        ] {
            assert!(!plausible(bad), "{bad:?}");
        }
    }
}
