//! Retention: finished operations are scrubbed down to tombstones (key, payload hash,
//! status, crm_id), so late duplicates still get the first result.
//!
//! A purge takes finished operations without open cases (and without a pending CRM
//! update) in small batches and scrubs their payloads and contact data — the name and its
//! search words (`operation_names`) included. Each picked operation is checked again
//! under its row lock before it is scrubbed: whoever opens a case locks the row first, so
//! a case opened during the batch keeps its operation whole. Deliveries that arrive after
//! their operation was purged (a late repeat or conflict) are scrubbed once they are past
//! retention themselves and their operation has no open case. Contact locks that ended
//! before the cutoff are deleted.

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::{NewEvent, PurgeReport, Result};
use leadgate_domain::{EventKind, TenantId};

use crate::ops::WriteTx;

/// One batch of the scrub of `scope`'s rows (a tenant's, or `None`: every tenant's but
/// those with a window of their own); an erasure's (`erasing`) last batch counts what it
/// left whole.
pub(crate) async fn purge_batch<T: WriteTx>(
    mut tx: T,
    scope: Option<TenantId>,
    finished_before: DateTime<Utc>,
    batch: i64,
    now: DateTime<Utc>,
    erasing: bool,
) -> Result<PurgeReport> {
    let scope = scope.map_or(-1, |t| t.0);
    let mut report = PurgeReport::default();
    let candidates = tx.purge_candidates(scope, finished_before, batch).await?;
    report.picked = candidates.len() as u64;
    for id in candidates {
        // Checked again under the row lock: the pick did not lock, and a conflicting
        // delivery may have opened a case since. Whoever opens a case locks the row
        // first, so none can open until this commits.
        tx.lock_operation(&id).await?;
        if !tx.still_purgeable(&id, finished_before).await? {
            continue;
        }
        report.operations += 1;
        tx.scrub_operation(&id, now).await?;
        report.deliveries += tx.scrub_deliveries_of(&id).await?;
        let event = NewEvent::new(
            EventKind::Purged,
            json!({"finished_before": finished_before}),
        );
        tx.append(&id, "retention", &event, now).await?;
    }
    // Deliveries that came after their operation was purged (a late repeat or conflict),
    // once they are past retention themselves and no case is open.
    report.deliveries += tx
        .scrub_late_deliveries(scope, finished_before, batch)
        .await?;
    // Refused deliveries never became operations; their bodies may still hold personal
    // data.
    report.deliveries += tx.scrub_rejected(scope, finished_before, batch).await?;
    // Contact locks that ended before the cutoff: a hash of a phone or e-mail and the
    // contact it led to.
    report.contact_locks = tx
        .purge_contact_locks(scope, finished_before, batch)
        .await?;
    // An erasure's last batch says what it left whole; retention runs all day and need
    // not count it.
    if erasing && scope >= 0 && report.is_last(batch) {
        report.left_whole = tx.unpurgeable(scope).await?;
    }
    tx.commit().await?;
    Ok(report)
}
