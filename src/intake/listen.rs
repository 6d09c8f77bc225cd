//! The gateway's HTTP listener: connections bounded in number and in time.
//!
//! `axum::serve` keeps a connection as long as its client likes: a client that sends a
//! request's head one byte a minute, or opens a connection and sends nothing, holds a
//! socket and a file descriptor for ever, and a thousand of them stopped the gateway
//! accepting anything under systemd's default of 1,024 open files. Here every
//! connection holds one of `[server] max_connections` slots (one more is closed at once,
//! never queued: a queue is what slow clients fill), a request's head must arrive within
//! `header_timeout` — also the longest a kept-alive connection may sit idle — and its
//! body within `body_timeout` (`read_body` in `intake/mod.rs`). The peer address goes
//! into each request's extensions (`ConnectInfo`). A body that does not arrive in time is
//! answered 408 and journaled without it. `tests/it/slow_clients.rs` holds connections
//! open with real sockets to check each bound.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// What one listener allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

/// How long, at most, a shutdown waits for requests in flight to finish.
const DRAIN: Duration = Duration::from_secs(30);

/// Serves `app` on `listener` until `shutdown` turns true, then lets requests in flight
/// finish (up to [`DRAIN`]).
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    shutdown: watch::Receiver<bool>,
) {
    serve_tls(listener, app, limits, None, shutdown).await
}

/// [`serve`], over TLS when `tls` is given: a handshake that does not finish within
/// `header_timeout` ends the connection (and frees its slot) like a slow request head.
pub async fn serve_tls(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut full_since: Option<tokio::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors, most likely: wait instead of spinning.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Closed at once: the client sees the connection end and may try again.
            if full_since.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    "every connection slot is taken: closing new connections"
                );
                full_since = Some(tokio::time::Instant::now());
            }
            drop(stream);
            continue;
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            let mut app = app.clone();
            // A Router is always ready: no poll_ready needed.
            tower_service::Service::call(&mut app, req.map(axum::body::Body::new))
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .keep_alive(true);
        let (watcher, tls, handshake) = (graceful.watcher(), tls.clone(), limits.header_timeout);
        tokio::spawn(async move {
            let ended = match tls {
                None => {
                    watcher
                        .watch(builder.serve_connection(TokioIo::new(stream), service))
                        .await
                }
                Some(acceptor) => {
                    match tokio::time::timeout(handshake, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            watcher
                                .watch(builder.serve_connection(TokioIo::new(tls), service))
                                .await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "a TLS handshake failed");
                            Ok(())
                        }
                        Err(_) => Ok(()),
                    }
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after {DRAIN:?}: closing them");
    }
}
