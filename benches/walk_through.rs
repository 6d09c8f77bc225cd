//! The console's walk-through in actions and seconds (issue 37's measure): the two jobs of
//! the day it was timed on, done in Chromium against a real gateway on PostgreSQL with a
//! personal login per role, each the shortest way the console offers.
//!
//! - **Support: "did my lead arrive?"** — a lead is asked about by its phone, written as a
//!   person dictates it. After: support looks it up themselves (the dashboard's lookup).
//!   Before (the UI before issue 37): support had no way in the console; they asked sales
//!   ops, who searched for it — measured here as sales ops' part, plus the hand-off.
//! - **Sales ops: an uncertain case** — the lead is found in the CRM (its id is known) and
//!   confirmed: open the case, *Find in CRM*, type the id, confirm.
//!
//! Actions are what a person does: a click, a field typed, a key. Seconds are the wall time
//! from the first action to the answer on screen (or the decision in the database), with
//! the machine's own latency only; the person's time is estimated beside it with the
//! keystroke-level model (Card, Moran and Newell: 1.35 s to think before each action,
//! 1.1 s to point, 0.2 s to click, 0.4 s to move between mouse and keys, 0.28 s a key).
//!
//! `LEADGATE_WALK=before|after` says which UI `ui/dist` holds (the debug gateway serves it
//! from disk): `scripts/walk-through.sh` (make walk-through) builds the one before issue 37
//! from git, runs `before`, puts today's back and runs `after`.

use std::time::{Duration, Instant};

use leadgate::domain::roles::Role;
use leadgate::domain::Status;
use leadgate_testkit::cluster::Cluster;
use leadgate_testkit::console::{deploy, sign_in, Browser, Seeding};
use leadgate_testkit::people::People;
use leadgate_testkit::webdriver::{click, el, text_until, Client};

const THINK: f64 = 1.35;
const POINT: f64 = 1.1;
const CLICK: f64 = 0.2;
const HOME: f64 = 0.4;
const KEY: f64 = 0.28;

/// What a person did, counted as they did it.
#[derive(Default)]
struct Walk {
    actions: u32,
    keys: u32,
    human: f64,
    started: Option<Instant>,
}

impl Walk {
    fn begin(&mut self) {
        self.started.get_or_insert_with(Instant::now);
    }

    async fn click(&mut self, c: &Client, selector: &str) {
        self.begin();
        self.actions += 1;
        self.human += THINK + POINT + CLICK;
        click(c, selector).await;
    }

    /// Types `text` into the focused field or `selector` (a click first, when given);
    /// `enter` ends it with Enter.
    async fn type_in(&mut self, c: &Client, selector: &str, text: &str, enter: bool) {
        self.begin();
        self.actions += 1;
        let n = text.chars().count() as u32 + u32::from(enter);
        self.keys += n;
        self.human += THINK + HOME + n as f64 * KEY + HOME;
        let keys = if enter {
            format!("{text}\u{E007}")
        } else {
            text.to_owned()
        };
        el(c, selector).await.send_keys(&keys).await.unwrap();
    }

    /// A key pressed on the page (a shortcut).
    async fn key(&mut self, c: &Client, key: &str) {
        self.begin();
        self.actions += 1;
        self.keys += 1;
        self.human += THINK + KEY;
        el(c, "body").await.send_keys(key).await.unwrap();
    }

    /// Reading the answer on screen: a thought, no action.
    fn read(&mut self) {
        self.human += THINK;
    }

    fn report(&self, job: &str, ui: &str, note: &str) {
        let secs = self.started.map_or(0.0, |s| s.elapsed().as_secs_f64());
        println!(
            "{job:<44} {ui:<7} actions {:>2}  keys {:>3}  machine {secs:>5.2} s  person (KLM) {:>5.1} s{note}",
            self.actions, self.keys, self.human
        );
    }
}

/// Support's question: Anna's form (the seed's completed lead, +7 916 123-45-67, in the
/// CRM as 7001), the phone as she dictates it.
const PHONE: &str = "8 (916) 123-45-67";

async fn support_after(c: &Client, d: &leadgate_testkit::console::Deployment, people: &People) {
    sign_in(
        c,
        people.login(Role::Support),
        &people.password(Role::Support),
    )
    .await;
    el(c, "[data-testid=lookup-input]").await;
    let key = d.cases().linked_target.to_string();
    let mut w = Walk::default();
    w.click(c, "[data-testid=lookup-input]").await;
    w.type_in(c, "[data-testid=lookup-input]", PHONE, true)
        .await;
    el(
        c,
        &format!("[data-testid=lookup-row][data-operation='{key}']"),
    )
    .await;
    w.read();
    w.report("support: did my lead arrive?", "after", "");
}

async fn support_before(c: &Client, d: &leadgate_testkit::console::Deployment, people: &People) {
    // Support's console had no lookup: the question goes to sales ops.
    sign_in(
        c,
        people.login(Role::Support),
        &people.password(Role::Support),
    )
    .await;
    el(c, "[data-testid=nav-dashboard]").await;
    assert!(
        c.find(leadgate_testkit::webdriver::css("[data-testid=search]"))
            .await
            .is_err(),
        "support has no search in this UI"
    );
    click(c, "[data-testid=sign-out]").await;
    sign_in(
        c,
        people.login(Role::SalesOps),
        &people.password(Role::SalesOps),
    )
    .await;
    // (The UI before kept the last person's screen after a sign-out: the queue, uncounted.)
    click(c, "[data-testid=nav-queue]").await;
    el(c, "[data-testid=queue-row]").await;
    let key = d.cases().linked_target.to_string();
    let mut w = Walk::default();
    w.click(c, "[data-testid=search]").await;
    w.type_in(c, "[data-testid=search]", PHONE, true).await;
    w.click(
        c,
        &format!("[data-testid=queue-row][data-operation='{key}']"),
    )
    .await;
    text_until(c, "[data-testid=case-key]", &key, |t| t == key).await;
    el(c, "[data-testid=op-status]").await;
    w.read();
    w.report(
        "support: did my lead arrive?",
        "before",
        "  + a message to sales ops and their answer (by sales ops)",
    );
    click(c, "[data-testid=search-clear]").await;
}

async fn uncertain(
    c: &Client,
    d: &leadgate_testkit::console::Deployment,
    people: &People,
    after: bool,
) {
    sign_in(
        c,
        people.login(Role::SalesOps),
        &people.password(Role::SalesOps),
    )
    .await;
    click(c, "[data-testid=nav-queue]").await;
    let id = d.cases().uncertain.clone();
    let row = format!("[data-testid=queue-row][data-operation='{id}']");
    el(c, &row).await;
    let mut w = Walk::default();
    w.click(c, &row).await;
    text_until(c, "[data-testid=case-key]", id.as_str(), |t| {
        t == id.as_str()
    })
    .await;
    // Look in the CRM (a new tab at its search), then back to the console.
    let console_tab = c.window().await.unwrap();
    w.click(c, "[data-testid=find-in-crm]").await;
    w.read();
    c.switch_to_window(console_tab).await.unwrap();
    if after {
        // `i` goes to the CRM id field; Enter there confirms.
        w.key(c, "i").await;
        w.type_in(c, "[data-testid=crm-id-input]", "5555", true)
            .await;
    } else {
        w.click(c, "[data-testid=crm-id-input]").await;
        w.type_in(c, "[data-testid=crm-id-input]", "5555", false)
            .await;
        w.click(c, "[data-testid=confirm]").await;
    }
    el(c, "[data-testid=op-status][data-status=completed]").await;
    let o = d.store.operation(&id).await.unwrap().unwrap();
    assert_eq!(o.status, Status::Completed);
    w.report(
        "sales ops: uncertain case, found in the CRM",
        if after { "after" } else { "before" },
        "",
    );
}

#[tokio::main]
async fn main() {
    let after = match std::env::var("LEADGATE_WALK").as_deref() {
        Ok("before") => false,
        Ok("after") | Err(_) => true,
        Ok(other) => panic!("LEADGATE_WALK is before or after, not {other}"),
    };
    let (_cluster, url): (Cluster, String) = Cluster::checking_passwords("walk-owner-password");
    leadgate::store::connect(&url).await.unwrap();
    let people = People::new(&url).await;
    let d = deploy(env!("CARGO_BIN_EXE_leadgate"), &url, "", Seeding::Cases).await;
    let (_driver, driver) = Browser::Chromium.driver();
    let c = Browser::Chromium.open(&driver).await;
    c.goto(&d.console).await.unwrap();
    if after {
        support_after(&c, &d, &people).await;
    } else {
        support_before(&c, &d, &people).await;
    }
    click(&c, "[data-testid=sign-out]").await;
    uncertain(&c, &d, &people, after).await;
    let _ = c.close().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
}
