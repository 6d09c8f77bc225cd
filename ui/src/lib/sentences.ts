// The case timeline in words: one sentence per event, in the operator's language, made
// of the event's kind and the detail JSON the Rust code writes for it (see
// i18n/event-kinds.ts for where). Pure: no DOM, no clock but the event's own times.
// A kind this console does not know, or a detail without what the sentence needs,
// still gives a readable sentence (the kind's name and the detail's plain fields);
// nothing here throws.
import type { EventView, JsonValue } from "./bindings";
import { duration, localDateTime, localTime, toMillis } from "./format";
import type { Lang } from "./i18n";
import type { EventKind } from "./i18n/event-kinds";
import type { EventStrings } from "./i18n/events.en";
import {
  actorLabel,
  crmLabel,
  errorClassLabel,
  eventStrings,
  pick,
  reasonLabel,
  resolutionLabel,
  statusLabel,
} from "./labels";

/** What earlier events of the same timeline tell about this one. */
export interface Context {
  /** The connector of the latest attempt or request (`bitrix24`, `amocrm`, `http`). */
  connector?: string | null;
  /** The number of the latest claimed attempt. */
  attempt?: number | null;
  /** How long the latest CRM answer took (its `duration_ms`). */
  durationMs?: number | null;
  /** `[retry] max_attempts`, when the caller knows it (the timeline does not say). */
  maxAttempts?: number | null;
  /** The zone times are shown in; the machine's when not given. */
  timeZone?: string;
  /** A person fixed the lead's data and resent it since the last create or find. */
  edited?: boolean;
}

type Obj = { [key: string]: JsonValue | undefined };
type Describer = (e: EventView, d: Obj, s: Sentences) => string | null;

/** What a describer works with: the strings, the language, the context. */
interface Sentences {
  L: EventStrings;
  lang: Lang;
  ctx: Context;
}

const obj = (v: JsonValue | undefined): Obj =>
  v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Obj) : {};
const str = (v: JsonValue | undefined): string | null =>
  typeof v === "string" && v.trim() !== "" ? v : typeof v === "number" && Number.isFinite(v) ? String(v) : null;
const num = (v: JsonValue | undefined): number | null =>
  typeof v === "number" && Number.isFinite(v) ? v : typeof v === "string" && /^\d+$/.test(v) ? Number(v) : null;
const strings = (v: JsonValue | undefined): string[] =>
  Array.isArray(v) ? v.map((x) => str(x)).filter((x): x is string => x !== null) : [];

/** A stored message cut to fit a sentence (the whole of it is in the raw JSON). */
function clip(s: string | null, max = 160): string | null {
  if (s === null) return null;
  const one = s.replace(/\s+/g, " ").trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}

/** A few ids, then `…`. */
function few(ids: string[], max = 3): string {
  return ids.length > max ? `${ids.slice(0, max).join(", ")}, …` : ids.join(", ");
}

/** `in 30 s` from the event's own time to `at`, `now` when it is due at once. */
function delay(e: EventView, at: JsonValue | undefined, s: Sentences): string | null {
  const when = str(at);
  if (when === null) return null;
  const ms = toMillis(when) - toMillis(e.at);
  if (!Number.isFinite(ms)) return null;
  return ms < 500 ? s.L.ev.now : s.L.ev.inDelay(duration(ms, s.lang));
}

const cls = (e: EventView, d: Obj): string | null => e.error_class ?? str(d.class);
const clsLabel = (c: string | null, s: Sentences) => (c === null ? null : errorClassLabel(c, s.lang));
/** The failure's message: `error` (the timeline's), else `message` (the adapter's). */
/** The CRM's or the worker's own words: never inside a sentence (they are in whatever
 *  language the CRM speaks), shown apart as a technical detail (`technical`). */
const message = (d: Obj) => clip(str(d.error) ?? str(d.message));

/** An event's raw error text, to show under its sentence; null when it has none. */
export function technical(e: EventView): string | null {
  return e.detail !== null && typeof e.detail === "object" && !Array.isArray(e.detail) ? message(e.detail as Obj) : null;
}
const crm = (d: Obj, s: Sentences) => crmLabel(str(d.connector) ?? s.ctx.connector, s.lang);
const dur = (ms: number | null, s: Sentences) => (ms === null ? null : duration(ms, s.lang));

/** The extras worth a word in a review case's own detail. */
function caseExtras(detail: Obj, s: Sentences): string {
  const { ev } = s.L;
  const out: string[] = [];
  const attempts = num(detail.attempts);
  if (attempts !== null && attempts > 0) out.push(ev.afterAttempts(attempts));
  const ids = strings(detail.crm_ids);
  if (ids.length) out.push(ev.crmIds(few(ids)));
  const lookup = str(detail.lookup);
  if (lookup?.startsWith("not found")) out.push(ev.lookupSaid(ev.verdict.not_found));
  else if (lookup === "failed") out.push(ev.lookupSaid(ev.verdict.lookup_failed));
  if (detail.opened_from === "console") out.push(ev.openedFromConsole);
  const comment = clip(str(detail.comment));
  if (comment) out.push(ev.comment(comment));
  return out.join("; ");
}

function review(noted: boolean): Describer {
  return (_e, d, s) => {
    const reason = str(d.reason);
    if (reason === null) return null;
    const f = noted ? s.L.ev.reviewNoted : s.L.ev.reviewOpened;
    return f(num(d.case_id), reasonLabel(reason, s.lang), caseExtras(obj(d.detail), s));
  };
}

/** A CRM exchange's answer: to a create (`crm_response`) or to a lookup. */
function cutOrUnsent(d: Obj, s: Sentences, cut: (d: string) => string): string | null {
  const after = num(d.cut_after_ms) ?? num(d.timeout_ms);
  if (after !== null) return cut(duration(after, s.lang));
  if (d.sent === false) return s.L.ev.notSentCall();
  return null;
}

/** The changed fields' names, in words (`phone, comment`). */
const fieldNames = (v: JsonValue | undefined, s: Sentences) =>
  strings(v)
    .map((f) => (Object.hasOwn(s.L.ev.field, f) ? pick(s.L.ev.field, f) : f))
    .join(", ");

const DESCRIBERS: Record<EventKind, Describer> = {
  delivery: (_e, d, { L }) => {
    const n = num(d.delivery_id);
    const outcome = str(d.outcome);
    if (outcome === null) return null;
    const via = d.via === "claim_api" ? L.ev.viaClaimApi : "";
    const base =
      outcome === "new"
        ? L.ev.deliveryNew(n)
        : outcome === "duplicate"
          ? L.ev.deliveryDuplicate(n)
          : outcome === "conflict"
            ? L.ev.deliveryConflict(n)
            : L.ev.deliveryOther(n, outcome.replace(/_/g, " "));
    return base + via;
  },
  contact_match: (_e, d, { L }) => {
    if (!Array.isArray(d.matches)) return null;
    const ids = d.matches.map((m) => str(obj(m).operation_id)).filter((x): x is string => x !== null);
    const rule = str(d.rule);
    const ruleText = rule === null ? "" : Object.hasOwn(L.ev.rule, rule) ? pick(L.ev.rule, rule) : L.ev.ruleOther(rule);
    return L.ev.contactMatch(d.matches.length, few(ids), ruleText);
  },
  linked: (_e, d, { L }) => {
    const id = str(d.crm_id);
    if (id === null) return null;
    return str(d.by_rule) === "same_channel" ? L.ev.linkedSameChannel(id) : L.ev.linked(id);
  },
  accepted_as_new: (_e, d, { L }) =>
    L.ev.acceptedAsNew(num(d.delivery_id), str(d.from_operation), num(d.case_id)),
  status_changed: (_e, d, { L, lang }) => {
    const to = str(d.to);
    if (to === null) return null;
    const from = str(d.from);
    return from === null
      ? L.ev.statusChangedTo(statusLabel(to, lang))
      : L.ev.statusChanged(statusLabel(from, lang), statusLabel(to, lang));
  },
  review_opened: review(false),
  review_noted: review(true),
  review_superseded: (_e, d, { L, lang }) => {
    const by = num(d.by_case);
    const status = str(d.status);
    const why = by !== null ? L.ev.supersededByCase(by) : status !== null ? L.ev.supersededStatus(statusLabel(status, lang)) : "";
    return L.ev.reviewSuperseded(num(d.case_id), why);
  },
  claimed: (_e, d, { L, ctx }) => {
    const until = str(d.lease_expires_at);
    return L.ev.claimed(num(d.attempt), until === null ? null : localTime(until, ctx.timeZone), d.granted === true);
  },
  lease_taken_over: (_e, d, { L, lang }) => {
    const owner = str(d.previous_owner);
    return L.ev.leaseTakenOver(owner === null ? null : actorLabel(owner, lang));
  },
  released_unsent: (_e, d, { L, lang }) => {
    const owner = str(d.previous_owner);
    return L.ev.releasedUnsent(owner === null ? null : actorLabel(owner, lang), d.granted === true);
  },
  contact_wait: (e, d, s) => s.L.ev.contactWait(delay(e, d.at, s), d.granted === true),
  attempt_started: (_e, d, s) => s.L.ev.attemptStarted(num(d.attempt) ?? s.ctx.attempt ?? null, crm(d, s), num(d.batch)),
  not_sent: (e, d, s) => s.L.ev.notSent(clsLabel(cls(e, d), s)),
  crm_request: (_e, d, s) => {
    const batch = num(d.batch) ?? (strings(d.origin_ids).length || null);
    return s.L.ev.crmRequest(crm(d, s), str(d.method) ?? str(d.call), batch);
  },
  crm_response: (e, d, s) => {
    const early = cutOrUnsent(d, s, s.L.ev.cutOff);
    if (early !== null) return early;
    const c = cls(e, d);
    const who = crmLabel(s.ctx.connector, s.lang);
    const status = num(d.status);
    const took = dur(num(d.duration_ms), s);
    if (c !== null) return s.L.ev.answerError(who, status, took, errorClassLabel(c, s.lang));
    return s.L.ev.answered(who, status, took, str(d.id) ?? str(d.result));
  },
  crm_update_requested: (_e, d, { L }) => L.ev.updateRequested(str(d.crm_id), num(d.delivery_id)),
  crm_update_request: (_e, d, s) => s.L.ev.updateRequest(crm(d, s), str(d.method) ?? str(d.call), fieldNames(d.fields, s)),
  crm_update_response: (e, d, s) => {
    const early = cutOrUnsent(d, s, s.L.ev.cutOff);
    if (early !== null) return early;
    const c = cls(e, d);
    const who = crmLabel(s.ctx.connector, s.lang);
    const status = num(d.status);
    const took = dur(num(d.duration_ms), s);
    if (c !== null) return s.L.ev.answerError(who, status, took, errorClassLabel(c, s.lang));
    return s.L.ev.answered(who, status, took, null);
  },
  crm_updated: (_e, d, s) => s.L.ev.updated(str(d.crm_id), fieldNames(d.fields, s)),
  crm_update_skipped: (_e, _d, { L }) => L.ev.updateSkipped,
  crm_update_retry: (e, d, s) => s.L.ev.updateRetry(clsLabel(cls(e, d), s), delay(e, d.due_at, s)),
  crm_update_failed: (e, d, s) =>
    s.L.ev.updateFailed(str(d.crm_id), clsLabel(cls(e, d), s), num(d.review_case)),
  reconcile_request: (_e, d, s) => {
    const keys = strings(d.origin_ids).length || null;
    return s.L.ev.lookupRequest(crm(d, s), keys);
  },
  reconcile_response: (e, d, s) => {
    const early = cutOrUnsent(d, s, s.L.ev.lookupCutOff);
    if (early !== null) return early;
    const took = dur(num(d.duration_ms), s);
    const c = cls(e, d);
    if (c !== null) return s.L.ev.lookupError(took, errorClassLabel(c, s.lang));
    const ids = strings(d.ids);
    const found = num(d.found) ?? (Array.isArray(d.ids) ? ids.length : null);
    return found === null ? null : s.L.ev.lookupAnswered(took, found, few(ids));
  },
  reconciliation: (_e, d, { L }) => {
    const verdict = str(d.verdict);
    if (verdict === null) return null;
    const notProof = verdict === "not_found" && d.authoritative === false;
    return L.ev.reconciliation(pick(L.ev.verdict, verdict), notProof, d.verify_pass === true);
  },
  crm_created: (_e, d, s) => {
    const id = str(d.crm_id);
    if (id === null) return null;
    const late = d.late === true;
    return s.L.ev.crmCreated(id, crmLabel(s.ctx.connector, s.lang), late ? null : dur(s.ctx.durationMs ?? null, s), late);
  },
  recovered: (_e, d, s) => {
    const id = str(d.crm_id);
    if (id === null) return null;
    const found = s.L.ev.recovered(id, crmLabel(s.ctx.connector, s.lang), d.late === true);
    // A fix that found the lead already there was not sent: the CRM keeps its data.
    return s.ctx.edited ? `${found}. ${s.L.ev.editsNotSent}` : found;
  },
  retry_scheduled: (e, d, s) => {
    const n = s.ctx.attempt === null || s.ctx.attempt === undefined ? null : s.ctx.attempt + 1;
    return s.L.ev.retry(n, s.ctx.maxAttempts ?? null, delay(e, d.at, s), clsLabel(cls(e, d), s));
  },
  verify_scheduled: (e, d, s) => {
    const c = cls(e, d);
    return s.L.ev.verify(delay(e, d.at, s), c === "uncertain" ? null : clsLabel(c, s));
  },
  failed: (e, d, s) => s.L.ev.failed(clsLabel(cls(e, d), s)),
  connector_unreachable: (e, d, s) =>
    s.L.ev.unreachable(crmLabel(s.ctx.connector, s.lang), delay(e, d.at, s), d.verify === true),
  connector_paused: (e, d, s) => s.L.ev.paused(crm(d, s), clsLabel(cls(e, d), s)),
  notification: (_e, d, s) => {
    const what = str(d.what);
    if (what === null) return null;
    const to = str(d.to);
    const whatText = pick(s.L.ev.what, what);
    if (to !== null) return s.L.ev.notifiedPerson(actorLabel(to, s.lang), str(d.channel), whatText);
    const connector = str(d.connector);
    if (what === "connector_paused" && connector !== null) {
      return s.L.ev.notified(s.L.ev.connectorPausedNamed(crmLabel(connector, s.lang)));
    }
    return s.L.ev.notified(whatText);
  },
  late_outcome: (_e, d, { L }) => {
    const id = str(d.crm_id);
    if (d.same_as_known === true && id !== null) return L.ev.lateSame(id);
    // `outcome` is the Rust debug text of the outcome: `Retry { failure: … }`.
    const word = /^[A-Za-z]+/.exec(str(d.outcome) ?? "")?.[0] ?? null;
    return L.ev.lateOutcome(word === null ? null : Object.hasOwn(L.ev.lateOutcomes, word) ? pick(L.ev.lateOutcomes, word) : word);
  },
  crm_step: (_e, d, { L }) => {
    const id = str(d.crm_id);
    const entity = str(d.entity);
    return id === null || entity === null ? null : L.ev.step(entity, id, str(d.how) ?? "created");
  },
  extra_crm_entity: (_e, d, { L }) => {
    const id = str(d.crm_id);
    return id === null ? null : L.ev.extraEntity(id, str(d.known_crm_id));
  },
  human_action: (e, d, { L, lang }) => {
    const action = str(d.action);
    if (action === null) return null;
    const who = actorLabel(e.actor, lang);
    const human = L.ev.human as Record<string, (who: string, crmId: string | null, newOp: string | null) => string>;
    // Fix and resend names the fields it edited (never their values) where others name a CRM id.
    const second = action === "resent_edited" ? editedFields(d.edited) : str(d.crm_id);
    const base = Object.hasOwn(human, action)
      ? human[action](who, second, str(d.new_operation))
      : L.ev.humanOther(who, num(d.case_id), resolutionLabel(action, lang));
    return L.ev.withComment(base, clip(str(d.comment), 300));
  },
  redelivered: (_e, d, { L }) => L.ev.redelivered(num(d.redelivery)),
  redelivery_failed: (_e, d, { L }) => L.ev.redeliveryFailed(num(d.redelivery)),
  purged: (_e, d, { L, ctx }) => {
    const before = str(d.finished_before);
    return L.ev.purged(before === null ? null : localDateTime(before, ctx.timeZone));
  },
};

/** The kinds this console has a sentence for. */
export const DESCRIBED_KINDS: readonly string[] = Object.keys(DESCRIBERS);

/** The kind's name and the detail's plain fields: for what no sentence fits. */
function generic(e: EventView, L: EventStrings): string {
  const kind = typeof e.kind === "string" ? e.kind : String(e.kind);
  const title = Object.hasOwn(L.kinds, kind) ? L.kinds[kind as EventKind] : L.unknownKind(kind);
  const fields = Object.entries(obj(e.detail))
    .filter(([, v]) => v !== null && v !== undefined && typeof v !== "object")
    .slice(0, 4)
    .map(([k, v]) => `${k}: ${clip(String(v), 60)}`)
    .join(", ");
  return L.generic(title, fields);
}

/** One event as a sentence; `ctx` says what earlier events told (see [`describeAll`]). */
export function describe(e: EventView, lang: Lang, ctx: Context = {}): string {
  const L = eventStrings(lang);
  try {
    const f = Object.hasOwn(DESCRIBERS, e.kind) ? DESCRIBERS[e.kind as EventKind] : undefined;
    const sentence = f?.(e, obj(e.detail), { L, lang, ctx });
    if (sentence) return sentence;
  } catch {
    // A detail of an unexpected shape: the plain sentence below.
  }
  try {
    return generic(e, L);
  } catch {
    return L.unknownKind(String(e?.kind));
  }
}

/** What `e` tells the events after it. */
function learn(ctx: Context, e: EventView): Context {
  const d = obj(e.detail);
  switch (e.kind) {
    case "claimed":
      return { ...ctx, attempt: num(d.attempt) ?? ctx.attempt, durationMs: null };
    case "attempt_started":
      return { ...ctx, attempt: num(d.attempt) ?? ctx.attempt, connector: str(d.connector) ?? ctx.connector };
    case "crm_request":
    case "reconcile_request":
    case "crm_update_request":
      return { ...ctx, connector: str(d.connector) ?? ctx.connector };
    case "crm_response":
      return { ...ctx, durationMs: num(d.duration_ms) };
    case "human_action":
      return d.action === "resent_edited" ? { ...ctx, edited: true } : ctx;
    case "crm_created":
    case "recovered":
      return { ...ctx, edited: false };
    default:
      return ctx;
  }
}

/** Every event of a timeline (oldest first) as a sentence, each knowing what came before. */
export function describeAll(events: EventView[], lang: Lang, options: Context = {}): string[] {
  let ctx: Context = { ...options };
  return events.map((e) => {
    const sentence = describe(e, lang, ctx);
    ctx = learn(ctx, e);
    return sentence;
  });
}

/** `phone, utm.source` from a Fix and resend's `edited` (changed, added, removed), or null. */
function editedFields(v: unknown): string | null {
  if (!v || typeof v !== "object") return null;
  const e = v as Record<string, unknown>;
  const names = ["changed", "added", "removed"].flatMap((k) => (Array.isArray(e[k]) ? e[k].filter((x): x is string => typeof x === "string") : []));
  return names.length ? clip(names.join(", "), 200) : null;
}
