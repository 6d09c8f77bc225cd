//! Control-plane pieces shared by the fake CRM servers: a fault queue, call counters,
//! and a listener whose connections a handler can cut without answering.
//!
//! The fakes exist to reproduce, over real HTTP, the failures that create duplicates:
//! a CRM that executes a create and then loses the answer. Cutting the TCP connection
//! from inside a handler is not something axum offers, hence [`KillableListener`].

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// One queued fault: applied to the next `times` calls of `method` (`*` = any method).
///
/// On the wire: `{"method":"crm.lead.add","fault":"rate_limit","retry_after_secs":2,"times":1}`
/// — the fault's own fields sit next to `method` and `times`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FaultRule<F> {
    pub method: String,
    #[serde(flatten)]
    pub fault: F,
    #[serde(default = "one")]
    pub times: u32,
}

fn one() -> u32 {
    1
}

/// Faults waiting to be applied, plus faults that apply to every matching call, plus
/// faults that strike a call at random (a chaos run).
#[derive(Debug)]
pub struct FaultQueue<F> {
    queued: Mutex<Vec<FaultRule<F>>>,
    always: Vec<(String, F)>,
    random: Vec<RandomFault<F>>,
}

/// A fault that strikes each call of `method` (`*` = any) with `probability`.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomFault<F> {
    pub method: String,
    pub probability: f64,
    pub fault: F,
}

impl<F: Clone> FaultQueue<F> {
    /// `always` faults apply to every call of their method unless a queued fault
    /// applies first.
    pub fn new(always: Vec<(String, F)>) -> Self {
        Self::with_random(always, Vec::new())
    }

    /// As [`FaultQueue::new`], and each call not taken by a queued or `always` fault
    /// draws the `random` ones in order.
    pub fn with_random(always: Vec<(String, F)>, random: Vec<RandomFault<F>>) -> Self {
        FaultQueue {
            queued: Mutex::new(Vec::new()),
            always,
            random,
        }
    }

    pub fn push(&self, rule: FaultRule<F>) {
        if rule.times > 0 {
            lock(&self.queued).push(rule);
        }
    }

    /// Takes the fault for one call of `method`: the oldest matching queued rule (its
    /// count goes down by one), else an `always` fault, else a random one.
    pub fn take(&self, method: &str) -> Option<F> {
        self.take_where(method, |_| true)
    }

    /// As [`FaultQueue::take`], but only faults that `accept` takes part: a queued rule
    /// whose fault it refuses is left in the queue for a later call (Bitrix24's batch
    /// commands take only the faults that concern one command, not the connection).
    pub fn take_where(&self, method: &str, accept: impl Fn(&F) -> bool) -> Option<F> {
        let applies = |m: &str| m == "*" || m == method;
        let mut queued = lock(&self.queued);
        if let Some(i) = queued
            .iter()
            .position(|r| applies(&r.method) && accept(&r.fault))
        {
            let fault = queued[i].fault.clone();
            queued[i].times -= 1;
            if queued[i].times == 0 {
                queued.remove(i);
            }
            return Some(fault);
        }
        drop(queued);
        if let Some((_, f)) = self.always.iter().find(|(m, f)| applies(m) && accept(f)) {
            return Some(f.clone());
        }
        let draw: f64 = rand::random();
        let mut edge = 0.0;
        for r in self
            .random
            .iter()
            .filter(|r| applies(&r.method) && accept(&r.fault))
        {
            edge += r.probability;
            if draw < edge {
                return Some(r.fault.clone());
            }
        }
        None
    }

    pub fn pending(&self) -> Vec<FaultRule<F>> {
        lock(&self.queued).clone()
    }

    /// Queues every rule of a control request (`POST /_fake/faults`) and answers what
    /// each fake's control API answers: how many were queued and what is pending now.
    pub fn push_all(&self, rules: Vec<FaultRule<F>>) -> serde_json::Value
    where
        F: serde::Serialize,
    {
        let queued = rules.len();
        for rule in rules {
            self.push(rule);
        }
        serde_json::json!({"queued": queued, "pending": self.pending()})
    }

    /// Drops the queued faults; the `always` faults stay (they are configuration).
    pub fn clear(&self) {
        lock(&self.queued).clear();
    }
}

/// Per-method call counts, so tests can assert how often the CRM was really called.
#[derive(Debug, Default)]
pub struct CallCounter(Mutex<BTreeMap<String, u64>>);

impl CallCounter {
    pub fn hit(&self, method: &str) {
        *lock(&self.0).entry(method.to_owned()).or_default() += 1;
    }

    pub fn get(&self, method: &str) -> u64 {
        lock(&self.0).get(method).copied().unwrap_or(0)
    }

    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        lock(&self.0).clone()
    }

    pub fn clear(&self) {
        lock(&self.0).clear();
    }
}

/// For `Option<Option<T>>` fields of a settings update: a field that is there (even as
/// `null`, meaning "off") is `Some`, a missing one (`#[serde(default)]`) is `None`.
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// A fake's state lock is never held across an await, and a panic in a test handler
/// must not poison every later call.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The handle a handler gets (as `ConnectInfo<ConnKill>`) to cut its own connection.
#[derive(Debug, Clone, Default)]
pub struct ConnKill(Arc<AtomicBool>);

impl ConnKill {
    /// From now on the connection neither reads nor writes: whatever the handler
    /// returns is never sent and the socket is closed — an answer lost on the way.
    pub fn drop_connection(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn is_dropped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A TCP listener whose streams carry a [`ConnKill`] switch.
pub struct KillableListener(TcpListener);

impl KillableListener {
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        Ok(KillableListener(TcpListener::bind(addr).await?))
    }
}

impl Listener for KillableListener {
    type Io = KillableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = Listener::accept(&mut self.0).await;
        (
            KillableStream {
                inner: io,
                kill: ConnKill::default(),
            },
            addr,
        )
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

impl Connected<IncomingStream<'_, KillableListener>> for ConnKill {
    fn connect_info(stream: IncomingStream<'_, KillableListener>) -> Self {
        stream.io().kill.clone()
    }
}

/// A TCP stream that fails every write (and reads EOF) once its switch is flipped,
/// so hyper closes the connection without having sent a byte of the answer.
pub struct KillableStream {
    inner: TcpStream,
    kill: ConnKill,
}

fn killed() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "fake: answer lost")
}

impl AsyncRead for KillableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.kill.is_dropped() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.kill.is_dropped() {
            return Poll::Ready(Err(killed()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.kill.is_dropped() {
            return Poll::Ready(Err(killed()));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.kill.is_dropped() {
            return Poll::Ready(Err(killed()));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// How long a "hung" handler waits: far longer than any adapter timeout.
pub const HANG: Duration = Duration::from_secs(3600);

/// A running fake server. Dropping it stops the server and wakes hung handlers.
pub struct FakeServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
    shutdown: watch::Sender<bool>,
}

impl FakeServer {
    /// Binds `listen` (port 0 picks a free port) and serves the router built by
    /// `make_router`, whose handlers may extract `ConnectInfo<ConnKill>` and get the
    /// shutdown signal to pass to [`hang`].
    pub async fn spawn(
        listen: SocketAddr,
        make_router: impl FnOnce(watch::Receiver<bool>) -> axum::Router,
    ) -> io::Result<FakeServer> {
        let listener = KillableListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let service = make_router(shutdown_rx).into_make_service_with_connect_info::<ConnKill>();
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, service).await {
                tracing::warn!(error = %e, "fake CRM server stopped");
            }
        });
        Ok(FakeServer {
            addr,
            task,
            shutdown,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

/// A fake server that can go down (its port refuses connections, and connections kept
/// alive from before are cut without an answer) and come back on the same address: a
/// service with an outage.
pub struct Downable {
    addr: SocketAddr,
    make: MakeRouter,
    server: Mutex<Option<FakeServer>>,
    down: Arc<AtomicBool>,
}

type MakeRouter = Arc<dyn Fn(watch::Receiver<bool>) -> axum::Router + Send + Sync>;

/// Whether a [`Downable`] server is down: handlers check it first.
#[derive(Debug, Clone, Default)]
pub struct DownFlag(Arc<AtomicBool>);

impl DownFlag {
    pub fn is_down(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl Downable {
    /// Serves the router `make` builds (again after each [`Downable::come_back`]); its
    /// handlers get the [`DownFlag`] to check.
    pub async fn spawn(
        listen: SocketAddr,
        make: impl Fn(watch::Receiver<bool>, DownFlag) -> axum::Router + Send + Sync + 'static,
    ) -> io::Result<Downable> {
        let down = Arc::new(AtomicBool::new(false));
        let flag = DownFlag(Arc::clone(&down));
        let make: MakeRouter = Arc::new(move |rx| make(rx, flag.clone()));
        let m = Arc::clone(&make);
        let server = FakeServer::spawn(listen, move |rx| m(rx)).await?;
        Ok(Downable {
            addr: server.addr(),
            make,
            server: Mutex::new(Some(server)),
            down,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on connections are refused, and requests on connections opened before
    /// are cut without an answer.
    pub fn go_down(&self) {
        self.down.store(true, Ordering::SeqCst);
        lock(&self.server).take();
    }

    /// Listens on the same address again.
    pub async fn come_back(&self) -> io::Result<()> {
        let mut tries = 0;
        let server = loop {
            let m = Arc::clone(&self.make);
            match FakeServer::spawn(self.addr, move |rx| m(rx)).await {
                Ok(s) => break s,
                // The old listener may take a moment to be closed.
                Err(e) if tries < 50 => {
                    tries += 1;
                    tracing::debug!(error = %e, "fake: rebinding");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(e),
            }
        };
        *lock(&self.server) = Some(server);
        self.down.store(false, Ordering::SeqCst);
        Ok(())
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }
}

/// Never answers (until the server shuts down): a CRM that executed the request and
/// then went silent.
pub async fn hang(mut shutdown: watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(HANG) => {}
        _ = shutdown.wait_for(|stopped| *stopped) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_queue_applies_queued_then_always() {
        let q = FaultQueue::new(vec![("crm.lead.list".to_owned(), "slow")]);
        q.push(FaultRule {
            method: "crm.lead.add".into(),
            fault: "boom",
            times: 2,
        });
        q.push(FaultRule {
            method: "*".into(),
            fault: "any",
            times: 1,
        });
        assert_eq!(q.take("crm.lead.add"), Some("boom"));
        assert_eq!(q.take("crm.lead.list"), Some("any"));
        assert_eq!(q.take("crm.lead.add"), Some("boom"));
        assert_eq!(q.take("crm.lead.add"), None);
        assert_eq!(q.take("crm.lead.list"), Some("slow"));
        assert!(q.pending().is_empty());
    }

    #[test]
    fn take_where_leaves_refused_faults_queued() {
        let q = FaultQueue::new(Vec::new());
        for fault in ["hang", "validation"] {
            q.push(FaultRule {
                method: "crm.lead.add".into(),
                fault,
                times: 1,
            });
        }
        assert_eq!(
            q.take_where("crm.lead.add", |f| *f != "hang"),
            Some("validation")
        );
        assert_eq!(q.take_where("crm.lead.add", |f| *f != "hang"), None);
        assert_eq!(q.take("crm.lead.add"), Some("hang"));
    }
}
