//! Plain-text views for the CLI and support: what a person reads in a terminal.

use std::fmt::Write;

use crate::domain::OperationId;
use crate::store::{Reads, Result, SearchPage};

/// How many of the newest timeline events `ops show` prints unless told otherwise.
pub const SHOW_EVENTS: i64 = 200;

/// Status, open review cases and a page of the timeline of one operation (the newest
/// `events` before event id `before`, with how to read the older ones), or `None` if the
/// key is unknown. Every stored text is printed with its control characters escaped
/// (`domain::text::escape_controls`): what a source or an integration sent must not
/// drive the terminal.
pub async fn operation(
    store: &dyn Reads,
    id: &OperationId,
    before: Option<i64>,
    events: i64,
) -> Result<Option<String>> {
    let Some(op) = store.operation(id).await? else {
        return Ok(None);
    };
    let cases = store.cases_of(id).await?;
    let page = store.timeline_page(id, before, events).await?;
    let mut out = String::new();
    let opt = |v: &Option<String>| esc(v.as_deref().unwrap_or("-")).into_owned();
    let _ = writeln!(out, "operation   {}", esc(op.operation_id.as_str()));
    let _ = writeln!(out, "source      {}", esc(&op.source));
    let _ = writeln!(out, "status      {}", op.status);
    if let Some(reason) = op.review_reason {
        let _ = writeln!(out, "reason      {reason}");
    }
    let _ = writeln!(
        out,
        "crm_id      {}{}",
        opt(&op.crm_id),
        op.crm_link
            .as_deref()
            .map(|l| format!(" ({})", esc(l)))
            .unwrap_or_default()
    );
    let _ = writeln!(out, "attempts    {}", op.attempts);
    if let Some(e) = &op.last_error {
        let class = op.last_error_class.map(|c| c.as_str()).unwrap_or("-");
        let _ = writeln!(out, "last error  [{class}] {}", esc(e));
    }
    let _ = writeln!(out, "version     {}", op.version);
    let _ = writeln!(out, "created     {}", op.created_at.to_rfc3339());
    let _ = writeln!(out, "updated     {}", op.updated_at.to_rfc3339());
    if !cases.is_empty() {
        let _ = writeln!(out, "\nreview cases");
        for c in &cases {
            let state = match (&c.resolved_at, &c.resolution) {
                (Some(at), Some(r)) => format!(
                    "resolved {} by {}: {r}",
                    at.to_rfc3339(),
                    opt(&c.resolved_by)
                ),
                _ => "OPEN".into(),
            };
            let _ = writeln!(out, "  #{:<6} {:<20} {state}", c.id, c.reason.as_str());
        }
    }
    let _ = writeln!(out, "\ntimeline");
    if let (true, Some(first)) = (page.older > 0, page.events.first()) {
        let _ = writeln!(
            out,
            "  … {} older events: leadgate ops show '{}' --before {}",
            page.older,
            esc(op.operation_id.as_str()).replace('\'', "'\\''"),
            first.id
        );
    }
    for e in &page.events {
        let _ = writeln!(
            out,
            "  {}  {:<18} {:<20} {}",
            e.at.format("%Y-%m-%d %H:%M:%S%.3f"),
            esc(&e.kind),
            esc(&e.actor),
            esc(&e.detail.to_string())
        );
    }
    Ok(Some(out))
}

fn esc(text: &str) -> std::borrow::Cow<'_, str> {
    crate::domain::text::escape_controls(text)
}

/// A page of `ops find` results as a table, newest first, with the cursor of the next
/// page when there is one.
pub fn search(page: &SearchPage) -> String {
    let mut out = String::new();
    if page.hits.is_empty() {
        out.push_str("no operations found\n");
        return out;
    }
    let opt = |v: &Option<String>| esc(v.as_deref().unwrap_or("-")).into_owned();
    let _ = writeln!(
        out,
        "{:<20} {:<28} {:<15} {:<12} {:<8} {:<12} {:<24} {:<14} email",
        "created", "operation", "status", "crm_id", "case", "matched", "name", "phone"
    );
    for h in &page.hits {
        let case = h
            .open_case_id
            .map(|c| format!("#{c}"))
            .unwrap_or_else(|| "-".into());
        let status = match h.review_reason {
            Some(r) if h.status == crate::domain::Status::NeedsReview => {
                format!("{} ({r})", h.status)
            }
            _ => h.status.to_string(),
        };
        let _ = writeln!(
            out,
            "{:<20} {:<28} {:<15} {:<12} {:<8} {:<12} {:<24} {:<14} {}",
            h.created_at.format("%Y-%m-%d %H:%M:%S"),
            esc(h.operation_id.as_str()),
            status,
            opt(&h.crm_id),
            case,
            h.matched.as_str(),
            opt(&h.name),
            opt(&h.phone),
            opt(&h.email)
        );
    }
    if let Some(next) = &page.next {
        // Quoted for a POSIX shell: a key may hold anything a source sent.
        let quoted = esc(&next.to_string()).replace('\'', "'\\''");
        let _ = writeln!(out, "\nmore: --after '{quoted}'");
    }
    out
}

/// A page of `ops find` results as one JSON object: `hits` and `next`.
pub fn search_json(page: &SearchPage) -> serde_json::Value {
    serde_json::json!({
        "hits": page.hits,
        "next": page.next.as_ref().map(ToString::to_string),
    })
}
