//! The console's second walk-through (issue 37, points 7 and 8), as one scenario for
//! either shell: the desktop app's real window and a browser run the same checks on a
//! console switched to Russian. It starts signed in with the queue on screen, on a store
//! seeded by [`crate::seed::seed`], and ends back in English.

use std::time::Duration;

use fantoccini::Client;
use leadgate::domain::{OperationId, ReviewReason, Status};
use leadgate::store::{self, ContactKeys, Store};
use serde_json::{json, Value};

use crate::seed::lead;
use crate::steps::absent;
use crate::webdriver::{choose, click, el, open_row, shot, tab, text_until, type_into};

/// What the walk-through adds to a seeded store: an ambiguous match whose lookup found
/// two entities (`21` and `22`).
pub struct Walk {
    pub ambiguous: OperationId,
    /// The seed's first lead: a rate-limit retry, then created — its last error is history.
    pub completed_with_error: OperationId,
}

/// Adds the walk-through's own cases to a store [`crate::seed::seed`] filled.
pub async fn prepare(db: &dyn Store) -> Walk {
    let mut d = lead(
        "site",
        "1006",
        json!({"submission_id": "1006", "name": "Дина", "phone": "+79035550606"}),
        store::local_now(),
    );
    d.contact = ContactKeys {
        phone: Some("+79035550606".into()),
        email: None,
        name: None,
    };
    let ambiguous = d.operation_id.clone();
    db.record_delivery(d).await.unwrap();
    db.open_review(
        &ambiguous,
        ReviewReason::AmbiguousMatch,
        "worker:1",
        json!({"crm_ids": ["21", "22"]}),
        store::local_now(),
    )
    .await
    .unwrap();
    let completed_with_error = OperationId::new("tilda", "9000").unwrap();
    let o = db.operation(&completed_with_error).await.unwrap().unwrap();
    assert_eq!(o.status, Status::Completed, "the seed's first lead");
    assert!(o.last_error.is_some(), "a retry before its create");
    Walk {
        ambiguous,
        completed_with_error,
    }
}

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.unwrap()
}

async fn focused(c: &Client) -> String {
    js(
        c,
        "return document.activeElement ? document.activeElement.getAttribute('data-testid') || '' : '';",
    )
    .await
    .as_str()
    .unwrap_or_default()
    .to_owned()
}

async fn count(c: &Client, selector: &str) -> i64 {
    let text = text_until(c, selector, "a number", |t| {
        t.chars().any(|ch| ch.is_ascii_digit())
    })
    .await;
    text.chars()
        .filter(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

/// Whether `text` holds no Latin letter (ids and keys excluded by the caller).
fn russian_only(text: &str) -> bool {
    !text.chars().any(|ch| ch.is_ascii_alphabetic())
}

/// Makes the console's next `search` calls answer 1.5 s late, in either shell (Tauri's
/// `invoke` or the browser's `fetch`), so the "searching…" state can be seen.
const SLOW_SEARCH: &str = r#"
const late = (go) => new Promise((r) => setTimeout(r, 1500)).then(go);
const tauri = window.__TAURI_INTERNALS__;
if (tauri && !tauri.slowed) {
  const invoke = tauri.invoke.bind(tauri);
  tauri.invoke = (cmd, args, opts) => (cmd === "search" ? late(() => invoke(cmd, args, opts)) : invoke(cmd, args, opts));
  tauri.slowed = true;
} else if (!window.slowed) {
  const f = window.fetch.bind(window);
  window.fetch = (u, i) => (String(u).includes("/api/call/search") ? late(() => f(u, i)) : f(u, i));
  window.slowed = true;
}
return true;
"#;

/// The walk-through, on the queue of a console seeded by [`crate::seed::seed`] plus
/// [`prepare`]; `failed` is the seed's failed lead, `uncertain` its uncertain one.
pub async fn second_walk_through(
    c: &Client,
    db: &dyn Store,
    w: &Walk,
    failed: &OperationId,
    uncertain: &OperationId,
) {
    choose(c, "select[data-testid=language]", "ru").await;
    click(c, "[data-testid=nav-queue]").await;
    tab(c, "needs_review").await;
    text_until(c, "[data-testid=tab-needs_review]", "Russian tabs", |t| {
        t.starts_with("На разборе")
    })
    .await;

    // A paused connector's banner says why in Russian; the CRM's words come apart.
    text_until(
        c,
        "[data-testid=paused-banner][data-connector=bitrix24]",
        "the cause in Russian",
        |t| t.starts_with("Коннектор CRM bitrix24 приостановлен: доступ отклонён."),
    )
    .await;

    // The badge counts what waits for this person: failed leads are on their tab only.
    let failed_count = count(c, "[data-testid=count-failed_terminal]").await;
    assert!(failed_count >= 1);
    let waiting = count(c, "[data-testid=count-needs_review]").await
        + count(c, "[data-testid=count-payload_conflict]").await
        + count(c, "[data-testid=count-stale]").await;
    let badge = count(c, "[data-testid=queue-badge]").await;
    assert_eq!(badge, waiting, "the badge leaves the failed leads out");

    // Durations in Russian: "1 мин 17 с", never "1 m 17 s".
    let age = text_until(c, "[data-testid=queue-row] .age", "a Russian age", |t| {
        t.chars().any(|ch| ch.is_ascii_digit()) && russian_only(t)
    })
    .await;
    assert!(
        ["мс", "с", "мин", "ч", "дн"]
            .iter()
            .any(|u| age.ends_with(u)),
        "{age}"
    );

    // "/" goes to the search; while it is asked, the list says so and shows no old rows.
    el(c, "body").await.send_keys("/").await.unwrap();
    assert_eq!(focused(c).await, "search", "/ focuses the search");
    js(c, SLOW_SEARCH).await;
    type_into(c, "[data-testid=search]", "+7 903 555-06-06\u{E007}").await;
    text_until(c, "[data-testid=search-pending]", "searching…", |t| {
        t.starts_with("Ищу")
    })
    .await;
    assert!(
        absent(c, "[data-testid=queue-row]").await,
        "no rows of the tab under the search header"
    );
    open_row(c, w.ambiguous.as_str()).await;
    click(c, "[data-testid=search-clear]").await;

    // Filters belong to their tab: an empty filtered list says cases wait and clears.
    choose(c, "select[data-testid=filter-reason]", "late_duplicate").await;
    let note = text_until(
        c,
        "[data-testid=empty-filtered]",
        "the filtered note",
        |t| t.contains("ждут") || t.contains("ждёт"),
    )
    .await;
    assert!(!note.contains("Хорошо"), "{note}");
    click(c, "[data-testid=clear-filters]").await;
    el(c, "[data-testid=queue-row]").await;
    // (Another filter this time: WebKit's driver does not pick an option it picked
    // before the page reset the list.)
    choose(c, "select[data-testid=filter-age]", "1440").await;
    el(c, "[data-testid=empty-filtered]").await;
    tab(c, "stale").await;
    tab(c, "needs_review").await;
    el(c, "[data-testid=queue-row]").await;
    let filters = js(
        c,
        "return ['filter-reason', 'filter-age'].map(f => document.querySelector(`[data-testid=${f}]`).value);",
    )
    .await;
    assert_eq!(
        filters,
        json!(["", "0"]),
        "the filters did not follow the tabs"
    );

    // An ambiguous match: the entities found, each with its page and a pick button; `i`
    // goes to the CRM id field and Enter confirms the one picked.
    open_row(c, w.ambiguous.as_str()).await;
    for id in ["21", "22"] {
        el(
            c,
            &format!("[data-testid=found-in-crm] [data-crm-id='{id}'] [data-testid=pick-found]"),
        )
        .await;
        el(
            c,
            &format!("[data-testid=found-in-crm] [data-crm-id='{id}'] [data-testid=open-found]"),
        )
        .await;
    }
    shot(c, "ambiguous-ru.png").await;
    click(
        c,
        "[data-testid=found-in-crm] [data-crm-id='22'] [data-testid=pick-found]",
    )
    .await;
    // Away from the field first, so `i` is a shortcut, not a letter typed.
    js(
        c,
        "document.activeElement && document.activeElement.blur(); return true;",
    )
    .await;
    el(c, "body").await.send_keys("i").await.unwrap();
    assert_eq!(focused(c).await, "crm-id-input", "i goes to the CRM id");
    let input = el(c, "[data-testid=crm-id-input]").await;
    assert_eq!(input.prop("value").await.unwrap().as_deref(), Some("22"));
    input.send_keys("\u{E007}").await.unwrap();
    el(c, "[data-testid=op-status][data-status=completed]").await;
    let o = db.operation(&w.ambiguous).await.unwrap().unwrap();
    assert_eq!(
        (o.status, o.crm_id.as_deref()),
        (Status::Completed, Some("22"))
    );

    // `a` asks to re-check in the CRM (the dialog first); Esc says no, nothing granted.
    tab(c, "needs_review").await;
    open_row(c, uncertain.as_str()).await;
    js(
        c,
        "document.activeElement && document.activeElement.blur(); return true;",
    )
    .await;
    el(c, "body").await.send_keys("a").await.unwrap();
    el(c, "[data-testid=authorize-dialog-yes]").await;
    el(c, "body").await.send_keys("\u{E00C}").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(absent(c, "[data-testid=authorize-dialog-yes]").await);
    let o = db.operation(uncertain).await.unwrap().unwrap();
    assert_eq!(o.retry_grants, 0, "a dialog answered no grants nothing");

    // The CRM's own words stay out of Russian sentences, shown apart; the failed lead's
    // last error is red.
    tab(c, "failed_terminal").await;
    open_row(c, failed.as_str()).await;
    let sentence = text_until(
        c,
        "[data-testid=timeline] [data-kind=crm_response] [data-testid=event-sentence]",
        "a Russian sentence",
        |t| t.starts_with("Ответ"),
    )
    .await;
    assert!(!sentence.contains("TITLE"), "{sentence}");
    text_until(
        c,
        "[data-testid=timeline] [data-kind=crm_response] [data-testid=event-technical]",
        "the CRM's words apart",
        |t| t == "TITLE is required",
    )
    .await;
    let last = el(c, "[data-testid=last-error]").await;
    assert!(last.attr("class").await.unwrap().unwrap().contains("err"));

    // On a completed lead the last error is history: not red, and said so.
    type_into(
        c,
        "[data-testid=search]",
        &format!("{}\u{E007}", w.completed_with_error.as_str()),
    )
    .await;
    open_row(c, w.completed_with_error.as_str()).await;
    let last = el(c, "[data-testid=last-error][data-past=true]").await;
    assert!(!last.attr("class").await.unwrap().unwrap().contains("err"));
    click(c, "[data-testid=search-clear]").await;

    // Payload conflicts are never decided in bulk: no button that could only be refused.
    tab(c, "payload_conflict").await;
    el(c, "[data-testid=queue-row]").await;
    assert!(absent(c, "[data-testid=bulk-open]").await);

    // The business rules speak of a manager (менеджер), as the roles do.
    click(c, "[data-testid=nav-rules]").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rules = js(c, "return document.body.innerText;").await;
    let rules = rules.as_str().unwrap();
    assert!(!rules.contains("руковод"), "{rules}");

    // The dashboard's charts: the time axis and legend in Russian.
    click(c, "[data-testid=nav-dashboard]").await;
    text_until(
        c,
        ".u-legend .u-series:first-child .u-label",
        "Время",
        |t| t == "Время",
    )
    .await;
    let axis = js(
        c,
        "return [...document.querySelectorAll('.u-axis')].map(a => a.innerText).join(' ');",
    )
    .await;
    let axis = axis.as_str().unwrap();
    assert!(russian_only(axis), "the time axis in Russian: {axis}");
    shot(c, "dashboard-ru.png").await;

    // At the minimum width (960 px) in Russian the language switch stays on screen.
    let was = c.get_window_rect().await.unwrap();
    c.set_window_size(960, 600).await.unwrap();
    click(c, "[data-testid=nav-queue]").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fits = js(
        c,
        "const w = document.documentElement.clientWidth;\
         return [...document.querySelectorAll('header.top select, header.top button')]\
           .map(e => [e.getAttribute('data-testid') || e.textContent, e.getBoundingClientRect().right, w]);",
    )
    .await;
    for item in fits.as_array().unwrap() {
        let (right, width) = (item[1].as_f64().unwrap(), item[2].as_f64().unwrap());
        assert!(right <= width + 0.5, "{item} is off-screen: {fits}");
    }
    shot(c, "minimum-size-ru.png").await;
    c.set_window_rect(was.0 as u32, was.1 as u32, was.2 as u32, was.3 as u32)
        .await
        .unwrap();

    choose(c, "select[data-testid=language]", "en").await;
    text_until(c, "[data-testid=tab-needs_review]", "English again", |t| {
        t.starts_with("Needs review") || !t.starts_with("На разборе")
    })
    .await;
}
