//! What happened to an operation, as its timeline names it: every kind of event the
//! gateway, the worker, the reconciler, the console and the migrations write. The store
//! takes only these when it appends (`store::NewEvent`), the console's TypeScript gets
//! them generated (`EVENT_KINDS` in `ui/src/lib/bindings.ts`), and a test checks that
//! every kind the migrations' SQL writes is one of them.
//!
//! Reading stays tolerant: a timeline may hold a kind a newer Leadgate wrote, so a read
//! event's kind is text, and [`EventKind::from_str`](std::str::FromStr) tells the known
//! ones.

use super::named_enum;

/// The kind of a timeline event. The comments say who writes each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    // intake (store/journal/ops.rs, claim_api.rs; PostgreSQL: migration 0008)
    Delivery,
    ContactMatch,
    Linked,
    AcceptedAsNew,
    // state (store/ops/mod.rs)
    StatusChanged,
    ReviewOpened,
    ReviewNoted,
    ReviewSuperseded,
    // claims and leases (store/work_queue/attempts.rs)
    Claimed,
    LeaseTakenOver,
    ReleasedUnsent,
    // a lead whose contact another lead is finding or making (store/work_queue/contacts.rs)
    ContactWait,
    AttemptStarted,
    // a CRM exchange (attempt.rs, worker.rs, worker/batch.rs, reconcile.rs)
    NotSent,
    CrmRequest,
    CrmResponse,
    ReconcileRequest,
    ReconcileResponse,
    Reconciliation,
    // outcomes (store/work_queue/attempts.rs)
    CrmCreated,
    Recovered,
    RetryScheduled,
    VerifyScheduled,
    Failed,
    ConnectorUnreachable,
    ConnectorPaused,
    Notification,
    LateOutcome,
    ExtraCrmEntity,
    // steps of a contact-and-deal create (worker/steps.rs)
    CrmStep,
    // people (store/review/ops.rs, console model)
    HumanAction,
    // claim-API redelivery (store/claim_api/ops.rs, redeliver.rs)
    Redelivered,
    RedeliveryFailed,
    // updates of CRM entities a person asked for (store/review/ops.rs, store/updates/ops.rs, worker/update.rs)
    CrmUpdateRequested,
    CrmUpdateRequest,
    CrmUpdateResponse,
    CrmUpdated,
    CrmUpdateSkipped,
    CrmUpdateRetry,
    CrmUpdateFailed,
    // retention (store/upkeep/retention.rs)
    Purged,
}

named_enum!(EventKind, "event kind", {
    Delivery => "delivery",
    ContactMatch => "contact_match",
    Linked => "linked",
    AcceptedAsNew => "accepted_as_new",
    StatusChanged => "status_changed",
    ReviewOpened => "review_opened",
    ReviewNoted => "review_noted",
    ReviewSuperseded => "review_superseded",
    Claimed => "claimed",
    LeaseTakenOver => "lease_taken_over",
    ReleasedUnsent => "released_unsent",
    ContactWait => "contact_wait",
    AttemptStarted => "attempt_started",
    NotSent => "not_sent",
    CrmRequest => "crm_request",
    CrmResponse => "crm_response",
    ReconcileRequest => "reconcile_request",
    ReconcileResponse => "reconcile_response",
    Reconciliation => "reconciliation",
    CrmCreated => "crm_created",
    Recovered => "recovered",
    RetryScheduled => "retry_scheduled",
    VerifyScheduled => "verify_scheduled",
    Failed => "failed",
    ConnectorUnreachable => "connector_unreachable",
    ConnectorPaused => "connector_paused",
    Notification => "notification",
    LateOutcome => "late_outcome",
    ExtraCrmEntity => "extra_crm_entity",
    CrmStep => "crm_step",
    HumanAction => "human_action",
    Redelivered => "redelivered",
    RedeliveryFailed => "redelivery_failed",
    CrmUpdateRequested => "crm_update_requested",
    CrmUpdateRequest => "crm_update_request",
    CrmUpdateResponse => "crm_update_response",
    CrmUpdated => "crm_updated",
    CrmUpdateSkipped => "crm_update_skipped",
    CrmUpdateRetry => "crm_update_retry",
    CrmUpdateFailed => "crm_update_failed",
    Purged => "purged",
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_as_itself() {
        assert!(EventKind::ALL.len() > 40);
        for k in EventKind::ALL {
            assert_eq!(k.as_str().parse::<EventKind>(), Ok(*k));
        }
        assert!("crm_stpe".parse::<EventKind>().is_err());
    }
}
