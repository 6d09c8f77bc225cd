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

/// The session cookie's name over plain HTTP (loopback only).
pub const COOKIE: &str = "leadgate_session";

/// Its name over HTTPS: with the `__Host-` prefix a browser takes the cookie only when it
/// is `Secure`, for the whole site (`Path=/`) and set by this host alone (no `Domain`),
/// so a sibling subdomain cannot plant one. Over HTTPS only this name is read.
pub const SECURE_COOKIE: &str = "__Host-leadgate_session";

/// The session cookie's name, over HTTPS or not.
pub fn cookie_name(https: bool) -> &'static str {
    if https {
        SECURE_COOKIE
    } else {
        COOKIE
    }
}

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

/// Open sessions of one login at most: a new sign-in beyond it ends the oldest (each
/// holds a database connection on PostgreSQL).
pub const SESSIONS_PER_LOGIN: usize = 3;
/// Open sessions at most, everyone's together: a sign-in beyond it is refused.
pub const SESSIONS_AT_MOST: usize = 500;

impl<C> Sessions<C> {
    pub fn new(idle: Duration, absolute: Duration) -> Sessions<C> {
        Sessions {
            open: Mutex::new(HashMap::new()),
            idle,
            absolute,
        }
    }

    /// Opens a session for `login` on `console`; answers its id and CSRF token, or `None`
    /// when [`SESSIONS_AT_MOST`] are open. The id is new at every sign-in, so an id
    /// planted before sign-in is worth nothing; the login's oldest session ends when it
    /// has [`SESSIONS_PER_LOGIN`].
    pub fn open(&self, login: &str, console: C) -> Option<(String, String)> {
        let (id, csrf) = (random_token(), random_token());
        let now = Instant::now();
        let mut open = self.lock();
        let mut mine: Vec<(Instant, String)> = open
            .iter()
            .filter(|(_, s)| s.login == login)
            .map(|(id, s)| (s.started, id.clone()))
            .collect();
        mine.sort();
        while mine.len() >= SESSIONS_PER_LOGIN {
            open.remove(&mine.remove(0).1);
        }
        if open.len() >= SESSIONS_AT_MOST {
            return None;
        }
        open.insert(
            id.clone(),
            Session {
                console: Arc::new(console),
                csrf: csrf.clone(),
                login: login.to_owned(),
                started: now,
                last_used: now,
            },
        );
        Some((id, csrf))
    }

    /// The session `id` as of now, its idle clock restarted when `touch` (a person's
    /// call; the UI's background polling is not); `None` when there is none or it has
    /// timed out (then it is ended).
    pub fn get(&self, id: &str, touch: bool) -> Option<(Arc<C>, String)> {
        let mut open = self.lock();
        let now = Instant::now();
        let s = open.get_mut(id)?;
        if !self.within(s, now) {
            open.remove(id);
            return None;
        }
        if touch {
            s.last_used = now;
        }
        Some((Arc::clone(&s.console), s.csrf.clone()))
    }

    /// Whether `s` is within its idle and absolute timeouts at `now`.
    fn within(&self, s: &Session<C>, now: Instant) -> bool {
        now.duration_since(s.last_used) <= self.idle
            && now.duration_since(s.started) <= self.absolute
    }

    /// Puts `console` in the session `id` (the same person's, showing another tenant);
    /// `false` when the session has ended meanwhile.
    pub fn replace(&self, id: &str, console: C) -> bool {
        match self.lock().get_mut(id) {
            Some(s) => {
                s.console = Arc::new(console);
                true
            }
            None => false,
        }
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
        open.retain(|_, s| self.within(s, now) && !removed(&s.login));
        before - open.len()
    }

    /// The logins signed in now (one entry per session).
    #[cfg(test)]
    fn logins(&self) -> Vec<String> {
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

/// Sign-in attempts that did not succeed, per login and per client address: after
/// [`LOCK_AFTER`] within [`LOCK_FOR`], that login (or address) is refused until
/// [`LOCK_FOR`] has passed since the last one, whatever the password. An attempt counts
/// from the moment it starts ([`Lockout::begin`]), so attempts sent at once cannot all
/// slip in before the first has failed.
pub struct Lockout {
    attempts: Mutex<HashMap<String, (u32, Instant)>>,
}

pub const LOCK_AFTER: u32 = 5;
pub const LOCK_FOR: Duration = Duration::from_secs(15 * 60);

impl Lockout {
    pub fn new() -> Lockout {
        Lockout {
            attempts: Mutex::new(HashMap::new()),
        }
    }

    fn keys(login: &str, addr: IpAddr) -> [String; 2] {
        [format!("login:{login}"), format!("addr:{addr}")]
    }

    /// Counts an attempt of `login` from `addr` and answers how many came before it, or
    /// `None` when either is locked out (nothing counted).
    pub fn begin(&self, login: &str, addr: IpAddr) -> Option<u32> {
        let now = Instant::now();
        let mut a = self.lock();
        a.retain(|_, (_, last)| now.duration_since(*last) < LOCK_FOR);
        let keys = Self::keys(login, addr);
        let before = keys
            .iter()
            .filter_map(|k| a.get(k).map(|(n, _)| *n))
            .max()
            .unwrap_or(0);
        if before >= LOCK_AFTER {
            return None;
        }
        for k in keys {
            let e = a.entry(k).or_insert((0, now));
            e.0 += 1;
            e.1 = now;
        }
        Some(before)
    }

    /// Whether `login` or `addr` is locked out now.
    #[cfg(test)]
    fn locked(&self, login: &str, addr: IpAddr) -> bool {
        let a = self.lock();
        Self::keys(login, addr).iter().any(|k| {
            a.get(k)
                .is_some_and(|(n, last)| *n >= LOCK_AFTER && last.elapsed() < LOCK_FOR)
        })
    }

    /// The attempt succeeded: the login's count is forgotten, and this attempt is taken
    /// off the address's (one address trying many logins is still slowed down).
    pub fn succeeded(&self, login: &str, addr: IpAddr) {
        let mut a = self.lock();
        a.remove(&format!("login:{login}"));
        Self::uncount(&mut a, &format!("addr:{addr}"));
    }

    /// The attempt was no guess (the database could not be asked): it does not count.
    pub fn release(&self, login: &str, addr: IpAddr) {
        let mut a = self.lock();
        for k in Self::keys(login, addr) {
            Self::uncount(&mut a, &k);
        }
    }

    fn uncount(a: &mut HashMap<String, (u32, Instant)>, key: &str) {
        if let Some(e) = a.get_mut(key) {
            e.0 = e.0.saturating_sub(1);
            if e.0 == 0 {
                a.remove(key);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u32, Instant)>> {
        self.attempts.lock().unwrap_or_else(|p| p.into_inner())
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
        let (id, csrf) = s.open("anna", ()).unwrap();
        assert_ne!(id, csrf);
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            s.get(&id, false).is_none(),
            "a look without touching sees it ended"
        );
        assert!(s.get(&id, true).is_none());
        assert!(
            s.is_empty(),
            "a timed-out session is ended when it is touched"
        );
    }

    #[test]
    fn a_used_session_still_ends_at_its_absolute_timeout() {
        let absolute = Duration::from_millis(600);
        let s: Sessions<()> = Sessions::new(Duration::from_secs(60), absolute);
        let (id, _) = s.open("anna", ()).unwrap();
        let started = Instant::now();
        let mut touches = 0;
        while s.get(&id, true).is_some() {
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
        let (a1, _) = s.open("anna", ()).unwrap();
        let (a2, _) = s.open("anna", ()).unwrap();
        let (b, _) = s.open("boris", ()).unwrap();
        assert_eq!(s.sweep(|login| login == "anna"), 2);
        assert!(s.get(&a1, true).is_none() && s.get(&a2, true).is_none());
        assert!(s.get(&b, true).is_some());
        assert_eq!(s.logins(), ["boris"]);
        assert!(s.close(&b) && !s.close(&b));
    }

    #[test]
    fn background_calls_do_not_keep_a_session_alive() {
        let s: Sessions<()> = Sessions::new(Duration::from_millis(300), Duration::from_secs(60));
        let (id, _) = s.open("anna", ()).unwrap();
        let started = Instant::now();
        while s.get(&id, false).is_some() {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[test]
    fn a_login_keeps_its_newest_sessions_only() {
        let s: Sessions<()> = Sessions::new(Duration::from_secs(60), Duration::from_secs(60));
        let ids: Vec<String> = (0..SESSIONS_PER_LOGIN + 2)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(2));
                s.open("anna", ()).unwrap().0
            })
            .collect();
        assert_eq!(s.len(), SESSIONS_PER_LOGIN);
        assert!(s.get(&ids[0], true).is_none() && s.get(&ids[1], true).is_none());
        assert!(ids[2..].iter().all(|id| s.get(id, true).is_some()));
    }

    #[test]
    fn a_login_or_an_address_is_locked_after_repeated_failures() {
        let l = Lockout::new();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for i in 0..LOCK_AFTER - 1 {
            assert_eq!(l.begin("anna", a), Some(i));
        }
        assert!(!l.locked("anna", a));
        // The last attempt allowed succeeds: the login starts afresh, the address keeps
        // the failures it made.
        assert_eq!(l.begin("anna", a), Some(LOCK_AFTER - 1));
        l.succeeded("anna", a);
        assert!(!l.locked("anna", b));
        assert_eq!(
            l.begin("boris", a),
            Some(LOCK_AFTER - 1),
            "the address's failures stay"
        );
        assert!(l.locked("boris", a), "the address, after one more failure");
        assert_eq!(l.begin("carl", a), None, "any login from the address");
        assert_eq!(
            l.begin("boris", b),
            Some(1),
            "boris from elsewhere: his one failure"
        );
        for _ in 0..LOCK_AFTER - 2 {
            assert!(l.begin("boris", b).is_some());
        }
        assert_eq!(
            l.begin("boris", "10.0.0.3".parse().unwrap()),
            None,
            "the login from anywhere"
        );
    }

    #[test]
    fn attempts_sent_at_once_are_counted_before_any_has_failed() {
        let l = Arc::new(Lockout::new());
        let addr: IpAddr = "10.0.0.1".parse().unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(50));
        let let_in: u32 = (0..50)
            .map(|_| {
                let (l, barrier) = (Arc::clone(&l), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    l.begin("anna", addr).is_some() as u32
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum();
        assert_eq!(
            let_in, LOCK_AFTER,
            "exactly as many attempts as the lockout allows"
        );
    }

    #[test]
    fn an_attempt_the_database_could_not_answer_does_not_count() {
        let l = Lockout::new();
        let addr: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..LOCK_AFTER * 2 {
            assert!(l.begin("anna", addr).is_some());
            l.release("anna", addr);
        }
        assert!(!l.locked("anna", addr));
    }
}
