// English words of the case timeline and of the labels every view shows: statuses,
// review reasons, error classes, resolutions, actors. events.ru.ts has the same keys
// (checked by its type). The logic (which field says what) is in ../sentences.ts; these
// functions only put already formatted pieces into words.
import type { EventKind } from "./event-kinds";

/** ` #47`, or nothing when the number is not known. */
const no = (n: number | null) => (n === null ? "" : ` #${n}`);
/** `: «text»`, or nothing. */
const quoted = (s: string | null, sep = ": ") => (s ? `${sep}«${s}»` : "");

export const eventsEn = {
  /** The locale that dates and numbers are written in. */
  locale: "en-GB",
  status: {
    received: "received",
    in_progress: "in progress",
    completed: "completed",
    failed_terminal: "failed",
    needs_review: "needs review",
  },
  reason: {
    payload_conflict: "payload conflict",
    uncertain_outcome: "uncertain outcome",
    retries_exhausted: "retries exhausted",
    ambiguous_match: "ambiguous match",
    cross_channel_match: "cross-channel match",
    late_duplicate: "late duplicate",
  },
  errorClass: {
    not_sent: "not sent",
    rate_limited: "CRM rate limit",
    uncertain: "outcome unknown",
    validation: "data refused by the CRM",
    auth: "credentials rejected",
    conflict: "payload conflict",
  },
  resolution: {
    confirmed_crm_result: "confirmed CRM result",
    linked_existing: "linked to existing",
    retry_authorized: "retry authorized",
    kept_original: "kept original",
    accepted_as_new: "accepted as new",
    updated_crm: "kept original, CRM updated",
    rejected: "rejected",
    created_new: "created as new",
    resent_edited: "fixed and resent",
    superseded: "superseded",
  },
  actor: {
    gateway: "gateway",
    console: "console",
    retention: "retention",
    migration: "migration",
    claim_api: "claim API",
    reconciler: "reconciler",
    worker: (id: string) => `worker ${id}`,
    reconcilerOf: (id: string) => `reconciler ${id}`,
  },
  crm: {
    bitrix24: "Bitrix24",
    amocrm: "amoCRM",
    http: "the HTTP CRM",
    unknown: "the CRM",
  },
  units: { ms: "ms", s: "s", min: "min", h: "h", d: "d", decimal: "." },
  /** Short names of the kinds, for a detail the sentence cannot be made of. */
  kinds: {
    delivery: "Delivery",
    contact_match: "Contact match",
    linked: "Linked to an existing entity",
    accepted_as_new: "Accepted as new",
    status_changed: "Status changed",
    review_opened: "Review case opened",
    review_noted: "Added to the review case",
    review_superseded: "Review case superseded",
    claimed: "Claimed",
    lease_taken_over: "Lease taken over",
    released_unsent: "Put back unsent",
    contact_wait: "Waiting for the contact",
    attempt_started: "Attempt started",
    not_sent: "Not sent",
    crm_request: "Request to the CRM",
    crm_response: "Answer of the CRM",
    reconcile_request: "Lookup by key",
    reconcile_response: "Answer to the lookup",
    reconciliation: "Looked up by key",
    crm_created: "Created in the CRM",
    recovered: "Found in the CRM",
    retry_scheduled: "Retry scheduled",
    verify_scheduled: "Lookup scheduled",
    failed: "Failed for good",
    connector_unreachable: "CRM unreachable",
    connector_paused: "Connector paused",
    notification: "Notification",
    late_outcome: "Late report",
    extra_crm_entity: "Second CRM entity",
    crm_step: "Step done in the CRM",
    human_action: "A person's decision",
    redelivered: "Sent back to the integration",
    redelivery_failed: "Redelivery failed",
    purged: "Data removed by retention",
    crm_update_requested: "CRM update requested",
    crm_update_request: "Update sent to the CRM",
    crm_update_response: "Answer to the update",
    crm_updated: "Updated in the CRM",
    crm_update_skipped: "Update not needed",
    crm_update_retry: "Update retried",
    crm_update_failed: "Update failed",
  } satisfies Record<EventKind, string>,
  generic: (title: string, fields: string) => (fields ? `${title} (${fields})` : title),
  unknownKind: (kind: string) => `Event “${kind}”`,
  ev: {
    deliveryNew: (n: number | null) => `Delivery${no(n)} — new operation`,
    deliveryDuplicate: (n: number | null) => `Delivery${no(n)} — same lead again, absorbed`,
    deliveryConflict: (n: number | null) => `Delivery${no(n)} — same key, different data: payload conflict`,
    deliveryOther: (n: number | null, outcome: string) => `Delivery${no(n)} — ${outcome}`,
    viaClaimApi: " (through the claim API)",
    contactMatch: (count: number, list: string, rule: string) =>
      `Same phone or e-mail as ${count} earlier ${count === 1 ? "operation" : "operations"}${list ? ` (${list})` : ""}: ${rule}`,
    rule: {
      create: "a new CRM entity is created anyway",
      link: "linked to its CRM entity",
      review: "a person decides",
    },
    ruleOther: (rule: string) => `rule “${rule}”`,
    linked: (crmId: string) => `Linked to the existing CRM entity ${crmId} (matching rule), no CRM call`,
    linkedSameChannel: (crmId: string) => `Linked to the existing CRM entity ${crmId}: the same request again through the same channel, no CRM call`,
    statusChanged: (from: string, to: string) => `Status: ${from} → ${to}`,
    statusChangedTo: (to: string) => `Status: ${to}`,
    reviewOpened: (caseNo: number | null, reason: string, extra: string) =>
      `Case${no(caseNo)} opened: ${reason}${extra ? `; ${extra}` : ""}`,
    reviewNoted: (caseNo: number | null, reason: string, extra: string) =>
      `Added to the open case${no(caseNo)}: ${reason}${extra ? `; ${extra}` : ""}`,
    afterAttempts: (n: number) => `after ${n} ${n === 1 ? "attempt" : "attempts"}`,
    crmIds: (ids: string) => `CRM ids ${ids}`,
    lookupSaid: (what: string) => `lookup: ${what}`,
    comment: (c: string) => `«${c}»`,
    openedFromConsole: "sent to review from the console",
    reviewSuperseded: (caseNo: number | null, why: string) => `Case${no(caseNo)} closed as superseded${why ? `: ${why}` : ""}`,
    supersededByCase: (caseNo: number) => `case #${caseNo} settled the operation`,
    supersededStatus: (status: string) => `the operation is ${status} already`,
    claimed: (attempt: number | null, until: string | null, granted: boolean) =>
      `${attempt === null ? "Claimed" : `Attempt ${attempt} claimed`}${until ? `, lease until ${until}` : ""}${granted ? " — the one retry a person granted" : ""}`,
    leaseTakenOver: (owner: string | null) =>
      `${owner ? `The lease of ${owner}` : "The lease"} ran out — taken over to look the key up in the CRM`,
    releasedUnsent: (owner: string | null, granted: boolean) =>
      `${owner ? `The lease of ${owner}` : "The lease"} ran out before anything was sent — put back, the attempt${granted ? " and the person's grant" : ""} given back`,
    contactWait: (when: string | null, granted: boolean) =>
      `Another lead with this phone or e-mail is finding or making the client's contact — put back unsent${when ? `, due again ${when}` : ""}, the attempt${granted ? " and the person's grant" : ""} given back`,
    attemptStarted: (attempt: number | null, crm: string, batch: number | null) =>
      `${attempt === null ? "The create goes out" : `Attempt ${attempt}`}: sending to ${crm}${batch && batch > 1 ? ` (one request of ${batch} creates)` : ""}`,
    crmRequest: (crm: string, method: string | null, batch: number | null) =>
      `Request to ${crm}${method ? `: ${method}` : ""}${batch && batch > 1 ? ` (${batch} creates in one request)` : ""}`,
    cutOff: (d: string) => `No answer within ${d} — outcome unknown`,
    notSentCall: () => `The request was not sent`,
    answered: (crm: string, status: number | null, d: string | null, id: string | null) =>
      `${cap(crm)} answered${status !== null ? ` HTTP ${status}` : ""}${d ? ` in ${d}` : ""}${id ? `: id ${id}` : ""}`,
    answerError: (crm: string, status: number | null, d: string | null, cls: string) =>
      `${cap(crm)} answered${status !== null ? ` HTTP ${status}` : ""}${d ? ` in ${d}` : ""}: ${cls}`,
    lookupRequest: (crm: string, keys: number | null) =>
      `Looking the key up in ${crm}${keys && keys > 1 ? ` (${keys} keys in one request)` : ""}`,
    lookupAnswered: (d: string | null, found: number, ids: string) =>
      `The lookup answered${d ? ` in ${d}` : ""}: ${found === 0 ? "nothing found" : `found ${found}${ids ? ` (${ids})` : ""}`}`,
    lookupError: (d: string | null, cls: string) =>
      `The lookup failed${d ? ` after ${d}` : ""}: ${cls}`,
    lookupCutOff: (d: string) => `No answer to the lookup within ${d}`,
    reconciliation: (verdict: string, notProof: boolean, verifyPass: boolean) =>
      `Looked up by key${verifyPass ? " before creating again" : ""}: ${verdict}${notProof ? " — this CRM's search may lag, not proof that nothing was created" : ""}`,
    verdict: {
      found_one: "found",
      found_several: "several entities found",
      not_found: "not found",
      lookup_failed: "the lookup failed",
    },
    crmCreated: (id: string, crm: string, d: string | null, late: boolean) =>
      `${late ? "A late answer: lead" : "Lead"} ${id} created in ${crm}${d ? ` in ${d}` : ""}`,
    recovered: (id: string, crm: string, late: boolean) =>
      `${late ? "A late answer: lead" : "Lead"} ${id} found in ${crm} — the earlier create had landed, nothing created twice`,
    editsNotSent: "The fixed data was not sent: the lead was already in the CRM — change it there (Open in CRM)",
    step: (entity: string, id: string, how: string) =>
      `${entity === "contact" ? "Contact" : entity === "deal" ? "Deal" : cap(entity)} ${id} ${
        how === "linked"
          ? "linked: the client is known in the CRM (found by phone or e-mail)"
          : how === "recovered"
            ? "found again by its key — the earlier create had landed, nothing created twice"
            : "created"
      }`,
    retry: (n: number | null, of: number | null, inD: string | null, cls: string | null) =>
      `Retry${n === null ? "" : ` ${n}`}${n !== null && of !== null ? ` of ${of}` : ""} scheduled${inD ? ` ${inD}` : ""}${cls ? ` (${cls})` : ""}`,
    verify: (inD: string | null, cls: string | null) =>
      `Outcome unknown${cls ? ` (${cls})` : ""} — the key is looked up again${inD ? ` ${inD}` : ""}, before anything is created`,
    failed: (cls: string | null) => `Failed for good${cls ? `: ${cls}` : ""}`,
    unreachable: (crm: string, inD: string | null, verify: boolean) =>
      `${cap(crm)} does not answer — waiting for its next probe${inD ? ` ${inD}` : ""}; this attempt is not counted${verify ? ", the key is looked up first" : ""}`,
    paused: (connector: string, cls: string | null) =>
      `Connector ${connector} paused${cls ? `: ${cls}` : ""}. Nothing is sent to it until someone resumes it`,
    notifiedPerson: (who: string, channel: string | null, what: string) =>
      `${who} was notified${channel === "desktop" ? " on the desktop" : channel ? ` (${channel})` : ""}: ${what}`,
    notified: (what: string) => `Notification: ${what}`,
    what: {
      review_opened: "new review case",
      connector_paused: "connector paused",
    },
    connectorPausedNamed: (c: string) => `connector ${c} paused`,
    lateOutcome: (what: string | null) =>
      `A late report after the lease was lost${what ? ` (${what})` : ""} — kept on the timeline, nothing changed`,
    lateOutcomes: {
      Retry: "retry",
      Verify: "look up again",
      Terminal: "failure",
      Review: "needs review",
      Outage: "CRM unreachable",
      PauseConnector: "credentials rejected",
    },
    lateSame: (id: string) => `A late answer repeats the known CRM id ${id}`,
    extraEntity: (id: string, known: string | null) =>
      `A second CRM entity ${id} was created${known ? ` (${known} was already known)` : ""} — a person decides`,
    human: {
      confirmed_crm_result: (who: string, crmId: string | null) => `${who} confirmed the CRM result${crmId ? ` ${crmId}` : ""}`,
      linked_existing: (who: string, crmId: string | null) => `${who} linked it to the existing entity${crmId ? ` ${crmId}` : ""}`,
      retry_authorized: (who: string) => `${who} authorized one retry`,
      kept_original: (who: string) => `${who} kept the original data`,
      accepted_as_new: (who: string, _crmId: string | null, newOp: string | null) =>
        `${who} accepted the conflicting delivery as a new operation${newOp ? ` ${newOp}` : ""}`,
      updated_crm: (who: string, crmId: string | null) =>
        `${who} kept the original data and asked for the CRM entity${crmId ? ` ${crmId}` : ""} to get the changed fields`,
      rejected: (who: string) => `${who} rejected the lead`,
      created_new: (who: string) => `${who} sent it to the CRM as a new lead`,
      resent_edited: (who: string, fields: string | null) => `${who} fixed the lead's data${fields ? ` (${fields})` : ""} and sent it again`,
    },
    humanOther: (who: string, caseNo: number | null, resolution: string) => `${who} resolved case${no(caseNo)}: ${resolution}`,
    withComment: (s: string, c: string | null) => `${s}${quoted(c)}`,
    acceptedAsNew: (delivery: number | null, from: string | null, caseNo: number | null) =>
      `New operation made of delivery${no(delivery)}${from ? ` of ${from}` : ""}, accepted as new${caseNo === null ? "" : ` (case #${caseNo})`}`,
    redelivered: (n: number | null) => `Sent back to the integration to be claimed again${n === null ? "" : ` (redelivery ${n})`}`,
    redeliveryFailed: (n: number | null) =>
      `Sending back to the integration failed${n === null ? "" : ` (redelivery ${n})`}; tried again later`,
    purged: (before: string | null) =>
      `Retention removed the payload and contact data${before ? ` (finished before ${before})` : ""}`,
    notSent: (cls: string | null) => `Nothing was sent to the CRM${cls ? `: ${cls}` : ""}`,
    field: { title: "title", name: "name", phone: "phone", email: "e-mail", comment: "comment" },
    updateRequested: (crmId: string | null, delivery: number | null) =>
      `The CRM entity${crmId ? ` ${crmId}` : ""} is to get the changed fields of delivery${no(delivery)}; the worker sends them`,
    updateRequest: (crm: string, method: string | null, fields: string) =>
      `Update sent to ${crm}${method ? `: ${method}` : ""}${fields ? ` (${fields})` : ""}`,
    updated: (crmId: string | null, fields: string) =>
      `CRM entity${crmId ? ` ${crmId}` : ""} updated${fields ? `: ${fields}` : ""}`,
    updateSkipped: "Nothing the CRM holds differs in the later delivery: no update sent",
    updateRetry: (cls: string | null, inD: string | null) =>
      `The update was not confirmed${cls ? ` (${cls})` : ""} — sent again${inD ? ` ${inD}` : ""}`,
    updateFailed: (crmId: string | null, cls: string | null, caseNo: number | null) =>
      `The update of${crmId ? ` ${crmId}` : " the CRM entity"} failed${cls ? `: ${cls}` : ""}${caseNo === null ? "" : `; case #${caseNo} asks a person again`}`,
    /** A delay from the event's time: `in 30 s`, `now`. */
    inDelay: (d: string) => `in ${d}`,
    now: "now",
  },
};

function cap(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

export type EventStrings = typeof eventsEn;
