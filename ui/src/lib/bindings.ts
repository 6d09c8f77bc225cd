// Generated from crates/leadgate-console-model/src/lib.rs by ts-rs: do not edit.
// Regenerate: UPDATE_BINDINGS=1 cargo test -p leadgate-console-model bindings_are_fresh

export type JsonValue = number | string | boolean | Array<JsonValue> | { [key in string]?: JsonValue } | null;

export type ConsoleError = { "kind": "not_connected" } | { "kind": "unreachable", message: string, } | { "kind": "schema_missing" } | { "kind": "schema_too_old", found: number, known: number, } | { "kind": "schema_too_new", found: number, known: number, } | { "kind": "already_resolved", case_id: number, by: string, } | { "kind": "changed", expected: number, current: number, } | { "kind": "invalid", message: string, } | { "kind": "refused", code: string, message: string, detail: string | null, } | { "kind": "not_found", message: string, } | { "kind": "forbidden", message: string, } | { "kind": "failed", message: string, };

export type Settings = { database_url: string | null, 
/**
 * `ru` or `en`; none: follow the system locale.
 */
language: string | null, 
/**
 * How to open a CRM entity: `{id}` is replaced by the `crm_id`.
 */
crm_url_template: string | null, 
/**
 * The tenant shown last (its slug), shown again at the next connection when the
 * login may still see it.
 */
tenant: string | null, };

export type Connection = { backend: string, 
/**
 * The URL without a password.
 */
display_url: string, schema_version: number, 
/**
 * The database pushes changes (PostgreSQL LISTEN/NOTIFY, `leadgate://refresh`
 * events); otherwise the console polls (SQLite).
 */
live: boolean, 
/**
 * `local` (SQLite: one machine, one operator, the OS user), `owner` (PostgreSQL with
 * the gateway's own login: everything, written directly), `person` (a personal login
 * in `role`: a gateway applies each action), `nobody` (a login in no Leadgate role).
 */
mode: string, 
/**
 * Who every action is recorded as.
 */
actor: string, 
/**
 * `support`, `sales_ops`, `manager` or `admin`: a personal login's role.
 */
role: string | null, 
/**
 * What this console may show and do; the database refuses the rest.
 */
may: Permissions, 
/**
 * The tenant shown (its slug): every list, figure, connector and rule is its own.
 */
tenant: string, 
/**
 * The tenants this login may show, the default tenant first; a switcher when more
 * than one.
 */
tenants: Array<TenantOption>, };

export type TenantOption = { slug: string, name: string, 
/**
 * `active`, `paused` (its leads wait) or `removed`.
 */
state: string, };

export type Permissions = { 
/**
 * The queue, the cases, their timelines, payloads and contact data.
 */
read_cases: boolean, 
/**
 * Decide review cases (other than cross-channel matches).
 */
resolve: boolean, 
/**
 * Decide cross-channel matches, and *Create new*.
 */
cross_channel: boolean, 
/**
 * Resume a paused connector.
 */
connectors: boolean, 
/**
 * Change the business rules (what a contact match means, the window, the channels).
 */
rules: boolean, 
/**
 * See and manage the event feed's subscribers (admins).
 */
feed: boolean, };

export type Tab = "needs_review" | "payload_conflict" | "stale" | "failed_terminal" | "connectors";

export type QueueQuery = { reason: string | null, source: string | null, 
/**
 * Only items older than this many minutes.
 */
older_than_minutes: number | null, 
/**
 * Newest first instead of oldest first (the default: who waited longest).
 */
newest_first: boolean, 
/**
 * The `next` cursor of the previous page.
 */
cursor: string | null, limit: number | null, };

export type QueueRow = { case_id: number | null, operation_id: string | null, source: string, status: string, reason: string | null, 
/**
 * When it started waiting (case opened, lease expired, failure, connector paused).
 */
since: string, attempts: number, crm_id: string | null, note: string | null, 
/**
 * Who the lead is, as the queue shows it first.
 */
lead: LeadSummary, };

export type LeadSummary = { name: string | null, phone: string | null, email: string | null, 
/**
 * The form (or channel) it came from, when the payload names one.
 */
form: string | null, };

export type QueuePage = { rows: Array<QueueRow>, next: string | null, };

export type TabCounts = { needs_review: number, by_reason: Record<string, number>, payload_conflict: number, stale: number, failed_terminal: number, paused_connectors: number, 
/**
 * Of `needs_review`, the cases this person's role does not decide (for sales ops the
 * cross-channel matches, which wait for a manager).
 */
others_decide: number, 
/**
 * A gateway or worker beat within [`GATEWAY_SILENT_AFTER`]: leads are being sent,
 * and a person's action is applied (on PostgreSQL) within a second.
 */
gateway_running: boolean, 
/**
 * When one last did, if ever.
 */
gateway_last_beat: string | null, 
/**
 * Deliveries waiting in the gateways' intake spools for the operations database, as
 * the gateways last said (`Upkeep::beats`), and when the oldest of them arrived.
 */
spooled: number, spooled_since: string | null, };

export type OperationView = { operation_id: string, source: string, status: string, payload_hash: string, payload: JsonValue | null, crm_id: string | null, crm_link: string | null, 
/**
 * Opens the entity in the CRM (from the settings' template, else the address the
 * gateway published for its CRM).
 */
crm_url: string | null, 
/**
 * The CRM's list searched for this lead's phone (else e-mail, else name): to look
 * before deciding. Set on a case's own operation only.
 */
crm_search_url: string | null, attempts: number, last_error: string | null, last_error_class: string | null, review_reason: string | null, lease_owner: string | null, lease_expires_at: string | null, retry_grants: number, 
/**
 * A retry looks the key up in the CRM before it creates: an attempt was made, or a
 * lookup is owed (an outage gave an attempt back after its create went out). The
 * console says "re-check" then, and "send" only when nothing can have reached the CRM.
 */
checks_first: boolean, contact_phone: string | null, contact_email: string | null, lead: LeadSummary, version: number, created_at: string, updated_at: string, };

export type CaseView = { id: number, operation_id: string, reason: string, opened_at: string, resolved_at: string | null, resolution: string | null, resolved_by: string | null, comment: string | null, detail: JsonValue, version: number, };

export type EventView = { id: number, 
/**
 * RFC 3339 with microseconds, UTC.
 */
at: string, kind: string, actor: string, error_class: string | null, detail: JsonValue, };

export type DeliveryPayload = { delivery_id: number, received_at: string, payload: JsonValue | null, payload_hash: string | null, };

export type Conflict = { original: JsonValue | null, original_hash: string, incoming: DeliveryPayload, };

export type CaseDetail = { operation: OperationView, 
/**
 * The case the operator opened (or the newest open one).
 */
case: CaseView | null, cases: Array<CaseView>, 
/**
 * The newest [`TIMELINE_PAGE`] events, oldest first; `older_events` more before
 * them ([`Console::older_events`]).
 */
timeline: Array<EventView>, older_events: number, conflict: Conflict | null, candidates: Array<OperationView>, 
/**
 * What the steps of a stepped create (contact + deal) found or made, each entity
 * once (its latest `crm_step` event), with the CRM page to open it on.
 */
crm_entities: Array<CrmEntityView>, 
/**
 * An ambiguous match's entities: the ids the lookup by key found in the CRM, each
 * with its page, so the person opens them and picks the one that stands.
 */
found_in_crm: Array<FoundInCrm>, 
/**
 * What a person may do on `case` now, as the resolution each would record
 * (`domain::rules::allowed_actions`: the same rules `Review::resolve` applies); empty
 * when the case is resolved.
 */
allowed: Array<string>, 
/**
 * False when this person's role decides no case of this reason (a cross-channel
 * match is a manager's): the console says whose it is instead of offering buttons.
 */
role_decides: boolean, 
/**
 * Those of `allowed` that need a comment saying why (`rules::needs_comment`).
 */
needs_comment: Array<string>, 
/**
 * Whether this person may *Fix and resend…* this lead now ([`Console::resend`]):
 * their role may, and the rules would grant a retry on the case it would resolve.
 */
may_resend: boolean, };

export type TimelinePageView = { 
/**
 * Oldest first.
 */
events: Array<EventView>, 
/**
 * How many are older still.
 */
older: number, };

export type CrmEntityView = { 
/**
 * `contact`, `deal`, `lead` or an HTTP CRM step's name.
 */
entity: string, crm_id: string, 
/**
 * `created`, `linked` (an existing one was found) or `recovered` (found by its key
 * after an answer that did not come).
 */
how: string, url: string | null, };

export type FoundInCrm = { crm_id: string, url: string | null, };

export type Action = { "type": "confirm", crm_id: string, } | { "type": "link", crm_id: string, } | { "type": "authorize_retry" } | { "type": "keep_original" } | { "type": "update_crm" } | { "type": "accept_as_new" } | { "type": "create_new" } | { "type": "reject" } | { "type": "resend_edited", payload: string, };

export type ActionRequest = { case_id: number, 
/**
 * The operation version the operator saw.
 */
expected_version: number, comment: string | null, action: Action, };

export type ResendRequest = { operation_id: string, 
/**
 * The operation version the person saw.
 */
expected_version: number, 
/**
 * The edited payload, as typed (JSON text of an object).
 */
payload: string, comment: string | null, };

export type ActionOutcome = { operation: OperationView, new_operation: string | null, };

export type ConnectorView = { name: string, paused: boolean, 
/**
 * Why: the CRM's error after an auth failure, or a person's words when `by_hand`.
 */
reason: string | null, since: string, changed_by: string, 
/**
 * Paused by a person (`changed_by`), not by the worker.
 */
by_hand: boolean, };

export type FeedSubscriberView = { id: number, 
/**
 * The URL without its query, fragment and user info (where tokens ride).
 */
url: string, events: Array<string>, 
/**
 * `active` or `disabled`.
 */
state: string, disabled_reason: string | null, disabled_at: string | null, 
/**
 * Deliveries that failed in a row.
 */
failures: number, 
/**
 * Events it is owed and has not accepted yet.
 */
pending: number, };

export type FeedAttemptView = { event_id: string, 
/**
 * The event's type (`review.opened`, …).
 */
kind: string, at: string, 
/**
 * The receiver's HTTP status, when it answered.
 */
status: number | null, ok: boolean, error: string | null, };

export type FeedSubscribed = { id: number, secret: string, };

export type SeriesPointView = { start: string, deliveries: number, new_operations: number, crm_entities: number, duplicates_absorbed: number, cases_opened: number, cases_resolved: number, retries_by_class: Record<string, number>, };

export type Dashboard = { unique_operations: number, crm_entities_created: number, duplicates_absorbed: Record<string, number>, retries_by_class: Record<string, number>, operations_by_status: Record<string, number>, stale_in_progress: number, unprocessed: number, lost: number, open_cases_by_reason: Record<string, number>, resolved_cases: number, mean_seconds_to_resolve: number | null, unreconstructable: number, paused_connectors: Array<string>, 
/**
 * Connectors whose CRM does not answer, and since when (leads wait for its probes).
 */
unreachable_connectors: { [key in string]: string }, series: Array<SeriesPointView>, 
/**
 * Entities made or found by stepped creates (contact + deal), all time:
 * `"<entity>:<how>"` (`contact:created`, `contact:linked`, `deal:created`, …).
 */
crm_steps: Record<string, number>, };

export type Range = "hour" | "day" | "week" | "month";

export type BulkAction = "authorize_retry" | "reject" | "confirm";

export type Selection = { tab: Tab, query: QueueQuery, search: string | null, };

export type BulkItem = { case_id: number, operation_id: string, 
/**
 * The operation's version when the preview read it: the run is refused on a case
 * that moved since.
 */
version: number, 
/**
 * The CRM id a bulk confirm confirms.
 */
crm_id: string | null, };

export type BulkPreview = { action: BulkAction, 
/**
 * Cases the selection matched.
 */
matched: number, 
/**
 * More than [`MAX_BULK`] matched: only the first ones are in `items`.
 */
truncated: boolean, 
/**
 * The cases the action is allowed on now.
 */
items: Array<BulkItem>, 
/**
 * Cases it is not allowed on, by `Refusal::code`.
 */
refused: Record<string, number>, 
/**
 * Whether the comment is required (always, for a bulk action).
 */
comment_required: boolean, 
/**
 * The same, reason by reason (the review reason's code), in the reasons' order.
 */
by_reason: Array<ReasonGroup>, 
/**
 * Connectors paused now: what the action sends to the worker waits until resumed.
 */
paused: Array<string>, };

export type BulkRequest = { action: BulkAction, comment: string | null, 
/**
 * The preview's `items`.
 */
items: Array<BulkItem>, };

export type BulkSkip = { case_id: number, operation_id: string, error: ConsoleError, };

export type BulkProgress = { id: string, action: BulkAction, by: string, total: number, done: number, succeeded: number, skipped: Array<BulkSkip>, finished: boolean, 
/**
 * A re-check run's leads as the worker settles them, counted afresh at each call.
 */
outcomes: RecheckOutcomes | null, };

export type RecheckOutcomes = { found: number, created: number, back_for_review: number, waiting: number, };

export type ReasonGroup = { reason: string, applies: number, refused: number, };

export type ExportRequest = { 
/**
 * The tab and its filters, or a search (cursor and limit are ignored: every
 * matching row).
 */
selection: Selection, 
/**
 * Headers (`col.<key>`), statuses (`status.<code>`) and reasons or error classes
 * (`reason.<code>`) in the operator's language.
 */
labels: { [key in string]: string }, 
/**
 * The operator's offset from UTC, in minutes east (Moscow: 180).
 */
utc_offset_minutes: number, 
/**
 * Fields separated by `;` instead of `,`: what Excel expects where the decimal
 * separator is a comma (a Russian locale), else it opens the file in one column.
 */
semicolons?: boolean, };

export type SearchRow = { operation_id: string, source: string, status: string, created_at: string, updated_at: string, crm_id: string | null, review_reason: string | null, 
/**
 * The newest open review case, to open it in the case view.
 */
open_case_id: number | null, name: string | null, phone: string | null, email: string | null, 
/**
 * Which field the query matched.
 */
matched: "operation_id" | "crm_id" | "name" | "phone" | "email", };

export type SearchResults = { 
/**
 * How the query was read: a phone (`normalized` is its E.164 form), an e-mail
 * (normalized), or text (key, crm_id and name).
 */
kind: "phone" | "email" | "text", normalized: string, rows: Array<SearchRow>, 
/**
 * The cursor of the next page; none on the last.
 */
next: string | null, };

export type LookupRow = { operation_id: string, source: string, status: string, received_at: string, crm_id: string | null, 
/**
 * The CRM has it: the lead was created there or linked to an entity it holds.
 */
in_crm: boolean, };

export type LookupResult = { 
/**
 * The phone as it was looked for (normalized), when the query reads as one.
 */
phone: string | null, rows: Array<LookupRow>, };

export type DiagnosisRow = { id: number, generated_at: string, input: string, 
/**
 * [`DiagnosisRow::input`] as a code, for the console's language (none when the
 * text names no input this version knows).
 */
input_code: ReportInput | null, period_from: string | null, period_to: string | null, groups: number, pairs: number, 
/**
 * Verdict code → pairs.
 */
totals: Record<string, number>, };

export type DiagnosisView = { row: DiagnosisRow, report: ReportData, };

export type ReportData = { generated_at: string, 
/**
 * What was read: "CSV export leads.csv", "amoCRM leads and contact search (API v4)".
 */
input: string, 
/**
 * [`ReportData::input`] as a code (none in reports saved before the codes).
 */
input_code: ReportInput | null, period_from: string | null, period_to: string | null, 
/**
 * What was read, in words ("132 CRM entities (…), Leadgate's journal, no n8n history").
 */
sources_read: string, 
/**
 * [`ReportData::sources_read`] as a code (none in reports saved before the codes).
 */
sources_read_code: SourcesRead | null, entities_read: number, groups: number, pairs: number, 
/**
 * Every verdict, in the order of the rules, with its pairs (zeros included).
 */
per_verdict: Array<VerdictCount>, 
/**
 * Per source: pairs per verdict, in the order of [`ReportData::per_verdict`].
 */
per_source: Array<SourceCounts>, 
/**
 * The most frequent first.
 */
causes: Array<CauseCount>, pair_list: Array<PairData>, };

export type VerdictCount = { 
/**
 * `Verdict::code`: `technical_duplicate`, `same_submission_without_key`, …
 */
verdict: string, title: string, pairs: number, };

export type SourceCounts = { source: string, pairs: Array<number>, };

export type CauseCount = { verdict: string, 
/**
 * "Technical duplicate: timeout after a successful create".
 */
cause: string, 
/**
 * What set it off, the cause after the verdict's title (none in reports saved
 * before the codes, and for causes that are the verdict alone).
 */
trigger: Trigger | null, pairs: number, };

export type PairData = { number: number, earlier: string, later: string, 
/**
 * The phones and e-mails the group shares, masked.
 */
shared: Array<string>, verdict: string, cause: string, 
/**
 * As in [`CauseCount::trigger`].
 */
trigger: Trigger | null, source: string, evidence: Array<string>, 
/**
 * [`PairData::evidence`] as codes, line for line (empty in reports saved before
 * the codes).
 */
evidence_codes: Array<Evidence>, timeline: Array<LineData>, };

export type LineData = { at: string | null, 
/**
 * `CRM`, `Leadgate` or `n8n`.
 */
origin: string, entity: string, text: string, 
/**
 * [`LineData::text`] as a code (none in reports saved before the codes).
 */
text_code: LineText | null, };

export type ReportInput = { "code": "csv", "args": { file: string, } } | { "code": "bitrix24_api" } | { "code": "amo_crm_api" };

export type SourcesRead = { entities: number, input: ReportInput, journal: boolean, 
/**
 * n8n executions read; `None` when n8n's history was not read.
 */
executions: number | null, };

export type Trigger = "timeout_after_create" | "two_workers" | "redelivery" | "retry_execution" | "manual_rerun" | "same_key_twice";

export type KeyKind = "leadgate_operation" | "submission_id" | "origin_id";

export type ContentMeasure = "payload_hash" | "n8n_body" | "crm_fields";

export type Evidence = { "code": "created_after", "args": { later: string, secs: number, earlier: string, } } | { "code": "same_operation", "args": { operation: string, deliveries: number, attempts: number, } } | { "code": "outcome_unknown_sent_again" } | { "code": "attempts_by", "args": { workers: Array<string>, } } | { "code": "delivered_times", "args": { n: number, } } | { "code": "execution_retry", "args": { later: string, mode: string, earlier: string, status: string, } } | { "code": "execution_failed_yet_created", "args": { execution: string, status: string, entity: string, } } | { "code": "same_submission", "args": { earlier: string, later: string, submission: string, } } | { "code": "started_by_hand", "args": { execution: string, } } | { "code": "triggered_again", "args": { execution: string, mode: string, } } | { "code": "same_origin_id", "args": { origin_id: string, } } | { "code": "same_content", "args": { measure: ContentMeasure, } } | { "code": "two_identities", "args": { kind: KeyKind, first: string, second: string, } } | { "code": "no_shared_key" } | { "code": "different_sources", "args": { first: string, then: string, } } | { "code": "two_events", "args": { first_kind: KeyKind, first: string, second_kind: KeyKind, second: string, } } | { "code": "different_content", "args": { measure: ContentMeasure, } } | { "code": "no_key", "args": { entity: string, } };

export type LineDetail = { 
/**
 * `outcome`, `attempt`, `method`, `status`, `crm_id`, `error`, `class`, …
 */
field: string, value: string, };

export type LineText = { "code": "crm_created", "args": { entity: string, source: string | null, originator_id: string | null, origin_id: string | null, utm_source: string | null, } } | { "code": "journal_event", "args": { operation: string, kind: string, actor: string, details: Array<LineDetail>, } } | { "code": "execution_started", "args": { execution: string, workflow: string, mode: string, retry_of: string | null, submission: string | null, } } | { "code": "execution_ended", "args": { execution: string, status: string, nodes: Array<string>, crm_ids: Array<string>, } };

export type SourceRulesView = { source: string, 
/**
 * `create`, `link` or `review`.
 */
rule: string, window_secs: number, channel: string, 
/**
 * What an edit names as the version it was made from.
 */
version: number, changed_at: string, changed_by: string, 
/**
 * The other sources of its channel.
 */
same_channel: Array<string>, };

export type RuleValues = { rule: string, window_secs: number, channel: string, };

export type RuleChangeView = { id: number, source: string, version: number, 
/**
 * A login, the OS user, or `configuration` (seeded from the gateway's TOML).
 */
actor: string, changed_at: string, 
/**
 * None: seeded.
 */
before: RuleValues | null, after: RuleValues, };

export type RulesView = { sources: Array<SourceRulesView>, 
/**
 * Newest first.
 */
history: Array<RuleChangeView>, 
/**
 * This connection may change them (a manager; local mode and the owner's login).
 */
may_edit: boolean, };

export type RulesEdit = { source: string, 
/**
 * The version shown when the edit was made: refused if another edit came first.
 */
expected_version: number, rule: string, window_secs: number, channel: string, };

/** Every kind of timeline event Leadgate writes (`EventKind` in crates/leadgate-domain). */
export const EVENT_KINDS = [
  "delivery",
  "contact_match",
  "linked",
  "accepted_as_new",
  "status_changed",
  "review_opened",
  "review_noted",
  "review_superseded",
  "claimed",
  "lease_taken_over",
  "released_unsent",
  "contact_wait",
  "attempt_started",
  "not_sent",
  "crm_request",
  "crm_response",
  "reconcile_request",
  "reconcile_response",
  "reconciliation",
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
  "crm_step",
  "human_action",
  "redelivered",
  "redelivery_failed",
  "crm_update_requested",
  "crm_update_request",
  "crm_update_response",
  "crm_updated",
  "crm_update_skipped",
  "crm_update_retry",
  "crm_update_failed",
  "purged",
] as const;

export type EventKind = (typeof EVENT_KINDS)[number];
