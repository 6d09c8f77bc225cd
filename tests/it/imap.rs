//! The `imap` preset against a real IMAP server, on both backends: Debian's Dovecot
//! (`dovecot-imapd`, installed by scripts/install-test-deps.sh), started by each test in
//! the foreground on loopback ports of its own, with a passwd-file user, a maildir and a
//! TLS certificate the test makes, all in a temporary directory. Messages reach the
//! mailbox with IMAP APPEND, as a mail server's delivery would leave them.
//!
//! To fail or hold the acknowledgement (`UID STORE`, `UID MOVE`, `UID COPY`) the gateway
//! is pointed at a small proxy of the test's: it terminates TLS with the same certificate
//! (the gateway verifies it against the test's CA like any server's), forwards every
//! command to Dovecot's plain listener, and can cut the connection at the acknowledging
//! command or hold it back until the gateway is killed.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leadgate_fakes::bitrix24::FakeBitrix24;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;

use leadgate_testkit::each_backend;
use leadgate_testkit::gateway::{origin_ids, Gateway, CREATE};
use leadgate_testkit::process::{free_port, wait_healthy, GatewayFile, Process, SiteAuth};

use crate::tls::{make_pki, unsafe_is_root, Pki};

const DOVECOT: &str = "/usr/sbin/dovecot";
const USER: &str = "leads";
const PASSWORD: &str = "imap-Pass-1";
const SOURCE: &str = "mail";

/// A Dovecot of the test's own, stopped (SIGTERM, then SIGKILL) when dropped.
struct Dovecot {
    dir: tempfile::TempDir,
    child: Child,
    /// Implicit TLS.
    imaps: u16,
    /// Plain IMAP, for the test's own deliveries and the proxy.
    plain: u16,
    ca_file: PathBuf,
    pki: Pki,
}

impl Dovecot {
    /// Started and answering; `with_move`: whether it advertises the MOVE extension
    /// (without it the gateway copies, flags `\Deleted` and expunges).
    async fn start(with_move: bool) -> Dovecot {
        assert!(
            Path::new(DOVECOT).exists(),
            "{DOVECOT} is missing: install Debian's dovecot-imapd (scripts/install-test-deps.sh)"
        );
        let pki = make_pki();
        let dir = tempfile::Builder::new()
            .prefix("lg-imap-")
            .tempdir()
            .unwrap();
        let p = dir.path();
        for sub in ["run", "state", "home"] {
            std::fs::create_dir(p.join(sub)).unwrap();
        }
        std::fs::write(p.join("cert.pem"), &pki.cert_pem).unwrap();
        std::fs::write(p.join("key.pem"), &pki.key_pem).unwrap();
        let ca_file = p.join("ca.pem");
        std::fs::write(&ca_file, &pki.ca_pem).unwrap();
        std::fs::write(p.join("passwd"), format!("{USER}:{{PLAIN}}{PASSWORD}\n")).unwrap();
        // Dovecot runs unprivileged: as the test's user, or as nobody when that is root.
        let root = unsafe_is_root();
        let id = |flag: &str| {
            let out = Command::new("id").arg(flag).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        let (user, group) = if root {
            ("nobody".to_owned(), "nogroup".to_owned())
        } else {
            (id("-un"), id("-gn"))
        };
        let (imaps, plain) = (free_port(), free_port());
        // Without MOVE: the capabilities Dovecot 2.3 lists after login, MOVE left out.
        let capability = if with_move {
            String::new()
        } else {
            "imap_capability = IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE SORT \
             SORT=DISPLAY THREAD=REFERENCES THREAD=REFS THREAD=ORDEREDSUBJECT MULTIAPPEND \
             URL-PARTIAL CATENATE UNSELECT CHILDREN NAMESPACE UIDPLUS LIST-EXTENDED \
             I18NLEVEL=1 CONDSTORE QRESYNC ESEARCH ESORT SEARCHRES WITHIN CONTEXT=SEARCH \
             LIST-STATUS BINARY LITERAL+\n"
                .to_owned()
        };
        let d = p.display();
        let conf = format!(
            "base_dir = {d}/run\nstate_dir = {d}/state\nlog_path = /dev/stderr\n\
             protocols = imap\nlisten = 127.0.0.1\nssl = yes\n\
             ssl_cert = <{d}/cert.pem\nssl_key = <{d}/key.pem\n\
             disable_plaintext_auth = no\nauth_mechanisms = plain login\n\
             default_internal_user = {user}\ndefault_internal_group = {group}\n\
             default_login_user = {user}\nfirst_valid_uid = 1\n\
             passdb {{\n  driver = passwd-file\n  args = scheme=PLAIN {d}/passwd\n}}\n\
             userdb {{\n  driver = static\n  args = uid={user} gid={group} home={d}/home/%u\n}}\n\
             mail_location = maildir:~/Maildir\n{capability}\
             service imap-login {{\n  chroot =\n\
               inet_listener imap {{\n    port = {plain}\n  }}\n\
               inet_listener imaps {{\n    port = {imaps}\n    ssl = yes\n  }}\n}}\n\
             service anvil {{\n  chroot =\n}}\nservice stats {{\n  chroot =\n}}\n"
        );
        std::fs::write(p.join("dovecot.conf"), conf).unwrap();
        if root {
            let ok = Command::new("chown")
                .args(["-R", "nobody:nogroup", p.to_str().unwrap()])
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown of the Dovecot directory");
        }
        let log = std::fs::File::create(p.join("dovecot.log")).unwrap();
        let mut cmd = Command::new(DOVECOT);
        cmd.args(["-F", "-c"])
            .arg(p.join("dovecot.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if root {
            cmd.uid(65534).gid(65534);
        }
        let child = cmd.spawn().expect("spawn dovecot");
        let mut dovecot = Dovecot {
            dir,
            child,
            imaps,
            plain,
            ca_file,
            pki,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while TcpStream::connect(("127.0.0.1", imaps)).await.is_err() {
            if let Ok(Some(status)) = dovecot.child.try_wait() {
                panic!("dovecot exited ({status}): {}", dovecot.log());
            }
            assert!(
                Instant::now() < deadline,
                "dovecot did not listen: {}",
                dovecot.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        dovecot
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dovecot.log")).unwrap_or_default()
    }

    /// A logged-in session over the plain listener.
    async fn session(&self) -> async_imap::Session<TcpStream> {
        let tcp = TcpStream::connect(("127.0.0.1", self.plain)).await.unwrap();
        let mut client = async_imap::Client::new(tcp);
        client.read_response().await.unwrap().expect("a greeting");
        client
            .login(USER, PASSWORD)
            .await
            .map_err(|(e, _)| e)
            .unwrap()
    }

    /// Delivers `raw` into INBOX, unseen.
    async fn deliver(&self, raw: &[u8]) {
        let mut s = self.session().await;
        s.append("INBOX", None, None, raw).await.unwrap();
        s.logout().await.unwrap();
    }

    /// Creates a mailbox (its name as sent: modified UTF-7).
    async fn create(&self, mailbox: &str) {
        let mut s = self.session().await;
        s.create(mailbox).await.unwrap();
        s.logout().await.unwrap();
    }

    /// `(messages, unseen)` in `mailbox` (its name as sent).
    async fn counts(&self, mailbox: &str) -> (u32, u32) {
        let mut s = self.session().await;
        let m = s.status(mailbox, "(MESSAGES UNSEEN)").await.unwrap();
        s.logout().await.unwrap();
        (m.exists, m.unseen.unwrap_or(0))
    }

    /// Waits (15 s at most) until `mailbox` counts `want`.
    async fn wait_counts(&self, mailbox: &str, want: (u32, u32)) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let got = self.counts(mailbox).await;
            if got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{mailbox}: {got:?}, not {want:?}: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the proxy does with the acknowledging command (`UID STORE`, `UID MOVE`, `UID COPY`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum AtAck {
    Forward,
    /// Closes the connection instead, this many times, then forwards.
    Cut(usize),
    /// Never forwards it (nor anything after it on that connection).
    Hold,
    /// Answers OK without forwarding it: what a server does with a `STORE` the login has
    /// no right to (RFC 4314), the flag silently not set.
    Swallow,
}

/// A TLS-terminating proxy in front of Dovecot's plain listener.
struct Proxy {
    port: u16,
    mode: Arc<Mutex<AtAck>>,
    /// Acknowledging commands seen.
    acks: Arc<AtomicUsize>,
    /// What the proxy saw and did.
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

/// Commands and connections the proxy saw; a UID whose body `FETCH` it answers NO.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    searches: AtomicUsize,
    /// `UID FETCH … BODY…` commands naming `refuse_fetch`.
    refused_fetches: AtomicUsize,
    refuse_fetch: Mutex<Option<u32>>,
    /// Every `UID SEARCH` answered `NO` (a server in trouble).
    refuse_search: std::sync::atomic::AtomicBool,
}

impl Proxy {
    async fn start(dovecot: &Dovecot, mode: AtAck) -> Proxy {
        use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
        let cert = CertificateDer::from_pem_slice(dovecot.pki.cert_pem.as_bytes()).unwrap();
        let key = PrivateKeyDer::from_pem_slice(dovecot.pki.key_pem.as_bytes()).unwrap();
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(mode));
        let acks = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Seen::default());
        let upstream = dovecot.plain;
        let (m, a, sn) = (Arc::clone(&mode), Arc::clone(&acks), Arc::clone(&seen));
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, mode, acks, seen) = (
                    acceptor.clone(),
                    Arc::clone(&m),
                    Arc::clone(&a),
                    Arc::clone(&sn),
                );
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    seen.connections.fetch_add(1, Ordering::SeqCst);
                    relay(tls, up, mode, acks, seen).await;
                });
            }
        });
        Proxy {
            port,
            mode,
            acks,
            seen,
            task,
        }
    }

    fn set(&self, mode: AtAck) {
        *self.mode.lock().unwrap() = mode;
    }

    fn acks(&self) -> usize {
        self.acks.load(Ordering::SeqCst)
    }

    /// Answers `NO [SERVERBUG]` to every body `FETCH` of `uid`, as Dovecot does for a
    /// message it cannot read (Gmail: "Some messages could not be FETCHed").
    fn refuse_fetch(&self, uid: u32) {
        *self.seen.refuse_fetch.lock().unwrap() = Some(uid);
    }

    fn count(&self, what: fn(&Seen) -> &AtomicUsize) -> usize {
        what(&self.seen).load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Server to client as it comes; client to server line by line, the acknowledging
/// command handled as `mode` says, a body `FETCH` of the refused UID answered NO.
async fn relay(
    client: tokio_rustls::server::TlsStream<TcpStream>,
    server: TcpStream,
    mode: Arc<Mutex<AtAck>>,
    acks: Arc<AtomicUsize>,
    seen: Arc<Seen>,
) {
    let (mut cr, cw) = tokio::io::split(client);
    let cw = Arc::new(tokio::sync::Mutex::new(cw));
    let (mut sr, mut sw) = server.into_split();
    let down_w = Arc::clone(&cw);
    let down = tokio::spawn(async move {
        let mut chunk = [0u8; 16384];
        loop {
            let n = match sr.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if down_w.lock().await.write_all(&chunk[..n]).await.is_err() {
                break;
            }
        }
        let _ = down_w.lock().await.shutdown().await;
    });
    // The proxy's own answer to `line`'s command, in place of the server's.
    let answer = |line: &[u8], words: &str| {
        let tag = line.split(|b| *b == b' ').next().unwrap_or(b"*").to_vec();
        [tag, format!(" {words}\r\n").into_bytes()].concat()
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut held = false;
    'read: loop {
        let n = match cr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if held {
            continue; // swallowed until the gateway goes away
        }
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            let line: Vec<u8> = buf.drain(..end + 2).collect();
            let upper = String::from_utf8_lossy(&line).to_ascii_uppercase();
            if upper.contains(" UID SEARCH ") {
                seen.searches.fetch_add(1, Ordering::SeqCst);
                if seen.refuse_search.load(Ordering::SeqCst) {
                    let no = answer(&line, "NO [UNAVAILABLE] Temporary failure.");
                    if cw.lock().await.write_all(&no).await.is_err() {
                        break 'read;
                    }
                    continue;
                }
            }
            let refused = *seen.refuse_fetch.lock().unwrap();
            if let Some(uid) = refused {
                if upper.contains(&format!(" UID FETCH {uid} ")) && upper.contains("BODY") {
                    seen.refused_fetches.fetch_add(1, Ordering::SeqCst);
                    let no = answer(&line, "NO [SERVERBUG] Internal error occurred.");
                    if cw.lock().await.write_all(&no).await.is_err() {
                        break 'read;
                    }
                    continue;
                }
            }
            if [" UID STORE ", " UID MOVE ", " UID COPY "]
                .iter()
                .any(|c| upper.contains(c))
            {
                acks.fetch_add(1, Ordering::SeqCst);
                let now = *mode.lock().unwrap();
                match now {
                    AtAck::Forward => {}
                    AtAck::Cut(n) => {
                        *mode.lock().unwrap() = if n > 1 {
                            AtAck::Cut(n - 1)
                        } else {
                            AtAck::Forward
                        };
                        break 'read;
                    }
                    AtAck::Hold => {
                        held = true;
                        continue 'read;
                    }
                    AtAck::Swallow => {
                        let ok = answer(&line, "OK Store completed.");
                        if cw.lock().await.write_all(&ok).await.is_err() {
                            break 'read;
                        }
                        continue;
                    }
                }
            }
            if sw.write_all(&line).await.is_err() {
                break 'read;
            }
        }
    }
    down.abort();
}

/// The `mail` source reading `port` (Dovecot's imaps, or the proxy's).
fn mail_source(dovecot: &Dovecot, port: u16, password: &str, extra: &str) -> String {
    format!(
        "[[source]]\nname = \"{SOURCE}\"\npreset = \"imap\"\n[source.pull]\n\
         url = \"imaps://localhost:{port}\"\nusername = \"{USER}\"\npassword = \"{password}\"\n\
         ca_file = \"{}\"\nevery = \"100ms\"\nbatch = 10\ntimeout = \"5s\"\n{extra}",
        dovecot.ca_file.display()
    )
}

/// A message as a mail server stores it.
fn message(message_id: Option<&str>, from: &str, subject: &str, body: &str) -> Vec<u8> {
    let id = message_id
        .map(|m| format!("Message-ID: <{m}>\r\n"))
        .unwrap_or_default();
    format!(
        "Return-Path: <bounce@example.ru>\r\nFrom: {from}\r\nTo: leads@example.ru\r\n\
         Subject: {subject}\r\nDate: {date}\r\n{id}\
         MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Transfer-Encoding: 8bit\r\n\r\n{body}\r\n",
        date = chrono::Utc::now().to_rfc2822()
    )
    .into_bytes()
}

/// A web form's notification in windows-1251, quoted-printable, the phone in the
/// subject ("Заявка +7 912 000-33-44") and the text "Перезвоните" in the body.
fn cp1251_message(message_id: &str) -> Vec<u8> {
    format!(
        "From: =?windows-1251?B?zuv84+A=?= <olga@example.ru>\r\n\
         Subject: =?windows-1251?B?x+D/4urg?= +7 912 000-33-44\r\n\
         Date: {date}\r\nMessage-ID: <{message_id}>\r\n\
         MIME-Version: 1.0\r\nContent-Type: text/plain; charset=windows-1251\r\n\
         Content-Transfer-Encoding: quoted-printable\r\n\r\n\
         =CF=E5=F0=E5=E7=E2=EE=ED=E8=F2=E5\r\n",
        date = chrono::Utc::now().to_rfc2822()
    )
    .into_bytes()
}

/// The key of a message without `Message-ID`: a hash of what identifies the submission
/// (src/pull/imap.rs `payload`).
fn hash_key(raw: &[u8]) -> String {
    let p = leadgate::pull::imap::payload(SOURCE, raw, Default::default());
    let key = p["message_id"].as_str().unwrap().to_owned();
    assert!(key.starts_with("sha256:"), "{key}");
    format!("{SOURCE}:{key}")
}

/// `(new, duplicate)` deliveries journaled for the mail source.
async fn journaled(store: &dyn leadgate::store::Store) -> (i64, i64) {
    let m = store
        .metrics(leadgate::store::local_now(), Duration::from_secs(60))
        .await
        .unwrap();
    let n = |outcome: &str| {
        m.deliveries
            .get(&(SOURCE.to_owned(), outcome.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    (n("new"), n("duplicate"))
}

/// Deliveries of the mail source journaled as rejected.
async fn rejected(store: &dyn leadgate::store::Store) -> i64 {
    let m = store
        .metrics(leadgate::store::local_now(), Duration::from_secs(60))
        .await
        .unwrap();
    m.deliveries
        .get(&(SOURCE.to_owned(), "rejected".to_owned()))
        .copied()
        .unwrap_or(0)
}

/// The reasons of the mail source's rejected deliveries.
async fn rejections(db: &leadgate_testkit::TestDb) -> Vec<String> {
    db.texts("select reject_reason from deliveries where source = 'mail' and outcome = 'rejected' order by id")
        .await
}

async fn until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (20 s at most) until `(new, duplicate)` is `want`.
async fn wait_journaled(store: &dyn leadgate::store::Store, want: (i64, i64)) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = journaled(store).await;
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "journaled {got:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The raw bodies and content types journaled for the mail source, oldest first.
async fn journal(db: &leadgate_testkit::TestDb) -> Vec<(Vec<u8>, String)> {
    use leadgate_testkit::Backend;
    let sql = "select raw_body, content_type from deliveries where source = 'mail' order by id";
    match db.backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
            sqlx::query_as(sql).fetch_all(&pool).await.unwrap()
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            sqlx::query_as(sql).fetch_all(&pool).await.unwrap()
        }
    }
}

each_backend!(
    imap_messages_become_one_lead_each_and_are_marked_seen_once_recorded,
    |db| async move {
        let dovecot = Dovecot::start(true).await;
        let first = message(
            Some("form-1@site.example"),
            "Ivan Petrov <ivan@example.ru>",
            "Заявка с сайта",
            "Здравствуйте! Перезвоните мне: 8 (912) 000-11-22.\r\nИван",
        );
        let second = cp1251_message("form-2@site.example");
        let anonymous = message(None, "nobody@example.ru", "без Message-ID", "текст");
        for raw in [&first, &second, &anonymous] {
            dovecot.deliver(raw).await;
        }
        // The same message delivered twice (two aliases, one mailbox): one lead.
        dovecot.deliver(&first).await;
        let gw =
            Gateway::start_extended(&db, &mail_source(&dovecot, dovecot.imaps, PASSWORD, "")).await;
        dovecot.wait_counts("INBOX", (4, 0)).await;
        let keys = [
            format!("{SOURCE}:form-1@site.example"),
            format!("{SOURCE}:form-2@site.example"),
            hash_key(&anonymous),
        ];
        for k in &keys {
            gw.wait_status(k, "completed").await;
        }
        // Another message under a known Message-ID: a conflict for a person, not a lead.
        let conflicting = message(
            Some("form-1@site.example"),
            "Someone Else <else@example.ru>",
            "Другое",
            "другой текст",
        );
        dovecot.deliver(&conflicting).await;
        dovecot.wait_counts("INBOX", (5, 0)).await;
        gw.wait_for(&keys[0], "the conflict case", |o| {
            o["open_cases"][0]["reason"] == "payload_conflict"
        })
        .await;
        let store = gw.store();
        assert_eq!(journaled(store.as_ref()).await, (3, 1));
        let mut origins = origin_ids(&gw.fake);
        origins.sort();
        let mut expected = keys.to_vec();
        expected.sort();
        assert_eq!(origins, expected, "one CRM lead per message");
        assert_eq!(gw.fake.calls(CREATE), 3);
        // Sender, phone and text mapped from the message; charsets decoded.
        let op = |k: &str| {
            let store = gw.store();
            let k = k.to_owned();
            async move { store.operation(&k.parse().unwrap()).await.unwrap().unwrap() }
        };
        let o = op(&keys[0]).await;
        assert_eq!(o.contact.phone.as_deref(), Some("+79120001122"));
        assert_eq!(o.contact.email.as_deref(), Some("ivan@example.ru"));
        let p = o.payload.unwrap();
        assert_eq!(p["name"], "Ivan Petrov");
        assert_eq!(p["subject"], "Заявка с сайта");
        assert!(p["comment"]
            .as_str()
            .unwrap()
            .starts_with("Заявка с сайта\n\nЗдравствуйте!"));
        // The event time is the message's Date (an old one would go to review).
        let age = chrono::Utc::now() - o.event_time.expect("the Date header");
        assert!(age.num_seconds().abs() < 300, "{age}");
        let o = op(&keys[1]).await;
        assert_eq!(o.contact.phone.as_deref(), Some("+79120003344"));
        let p = o.payload.unwrap();
        assert_eq!(p["name"], "Ольга");
        assert_eq!(p["text"], "Перезвоните");
        let created = gw.fake.entities();
        let olga = created
            .iter()
            .find(|e| e.fields["ORIGIN_ID"] == keys[1].as_str())
            .unwrap();
        assert_eq!(olga.fields["NAME"], "Ольга");
        // The journal holds each message as it was read: raw RFC 822.
        let rows = journal(&db).await;
        assert_eq!(rows.len(), 5);
        assert!(rows.iter().all(|(_, ct)| ct == "message/rfc822"));
        let bodies: Vec<&Vec<u8>> = rows.iter().map(|(b, _)| b).collect();
        for raw in [&first, &second, &anonymous, &conflicting] {
            assert!(bodies.contains(&raw), "journaled raw");
        }
        // The conflicting message waits for a person; the console's source filter and the
        // metrics name the source like any other (both read it from the journal).
        let console = leadgate_console_model::Console::open(&db.url)
            .await
            .unwrap();
        let conflicts = console
            .queue(
                leadgate_console_model::Tab::PayloadConflict,
                leadgate_console_model::QueueQuery {
                    source: Some(SOURCE.into()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(conflicts.rows.len(), 1);
        assert_eq!(conflicts.rows[0].source, SOURCE);
        let text = gw
            .get("/metrics")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let m = crate::metrics::samples(&text);
        let get = |k: &str| {
            m.get(k)
                .copied()
                .unwrap_or_else(|| panic!("{k} in\n{text}"))
        };
        assert_eq!(
            get("leadgate_deliveries_total{outcome=new,source=mail}"),
            3.0
        );
        assert_eq!(
            get("leadgate_deliveries_total{outcome=duplicate,source=mail}"),
            1.0
        );
        assert_eq!(
            get("leadgate_deliveries_total{outcome=conflict,source=mail}"),
            1.0
        );
        // A later message is read on the next poll.
        let later = message(
            Some("form-3@site.example"),
            "a@example.ru",
            "ещё",
            "+7 912 000-55-66",
        );
        dovecot.deliver(&later).await;
        gw.wait_status(&format!("{SOURCE}:form-3@site.example"), "completed")
            .await;
        dovecot.wait_counts("INBOX", (6, 0)).await;
        assert_eq!(gw.fake.calls(CREATE), 4);
        // The intake URL of a pulled source takes nothing.
        let res = gw
            .http
            .post(gw.intake_url(SOURCE))
            .json(&serde_json::json!({"message_id": "x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 401);
        gw.stop().await;
    }
);

each_backend!(
    imap_messages_whose_move_failed_are_read_again_and_absorbed,
    |db| async move {
        let dovecot = Dovecot::start(true).await;
        let done = "&BBcEMARPBDIEOgQ4-"; // "Заявки" in modified UTF-7
        dovecot.create(done).await;
        // The first UID MOVE loses its connection: the messages stay in INBOX, unmarked.
        let proxy = Proxy::start(&dovecot, AtAck::Cut(1)).await;
        let raws: Vec<Vec<u8>> = (1..=3)
            .map(|n| {
                message(
                    Some(&format!("move-{n}@site.example")),
                    "client@example.ru",
                    "заявка",
                    &format!("+7 912 000-00-0{n}"),
                )
            })
            .collect();
        for raw in &raws {
            dovecot.deliver(raw).await;
        }
        let gw = Gateway::start_extended(
            &db,
            &mail_source(&dovecot, proxy.port, PASSWORD, "move_to = \"Заявки\"\n"),
        )
        .await;
        dovecot.wait_counts(done, (3, 3)).await;
        dovecot.wait_counts("INBOX", (0, 0)).await;
        assert_eq!(proxy.acks(), 2, "one cut, one done");
        let store = gw.store();
        wait_journaled(store.as_ref(), (3, 3)).await;
        for n in 1..=3 {
            gw.wait_status(&format!("{SOURCE}:move-{n}@site.example"), "completed")
                .await;
        }
        assert_eq!(gw.fake.calls(CREATE), 3, "re-read, absorbed");
        gw.stop().await;
    }
);

each_backend!(
    imap_without_move_copies_flags_deleted_and_expunges,
    |db| async move {
        let dovecot = Dovecot::start(false).await;
        dovecot.create("Recorded").await;
        let raws: Vec<Vec<u8>> = (1..=2)
            .map(|n| message(Some(&format!("copy-{n}@x")), "c@example.ru", "s", "t"))
            .collect();
        for raw in &raws {
            dovecot.deliver(raw).await;
        }
        let gw = Gateway::start_extended(
            &db,
            &mail_source(
                &dovecot,
                dovecot.imaps,
                PASSWORD,
                "move_to = \"Recorded\"\n",
            ),
        )
        .await;
        dovecot.wait_counts("Recorded", (2, 2)).await;
        dovecot.wait_counts("INBOX", (0, 0)).await;
        for n in 1..=2 {
            gw.wait_status(&format!("{SOURCE}:copy-{n}@x"), "completed")
                .await;
        }
        assert_eq!(journaled(gw.store().as_ref()).await, (2, 0));
        gw.stop().await;
    }
);

each_backend!(
    imap_gateway_killed_between_recorded_and_seen_loses_and_doubles_nothing,
    |db| async move {
        let dovecot = Dovecot::start(true).await;
        let proxy = Proxy::start(&dovecot, AtAck::Hold).await;
        let raws: Vec<Vec<u8>> = (1..=3)
            .map(|n| {
                message(
                    (n != 3)
                        .then(|| format!("kill-{n}@site.example"))
                        .as_deref(),
                    "client@example.ru",
                    "заявка",
                    &format!("+7 912 000-00-1{n}"),
                )
            })
            .collect();
        for raw in &raws {
            dovecot.deliver(raw).await;
        }
        let keys = [
            format!("{SOURCE}:kill-1@site.example"),
            format!("{SOURCE}:kill-2@site.example"),
            hash_key(&raws[2]),
        ];
        let fake = FakeBitrix24::spawn("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        let mut toml = GatewayFile {
            db_url: &db.url,
            webhook_url: &fake.webhook_url(),
            port,
            lease: "4s",
            concurrency: None,
            retry: None,
            read_token: None,
            site: SiteAuth::Token("site-token"),
            crm_timeout: "3s",
            settle: None,
        }
        .toml();
        toml += &mail_source(&dovecot, proxy.port, "env:TEST_IMAP_PASSWORD", "");
        let config = dir.path().join("leadgate.toml");
        std::fs::write(&config, toml).unwrap();
        let config = config.display().to_string();
        let serve = |password: Option<&str>, log: &Path| {
            let mut cmd = crate::process::leadgate(&["serve", "--config", &config]);
            // Everything a developer may ask for (the kit's `warn` overridden): async-imap
            // logs each command (`LOGIN "user" "password"`) and answer at trace level.
            cmd.env("RUST_LOG", "trace")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(log).unwrap());
            if let Some(p) = password {
                cmd.env("TEST_IMAP_PASSWORD", p);
            }
            cmd.spawn().expect("spawn leadgate serve")
        };
        let log = |name: &str| dir.path().join(name);
        let read = |name: &str| std::fs::read_to_string(log(name)).unwrap_or_default();

        // Without its password the source refuses to start, naming it and the variable.
        let status = serve(None, &log("none.log")).wait().unwrap();
        assert!(!status.success());
        let err = read("none.log");
        assert!(
            err.contains("TEST_IMAP_PASSWORD") && err.contains("`mail`"),
            "{err}"
        );

        // A wrong password: the gateway runs, says why nothing is read, reads nothing.
        let mut wrong = Process(serve(Some("not-the-password"), &log("wrong.log")));
        wait_healthy(&base, Duration::from_secs(20), None).await;
        until(
            "the refused login is logged",
            Duration::from_secs(15),
            || read("wrong.log").contains("refused the login"),
        )
        .await;
        wrong.kill();
        let err = read("wrong.log");
        assert!(
            err.contains("check pull.username and pull.password"),
            "{err}"
        );
        assert!(
            !err.contains("not-the-password"),
            "no password in the log: {err}"
        );
        let store = db.store().await;
        assert_eq!(journaled(store.as_ref()).await, (0, 0));
        assert_eq!(dovecot.counts("INBOX").await, (3, 3));

        // The right one: recorded, then SIGKILL while the \Seen flag is held back.
        let mut first = Process(serve(Some(PASSWORD), &log("first.log")));
        wait_healthy(&base, Duration::from_secs(20), None).await;
        until("the gateway sets \\Seen", Duration::from_secs(15), || {
            proxy.acks() >= 1
        })
        .await;
        assert_eq!(journaled(store.as_ref()).await, (3, 0), "recorded first");
        first.kill();
        assert_eq!(dovecot.counts("INBOX").await, (3, 3), "never marked");
        // Traced, and still neither the password nor a message in the log.
        let traced = read("first.log");
        assert!(traced.contains("TRACE"), "RUST_LOG=trace took effect");
        assert!(!traced.contains(PASSWORD), "no password in the log");
        assert!(!traced.contains("LOGIN"), "no IMAP command in the log");
        assert!(
            !traced.contains("000-00-11"),
            "no message content in the log"
        );

        proxy.set(AtAck::Forward);
        let _second = Process(serve(Some(PASSWORD), &log("second.log")));
        wait_healthy(&base, Duration::from_secs(20), None).await;
        dovecot.wait_counts("INBOX", (3, 0)).await;
        for k in &keys {
            let id: leadgate::domain::OperationId = k.parse().unwrap();
            // The killed gateway's leases (4 s) run out first; generous for a busy machine.
            let deadline = Instant::now() + Duration::from_secs(60);
            while store
                .operation(&id)
                .await
                .unwrap()
                .is_none_or(|o| o.status.as_str() != "completed")
            {
                assert!(Instant::now() < deadline, "{k} never completed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        assert_eq!(
            journaled(store.as_ref()).await,
            (3, 3),
            "re-read, absorbed by the keys"
        );
        let mut origins = origin_ids(&fake);
        origins.sort();
        let mut expected = keys.to_vec();
        expected.sort();
        assert_eq!(origins, expected, "no loss, no duplicate");
        assert_eq!(fake.calls(CREATE), 3);
    }
);

each_backend!(
    imap_a_server_whose_certificate_is_not_trusted_gets_no_login,
    |db| async move {
        let dovecot = Dovecot::start(true).await;
        dovecot
            .deliver(&message(Some("tls@x"), "c@example.ru", "s", "t"))
            .await;
        // The test's CA is not among the public roots, and no ca_file names it.
        let source = mail_source(&dovecot, dovecot.imaps, PASSWORD, "").replace(
            &format!("ca_file = \"{}\"\n", dovecot.ca_file.display()),
            "",
        );
        assert!(!source.contains("ca_file"));
        let gw = Gateway::start_extended(&db, &source).await;
        // The gateway ends each handshake itself, refusing the certificate (Dovecot logs
        // the alert it got); the readiness probe's bare connection is the one without.
        let refused = |log: &str| {
            log.lines()
                .filter(|l| l.contains("TLS handshaking") && l.contains("unknown ca"))
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while refused(&dovecot.log()) < 2 {
            assert!(
                Instant::now() < deadline,
                "no refused handshake: {}",
                dovecot.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // No login over TLS (the test's own delivery logs in over the plain listener).
        let log = dovecot.log();
        assert!(
            !log.lines()
                .any(|l| l.contains("Login: user=<leads>") && l.contains(", TLS,")),
            "{log}"
        );
        assert_eq!(journaled(gw.store().as_ref()).await, (0, 0));
        assert_eq!(dovecot.counts("INBOX").await, (1, 1));
        gw.stop().await;
    }
);

each_backend!(
    imap_a_message_the_server_will_not_fetch_is_set_aside_and_the_ones_behind_it_are_read,
    |db| async move {
        let dovecot = Dovecot::start(true).await;
        // UID 1 is answered `NO [SERVERBUG]` whenever its body is fetched.
        let proxy = Proxy::start(&dovecot, AtAck::Forward).await;
        proxy.refuse_fetch(1);
        for n in 1..=3 {
            let raw = message(
                Some(&format!("poison-{n}@site.example")),
                "client@example.ru",
                "заявка",
                &format!("+7 912 000-00-2{n}"),
            );
            dovecot.deliver(&raw).await;
        }
        // A batch of one: the refused message is the whole batch until it is set aside.
        let source =
            mail_source(&dovecot, proxy.port, PASSWORD, "").replace("batch = 10\n", "batch = 1\n");
        let gw = Gateway::start_extended(&db, &source).await;
        for n in 2..=3 {
            gw.wait_status(&format!("{SOURCE}:poison-{n}@site.example"), "completed")
                .await;
        }
        // Read three times, then set aside, journaled as rejected for a person to see; it
        // stays unread in the mailbox.
        let store = gw.store();
        let deadline = Instant::now() + Duration::from_secs(15);
        while rejected(store.as_ref()).await < 1 {
            assert!(
                Instant::now() < deadline,
                "the refused message was never journaled"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        dovecot.wait_counts("INBOX", (3, 1)).await;
        let reasons = rejections(&db).await;
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        assert!(
            reasons[0].contains("UID 1") && reasons[0].contains("SERVERBUG"),
            "{reasons:?}"
        );
        assert_eq!(journaled(store.as_ref()).await, (2, 0));
        let poisoned: leadgate::domain::OperationId =
            format!("{SOURCE}:poison-1@site.example").parse().unwrap();
        assert!(store.operation(&poisoned).await.unwrap().is_none());
        // No hot loop: no more fetches of it, a poll every `every` (100 ms) at most, and
        // the refusal did not cost the session.
        let (fetches, searches) = (
            proxy.count(|s| &s.refused_fetches),
            proxy.count(|s| &s.searches),
        );
        assert_eq!(fetches, 3, "three tries");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(proxy.count(|s| &s.refused_fetches), 3, "set aside");
        let polls = proxy.count(|s| &s.searches) - searches;
        assert!((3..=14).contains(&polls), "{polls} polls in a second");
        assert_eq!(proxy.count(|s| &s.connections), 1, "one session");
        assert_eq!(gw.fake.calls(CREATE), 2);
        gw.stop().await;
    }
);

each_backend!(
    imap_a_seen_flag_the_server_acknowledges_but_does_not_set_is_noticed_and_set_aside,
    |db| async move {
        let dovecot = Dovecot::start(true).await;
        // Every STORE is answered OK and never reaches Dovecot (a login without the
        // right to set flags gets the same from a server: RFC 4314).
        let proxy = Proxy::start(&dovecot, AtAck::Swallow).await;
        let raw = message(
            Some("acl-1@site.example"),
            "c@example.ru",
            "заявка",
            "текст",
        );
        dovecot.deliver(&raw).await;
        let gw =
            Gateway::start_extended(&db, &mail_source(&dovecot, proxy.port, PASSWORD, "")).await;
        gw.wait_status(&format!("{SOURCE}:acl-1@site.example"), "completed")
            .await;
        let store = gw.store();
        // Read, recorded and "acknowledged" three times, then set aside: not re-journaled
        // every poll for ever.
        wait_journaled(store.as_ref(), (1, 2)).await;
        until("three acknowledgements", Duration::from_secs(15), || {
            proxy.acks() >= 3
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(proxy.acks(), 3);
        assert_eq!(journaled(store.as_ref()).await, (1, 2));
        assert_eq!(dovecot.counts("INBOX").await, (1, 1), "never marked");
        assert_eq!(proxy.count(|s| &s.connections), 1, "one session");
        assert_eq!(gw.fake.calls(CREATE), 1);
        gw.stop().await;
    }
);

each_backend!(
    imap_a_message_without_message_id_through_two_aliases_is_one_lead,
    |db| async move {
        let dovecot = Dovecot::start(true).await;
        let body = message(None, "Ivan <ivan@example.ru>", "заявка", "+7 912 000-77-88");
        // The same submission, delivered to two aliases of the mailbox: other
        // transport headers, the same sender, date, subject and text.
        let via = |alias: &str, hop: &str| {
            [
                format!(
                    "Delivered-To: {alias}@example.ru\r\nReceived: from {hop}.example.ru \
                     by imap.example.ru; {}\r\n",
                    chrono::Utc::now().to_rfc2822()
                )
                .into_bytes(),
                body.clone(),
            ]
            .concat()
        };
        let (one, two) = (via("leads", "mx1"), via("sales", "mx2"));
        assert_ne!(one, two);
        dovecot.deliver(&one).await;
        dovecot.deliver(&two).await;
        let gw =
            Gateway::start_extended(&db, &mail_source(&dovecot, dovecot.imaps, PASSWORD, "")).await;
        let key = hash_key(&one);
        assert_eq!(key, hash_key(&two));
        dovecot.wait_counts("INBOX", (2, 0)).await;
        gw.wait_status(&key, "completed").await;
        let store = gw.store();
        wait_journaled(store.as_ref(), (1, 1)).await;
        assert_eq!(origin_ids(&gw.fake), vec![key.clone()]);
        assert_eq!(gw.fake.calls(CREATE), 1, "one lead");
        gw.stop().await;
    }
);

each_backend!(
    imap_a_message_over_max_message_size_is_rejected_unread_and_acknowledged,
    |db| async move {
        let dovecot = Dovecot::start(true).await;
        let small = message(
            Some("small@x"),
            "c@example.ru",
            "заявка",
            "+7 912 000-44-55",
        );
        let big = message(
            Some("big@x"),
            "c@example.ru",
            "вложение",
            &"x".repeat(20_000),
        );
        let after = message(Some("after@x"), "c@example.ru", "ещё", "+7 912 000-44-56");
        for raw in [&small, &big, &after] {
            dovecot.deliver(raw).await;
        }
        let proxy = Proxy::start(&dovecot, AtAck::Forward).await;
        let gw = Gateway::start_extended(
            &db,
            &mail_source(&dovecot, proxy.port, PASSWORD, "max_message_size = 8000\n"),
        )
        .await;
        for k in ["small@x", "after@x"] {
            gw.wait_status(&format!("{SOURCE}:{k}"), "completed").await;
        }
        // Acknowledged (it would otherwise be refused again at every poll) and left in
        // the mailbox; journaled as rejected with its size, without its content.
        dovecot.wait_counts("INBOX", (3, 0)).await;
        let reasons = rejections(&db).await;
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        assert!(
            reasons[0].contains("pull.max_message_size") && reasons[0].contains("8000 bytes"),
            "{reasons:?}"
        );
        let rows = journal(&db).await;
        assert_eq!(rows.len(), 3);
        assert!(
            rows.iter().all(|(b, _)| b.len() < 8000),
            "the big one unread"
        );
        assert_eq!(journaled(gw.store().as_ref()).await, (2, 0));
        assert_eq!(gw.fake.calls(CREATE), 2);
        gw.stop().await;
    }
);

each_backend!(
    imap_polls_that_fail_back_off_instead_of_retrying_every_poll,
    |db| async move {
        let dovecot = Dovecot::start(true).await;
        let proxy = Proxy::start(&dovecot, AtAck::Forward).await;
        proxy.seen.refuse_search.store(true, Ordering::SeqCst);
        let raw = message(
            Some("later@x"),
            "c@example.ru",
            "заявка",
            "+7 912 000-99-00",
        );
        dovecot.deliver(&raw).await;
        let gw =
            Gateway::start_extended(&db, &mail_source(&dovecot, proxy.port, PASSWORD, "")).await;
        until("the first poll", Duration::from_secs(15), || {
            proxy.count(|s| &s.searches) >= 1
        })
        .await;
        // every = 100 ms: without a backoff some 20 polls in 2 s; doubling, 100 + 200 +
        // 400 + 800 ms: 5.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let polls = proxy.count(|s| &s.searches);
        assert!((3..=6).contains(&polls), "{polls} failed polls in 2 s");
        assert_eq!(proxy.count(|s| &s.connections), 1, "the session kept");
        // The server recovers: the message is read at the next poll.
        proxy.seen.refuse_search.store(false, Ordering::SeqCst);
        gw.wait_status(&format!("{SOURCE}:later@x"), "completed")
            .await;
        dovecot.wait_counts("INBOX", (1, 0)).await;
        assert_eq!(gw.fake.calls(CREATE), 1);
        gw.stop().await;
    }
);
