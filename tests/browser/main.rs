//! The web console in a real browser (issue 34): `leadgate serve` with `[console]`, as a
//! separate process over real HTTP, driven in Debian's Chromium (headless) through
//! chromedriver, and in Debian's Firefox ESR through geckodriver. A person signs in, sees
//! the queue, opens a case and confirms the CRM result; the database then says the case
//! is resolved by that person. On SQLite the operator of `[console]`, in both browsers;
//! on PostgreSQL a private cluster that checks passwords, with a
//! sales-ops person who resolves, a support person who sees the figures only, and a
//! manager who searches and changes a business rule (the database records it as theirs). Saves
//! the README's browser screenshot (docs/screenshots/browser-console.png).
//!
//! Needs Chromium, chromedriver, Firefox ESR, geckodriver and the built UI: `make test` installs and builds them
//! (scripts/install-browser-deps.sh, `npm --prefix ui run build`); a missing one fails the
//! test with what to run, it never passes unseen.

use std::sync::Arc;
use std::time::Duration;

use leadgate::console_web::password;
use leadgate::domain::roles::Role;
use leadgate::domain::Status;
use leadgate_testkit::cluster::Cluster;
use leadgate_testkit::console::{downloads_dir, in_browser, sign_in, Browser, Deployment, Seeding};
use leadgate_testkit::people::People;
use leadgate_testkit::webdriver::{
    choose, click, css, el, open_row, shot, tab, text_until, type_into, Client,
};
use serde_json::json;

const OPERATOR: &str = "anna";
const OPERATOR_PASSWORD: &str = "a long operator password";
const OWNER_PASSWORD: &str = "gateway-owner-password";

/// A deployment with every kind of case.
async fn deploy(db_url: &str, console_section: &str) -> Deployment {
    deploy_with(db_url, console_section, Seeding::Cases).await
}

async fn deploy_with(db_url: &str, console_section: &str, seeding: Seeding) -> Deployment {
    leadgate_testkit::console::deploy(
        env!("CARGO_BIN_EXE_leadgate"),
        db_url,
        console_section,
        seeding,
    )
    .await
}

/// A private cluster that checks passwords (scram-sha-256), as a deployment's must.
fn checked_cluster() -> (Cluster, String) {
    Cluster::checking_passwords(OWNER_PASSWORD)
}

mod cases;
mod resolve;
mod tenants;
