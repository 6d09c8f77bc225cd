// The Diagnosis screen's words and figures: a saved `leadgate diagnose` report as its
// HTML shows it (times in UTC, as the report states them).
import type { DiagnosisRow, PairData, ReportData } from "./bindings";
import type { Strings } from "./i18n";

/** `2026-11-20 07:15 UTC`; seconds with `withSeconds`. The input as it is when it is not a time. */
export function utc(rfc3339: string, withSeconds = false): string {
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(:\d{2})?/.exec(rfc3339);
  if (!m) return rfc3339;
  return `${m[1]} ${m[2]}${withSeconds ? (m[3] ?? ":00") : ""} UTC`;
}

/** The period a report covers, or "the whole export" for an export read without one. */
export function periodText(from: string | null, to: string | null, t: Strings): string {
  if (!from || !to) return t.diag.wholeExport;
  return `${utc(from)} – ${utc(to)}`;
}

/** A verdict's name in the operator's language (the code when it is unknown here). */
export function verdictTitle(code: string, t: Strings): string {
  return t.diag.verdicts[code] ?? code;
}

/** When a timeline line happened. */
export function lineTime(at: string | null, t: Strings): string {
  return at ? utc(at, true) : t.diag.timeUnknown;
}

/** The list's totals, the verdicts with pairs only, in the order of the rules. */
export function totalsText(row: DiagnosisRow, t: Strings): string {
  return VERDICTS
    .filter((v) => (row.totals[v] ?? 0) > 0)
    .map((v) => `${verdictTitle(v, t)} ${row.totals[v]}`)
    .join(" · ");
}

/** What set the pair off, when the report names it ("timeout after a successful create"):
 *  the cause after its verdict's title; null when the cause is the verdict alone. */
export function triggerOf(pair: PairData, report: ReportData): string | null {
  const title = report.per_verdict.find((v) => v.verdict === pair.verdict)?.title;
  if (title && pair.cause.startsWith(`${title}: `)) return pair.cause.slice(title.length + 2);
  return title === pair.cause ? null : pair.cause;
}

/** The pairs of one verdict, or all of them. */
export function pairsOf(report: ReportData, verdict: string | null): PairData[] {
  return verdict ? report.pair_list.filter((p) => p.verdict === verdict) : report.pair_list;
}

/** The verdict codes in the order of the rules (src/diagnose/verdict.rs `Verdict::ALL`). */
export const VERDICTS = [
  "technical_duplicate",
  "same_submission_without_key",
  "cross_channel_overlap",
  "new_request_known_client",
  "cannot_be_tied",
];
