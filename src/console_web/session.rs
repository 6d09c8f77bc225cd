//! The web console's sessions: who signed in, their own database connection, and when
//! the session ends. Sessions live in this process's memory only: a restart signs
//! everyone out, and nothing of a session (least of all a password) is written anywhere.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use leadgate_console_model::Console;
use rand::RngCore;

/// The session cookie's name.
pub const COOKIE: &str = "leadgate_session";

/// A random token: 32 bytes from the OS's generator, URL-safe base64.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// One signed-in person.
pub struct Session<C = Console> {
    /// The person's own connection: every call runs under it.
    pub console: Arc<C>,
    /// Sent back as `X-CSRF-Token` on every call.
    pub csrf: String,
    pub login: String,
    started: Instant,
    last_used: Instant,
}

/// Every open session, by id.
pub struct Sessions<C = Console> {
    open: Mutex<HashMap<String, Session<C>>>,
    idle: Duration,
    absolute: Duration,
}

impl<C> Sessions<C> {
    pub fn new(idle: Duration, absolute: Duration) -> Sessions<C> {
        Sessions {
            open: Mutex::new(HashMap::new()),
            idle,
            absolute,
        }
    }

    /// Opens a session for `login` on `console`; answers its id and CSRF token. The id
    /// is new at every sign-in, so an id planted before sign-in is worth nothing.
    pub fn open(&self, login: &str, console: C) -> (String, String) {
        let (id, csrf) = (random_token(), random_token());
        let now = Instant::now();
        self.lock().insert(
            id.clone(),
            Session {
                console: Arc::new(console),
                csrf: csrf.clone(),
                login: login.to_owned(),
                started: now,
                last_used: now,
            },
        );
        (id, csrf)
    }

    /// The session `id` as of now, its idle clock restarted; `None` when there is none or
    /// it has timed out (then it is ended).
    pub fn touch(&self, id: &str) -> Option<(Arc<C>, String)> {
        let mut open = self.lock();
        let now = Instant::now();
        let s = open.get_mut(id)?;
        if now.duration_since(s.last_used) > self.idle
            || now.duration_since(s.started) > self.absolute
        {
            open.remove(id);
            return None;
        }
        s.last_used = now;
        Some((Arc::clone(&s.console), s.csrf.clone()))
    }

    /// Whether the session `id` is open and within its timeouts (its clock untouched).
    pub fn alive(&self, id: &str) -> bool {
        let now = Instant::now();
        self.lock().get(id).is_some_and(|s| {
            now.duration_since(s.last_used) <= self.idle
                && now.duration_since(s.started) <= self.absolute
        })
    }

    /// Ends the session `id`; its database connection closes when its last call ends.
    pub fn close(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }

    /// Ends every session of `login` (a person removed) and every timed-out one.
    pub fn sweep(&self, removed: impl Fn(&str) -> bool) -> usize {
        let now = Instant::now();
        let mut open = self.lock();
        let before = open.len();
        open.retain(|_, s| {
            now.duration_since(s.last_used) <= self.idle
                && now.duration_since(s.started) <= self.absolute
                && !removed(&s.login)
        });
        before - open.len()
    }

    /// The logins signed in now (one entry per session).
    pub fn logins(&self) -> Vec<String> {
        self.lock().values().map(|s| s.login.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session<C>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Failed sign-ins, per login and per client address: after [`LOCK_AFTER`] failures
/// within [`LOCK_FOR`], that login (or address) is refused until [`LOCK_FOR`] has passed
/// since the last failure, whatever the password.
pub struct Lockout {
    failures: Mutex<HashMap<String, (u32, Instant)>>,
}

pub const LOCK_AFTER: u32 = 5;
pub const LOCK_FOR: Duration = Duration::from_secs(15 * 60);

impl Lockout {
    pub fn new() -> Lockout {
        Lockout {
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn keys(login: &str, addr: IpAddr) -> [String; 2] {
        [format!("login:{login}"), format!("addr:{addr}")]
    }

    /// Failures so far for this login or address (the larger), forgetting old ones.
    pub fn failures(&self, login: &str, addr: IpAddr) -> u32 {
        let mut f = self.lock();
        let now = Instant::now();
        f.retain(|_, (_, last)| now.duration_since(*last) < LOCK_FOR);
        Self::keys(login, addr)
            .iter()
            .filter_map(|k| f.get(k).map(|(n, _)| *n))
            .max()
            .unwrap_or(0)
    }

    pub fn locked(&self, login: &str, addr: IpAddr) -> bool {
        self.failures(login, addr) >= LOCK_AFTER
    }

    pub fn failed(&self, login: &str, addr: IpAddr) {
        let now = Instant::now();
        let mut f = self.lock();
        for k in Self::keys(login, addr) {
            let e = f.entry(k).or_insert((0, now));
            e.0 += 1;
            e.1 = now;
        }
    }

    /// A success forgets the login's failures (the address's stay: one address trying
    /// many logins is still slowed down).
    pub fn succeeded(&self, login: &str) {
        self.lock().remove(&format!("login:{login}"));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u32, Instant)>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Default for Lockout {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_and_never_repeat() {
        let a: std::collections::HashSet<String> = (0..1000).map(|_| random_token()).collect();
        assert_eq!(a.len(), 1000);
        assert!(a.iter().all(|t| t.len() == 43));
    }

    #[test]
    fn an_idle_session_ends() {
        let s: Sessions<()> = Sessions::new(Duration::from_millis(100), Duration::from_secs(60));
        let (id, csrf) = s.open("anna", ());
        assert_ne!(id, csrf);
        std::thread::sleep(Duration::from_millis(300));
        assert!(!s.alive(&id));
        assert!(s.touch(&id).is_none());
        assert!(
            s.is_empty(),
            "a timed-out session is ended when it is touched"
        );
    }

    #[test]
    fn a_used_session_still_ends_at_its_absolute_timeout() {
        let absolute = Duration::from_millis(600);
        let s: Sessions<()> = Sessions::new(Duration::from_secs(60), absolute);
        let (id, _) = s.open("anna", ());
        let started = Instant::now();
        let mut touches = 0;
        while s.touch(&id).is_some() {
            touches += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            started.elapsed() >= absolute,
            "ended early: {:?}",
            started.elapsed()
        );
        assert!(touches >= 2);
    }

    #[test]
    fn a_sweep_ends_the_sessions_of_a_removed_login_only() {
        let s: Sessions<()> = Sessions::new(Duration::from_secs(60), Duration::from_secs(60));
        let (a1, _) = s.open("anna", ());
        let (a2, _) = s.open("anna", ());
        let (b, _) = s.open("boris", ());
        assert_eq!(s.sweep(|login| login == "anna"), 2);
        assert!(s.touch(&a1).is_none() && s.touch(&a2).is_none());
        assert!(s.touch(&b).is_some());
        assert_eq!(s.logins(), ["boris"]);
        assert!(s.close(&b) && !s.close(&b));
    }

    #[test]
    fn a_login_or_an_address_is_locked_after_repeated_failures() {
        let l = Lockout::new();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..LOCK_AFTER - 1 {
            l.failed("anna", a);
        }
        assert!(!l.locked("anna", a));
        l.failed("anna", a);
        assert!(l.locked("anna", a), "the login from its address");
        assert!(l.locked("anna", b), "the login from anywhere");
        assert!(l.locked("boris", a), "any login from the address");
        assert!(!l.locked("boris", b));
        l.succeeded("anna");
        assert!(l.locked("anna", a), "the address stays locked");
        assert!(!l.locked("anna", b));
    }
}
