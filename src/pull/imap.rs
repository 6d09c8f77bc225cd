//! A mailbox read over IMAP (RFC 3501) as a lead source: the `imap` preset. Each poll
//! takes the messages not acknowledged yet (`UID SEARCH UNSEEN UNDELETED`, or every
//! undeleted message when acknowledging moves them away), oldest UID first, asks their
//! sizes (`UID FETCH RFC822.SIZE`), reads them one at a time with `UID FETCH
//! BODY.PEEK[]` (reading sets no flag; `pull.timeout` plus a second per 64 KiB for each),
//! journals and claims each through the intake's own steps (`intake::record_pulled`: the
//! raw RFC 822 message is the journaled body, `message/rfc822`) and only then
//! acknowledges them: `\Seen` set with `UID STORE`, or moved to `pull.move_to` (`UID
//! MOVE`; `UID COPY` + `\Deleted` + `UID EXPUNGE` on a server without MOVE). Every
//! command's tagged answer is checked (async-imap 0.11's own SEARCH, FETCH, STORE and
//! EXPUNGE end at a NO as at an OK), and the acknowledgement is read back (`FLAGS`, or a
//! `SEARCH` for what should have moved). A message the server does not deliver, or whose
//! acknowledgement does not hold, is counted; the third time it is set aside until the
//! gateway restarts (one that could not be read journaled as rejected), and the messages
//! behind it are read. A message over `pull.max_message_size` is journaled as rejected
//! unread and acknowledged. A gateway killed between recording and acknowledging finds the
//! messages unacknowledged again and their keys absorb the repeat: the key is the
//! `Message-ID`, or when it has none `sha256:<hex>` of what identifies the submission
//! (sender, `Reply-To`, `Date`, subject, decoded text), never of the transport headers.
//!
//! The mapped payload holds only what is derived from the message (sender, phone,
//! subject, text, date), so a message re-read byte for byte, delivered twice with other
//! `Received` or `Delivered-To` headers, or rebuilt by the server, has the same key and
//! fingerprint. The connection is TLS only
//! (implicit TLS, `imaps://`), verified against the public roots or, with
//! `pull.ca_file`, against that CA alone. Logins and errors are logged without the
//! password or any message content; a refused login is logged as such and tried again
//! less and less often (up to every 5 minutes), so a wrong password cannot lock the
//! account with a login every few seconds. A poll that made no progress is followed by
//! a pause of `every`; one that failed (the server, an acknowledgement, the database) by
//! a pause doubling from `every` up to 5 minutes, the session kept unless the connection
//! itself may be broken.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::rustls;

use async_imap::imap_proto::{AttributeValue, MailboxDatum, Response, Status};

use crate::config::{PullConfig, Secret};
use crate::domain::contact::{self, Region};
use crate::intake::IntakeState;

type Stream = tokio_rustls::client::TlsStream<TcpStream>;
type Session = async_imap::Session<Stream>;

/// The MIME type the raw message is journaled with.
pub const RFC822: &str = "message/rfc822";

/// The longest wait between two logins the server refused, or after a failed poll.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// How many times a message may fail to be read or acknowledged before it is set aside.
pub const MAX_STRIKES: u32 = 3;

/// `pull.max_message_size` unless set: 25 MiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: u64 = 25 * 1024 * 1024;

/// A message's body may take `pull.timeout` plus a second per this many bytes.
const SLOWEST_BYTES_PER_SEC: u64 = 64 * 1024;

/// How much of the subject and text goes into the lead's comment.
const COMMENT_CHARS: usize = 4000;

/// One pulled mailbox.
pub struct MailPoll {
    source: String,
    host: String,
    port: u16,
    server_name: rustls::pki_types::ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
    username: Secret,
    password: Secret,
    /// The mailbox read, modified UTF-7 as sent (RFC 3501 5.1.3).
    mailbox: String,
    /// Where acknowledged messages go (modified UTF-7); `None`: they are marked `\Seen`.
    move_to: Option<String>,
    every: Duration,
    batch: u32,
    timeout: Duration,
    max_message_size: u64,
}

/// A failed step: what it was and what went wrong, without secrets or message content.
#[derive(Debug)]
pub struct MailError {
    pub what: String,
    /// The server refused the login: retried less often.
    pub login: bool,
    /// The session is still usable (a command refused, the database unavailable).
    pub keep: bool,
}

impl std::fmt::Display for MailError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

fn fail(step: &str, e: impl std::fmt::Display) -> MailError {
    MailError {
        what: format!("{step}: {e}"),
        login: false,
        keep: false,
    }
}

/// An IMAP error as it may be logged: the server's own words for NO and BAD (cut), the
/// kind of I/O failure, never a response's data (it may be a message).
fn describe(e: &async_imap::error::Error) -> String {
    use async_imap::error::Error;
    match e {
        Error::Io(io) => format!("the connection failed ({})", io.kind()),
        Error::No(s) => format!(
            "the server answered NO {}",
            s.chars().take(200).collect::<String>()
        ),
        Error::Bad(s) => format!(
            "the server answered BAD {}",
            s.chars().take(200).collect::<String>()
        ),
        Error::ConnectionLost => "the server closed the connection".into(),
        Error::Parse(_) => "an answer the client could not parse".into(),
        Error::Validate(_) => "a name that cannot be sent as an IMAP string".into(),
        _ => "the command failed".into(),
    }
}

/// A logged-in session with the mailbox selected, and what the server can do.
pub struct Open {
    session: Session,
    can_move: bool,
    can_uid_expunge: bool,
}

impl MailPoll {
    pub fn new(
        source: &str,
        pull: &PullConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<MailPoll, String> {
        let field = |f: &str, e: String| format!("source `{source}`: pull.{f}: {e}");
        let url = pull.url.resolve(&env).map_err(|e| field("url", e))?;
        let (host, port) = parse_url(url.expose()).map_err(|e| field("url", e))?;
        let secret = |name: &str, s: &Option<Secret>| {
            s.as_ref()
                .ok_or_else(|| field(name, "is not set".into()))?
                .resolve(&env)
                .map_err(|e| field(name, e))
        };
        let username = secret("username", &pull.username)?;
        let password = secret("password", &pull.password)?;
        let roots = match &pull.ca_file {
            Some(path) => {
                let pem = std::fs::read(path)
                    .map_err(|e| field("ca_file", format!("{}: {e}", path.display())))?;
                ca_roots(&pem).map_err(|e| field("ca_file", format!("{}: {e}", path.display())))?
            }
            None => rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            },
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| field("url", format!("TLS could not be set up: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server_name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|_| field("url", format!("`{host}` is not a host name")))?;
        Ok(MailPoll {
            source: source.to_owned(),
            host,
            port,
            server_name,
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
            username,
            password,
            mailbox: utf7_imap(pull.mailbox.as_deref().unwrap_or("INBOX")),
            move_to: pull.move_to.as_deref().map(utf7_imap),
            every: pull.every,
            batch: pull.batch,
            timeout: pull.timeout,
            max_message_size: pull.max_message_size.unwrap_or(DEFAULT_MAX_MESSAGE_SIZE),
        })
    }

    async fn step<T, E: std::fmt::Display>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, MailError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(fail(what, e)),
            Err(_) => Err(fail(what, "no answer within pull.timeout")),
        }
    }

    /// Connects (TLS), logs in and selects the mailbox.
    pub async fn open(&self) -> Result<Open, MailError> {
        let addr = (self.host.as_str(), self.port);
        let tcp = self.step("connecting", TcpStream::connect(addr)).await?;
        let tls = self
            .step("TLS", self.tls.connect(self.server_name.clone(), tcp))
            .await?;
        let mut client = async_imap::Client::new(tls);
        let greeting = self
            .step("the greeting", async {
                client
                    .read_response()
                    .await
                    .map_err(|e| e.kind().to_string())
            })
            .await?;
        if greeting.is_none() {
            return Err(fail("the greeting", "the server closed the connection"));
        }
        let login = tokio::time::timeout(
            self.timeout,
            client.login(self.username.expose(), self.password.expose()),
        )
        .await;
        let mut session = match login {
            Ok(Ok(s)) => s,
            Ok(Err((e @ async_imap::error::Error::No(_), _))) => {
                return Err(MailError {
                    what: format!(
                        "login refused (check pull.username and pull.password): {}",
                        describe(&e)
                    ),
                    login: true,
                    keep: false,
                })
            }
            Ok(Err((e, _))) => return Err(fail("login", describe(&e))),
            Err(_) => return Err(fail("login", "no answer within pull.timeout")),
        };
        let caps = self
            .step("CAPABILITY", async {
                session.capabilities().await.map_err(|e| describe(&e))
            })
            .await?;
        let can_move = caps.has_str("MOVE");
        let can_uid_expunge = caps.has_str("UIDPLUS");
        drop(caps);
        self.step("SELECT", async {
            session
                .select(&self.mailbox)
                .await
                .map_err(|e| describe(&e))
        })
        .await?;
        Ok(Open {
            session,
            can_move,
            can_uid_expunge,
        })
    }

    /// Polls until shutdown: one session kept open between polls, opened again after a
    /// failure that may have left it unusable (not after a refused command or a database
    /// error). A poll that made no progress is followed by a pause of `every`; one that
    /// failed by a pause doubling from `every` up to 5 minutes, so an outage does not
    /// re-read the same messages every few seconds.
    pub async fn run(&self, state: IntakeState, mut shutdown: watch::Receiver<bool>) {
        let source = self.source.as_str();
        let mut open: Option<Open> = None;
        let mut refused = 0u32;
        let mut failed = 0u32;
        let mut troubles = Troubles::default();
        loop {
            if *shutdown.borrow() {
                break;
            }
            let polled = match open.as_mut() {
                Some(o) => self.poll_once(&state, o, &mut troubles).await,
                None => match self.open().await {
                    Ok(mut o) => {
                        if refused > 0 {
                            tracing::info!(source, "the IMAP server took the login again");
                        }
                        refused = 0;
                        let n = self.poll_once(&state, &mut o, &mut troubles).await;
                        open = Some(o);
                        n
                    }
                    Err(e) => Err(e),
                },
            };
            let wait = match polled {
                Ok(p) => {
                    failed = 0;
                    // More is waiting and this poll moved on: the next one at once.
                    if p.done > 0 && p.found > p.taken {
                        continue;
                    }
                    self.every
                }
                Err(e) if e.login => {
                    refused += 1;
                    let wait = self
                        .every
                        .saturating_mul(1 << refused.min(10))
                        .min(MAX_BACKOFF.max(self.every));
                    tracing::error!(
                        source,
                        error = %e,
                        retry_in = %humantime::format_duration(wait),
                        "the IMAP server refused the login; nothing is read from the mailbox"
                    );
                    open = None;
                    wait
                }
                Err(e) => {
                    failed += 1;
                    let wait = backoff(self.every, failed);
                    tracing::warn!(
                        source,
                        error = %e,
                        retry_in = %humantime::format_duration(wait),
                        "reading the mailbox failed; retrying"
                    );
                    if !e.keep {
                        open = None;
                    }
                    wait
                }
            };
            if super::pause(wait, &mut shutdown).await {
                break;
            }
        }
        if let Some(mut o) = open {
            let _ = tokio::time::timeout(self.timeout, o.session.logout()).await;
        }
    }

    /// One poll: the unacknowledged messages not set aside, oldest first (at most
    /// `batch`, and past the first no more than `max_message_size` bytes together), each
    /// read on its own (`UID FETCH <uid> BODY.PEEK[]`, within `timeout` plus a second per
    /// 64 KiB of its `RFC822.SIZE`) and recorded, then those recorded acknowledged and
    /// the acknowledgement checked. A message the server does not deliver, or whose
    /// acknowledgement does not hold, is counted against it; the third time it is set
    /// aside (see [`Troubles`]).
    pub async fn poll_once(
        &self,
        state: &IntakeState,
        open: &mut Open,
        troubles: &mut Troubles,
    ) -> Result<Polled, MailError> {
        let session = &mut open.session;
        // Whatever the server told us unasked (EXISTS, EXPUNGE, …) is of no use here.
        while session.unsolicited_responses.try_recv().is_ok() {}
        let query = if self.move_to.is_some() {
            "UNDELETED"
        } else {
            "UNSEEN UNDELETED"
        };
        let found = self.search(session, query).await?;
        let pending: Vec<u32> = found
            .into_iter()
            .filter(|uid| !troubles.set_aside.contains(uid))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut polled = Polled {
            found: pending.len(),
            ..Polled::default()
        };
        if pending.is_empty() {
            return Ok(polled);
        }
        let candidates = &pending[..pending.len().min(self.batch as usize)];
        // Sizes first: a message over the limit is never downloaded, and each body gets
        // a time to arrive in proportion to its size. A refusal here is not final: a
        // message without a size is still fetched (and fails) on its own.
        let mut sizes: HashMap<u32, u64> = HashMap::new();
        let cmd = format!("UID FETCH {} (UID RFC822.SIZE)", uid_set(candidates));
        match self
            .command(session, "UID FETCH RFC822.SIZE", &cmd, self.timeout, |r| {
                if let Some((uid, attrs)) = fetched(r) {
                    for a in attrs {
                        if let AttributeValue::Rfc822Size(n) = a {
                            sizes.insert(uid, u64::from(*n));
                        }
                    }
                }
            })
            .await
        {
            Ok(()) => {}
            Err(e) if e.keep => {
                tracing::warn!(source = %self.source, error = %e, "the sizes of some messages were refused")
            }
            Err(e) => return Err(e),
        }
        let region = state.matching.region;
        let mut done: Vec<u32> = Vec::new();
        let mut bytes = 0u64;
        let mut stopped: Option<MailError> = None;
        for &uid in candidates {
            let size = sizes.get(&uid).copied();
            if polled.taken > 0 && bytes.saturating_add(size.unwrap_or(0)) > self.max_message_size {
                break;
            }
            polled.taken += 1;
            if let Some(size) = size.filter(|n| *n > self.max_message_size) {
                let reason = format!(
                    "the message (IMAP UID {uid}) is {size} bytes, over pull.max_message_size \
                     ({} bytes): not read, acknowledged, left in the mailbox for a person",
                    self.max_message_size
                );
                tracing::warn!(source = %self.source, uid, size, "a message over pull.max_message_size is rejected (journaled)");
                if let Err(e) =
                    crate::intake::reject_pulled(state, &self.source, Vec::new(), RFC822, reason)
                        .await
                {
                    stopped = Some(recording(e));
                    break;
                }
                done.push(uid);
                continue;
            }
            bytes = bytes.saturating_add(size.unwrap_or(0));
            let within =
                self.timeout + Duration::from_secs(size.unwrap_or(0) / SLOWEST_BYTES_PER_SEC);
            let mut raw: Option<Vec<u8>> = None;
            let cmd = format!("UID FETCH {uid} (UID BODY.PEEK[])");
            let got = self
                .command(session, "UID FETCH", &cmd, within, |r| {
                    if let Some((u, attrs)) = fetched(r) {
                        for a in attrs {
                            if let AttributeValue::BodySection {
                                data: Some(data), ..
                            } = a
                            {
                                if u == uid {
                                    raw = Some(data.to_vec());
                                }
                            }
                        }
                    }
                })
                .await;
            let raw = match (got, raw) {
                (Ok(()), Some(raw)) => raw,
                (Ok(()), None) => {
                    // Gone (expunged by someone else) or withheld: SEARCH tells which.
                    let still = self
                        .search(session, &format!("UID {uid} UNDELETED"))
                        .await?;
                    if still.contains(&uid) {
                        let why = "the server answered OK but sent no message";
                        self.strike(state, troubles, uid, Trouble::Fetch, why)
                            .await?;
                    }
                    continue;
                }
                (Err(e), _) => {
                    self.strike(state, troubles, uid, Trouble::Fetch, &e.what)
                        .await?;
                    if e.keep {
                        continue;
                    }
                    stopped = Some(e);
                    break;
                }
            };
            let payload = payload(&self.source, &raw, region);
            match crate::intake::record_pulled(state, &self.source, raw, RFC822, payload).await {
                Ok(crate::intake::Pulled::Recorded(outcome)) => {
                    tracing::info!(source = %self.source, outcome = outcome.name(), "message recorded")
                }
                Ok(crate::intake::Pulled::Rejected(reason)) => {
                    tracing::warn!(source = %self.source, reason = %reason, "message rejected (journaled)")
                }
                Err(e) => {
                    stopped = Some(recording(e));
                    break;
                }
            }
            done.push(uid);
        }
        // Only what was recorded is acknowledged, also when the poll stopped half way.
        if !done.is_empty() && stopped.as_ref().is_none_or(|e| e.keep) {
            let acked = match self.acknowledge(open, &uid_set(&done)).await {
                Ok(()) => self.unacknowledged(open, &done).await,
                Err(e) => Err(e),
            };
            match acked {
                Ok(left) => {
                    for &uid in &done {
                        if left.contains(&uid) {
                            self.strike(
                                state,
                                troubles,
                                uid,
                                Trouble::Ack,
                                "the acknowledgement did not hold",
                            )
                            .await?;
                        } else {
                            troubles.clear(uid);
                            polled.done += 1;
                        }
                    }
                }
                Err(e) => {
                    if e.keep {
                        for &uid in &done {
                            self.strike(state, troubles, uid, Trouble::Ack, &e.what)
                                .await?;
                        }
                    }
                    return Err(stopped.unwrap_or(e));
                }
            }
        }
        match stopped {
            Some(e) => Err(e),
            None => Ok(polled),
        }
    }

    /// Counts a failure against `uid`; the third sets it aside, said at error level and,
    /// for a message that could not be read, journaled as a rejected delivery.
    async fn strike(
        &self,
        state: &IntakeState,
        troubles: &mut Troubles,
        uid: u32,
        trouble: Trouble,
        why: &str,
    ) -> Result<(), MailError> {
        if !troubles.strike(uid) {
            return Ok(());
        }
        let source = self.source.as_str();
        match trouble {
            Trouble::Fetch => {
                let reason = format!(
                    "the IMAP server did not deliver the message (UID {uid}) {MAX_STRIKES} times \
                     ({why}): left unread in the mailbox for a person, not read again until \
                     the gateway restarts"
                );
                tracing::error!(source, uid, error = %why, "a message the IMAP server does not deliver is set aside (journaled as rejected)");
                crate::intake::reject_pulled(state, source, Vec::new(), RFC822, reason)
                    .await
                    .map_err(recording)
            }
            Trouble::Ack => {
                tracing::error!(
                    source,
                    uid,
                    error = %why,
                    "a recorded message could not be acknowledged {MAX_STRIKES} times (does the login \
                     have the right to set flags, or to move?); set aside until the gateway restarts"
                );
                Ok(())
            }
        }
    }

    /// Runs `cmd` within `within`, handing every untagged answer to `each`, and reads
    /// its tagged status: NO or BAD is an error that leaves the session usable
    /// (`keep`), a timeout or a broken connection one that does not.
    async fn command(
        &self,
        session: &mut Session,
        what: &str,
        cmd: &str,
        within: Duration,
        mut each: impl FnMut(&Response<'_>),
    ) -> Result<(), MailError> {
        let run = async {
            let id = session
                .run_command(cmd)
                .await
                .map_err(|e| fail(what, describe(&e)))?;
            loop {
                let r = session
                    .read_response()
                    .await
                    .map_err(|e| fail(what, format!("the connection failed ({})", e.kind())))?
                    .ok_or_else(|| fail(what, "the server closed the connection"))?;
                match r.parsed() {
                    Response::Done {
                        tag,
                        status,
                        information,
                        ..
                    } if *tag == id => {
                        let words: String = information
                            .as_deref()
                            .unwrap_or("")
                            .chars()
                            .take(200)
                            .collect();
                        let answer = match status {
                            Status::Ok => return Ok(()),
                            Status::No => "NO",
                            Status::Bad => "BAD",
                            _ => return Err(fail(what, "an unexpected tagged answer")),
                        };
                        return Err(MailError {
                            what: format!("{what}: the server answered {answer} {words}"),
                            login: false,
                            keep: true,
                        });
                    }
                    other => each(other),
                }
            }
        };
        match tokio::time::timeout(within, run).await {
            Ok(r) => r,
            Err(_) => Err(fail(
                what,
                format!("no answer within {}", humantime::format_duration(within)),
            )),
        }
    }

    /// `UID SEARCH <query>`, its tagged answer checked (async-imap 0.11's `uid_search`
    /// takes a NO for an empty result: a server in trouble would look like an empty
    /// mailbox).
    async fn search(&self, session: &mut Session, query: &str) -> Result<BTreeSet<u32>, MailError> {
        let mut found = BTreeSet::new();
        let cmd = format!("UID SEARCH {query}");
        self.command(session, "UID SEARCH", &cmd, self.timeout, |r| {
            if let Response::MailboxData(MailboxDatum::Search(uids)) = r {
                found.extend(uids.iter().copied());
            }
        })
        .await?;
        Ok(found)
    }

    /// Sets `\Seen` on `set`, or moves it to `move_to`, each command's tagged answer
    /// checked.
    async fn acknowledge(&self, open: &mut Open, set: &str) -> Result<(), MailError> {
        let (can_move, can_uid_expunge) = (open.can_move, open.can_uid_expunge);
        let session = &mut open.session;
        let t = self.timeout;
        let Some(folder) = &self.move_to else {
            let cmd = format!("UID STORE {set} +FLAGS.SILENT (\\Seen)");
            return self
                .command(session, "UID STORE \\Seen", &cmd, t, |_| {})
                .await;
        };
        let folder = quoted(folder);
        if can_move {
            let cmd = format!("UID MOVE {set} {folder}");
            return self.command(session, "UID MOVE", &cmd, t, |_| {}).await;
        }
        let cmd = format!("UID COPY {set} {folder}");
        self.command(session, "UID COPY", &cmd, t, |_| {}).await?;
        let cmd = format!("UID STORE {set} +FLAGS.SILENT (\\Deleted)");
        self.command(session, "UID STORE \\Deleted", &cmd, t, |_| {})
            .await?;
        let cmd = if can_uid_expunge {
            format!("UID EXPUNGE {set}")
        } else {
            "EXPUNGE".to_owned()
        };
        self.command(session, "EXPUNGE", &cmd, t, |_| {}).await
    }

    /// Which of `uids` the acknowledgement did not reach: still without `\Seen`, or
    /// (with `move_to`) still in the mailbox. A server may answer OK to a `STORE` the
    /// login has no right to (RFC 4314: the flag is silently not set).
    async fn unacknowledged(&self, open: &mut Open, uids: &[u32]) -> Result<Vec<u32>, MailError> {
        let session = &mut open.session;
        let set = uid_set(uids);
        if self.move_to.is_some() {
            let left = self
                .search(session, &format!("UID {set} UNDELETED"))
                .await?;
            return Ok(uids.iter().copied().filter(|u| left.contains(u)).collect());
        }
        let mut seen = BTreeSet::new();
        let cmd = format!("UID FETCH {set} (UID FLAGS)");
        self.command(session, "UID FETCH FLAGS", &cmd, self.timeout, |r| {
            if let Some((uid, attrs)) = fetched(r) {
                for a in attrs {
                    if let AttributeValue::Flags(flags) = a {
                        if flags.iter().any(|f| f.eq_ignore_ascii_case("\\Seen")) {
                            seen.insert(uid);
                        }
                    }
                }
            }
        })
        .await?;
        Ok(uids.iter().copied().filter(|u| !seen.contains(u)).collect())
    }
}

/// What a poll did.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Polled {
    /// Messages waiting (not acknowledged, not set aside).
    pub found: usize,
    /// Messages this poll tried.
    pub taken: usize,
    /// Messages recorded (or rejected) and acknowledged.
    pub done: usize,
}

/// What went wrong with a message.
#[derive(Debug, Clone, Copy)]
enum Trouble {
    Fetch,
    Ack,
}

/// Messages that failed, counted across polls and sessions (a UID names the same
/// message while the mailbox's UIDVALIDITY holds). A message that fails
/// [`MAX_STRIKES`] times is set aside until the gateway restarts: the messages behind it
/// are still read.
#[derive(Debug, Default)]
pub struct Troubles {
    strikes: HashMap<u32, u32>,
    set_aside: BTreeSet<u32>,
}

impl Troubles {
    /// Counts a failure of `uid`; `true` when it is now set aside.
    fn strike(&mut self, uid: u32) -> bool {
        let n = self.strikes.entry(uid).or_insert(0);
        *n += 1;
        if *n >= MAX_STRIKES {
            self.strikes.remove(&uid);
            self.set_aside.insert(uid);
            return true;
        }
        false
    }

    fn clear(&mut self, uid: u32) {
        self.strikes.remove(&uid);
    }

    /// The UIDs set aside.
    pub fn set_aside(&self) -> impl Iterator<Item = u32> + '_ {
        self.set_aside.iter().copied()
    }
}

/// The wait after the `n`th failed poll in a row: `every`, doubled each time, at most
/// 5 minutes (or `every`, when that is longer).
fn backoff(every: Duration, n: u32) -> Duration {
    every
        .saturating_mul(1 << n.saturating_sub(1).min(16))
        .min(MAX_BACKOFF.max(every))
}

/// A database error while recording: the session stays, the poll is retried later.
fn recording(e: impl std::fmt::Display) -> MailError {
    MailError {
        what: format!("recording: {e}"),
        login: false,
        keep: true,
    }
}

/// A `FETCH` answer's UID and attributes.
fn fetched<'a>(r: &'a Response<'_>) -> Option<(u32, &'a [AttributeValue<'a>])> {
    let Response::Fetch(_, attrs) = r else {
        return None;
    };
    let uid = attrs.iter().find_map(|a| match a {
        AttributeValue::Uid(u) => Some(*u),
        _ => None,
    })?;
    Some((uid, attrs.as_slice()))
}

/// A mailbox name as an IMAP quoted string (the configuration refuses quotes and
/// control characters in it; a backslash is escaped).
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `imaps://host[:port]` (993 by default). Plain `imap://` is refused: the password
/// would cross the network readable.
fn parse_url(url: &str) -> Result<(String, u16), String> {
    let url = url.trim().trim_end_matches('/');
    let Some(rest) = url.strip_prefix("imaps://") else {
        return Err(if url.starts_with("imap://") {
            "plain imap:// would send the password unencrypted: use imaps:// (implicit TLS)".into()
        } else {
            "must be an imaps://host[:port] URL".into()
        });
    };
    if rest.contains(['/', '@', '?', '#']) {
        return Err("must be imaps://host[:port], without a path or credentials".into());
    }
    let (host, port) = match rest.strip_prefix('[') {
        // An IPv6 address: [::1] or [::1]:993.
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or("an unclosed [ in the host")?;
            (host, after.strip_prefix(':'))
        }
        None => match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        },
    };
    let port = match port {
        None => 993,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("`{p}` is not a port"))?,
    };
    if host.is_empty() {
        return Err("has no host".into());
    }
    Ok((host.to_owned(), port))
}

/// The certificates of a PEM file as the only trust roots.
fn ca_roots(pem: &[u8]) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("not a PEM certificate file ({e})"))?;
        roots
            .add(cert)
            .map_err(|e| format!("a certificate that cannot be a trust root ({e})"))?;
    }
    if roots.is_empty() {
        return Err("holds no certificate".into());
    }
    Ok(roots)
}

/// `1:3,7,9:10` for sorted UIDs.
fn uid_set(uids: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < uids.len() {
        let start = uids[i];
        let mut end = start;
        while i + 1 < uids.len() && uids[i + 1] == end + 1 {
            i += 1;
            end = uids[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}:{end}"));
        }
        i += 1;
    }
    out
}

/// A mailbox name in IMAP's modified UTF-7 (RFC 3501 5.1.3): `Заявки` is `&BBcEMARPBDIEOgQ4-`.
pub fn utf7_imap(name: &str) -> String {
    use base64::Engine;
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::IMAP_MUTF7,
        base64::engine::general_purpose::NO_PAD,
    );
    let mut out = String::new();
    let mut wide: Vec<u16> = Vec::new();
    let flush = |wide: &mut Vec<u16>, out: &mut String| {
        if wide.is_empty() {
            return;
        }
        let bytes: Vec<u8> = wide.iter().flat_map(|u| u.to_be_bytes()).collect();
        out.push('&');
        out.push_str(&engine.encode(bytes));
        out.push('-');
        wide.clear();
    };
    for c in name.chars() {
        if (' '..='~').contains(&c) {
            flush(&mut wide, &mut out);
            if c == '&' {
                out.push_str("&-");
            } else {
                out.push(c);
            }
        } else {
            let mut buf = [0u16; 2];
            wide.extend_from_slice(c.encode_utf16(&mut buf));
        }
    }
    flush(&mut wide, &mut out);
    out
}

/// The operation key of a message: its `Message-ID` (without the angle brackets), or
/// `sha256:<hex>` of `identity` when it has none: what identifies the submission, not
/// the bytes the way it came left (see [`payload`]). A `Message-ID` that could not be
/// `source`'s key (over 200 bytes, too long with the source's name, white space, control
/// or invisible characters) is keyed by `message-id-sha256:<hex>` of it, so no message is
/// refused for its header.
pub fn message_key(source: &str, message_id: Option<&str>, identity: &[u8]) -> String {
    match message_id.map(str::trim).filter(|m| !m.is_empty()) {
        Some(id)
            if id.len() <= 200
                && !id.chars().any(char::is_whitespace)
                && crate::domain::OperationId::new(source, id).is_ok() =>
        {
            id.to_owned()
        }
        Some(id) => format!("message-id-sha256:{}", hex::encode(Sha256::digest(id))),
        None => format!("sha256:{}", hex::encode(Sha256::digest(identity))),
    }
}

/// The lead a message makes, derived from the message's content alone (so the same
/// message gives the same payload, whatever headers the way it came added): `message_id`
/// (the key), `name` and `email` of the first `From`, `reply_to`, a `phone` found in the
/// subject or the text, `subject`, `text` (the text/plain body, or the HTML one as
/// text), `comment` (subject and text, cut) and `date` (RFC 3339). Without a
/// `Message-ID` the key hashes the sender (name, address, `Reply-To`), the `Date`, the
/// subject and the decoded text: a copy through another alias (other `Received`,
/// `Delivered-To`, `Return-Path`) or a server that rebuilds the message keeps its key.
/// A message that cannot be parsed at all is keyed by its raw bytes.
pub fn payload(source: &str, raw: &[u8], region: Region) -> Value {
    let parser = mail_parser::MessageParser::default();
    let Some(msg) = parser.parse(raw) else {
        return json!({"message_id": message_key(source, None, raw)});
    };
    let clean = |s: &str| s.replace('\0', "").trim().to_owned();
    let from = msg.from().and_then(|a| a.first());
    let name = from
        .and_then(|a| a.name())
        .map(clean)
        .filter(|s| !s.is_empty());
    let email = from
        .and_then(|a| a.address())
        .map(clean)
        .filter(|s| !s.is_empty());
    let reply_to = msg
        .reply_to()
        .and_then(|a| a.first())
        .and_then(|a| a.address())
        .map(clean);
    let subject = msg.subject().map(clean).filter(|s| !s.is_empty());
    let text = msg
        .body_text(0)
        .map(|t| clean(t.as_ref()))
        .filter(|s| !s.is_empty());
    let date = msg.date().map(|d| d.to_rfc3339());
    let phone = subject
        .as_deref()
        .and_then(|s| find_phone(s, region))
        .or_else(|| text.as_deref().and_then(|t| find_phone(t, region)));
    let comment = match (&subject, &text) {
        (Some(s), Some(t)) => Some(format!("{s}\n\n{t}")),
        (Some(s), None) => Some(s.clone()),
        (None, Some(t)) => Some(t.clone()),
        (None, None) => None,
    }
    .map(|c| c.chars().take(COMMENT_CHARS).collect::<String>());
    let identity = json!([
        "imap-submission/1",
        name,
        email,
        reply_to,
        date,
        subject,
        text
    ]);
    json!({
        "message_id": message_key(source, msg.message_id(), identity.to_string().as_bytes()),
        "name": name,
        "email": email,
        "reply_to": reply_to,
        "phone": phone,
        "subject": subject,
        "text": text,
        "comment": comment,
        "date": date,
    })
}

/// The first phone number in `text`: a run of digits with the usual separators
/// (`+7 (912) 000-11-22`, `8-912-000-11-22`), 10 to 15 digits, that is a valid number in
/// `region` (or with its country code). Dates, times and order numbers do not pass.
pub fn find_phone(text: &str, region: Region) -> Option<String> {
    let chars: Vec<char> = text.chars().collect();
    let sep = |c: char| matches!(c, ' ' | '-' | '(' | ')' | '.' | '\u{a0}');
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let starts = (c == '+' || c == '(' || c.is_ascii_digit())
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '+'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < chars.len() && (chars[j].is_ascii_digit() || sep(chars[j])) {
            // Two separators in a row other than ") " or " (" end the number.
            if sep(chars[j])
                && sep(chars[j - 1])
                && !matches!((chars[j - 1], chars[j]), (')', ' ') | (' ', '('))
            {
                break;
            }
            j += 1;
        }
        let run: String = chars[i..j].iter().collect();
        let run = run
            .trim_end_matches(|c: char| sep(c) && c != ')')
            .trim()
            .to_owned();
        let digits = run.chars().filter(char::is_ascii_digit).count();
        if (10..=15).contains(&digits) && contact::normalize_phone(&run, region).is_some() {
            return Some(run);
        }
        i = j.max(i + 1);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_imaps_only() {
        assert_eq!(
            parse_url("imaps://imap.example.com").unwrap(),
            ("imap.example.com".to_owned(), 993)
        );
        assert_eq!(
            parse_url("imaps://127.0.0.1:10993/").unwrap(),
            ("127.0.0.1".to_owned(), 10993)
        );
        assert_eq!(
            parse_url("imaps://[::1]:993").unwrap(),
            ("::1".to_owned(), 993)
        );
        assert!(parse_url("imap://imap.example.com")
            .unwrap_err()
            .contains("unencrypted"));
        assert!(parse_url("imaps://user:pw@imap.example.com").is_err());
        assert!(parse_url("imaps://host:0").is_err());
        assert!(parse_url("https://imap.example.com").is_err());
    }

    #[test]
    fn failed_polls_back_off_doubling_up_to_five_minutes() {
        let s = Duration::from_secs;
        assert_eq!(backoff(s(10), 1), s(10));
        assert_eq!(backoff(s(10), 2), s(20));
        assert_eq!(backoff(s(10), 4), s(80));
        assert_eq!(backoff(s(10), 6), s(300));
        assert_eq!(backoff(s(10), 60), s(300));
        assert_eq!(backoff(s(600), 3), s(600));
    }

    #[test]
    fn a_uid_is_set_aside_at_its_third_failure_and_a_success_clears_its_count() {
        let mut t = Troubles::default();
        assert!(!t.strike(7));
        assert!(!t.strike(7));
        t.clear(7);
        assert!(!t.strike(7));
        assert!(!t.strike(7));
        assert!(t.strike(7));
        assert_eq!(t.set_aside().collect::<Vec<_>>(), [7]);
    }

    #[test]
    fn uid_sets_are_ranges() {
        assert_eq!(uid_set(&[1, 2, 3, 7, 9, 10]), "1:3,7,9:10");
        assert_eq!(uid_set(&[5]), "5");
    }

    #[test]
    fn mailbox_names_are_modified_utf7() {
        assert_eq!(utf7_imap("INBOX"), "INBOX");
        assert_eq!(utf7_imap("Leads/Done"), "Leads/Done");
        assert_eq!(utf7_imap("A&B"), "A&-B");
        // RFC 3501's own example.
        assert_eq!(
            utf7_imap("~peter/mail/台北/日本語"),
            "~peter/mail/&U,BTFw-/&ZeVnLIqe-"
        );
        assert_eq!(utf7_imap("Заявки"), "&BBcEMARPBDIEOgQ4-");
    }

    #[test]
    fn phones_are_found_in_text_and_dates_are_not() {
        let ru = Region::default();
        let found = |t: &str| find_phone(t, ru);
        assert_eq!(
            found("Перезвоните мне: +7 (912) 000-11-22, Ольга").as_deref(),
            Some("+7 (912) 000-11-22")
        );
        assert_eq!(
            found("тел. 8-912-000-11-22.").as_deref(),
            Some("8-912-000-11-22")
        );
        assert_eq!(found("89120001122").as_deref(), Some("89120001122"));
        assert_eq!(found("Заказ от 15.01.2025 в 10:30, сумма 12500"), None);
        assert_eq!(found("2025-01-15 10:30:00"), None);
        assert_eq!(found("no phone here"), None);
    }

    #[test]
    fn keys_are_the_message_id_or_a_hash() {
        assert_eq!(
            message_key("mail", Some("abc@example.com"), b"x"),
            "abc@example.com"
        );
        let raw = b"[\"identity\"]";
        let k = message_key("mail", None, raw);
        assert_eq!(k, format!("sha256:{}", hex::encode(Sha256::digest(raw))));
        let long = "a".repeat(300);
        assert!(message_key("mail", Some(&long), raw).starts_with("message-id-sha256:"));
        // Fine alone, too long with a long source name; an invisible character.
        let id = format!("{}@x", "a".repeat(190));
        assert_eq!(message_key("mail", Some(&id), raw), id);
        assert!(message_key(&"s".repeat(64), Some(&id), raw).starts_with("message-id-sha256:"));
        assert!(message_key("mail", Some("a\u{200b}b@x"), raw).starts_with("message-id-sha256:"));
    }

    #[test]
    fn a_windows_1251_quoted_printable_message_maps_to_a_lead() {
        // "Заявка" / "Позвоните: +7 912 000-11-22" in windows-1251, quoted-printable.
        let raw = b"From: =?windows-1251?B?zuv84+A=?= <olga@example.ru>\r\n\
Subject: =?windows-1251?B?x+D/4urg?=\r\n\
Message-ID: <m1@example.ru>\r\n\
Date: Wed, 15 Jan 2025 10:30:00 +0300\r\n\
MIME-Version: 1.0\r\n\
Content-Type: text/plain; charset=windows-1251\r\n\
Content-Transfer-Encoding: quoted-printable\r\n\
\r\n\
=CF=EE=E7=E2=EE=ED=E8=F2=E5: +7 912 000-11-22\r\n";
        let p = payload("mail", raw, Region::default());
        assert_eq!(p["message_id"], "m1@example.ru");
        assert_eq!(p["name"], "Ольга");
        assert_eq!(p["email"], "olga@example.ru");
        assert_eq!(p["subject"], "Заявка");
        assert_eq!(p["text"], "Позвоните: +7 912 000-11-22");
        assert_eq!(p["phone"], "+7 912 000-11-22");
        assert_eq!(p["comment"], "Заявка\n\nПозвоните: +7 912 000-11-22");
        assert_eq!(p["date"], "2025-01-15T10:30:00+03:00");
        // The same bytes, the same payload: a re-read is a duplicate, not a conflict.
        assert_eq!(payload("mail", raw, Region::default()), p);
    }

    #[test]
    fn a_message_without_message_id_keeps_its_key_through_other_transport_headers() {
        let body = "From: Ivan <ivan@example.ru>\r\nTo: leads@example.ru\r\n\
Subject: заявка\r\nDate: Wed, 15 Jan 2025 10:30:00 +0300\r\n\
Content-Type: text/plain; charset=utf-8\r\n\r\nПерезвоните: +7 912 000-11-22\r\n";
        let one = format!(
            "Return-Path: <a@example.ru>\r\nDelivered-To: leads@example.ru\r\n\
Received: from mx1 by imap; Wed, 15 Jan 2025 10:30:01 +0300\r\n{body}"
        );
        let two = format!(
            "Return-Path: <b@example.ru>\r\nDelivered-To: sales@example.ru\r\n\
Received: from mx2 by imap; Wed, 15 Jan 2025 10:30:07 +0300\r\n\
X-Spam-Score: 0.1\r\n{body}"
        );
        let (p1, p2) = (
            payload("mail", one.as_bytes(), Region::default()),
            payload("mail", two.as_bytes(), Region::default()),
        );
        assert!(p1["message_id"].as_str().unwrap().starts_with("sha256:"));
        assert_eq!(p1, p2, "same key, same payload: a duplicate");
        // Another text, another date, another sender: another submission.
        for other in [
            one.replace("+7 912 000-11-22", "+7 912 000-11-23"),
            one.replace("10:30:00", "10:31:00"),
            one.replace("ivan@", "olga@"),
        ] {
            let p = payload("mail", other.as_bytes(), Region::default());
            assert_ne!(p["message_id"], p1["message_id"]);
        }
    }

    #[test]
    fn a_koi8r_base64_message_without_message_id_is_keyed_by_hash() {
        // "Тест" in KOI8-R, base64.
        let raw = b"From: test@example.ru\r\nSubject: t\r\n\
Content-Type: text/plain; charset=koi8-r\r\nContent-Transfer-Encoding: base64\r\n\r\n9MXT1A==\r\n";
        let p = payload("mail", raw, Region::default());
        assert_eq!(p["text"], "Тест");
        assert_eq!(p["name"], Value::Null);
        assert!(p["message_id"].as_str().unwrap().starts_with("sha256:"));
    }
}
