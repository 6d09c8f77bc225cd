// The Diagnosis screen's words and figures: a saved `leadgate diagnose` report as its
// HTML shows it, its times in the operator's time zone, the zone said.
import type { DiagnosisRow, PairData, ReportData } from "./bindings";
import { localDateTime, localMinute } from "./format";
import type { Strings } from "./i18n";

/** `2026-11-20 10:15 GMT+3` in the operator's zone (or `timeZone`); seconds with
 *  `withSeconds`. The input as it is when it is not a time. */
export function reportTime(rfc3339: string, withSeconds = false, timeZone?: string): string {
  return withSeconds ? localDateTime(rfc3339, timeZone) : localMinute(rfc3339, timeZone);
}

/** The period a report covers, or "the whole export" for an export read without one. */
export function periodText(from: string | null, to: string | null, t: Strings, timeZone?: string): string {
  if (!from || !to) return t.diag.wholeExport;
  return `${reportTime(from, false, timeZone)} – ${reportTime(to, false, timeZone)}`;
}

/** A verdict's name in the operator's language (the code when it is unknown here). */
export function verdictTitle(code: string, t: Strings): string {
  return t.diag.verdicts[code] ?? code;
}

/** When a timeline line happened. */
export function lineTime(at: string | null, t: Strings, timeZone?: string): string {
  return at ? reportTime(at, true, timeZone) : t.diag.timeUnknown;
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
