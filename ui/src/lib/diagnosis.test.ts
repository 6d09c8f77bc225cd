import { describe, expect, it } from "vitest";
import type { DiagnosisRow, ReportData } from "./bindings";
import { languages } from "./i18n";
import { lineTime, pairsOf, periodText, reportTime, totalsText, triggerOf, VERDICTS, verdictTitle } from "./diagnosis";

const { en, ru } = languages;

describe("diagnosis", () => {
  it("shows times in the operator's zone, the zone said", () => {
    expect(reportTime("2026-11-20T07:15:42.123456Z", false, "UTC")).toBe("2026-11-20 07:15 UTC");
    expect(reportTime("2026-11-20T07:15:42.123456Z", false, "Europe/Moscow")).toBe("2026-11-20 10:15 GMT+3");
    expect(reportTime("2026-11-20T07:15:42Z", true, "Europe/Moscow")).toBe("2026-11-20 10:15:42 GMT+3");
    expect(reportTime("garbage")).toBe("garbage");
    expect(lineTime(null, en)).toBe("time unknown");
    expect(lineTime("2026-11-20T07:15:42Z", ru, "Europe/Moscow")).toBe("2026-11-20 10:15:42 GMT+3");
  });

  it("names the period, or the whole export", () => {
    expect(periodText("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", en, "UTC")).toBe("2026-11-01 00:00 UTC – 2026-12-01 00:00 UTC");
    expect(periodText(null, null, en)).toBe("the whole export");
    expect(periodText(null, null, ru)).toBe("вся выгрузка");
  });

  it("names every verdict in both languages, and an unknown code as it is", () => {
    for (const v of VERDICTS) {
      expect(verdictTitle(v, en)).not.toBe(v);
      expect(verdictTitle(v, ru)).not.toBe(v);
    }
    expect(verdictTitle("from_a_newer_leadgate", en)).toBe("from_a_newer_leadgate");
  });

  it("lists the verdicts that have pairs, in the order of the rules", () => {
    const row: DiagnosisRow = {
      id: 1,
      generated_at: "2026-12-02T06:00:00Z",
      input: "CSV export leads.csv",
      input_code: { code: "csv", args: { file: "leads.csv" } },
      period_from: null,
      period_to: null,
      groups: 3,
      pairs: 4,
      totals: { cannot_be_tied: 1, technical_duplicate: 3, cross_channel_overlap: 0 },
    };
    expect(totalsText(row, en)).toBe("Technical duplicate 3 · Cannot be tied together 1");
  });

  it("filters the pairs by verdict", () => {
    const pair = (number: number, verdict: string) => ({
      number, earlier: "1", later: "2", shared: [], verdict, cause: verdict, source: "WEB", evidence: [], timeline: [],
    });
    const report = { pair_list: [pair(1, "technical_duplicate"), pair(2, "cannot_be_tied")] } as unknown as ReportData;
    expect(pairsOf(report, null).map((p) => p.number)).toEqual([1, 2]);
    expect(pairsOf(report, "cannot_be_tied").map((p) => p.number)).toEqual([2]);
  });

  it("names what set a pair off, apart from its verdict", () => {
    const report = {
      per_verdict: [
        { verdict: "technical_duplicate", title: "Technical duplicate", pairs: 1 },
        { verdict: "cannot_be_tied", title: "Cannot be tied together", pairs: 1 },
      ],
    } as unknown as ReportData;
    const pair = (verdict: string, cause: string) =>
      ({ number: 1, earlier: "1", later: "2", shared: [], verdict, cause, trigger: null, source: "WEB", evidence: [], evidence_codes: [], timeline: [] });
    expect(triggerOf(pair("technical_duplicate", "Technical duplicate: two workers"), report)).toBe("two workers");
    expect(triggerOf(pair("cannot_be_tied", "Cannot be tied together"), report)).toBeNull();
  });
});
