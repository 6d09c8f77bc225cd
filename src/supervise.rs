//! Long-running loops (the worker's claim loops, the reconciler, the retention loop)
//! must outlive any input: a loop that panics is logged and started again after a short
//! pause, until shutdown. A panic is a bug to fix, never a reason for a gateway that
//! silently stops working.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// How long a panicked loop waits before it starts again, so that a panic on every
/// start does not spin.
pub const RESTART_DELAY: Duration = Duration::from_secs(1);

/// Runs `make()` until it returns; when it panics, logs it (the loop's name, not the
/// panic's text, which may carry data) and runs `make()` again after `delay`, unless
/// `shutdown` turned true.
pub async fn supervise<F, Fut>(
    name: &str,
    shutdown: watch::Receiver<bool>,
    delay: Duration,
    make: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    supervise_counted(name, shutdown, delay, make).await;
}

/// [`supervise`], returning how many times the loop was restarted.
pub async fn supervise_counted<F, Fut>(
    name: &str,
    mut shutdown: watch::Receiver<bool>,
    delay: Duration,
    mut make: F,
) -> u32
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut restarts = 0;
    loop {
        match tokio::spawn(make()).await {
            Ok(()) => return restarts,
            Err(e) if e.is_panic() => {
                if *shutdown.borrow() {
                    return restarts;
                }
                restarts += 1;
                tracing::error!(
                    task = name,
                    restarts,
                    "a loop panicked (a bug: please report it); restarting it"
                );
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.wait_for(|stop| *stop) => return restarts,
                }
            }
            Err(_) => return restarts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn a_panicking_loop_is_restarted_until_it_returns() {
        let (_tx, rx) = watch::channel(false);
        let runs = Arc::new(AtomicU32::new(0));
        let r = Arc::clone(&runs);
        let restarts = supervise_counted("test loop", rx, Duration::from_millis(1), move || {
            let r = Arc::clone(&r);
            async move {
                if r.fetch_add(1, Ordering::SeqCst) < 2 {
                    panic!("poison input");
                }
            }
        })
        .await;
        assert_eq!(restarts, 2);
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn shutdown_stops_restarting() {
        let (tx, rx) = watch::channel(false);
        let runs = Arc::new(AtomicU32::new(0));
        let r = Arc::clone(&runs);
        let task = tokio::spawn(supervise_counted(
            "always panics",
            rx,
            Duration::from_millis(20),
            move || {
                r.fetch_add(1, Ordering::SeqCst);
                async { panic!("always") }
            },
        ));
        tokio::time::sleep(Duration::from_millis(70)).await;
        tx.send(true).unwrap();
        let restarts = tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("supervise returns after shutdown")
            .unwrap();
        assert!(restarts >= 1, "{restarts}");
        assert_eq!(runs.load(Ordering::SeqCst), restarts);
    }
}
