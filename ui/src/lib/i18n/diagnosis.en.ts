// The Diagnosis screen's sentences, by code (`leadgate_domain::report`'s `Evidence`,
// `LineText`, `ReportInput`, `SourcesRead`, `Trigger`): English word for word as Rust
// writes it (src/diagnose, crates/leadgate-domain/src/report/said.rs), so a report reads
// the same here as in its HTML. diagnosis.ru.ts has the same shape (checked by the type).
import type { ContentMeasure, Evidence, KeyKind, LineDetail, LineText, ReportInput, SourcesRead, Trigger } from "../bindings";

/** The arguments of code `C` of the union `U` (`undefined` for a code without any). */
type Args<U, C> = Extract<U, { code: C }> extends { args: infer A } ? A : undefined;
/** One function per code of `U`, from its arguments to a sentence. */
export type Sayers<U extends { code: string }> = { [C in U["code"]]: (args: Args<U, C>) => string };

export interface DiagnosisWords {
  evidence: Sayers<Evidence>;
  line: Sayers<LineText>;
  input: Sayers<ReportInput>;
  /** What was read; `input` already said. */
  sourcesRead: (s: SourcesRead, input: string) => string;
  trigger: Record<Trigger, string>;
  keyKind: Record<KeyKind, string>;
  measure: Record<ContentMeasure, string>;
  /** A gap in seconds: `40 s`, `12 min`, `3 h 5 min`, `2 d`. */
  duration: (secs: number) => string;
  /** A report's stand-in for a pair without a known source. */
  unknownSource: string;
}

/** The same thresholds as Rust's `duration` (crates/leadgate-domain/src/report/said.rs). */
export function durationIn(u: { s: string; min: string; h: string; d: string }): (secs: number) => string {
  return (s) => {
    if (s < 120) return `${s} ${u.s}`;
    if (s < 3600) return `${Math.floor(s / 60)} ${u.min}`;
    if (s < 86_400) {
      const m = Math.floor((s % 3600) / 60);
      return `${Math.floor(s / 3600)} ${u.h}${m ? ` ${m} ${u.min}` : ""}`;
    }
    return `${Math.floor(s / 86_400)} ${u.d}`;
  };
}

const duration = durationIn({ s: "s", min: "min", h: "h", d: "d" });
const keyKind: Record<KeyKind, string> = {
  leadgate_operation: "Leadgate operation",
  submission_id: "submission id",
  origin_id: "ORIGIN_ID",
};
const measure: Record<ContentMeasure, string> = {
  payload_hash: "payload hash",
  n8n_body: "n8n request body",
  crm_fields: "CRM fields",
};
const details = (d: LineDetail[]) => (d.length ? ` (${d.map((x) => `${x.field} ${x.value}`).join(", ")})` : "");

export const diagnosisEn: DiagnosisWords = {
  evidence: {
    created_after: (a) => `entity ${a.later} was created ${duration(a.secs)} after entity ${a.earlier}`,
    same_operation: (a) => `both belong to Leadgate operation ${a.operation} (${a.deliveries} deliveries, ${a.attempts} attempts)`,
    outcome_unknown_sent_again: () => "an attempt's outcome was unknown and the create was sent again",
    attempts_by: (a) => `attempts by ${a.workers.join(" and ")}`,
    delivered_times: (a) => `the source delivered it ${a.n} times`,
    execution_retry: (a) => `n8n execution ${a.later} (${a.mode}) is a retry of execution ${a.earlier} (${a.status})`,
    execution_failed_yet_created: (a) =>
      `execution ${a.execution} ended as \`${a.status}\` although entity ${a.entity} exists: the create had gone through`,
    same_submission: (a) => `n8n executions ${a.earlier} and ${a.later} both carry submission ${a.submission}`,
    started_by_hand: (a) => `execution ${a.execution} was started by hand`,
    triggered_again: (a) => `execution ${a.execution} was triggered by \`${a.mode}\`: the source delivered the event again`,
    same_origin_id: (a) => `both carry ORIGIN_ID ${a.origin_id}`,
    same_content: (a) => `the same content (${measure[a.measure]})`,
    two_identities: (a) => `but two identities: ${keyKind[a.kind]} ${a.first} and ${a.second}`,
    no_shared_key: () => "and no key that both carry",
    different_sources: (a) => `different sources: ${a.first}, then ${a.then}`,
    two_events: (a) => `two events: ${keyKind[a.first_kind]} ${a.first} and ${keyKind[a.second_kind]} ${a.second}`,
    different_content: (a) => `different content (${measure[a.measure]})`,
    no_key: (a) => `entity ${a.entity} has no key: no ORIGIN_ID, no Leadgate operation, no n8n execution`,
  },
  line: {
    crm_created: (a) => {
      const about: string[] = [];
      if (a.source !== null) about.push(`source ${a.source}`);
      if (a.origin_id !== null) about.push(a.originator_id !== null ? `ORIGINATOR_ID ${a.originator_id}, ORIGIN_ID ${a.origin_id}` : `ORIGIN_ID ${a.origin_id}`);
      else about.push("no ORIGIN_ID");
      if (a.utm_source !== null) about.push(`utm_source ${a.utm_source}`);
      return `entity ${a.entity} created in the CRM (${about.join(", ")})`;
    },
    journal_event: (a) => `${a.operation} ${a.kind.replace(/_/g, " ")} by ${a.actor}${details(a.details)}`,
    execution_started: (a) =>
      `n8n execution ${a.execution} of workflow ${a.workflow} started (${a.mode}${a.retry_of !== null ? `, retry of ${a.retry_of}` : ""})` +
      (a.submission !== null ? `: submission ${a.submission}` : ": no submission id in the request"),
    execution_ended: (a) =>
      `n8n execution ${a.execution} ended \`${a.status}\` after nodes ${a.nodes.join(" → ")}` +
      (a.crm_ids.length ? `; the CRM answered id ${a.crm_ids.join(", ")}` : ""),
  },
  input: {
    csv: (a) => `CSV export ${a.file}`,
    bitrix24_api: () => "Bitrix24 crm.lead.list and crm.duplicate.findbycomm",
    amo_crm_api: () => "amoCRM leads and contact search (API v4)",
  },
  sourcesRead: (s, input) =>
    `${s.entities} CRM entities (${input}), ${s.journal ? "Leadgate's journal" : "no Leadgate journal"}, ` +
    (s.executions !== null ? `${s.executions} n8n executions` : "no n8n history"),
  trigger: {
    timeout_after_create: "timeout after a successful create",
    two_workers: "two workers",
    redelivery: "redelivery of the same event",
    retry_execution: "retry of an n8n execution",
    manual_rerun: "manual re-run of the workflow",
    same_key_twice: "the same key created twice",
  },
  keyKind,
  measure,
  duration,
  unknownSource: "(unknown)",
};
