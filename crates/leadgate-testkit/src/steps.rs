//! What a person does in the console, one decision at a time, in either shell: the
//! desktop app's real window (`src-tauri/tests/e2e.rs`) and a browser (`tests/browser/`)
//! show the same UI, so the same selectors, clicks and checks against the database serve
//! both. Each step starts with the case's row in the current tab and ends when the
//! database holds the decision.

use std::time::Duration;

use fantoccini::Client;
use leadgate::domain::{OperationId, Status};
use leadgate::store::{Operation, ReviewCase, Store};

use crate::webdriver::{choose, click, css, el, open_row, tab, type_into};

async fn op(db: &dyn Store, id: &OperationId) -> Operation {
    db.operation(id).await.unwrap().expect("the operation")
}

async fn last_case(db: &dyn Store, id: &OperationId) -> ReviewCase {
    db.cases_of(id).await.unwrap().pop().expect("a case")
}

/// Whether nothing on the page matches `selector` now.
pub async fn absent(c: &Client, selector: &str) -> bool {
    c.find(css(selector)).await.is_err()
}

/// Opens the "waiting for a manager" list and waits until it has replaced the tab's rows
/// (`mine`, a case of this person's, gone), so the next click hits the row it aims at.
pub async fn for_manager(c: &Client, mine: &OperationId) {
    click(c, "[data-testid=for-manager]").await;
    crate::webdriver::text_until(c, "[data-testid=queue-list]", "the manager's list", |t| {
        !t.contains(mine.as_str())
    })
    .await;
}

/// *Re-check in CRM, create only if absent* on `exhausted` (an attempt was made: the
/// primary action while no CRM id is typed), answered yes: one grant, no second offered.
pub async fn authorize_retry(c: &Client, db: &dyn Store, exhausted: &OperationId) {
    open_row(c, exhausted.as_str()).await;
    let button = el(c, "[data-testid=authorize]").await;
    assert_eq!(
        button.attr("data-recheck").await.unwrap().as_deref(),
        Some("true")
    );
    let class = button.attr("class").await.unwrap().unwrap_or_default();
    assert!(
        class.contains("primary"),
        "the safe way out is primary: {class}"
    );
    let confirm = el(c, "[data-testid=confirm]").await;
    let class = confirm.attr("class").await.unwrap().unwrap_or_default();
    assert!(!class.contains("primary"), "one primary action: {class}");
    // Enter on the focused button presses it (the queue's own Enter is for rows).
    button.send_keys("\u{E007}").await.unwrap();
    click(c, "[data-testid=authorize-dialog-yes]").await;
    el(c, "[data-testid=resolved-by]").await;
    assert_eq!(op(db, exhausted).await.retry_grants, 1);
    assert!(
        absent(c, "[data-testid=authorize]").await,
        "no second grant offered"
    );
}

/// Links `cross_channel` to the candidate sharing its contact: *Link* is then the primary
/// action, not *Confirm*; the operation completes with the candidate's `crm_id`.
pub async fn link_candidate(c: &Client, db: &dyn Store, cross_channel: &OperationId, crm_id: &str) {
    open_row(c, cross_channel.as_str()).await;
    click(c, "[data-testid=pick-candidate]").await;
    let class = |sel: &'static str| async move {
        el(c, sel)
            .await
            .attr("class")
            .await
            .unwrap()
            .unwrap_or_default()
    };
    assert!(class("[data-testid=link]").await.contains("primary"));
    assert!(!class("[data-testid=confirm]").await.contains("primary"));
    click(c, "[data-testid=link]").await;
    el(c, "[data-testid=op-status][data-status=completed]").await;
    let o = op(db, cross_channel).await;
    assert_eq!(o.crm_id.as_deref(), Some(crm_id));
    assert_eq!(o.crm_link.as_deref(), Some("linked"));
}

/// Sends the `stale` operation to review and drops it with `reason`: the button waits for
/// the reason, and the question it asks first is answered no (Esc) and then yes.
pub async fn reject_stale(c: &Client, db: &dyn Store, stale: &OperationId, reason: &str) {
    tab(c, "stale").await;
    open_row(c, stale.as_str()).await;
    click(c, "[data-testid=send-to-review]").await;
    let reject = el(c, "[data-testid=reject]").await;
    assert!(
        !reject.is_enabled().await.unwrap(),
        "no reject without a reason"
    );
    type_into(c, "[data-testid=comment]", reason).await;
    click(c, "[data-testid=reject]").await;
    el(c, "[data-testid=action-dialog]").await;
    el(c, "body").await.send_keys("\u{E00C}").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        absent(c, "[data-testid=action-dialog]").await,
        "Esc closes the question"
    );
    assert_eq!(
        op(db, stale).await.status,
        Status::NeedsReview,
        "Esc rejected nothing"
    );
    click(c, "[data-testid=reject]").await;
    click(c, "[data-testid=action-dialog-yes]").await;
    el(c, "[data-testid=op-status][data-status=failed_terminal]").await;
    // The decision card says why, for whoever opens the lead later.
    crate::webdriver::text_until(c, "[data-testid=decision-comment]", reason, |t| t == reason)
        .await;
    let case = last_case(db, stale).await;
    assert_eq!(
        (case.resolution.as_deref(), case.comment.as_deref()),
        (Some("rejected"), Some(reason))
    );
}

/// Keeps the original of the payload conflict `conflict`, after the diff is shown. The
/// case is resolved by `by`.
pub async fn keep_original(c: &Client, db: &dyn Store, conflict: &OperationId, by: &str) {
    tab(c, "payload_conflict").await;
    open_row(c, conflict.as_str()).await;
    el(c, "[data-testid=conflict-diff] tr[data-kind=changed]").await;
    click(c, "[data-testid=keep-original]").await;
    click(c, "[data-testid=action-dialog-yes]").await;
    el(c, "[data-testid=resolved-by]").await;
    let case = last_case(db, conflict).await;
    assert_eq!(
        (case.resolution.as_deref(), case.resolved_by.as_deref()),
        (Some("kept_original"), Some(by))
    );
    assert_ne!(op(db, conflict).await.status, Status::NeedsReview);
}

/// Opens *Act on all…* over the cases the current tab and filters select, previews
/// `action` (`authorize_retry`, `reject`, `confirm`) and waits until the preview says it
/// applies to `applies` of them.
pub async fn bulk_preview(c: &Client, action: &str, applies: usize) {
    click(c, "[data-testid=bulk-open]").await;
    choose(c, "select[data-testid=bulk-action]", action).await;
    click(c, "[data-testid=bulk-preview]").await;
    el(
        c,
        &format!("[data-testid=bulk-applies][data-count='{applies}']"),
    )
    .await;
}

/// Starts the previewed bulk action with `comment` and waits for the run to end with
/// `succeeded` cases resolved and `skipped` skipped.
pub async fn bulk_run(c: &Client, comment: &str, succeeded: usize, skipped: usize) {
    type_into(c, "[data-testid=bulk-comment]", comment).await;
    click(c, "[data-testid=bulk-start]").await;
    let done = el(c, "[data-testid=bulk-done]").await;
    assert_eq!(
        done.attr("data-succeeded").await.unwrap(),
        Some(succeeded.to_string())
    );
    assert_eq!(
        done.attr("data-skipped").await.unwrap(),
        Some(skipped.to_string())
    );
}

/// *Fix and resend…* on the failed lead `failed`, from the *Failed* tab: the editor shows
/// the lead's data; text that is not JSON is refused with a sentence and changes nothing;
/// `fixed` (the lead's data as it should be) is then sent. Ends when the database holds
/// the fixed data under the original fingerprint, the case resolved as fixed and resent.
pub async fn fix_and_resend(
    c: &Client,
    db: &dyn Store,
    failed: &OperationId,
    fixed: &serde_json::Value,
) {
    tab(c, "failed_terminal").await;
    open_row(c, failed.as_str()).await;
    let before = op(db, failed).await;
    assert_eq!(before.status, Status::FailedTerminal);
    click(c, "[data-testid=resend]").await;
    let editor = el(c, "[data-testid=resend-payload]").await;
    let shown: serde_json::Value =
        serde_json::from_str(&editor.prop("value").await.unwrap().unwrap_or_default())
            .expect("the editor shows the lead's data as JSON");
    assert_eq!(Some(&shown), before.payload.as_ref());
    // Not JSON: refused, nothing changed.
    editor.clear().await.unwrap();
    editor.send_keys("{\"name\": ").await.unwrap();
    el(c, "[data-testid=resend-not-json]").await;
    click(c, "[data-testid=resend-send]").await;
    el(c, "[data-testid=resend-error]").await;
    let same = op(db, failed).await;
    assert_eq!(
        (same.version, same.status),
        (before.version, Status::FailedTerminal),
        "a refused edit changes nothing"
    );
    // The fixed data, sent.
    editor.clear().await.unwrap();
    editor.send_keys(&fixed.to_string()).await.unwrap();
    click(c, "[data-testid=resend-send]").await;
    el(c, "[data-testid=action-notice]").await;
    assert!(
        absent(c, "[data-testid=resend-dialog]").await,
        "the editor closes once sent"
    );
    let after = op(db, failed).await;
    assert_eq!(after.payload.as_ref(), Some(fixed));
    assert_eq!(
        after.payload_hash, before.payload_hash,
        "the fingerprint stays"
    );
    assert_ne!(after.status, Status::FailedTerminal);
    let case = last_case(db, failed).await;
    assert_eq!(case.resolution.as_deref(), Some("resent_edited"));
}

/// Waits (up to a minute) until the worker completed `id`, then until its open case view
/// shows it completed with that CRM id: the id, as the console shows it.
pub async fn completed_in_view(c: &Client, db: &dyn Store, id: &OperationId) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let crm_id = loop {
        let o = op(db, id).await;
        if o.status == Status::Completed {
            break o.crm_id.expect("a completed lead has its CRM id");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id} was never sent: {:?}",
            o.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    el(c, "[data-testid=op-status][data-status=completed]").await;
    crate::webdriver::text_until(c, "[data-testid=op-crm-id]", &crm_id, |t| {
        t.contains(crm_id.as_str())
    })
    .await;
    crm_id
}

/// *Pause…* on the active connector `name` on the dashboard (an admin's), with
/// `reason`: refused without one (the button waits for it), then paused by hand with the
/// person's words on the banner; *Resume* from the banner ends it. Returns who paused it,
/// as the database recorded it.
pub async fn pause_by_hand_and_resume(
    c: &Client,
    db: &dyn Store,
    name: &str,
    reason: &str,
) -> String {
    click(c, "[data-testid=nav-dashboard]").await;
    click(
        c,
        &format!("[data-testid=connectors-panel] [data-connector='{name}'] [data-testid=pause]"),
    )
    .await;
    let yes = el(c, "[data-testid=pause-dialog-yes]").await;
    assert!(
        !yes.is_enabled().await.unwrap(),
        "no pause without a reason"
    );
    type_into(c, "[data-testid=pause-reason]", reason).await;
    click(c, "[data-testid=pause-dialog-yes]").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let by = loop {
        let now = db.connector(name).await.unwrap().expect("the connector");
        if now.paused {
            assert!(now.by_hand, "{now:?}");
            assert_eq!(now.reason.as_deref(), Some(reason));
            break now.changed_by;
        }
        assert!(tokio::time::Instant::now() < deadline, "never paused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The banner: on the dashboard for those who read no case, above the queue for the rest.
    if !absent(c, "[data-testid=nav-queue]").await {
        click(c, "[data-testid=nav-queue]").await;
    }
    let shown = el(
        c,
        &format!(
            "[data-testid=paused-banner][data-connector='{name}'] [data-testid=pause-reason-shown]"
        ),
    )
    .await;
    assert_eq!(shown.text().await.unwrap(), reason);
    click(c, "[data-testid=banner-resume]").await;
    click(c, "[data-testid=resume-dialog-yes]").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while db
        .connector(name)
        .await
        .unwrap()
        .expect("the connector")
        .paused
    {
        assert!(tokio::time::Instant::now() < deadline, "never resumed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    by
}

/// *Add subscriber* on the dashboard's Feed panel (an admin's): `url` for every event
/// type; the secret is shown once, then gone for good once closed. Returns the secret
/// shown; the database holds the subscriber.
pub async fn add_feed_subscriber(c: &Client, db: &dyn Store, url: &str) -> String {
    click(c, "[data-testid=nav-dashboard]").await;
    let before = db.feed_subscribers().await.unwrap().len();
    click(c, "[data-testid=feed-panel] [data-testid=feed-add]").await;
    let yes = el(c, "[data-testid=feed-subscribe]").await;
    assert!(
        !yes.is_enabled().await.unwrap(),
        "no subscriber without a URL"
    );
    type_into(c, "[data-testid=feed-url]", url).await;
    click(c, "[data-testid=feed-subscribe]").await;
    let secret = el(c, "[data-testid=feed-secret-value]")
        .await
        .text()
        .await
        .unwrap();
    assert!(secret.starts_with("whsec_"), "{secret}");
    let now = db.feed_subscribers().await.unwrap();
    assert_eq!(now.len(), before + 1, "{now:?}");
    assert_eq!(now.last().unwrap().url, url);
    click(c, "[data-testid=feed-secret-done]").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !absent(c, "[data-testid=feed-secret]").await {
        assert!(tokio::time::Instant::now() < deadline, "the secret stays");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = el(c, "[data-testid=feed-panel]")
        .await
        .text()
        .await
        .unwrap();
    assert!(!page.contains(&secret), "shown once only");
    secret
}
