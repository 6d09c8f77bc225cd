// Every timeline event kind the gateway, the worker, the reconciler, the console and the
// migrations write. `sentences.test.ts` reads the Rust and SQL sources and fails when a
// kind written there is missing here (or listed here but written nowhere).
export const EVENT_KINDS = [
  // intake (store/ops/intake.rs, claim_api.rs; PostgreSQL: migration 0008)
  "delivery",
  "contact_match",
  "linked",
  "accepted_as_new",
  // state (store/ops/mod.rs)
  "status_changed",
  "review_opened",
  "review_noted",
  "review_superseded",
  // claims and leases (store/ops/attempts.rs)
  "claimed",
  "lease_taken_over",
  "released_unsent",
  // a lead whose contact another lead is finding or making (store/ops/contacts.rs)
  "contact_wait",
  "attempt_started",
  // a CRM exchange (attempt.rs, worker.rs, worker/batch.rs, reconcile.rs)
  "not_sent",
  "crm_request",
  "crm_response",
  "reconcile_request",
  "reconcile_response",
  "reconciliation",
  // outcomes (store/ops/attempts.rs)
  "crm_created",
  "recovered",
  "retry_scheduled",
  "verify_scheduled",
  "failed",
  "connector_unreachable",
  "connector_paused",
  "notification",
  "late_outcome",
  "extra_crm_entity",
  // steps of a contact-and-deal create (worker/steps.rs)
  "crm_step",
  // people (store/ops/review.rs, console model)
  "human_action",
  // claim-API redelivery (store/ops/claim_api.rs, redeliver.rs)
  "redelivered",
  "redelivery_failed",
  // updates of CRM entities a person asked for (store/ops/review.rs, store/ops/updates.rs,
  // worker/update.rs)
  "crm_update_requested",
  "crm_update_request",
  "crm_update_response",
  "crm_updated",
  "crm_update_skipped",
  "crm_update_retry",
  "crm_update_failed",
  // retention (store/ops/retention.rs)
  "purged",
] as const;

export type EventKind = (typeof EVENT_KINDS)[number];
