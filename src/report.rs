//! Plain-text views for the CLI and support: what a person reads in a terminal.

use std::fmt::Write;

use crate::domain::OperationId;
use crate::store::{Result, Store};

/// Status, open review cases and the full timeline of one operation, or `None` if the
/// key is unknown.
pub async fn operation(store: &dyn Store, id: &OperationId) -> Result<Option<String>> {
    let Some(op) = store.operation(id).await? else {
        return Ok(None);
    };
    let cases = store.cases_of(id).await?;
    let timeline = store.timeline(id).await?;
    let mut out = String::new();
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let _ = writeln!(out, "operation   {}", op.operation_id);
    let _ = writeln!(out, "source      {}", op.source);
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
            .map(|l| format!(" ({l})"))
            .unwrap_or_default()
    );
    let _ = writeln!(out, "attempts    {}", op.attempts);
    if let Some(e) = &op.last_error {
        let class = op.last_error_class.map(|c| c.as_str()).unwrap_or("-");
        let _ = writeln!(out, "last error  [{class}] {e}");
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
    for e in &timeline {
        let _ = writeln!(
            out,
            "  {}  {:<18} {:<20} {}",
            e.at.format("%Y-%m-%d %H:%M:%S%.3f"),
            e.kind,
            e.actor,
            e.detail
        );
    }
    Ok(Some(out))
}
