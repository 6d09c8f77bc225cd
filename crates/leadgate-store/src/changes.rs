//! What the store offers callers that must not speak SQL (the console's view model): a
//! subscription to changes the database pushes. (Its errors are classified in
//! `store::error`.)
//!
//! On PostgreSQL, triggers on `review_cases`, `connectors` and `business_rules` — only
//! those: their writes are rare, and NOTIFY serialises commits — call
//! `pg_notify('leadgate_console', <table>)`. The console model listens, and the desktop
//! shell turns each change into a `leadgate://refresh` event. Any login may NOTIFY that
//! channel (PostgreSQL cannot restrict it), so the listener coalesces
//! ([`Changes::forward`]): at most four names every [`REFRESH_EVERY`], the last change
//! always handed on. SQLite pushes nothing: the console polls every 3 s.

use std::time::Duration;

use super::Result;

/// The PostgreSQL channel the database notifies on (migration 0004): the payload is the
/// name of the table that changed (a review case, a connector).
pub const CHANGES_CHANNEL: &str = "leadgate_console";

/// Whether the database at `url` pushes its changes ([`subscribe`] gives a [`Changes`]);
/// otherwise a caller polls. PostgreSQL does (LISTEN/NOTIFY); SQLite does not.
pub fn pushes_changes(url: &str) -> bool {
    super::Backend::of(url).is_ok_and(super::Backend::is_shared)
}

/// Listens for changes to the database at `url`. `None` when it pushes none (SQLite):
/// the caller polls.
pub async fn subscribe(url: &str) -> Result<Option<Changes>> {
    if !pushes_changes(url) {
        return Ok(None);
    }
    // The same TLS policy as the store's own connections.
    let pool = sqlx::PgPool::connect_lazy_with(super::postgres::connect_options(url)?);
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
    listener.listen(CHANGES_CHANNEL).await?;
    Ok(Some(Changes { listener }))
}

/// A live subscription to the database's change notifications.
pub struct Changes {
    listener: sqlx::postgres::PgListener,
}

/// At most this often a [`Changes::forward`] hands changes on. Any login may `NOTIFY`
/// the channel (PostgreSQL cannot restrict it), so thousands of notifications a second
/// must not become thousands of console refreshes.
pub const REFRESH_EVERY: Duration = Duration::from_millis(500);

/// How many distinct payloads one forwarded batch names at most (the tables that notify
/// are three; the rest is someone's NOTIFY).
pub const NAMES_PER_BATCH: usize = 4;

impl Changes {
    /// [`Changes::forward`] every [`REFRESH_EVERY`] into `to`, the channel a console's
    /// screens listen on (the desktop's and the browsers'): a NOTIFY storm from any login
    /// is a few refreshes every half second at most.
    pub fn relay(self, to: tokio::sync::broadcast::Sender<String>) -> tokio::task::JoinHandle<()> {
        self.forward(REFRESH_EVERY, move |table| {
            let _ = to.send(table);
        })
    }

    /// Listens in a task of its own and hands the changes on through `send`, coalesced:
    /// after a batch, nothing for `every`; then whatever arrived meanwhile as one batch —
    /// the distinct names (at most four, each cut to 63 bytes), one `send` each. So
    /// however many notifications arrive, `send` is called at most four times per
    /// `every`, and the last change is always handed on. Aborting the returned task stops
    /// the listening too.
    pub fn forward(
        mut self,
        every: Duration,
        send: impl Fn(String) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        use std::sync::{Arc, Mutex};
        let arrived = Arc::new(tokio::sync::Notify::new());
        let names = Arc::new(Mutex::new(Vec::<String>::new()));
        let reader = {
            let (arrived, names) = (Arc::clone(&arrived), Arc::clone(&names));
            tokio::spawn(async move {
                loop {
                    let mut name = self.next().await;
                    if name.len() > 63 {
                        let mut end = 63;
                        while !name.is_char_boundary(end) {
                            end -= 1;
                        }
                        name.truncate(end);
                    }
                    {
                        let mut names = names.lock().expect("changes lock");
                        if names.len() < NAMES_PER_BATCH && !names.contains(&name) {
                            names.push(name);
                        }
                    }
                    arrived.notify_one();
                }
            })
        };
        /// Stops the reader when the forwarding task ends or is aborted.
        struct Stop(tokio::task::JoinHandle<()>);
        impl Drop for Stop {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        tokio::spawn(async move {
            let _reader = Stop(reader);
            loop {
                arrived.notified().await;
                let batch = std::mem::take(&mut *names.lock().expect("changes lock"));
                for name in batch {
                    send(name);
                }
                tokio::time::sleep(every).await;
            }
        })
    }

    /// The next change: the name of the table that changed. A broken connection is
    /// reconnected on the next try, after a pause that keeps a dead server from spinning
    /// the caller's loop; changes made while it was down are not replayed.
    pub async fn next(&mut self) -> String {
        loop {
            match self.listener.recv().await {
                Ok(n) => return n.payload().to_owned(),
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }
}
