//! Leadgate's test kit and developer tools, kept out of the product crate: only tests,
//! benchmarks and the demo depend on it (the `leadgate` package as a dev-dependency).
//!
//! - [`cluster`]: a private PostgreSQL cluster (TLS only, passwords checked);
//! - [`db`]: a fresh database per test on each backend, and [`each_backend!`];
//! - [`gateway`]: a gateway started in-process with a fake CRM, and its requests;
//! - [`process`]: `leadgate` as separate processes (ports, children, config files);
//! - [`seed`]: a database with one review case of each kind, through real store calls;
//! - [`deb`]: dpkg for the tests that install the packages they built;
//! - [`webdriver`]: the console driven through WebDriver, in its window or a browser;
//! - [`demo`]: the eight pilot scenarios played over HTTP (`leadgate-dev demo`).
//!
//! The `leadgate-dev` binary (`src/bin/leadgate-dev.rs`) serves the fake CRMs and plays
//! the demo; the shipped `leadgate` has neither command.

pub mod cluster;
pub mod console;
pub mod db;
pub mod deb;
pub mod demo;
pub mod gateway;
pub mod people;
pub mod process;
pub mod seed;
pub mod steps;
pub mod walk;
pub mod webdriver;

pub use db::{run, Backend, TestDb};

/// Waits for `cond`, generously (90 s): a busy machine is only slower, never failing.
pub async fn wait_until(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !cond().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
