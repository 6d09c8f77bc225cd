// The Diagnosis screen's words and figures: a saved `leadgate diagnose` report as its
// HTML shows it, its times in the operator's time zone, the zone said, its sentences in
// the operator's language. Each sentence is said from its code (i18n/diagnosis.{en,ru}.ts);
// a report saved before the codes, or a code this console does not know, shows the
// English text it was saved with.
import type { CauseCount, DiagnosisRow, Evidence, LineData, LineText, PairData, ReportData, ReportInput } from "./bindings";
import { localDateTime, localMinute } from "./format";
import type { Strings } from "./i18n";
import { diagnosisEn, type DiagnosisWords } from "./i18n/diagnosis.en";
import { diagnosisRu } from "./i18n/diagnosis.ru";
import { langOf } from "./labels";

/** The sentences of the language of `t`. */
export function words(t: Strings): DiagnosisWords {
  return langOf(t) === "ru" ? diagnosisRu : diagnosisEn;
}

/** A code said by `sayers`, or null when this console has no words for it. */
function say<U extends { code: string }>(sayers: Record<string, (args: never) => string>, code: U | null | undefined): string | null {
  if (!code || !Object.hasOwn(sayers, code.code)) return null;
  return sayers[code.code]((code as unknown as { args: never }).args);
}

/** A pair's evidence, line by line. */
export function evidenceLines(pair: PairData, t: Strings): string[] {
  const codes: Evidence[] = pair.evidence_codes ?? [];
  if (codes.length !== pair.evidence.length) return pair.evidence;
  const w = words(t);
  return codes.map((c, i) => say(w.evidence, c) ?? pair.evidence[i]);
}

/** What happened, on one timeline line. */
export function lineText(line: LineData, t: Strings): string {
  return say<LineText>(words(t).line, line.text_code) ?? line.text;
}

/** What a report read the CRM through ("CSV export leads.csv"). */
export function inputText(input: string, code: ReportInput | null | undefined, t: Strings): string {
  return say(words(t).input, code) ?? input;
}

/** What a report read, in words ("132 CRM entities (…), Leadgate's journal, no n8n history"). */
export function sourcesReadText(report: ReportData, t: Strings): string {
  const s = report.sources_read_code;
  if (!s) return report.sources_read;
  return words(t).sourcesRead(s, inputText(report.input, s.input, t));
}

/** A source as a report names it; the stand-in for an unknown one in the operator's language. */
export function sourceName(source: string, t: Strings): string {
  return source === diagnosisEn.unknownSource ? words(t).unknownSource : source;
}

/** One of the top causes: the verdict, and what set it off. */
export function causeText(c: CauseCount, report: ReportData, t: Strings): string {
  const title = verdictTitle(c.verdict, t);
  if (c.trigger) return `${title}: ${words(t).trigger[c.trigger] ?? c.trigger}`;
  const english = report.per_verdict.find((v) => v.verdict === c.verdict)?.title;
  return english === c.cause ? title : c.cause;
}

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

/** What set the pair off, when the report names it ("timeout after a successful create"),
 *  in the operator's language; null when the cause is the verdict alone. */
export function triggerText(pair: PairData, report: ReportData, t: Strings): string | null {
  if (pair.trigger) return words(t).trigger[pair.trigger] ?? triggerOf(pair, report);
  return triggerOf(pair, report);
}

/** What set the pair off, as the report's English text says it: the cause after its
 *  verdict's title; null when the cause is the verdict alone. */
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
