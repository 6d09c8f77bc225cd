import { describe, expect, it } from "vitest";
import type { CauseCount, DiagnosisRow, Evidence, LineText, PairData, ReportData } from "./bindings";
import { languages } from "./i18n";
import {
  causeText,
  evidenceLines,
  inputText,
  lineText,
  lineTime,
  pairsOf,
  periodText,
  reportTime,
  sourceName,
  sourcesReadText,
  totalsText,
  triggerOf,
  triggerText,
  VERDICTS,
  verdictTitle,
} from "./diagnosis";

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

/** Runs of three or more English words: letters only, ids (digits, `:`, `_`, `.`, `@`)
 *  and a few names left out. */
function englishRuns(text: string): string[] {
  const names = new Set(["Leadgate", "CRM", "n8n", "Bitrix24", "amoCRM", "API", "CSV", "ORIGIN_ID", "ORIGINATOR_ID"]);
  const runs: string[] = [];
  let run: string[] = [];
  for (const raw of text.split(/\s+/)) {
    const w = raw.replace(/^[(«"`]+|[)»"`,.:;]+$/g, "");
    if (/^[A-Za-z][a-z]*('[a-z]+)?$/.test(w) && !names.has(w)) run.push(w);
    else {
      if (run.length >= 3) runs.push(run.join(" "));
      run = [];
    }
  }
  if (run.length >= 3) runs.push(run.join(" "));
  return runs;
}

/** One sample of every evidence code, with the English Rust writes for it
 *  (crates/leadgate-domain/src/report/said.rs's test, the same arguments). */
const EVIDENCE: [Evidence, string][] = [
  [{ code: "created_after", args: { later: "102", secs: 60, earlier: "101" } }, "entity 102 was created 60 s after entity 101"],
  [{ code: "same_operation", args: { operation: "site:1", deliveries: 2, attempts: 3 } }, "both belong to Leadgate operation site:1 (2 deliveries, 3 attempts)"],
  [{ code: "outcome_unknown_sent_again" }, "an attempt's outcome was unknown and the create was sent again"],
  [{ code: "attempts_by", args: { workers: ["worker:a", "worker:b"] } }, "attempts by worker:a and worker:b"],
  [{ code: "delivered_times", args: { n: 3 } }, "the source delivered it 3 times"],
  [{ code: "execution_retry", args: { later: "42", mode: "retry", earlier: "41", status: "error" } }, "n8n execution 42 (retry) is a retry of execution 41 (error)"],
  [{ code: "execution_failed_yet_created", args: { execution: "41", status: "error", entity: "101" } }, "execution 41 ended as `error` although entity 101 exists: the create had gone through"],
  [{ code: "same_submission", args: { earlier: "50", later: "51", submission: "7741:50" } }, "n8n executions 50 and 51 both carry submission 7741:50"],
  [{ code: "started_by_hand", args: { execution: "57" } }, "execution 57 was started by hand"],
  [{ code: "triggered_again", args: { execution: "51", mode: "webhook" } }, "execution 51 was triggered by `webhook`: the source delivered the event again"],
  [{ code: "same_origin_id", args: { origin_id: "x-1" } }, "both carry ORIGIN_ID x-1"],
  [{ code: "same_content", args: { measure: "payload_hash" } }, "the same content (payload hash)"],
  [{ code: "same_content", args: { measure: "n8n_body" } }, "the same content (n8n request body)"],
  [{ code: "two_identities", args: { kind: "leadgate_operation", first: "site:a", second: "site:b" } }, "but two identities: Leadgate operation site:a and site:b"],
  [{ code: "no_shared_key" }, "and no key that both carry"],
  [{ code: "different_sources", args: { first: "WEB", then: "CALL" } }, "different sources: WEB, then CALL"],
  [{ code: "two_events", args: { first_kind: "submission_id", first: "tr-1", second_kind: "origin_id", second: "x-2" } }, "two events: submission id tr-1 and ORIGIN_ID x-2"],
  [{ code: "different_content", args: { measure: "crm_fields" } }, "different content (CRM fields)"],
  [{ code: "no_key", args: { entity: "102" } }, "entity 102 has no key: no ORIGIN_ID, no Leadgate operation, no n8n execution"],
];

const LINES: [LineText, string][] = [
  [
    { code: "crm_created", args: { entity: "101", source: "WEB", originator_id: "leadgate", origin_id: "site:1", utm_source: "yandex" } },
    "entity 101 created in the CRM (source WEB, ORIGINATOR_ID leadgate, ORIGIN_ID site:1, utm_source yandex)",
  ],
  [{ code: "crm_created", args: { entity: "101", source: null, originator_id: null, origin_id: "site:1", utm_source: null } }, "entity 101 created in the CRM (ORIGIN_ID site:1)"],
  [{ code: "crm_created", args: { entity: "101", source: "CALL", originator_id: "leadgate", origin_id: null, utm_source: null } }, "entity 101 created in the CRM (source CALL, no ORIGIN_ID)"],
  [
    {
      code: "journal_event",
      args: { operation: "site:1", kind: "attempt_started", actor: "worker:a", details: [{ field: "attempt", value: "2" }, { field: "class", value: "uncertain" }] },
    },
    "site:1 attempt started by worker:a (attempt 2, class uncertain)",
  ],
  [{ code: "journal_event", args: { operation: "site:1", kind: "verify_scheduled", actor: "gateway", details: [] } }, "site:1 verify scheduled by gateway"],
  [
    { code: "execution_started", args: { execution: "42", workflow: "wf-leads", mode: "retry", retry_of: "41", submission: null } },
    "n8n execution 42 of workflow wf-leads started (retry, retry of 41): no submission id in the request",
  ],
  [
    { code: "execution_started", args: { execution: "41", workflow: "wf-leads", mode: "webhook", retry_of: null, submission: "7741:41" } },
    "n8n execution 41 of workflow wf-leads started (webhook): submission 7741:41",
  ],
  [
    { code: "execution_ended", args: { execution: "42", status: "success", nodes: ["Webhook", "Bitrix24 crm.lead.add"], crm_ids: ["602"] } },
    "n8n execution 42 ended `success` after nodes Webhook → Bitrix24 crm.lead.add; the CRM answered id 602",
  ],
  [{ code: "execution_ended", args: { execution: "41", status: "error", nodes: ["Webhook"], crm_ids: [] } }, "n8n execution 41 ended `error` after nodes Webhook"],
];

function pairWith(evidence: [Evidence, string][], timeline: [LineText, string][]): PairData {
  return {
    number: 1, earlier: "101", later: "102", shared: ["+7999•••33"], verdict: "technical_duplicate",
    cause: "Technical duplicate: timeout after a successful create", trigger: "timeout_after_create", source: "WEB",
    evidence: evidence.map(([, text]) => text), evidence_codes: evidence.map(([code]) => code),
    timeline: timeline.map(([code, text]) => ({ at: null, origin: "CRM", entity: "101", text, text_code: code })),
  };
}

const REPORT = {
  per_verdict: [
    { verdict: "technical_duplicate", title: "Technical duplicate", pairs: 1 },
    { verdict: "cannot_be_tied", title: "Cannot be tied together", pairs: 1 },
  ],
} as unknown as ReportData;

describe("the report's sentences", () => {
  it("are in English word for word as Rust writes them", () => {
    const pair = pairWith(EVIDENCE, LINES);
    expect(evidenceLines(pair, en)).toEqual(EVIDENCE.map(([, text]) => text));
    expect(pair.timeline.map((l) => lineText(l, en))).toEqual(LINES.map(([, text]) => text));
  });

  it("are in Russian with no English sentence left", () => {
    const pair = pairWith(EVIDENCE, LINES);
    const said = [...evidenceLines(pair, ru), ...pair.timeline.map((l) => lineText(l, ru))];
    for (const s of said) {
      expect(englishRuns(s), s).toEqual([]);
      expect(s).toMatch(/[а-яё]/);
    }
    expect(said).toContain("сущность 102 создана через 60 с после сущности 101");
    expect(said).toContain("обе относятся к операции Leadgate site:1 (2 доставки, 3 попытки)");
    expect(said).toContain("попытки делали обработчик a и обработчик b");
    expect(said).toContain("источник доставил заявку 3 раза");
    expect(said).toContain("разные источники: сначала WEB, затем CALL");
    expect(said).toContain("одинаковое содержимое (хеш данных заявки)");
    expect(said).toContain("сущность 101 создана в CRM (источник CALL, без ORIGIN_ID)");
    expect(said).toContain("site:1: начата попытка — обработчик a (попытка: 2, класс ошибки: исход неизвестен)");
    expect(said).toContain("выполнение n8n 41 сценария wf-leads началось (вебхук): заявка 7741:41");
    expect(said).toContain("выполнение n8n 42 завершилось (успешно) после узлов Webhook → Bitrix24 crm.lead.add; CRM ответила id 602");
  });

  it("count in Russian as people do", () => {
    const w = (code: Evidence) => evidenceLines(pairWith([[code, "english"]], []), ru)[0];
    expect(w({ code: "delivered_times", args: { n: 2 } })).toBe("источник доставил заявку 2 раза");
    expect(w({ code: "delivered_times", args: { n: 5 } })).toBe("источник доставил заявку 5 раз");
    expect(w({ code: "delivered_times", args: { n: 21 } })).toBe("источник доставил заявку 21 раз");
    expect(w({ code: "same_operation", args: { operation: "s:1", deliveries: 1, attempts: 5 } })).toBe("обе относятся к операции Leadgate s:1 (1 доставка, 5 попыток)");
    const gap = (secs: number) => w({ code: "created_after", args: { later: "2", secs, earlier: "1" } });
    expect(gap(300)).toBe("сущность 2 создана через 5 мин после сущности 1");
    expect(gap(7200)).toBe("сущность 2 создана через 2 ч после сущности 1");
    expect(gap(11_100)).toBe("сущность 2 создана через 3 ч 5 мин после сущности 1");
    expect(gap(3 * 86_400 + 5)).toBe("сущность 2 создана через 3 дн после сущности 1");
  });

  it("name the cause, the input and what was read in the operator's language", () => {
    const pair = pairWith(EVIDENCE, []);
    expect(triggerText(pair, REPORT, ru)).toBe("тайм-аут после успешного создания");
    expect(triggerText(pair, REPORT, en)).toBe("timeout after a successful create");
    const cause = { verdict: "technical_duplicate", cause: "Technical duplicate: two workers", trigger: "two_workers", pairs: 2 } as CauseCount;
    expect(causeText(cause, REPORT, ru)).toBe("Технический дубль: два обработчика");
    expect(causeText(cause, REPORT, en)).toBe("Technical duplicate: two workers");
    const alone = { verdict: "cannot_be_tied", cause: "Cannot be tied together", trigger: null, pairs: 1 } as CauseCount;
    expect(causeText(alone, REPORT, ru)).toBe("Не удаётся связать");
    expect(inputText("CSV export leads.csv", { code: "csv", args: { file: "leads.csv" } }, ru)).toBe("выгрузка CSV leads.csv");
    expect(inputText("amoCRM leads and contact search (API v4)", { code: "amo_crm_api" }, ru)).toBe("amoCRM: сделки и поиск контактов (API v4)");
    const report = {
      input: "Bitrix24 crm.lead.list and crm.duplicate.findbycomm",
      sources_read: "132 CRM entities (Bitrix24 crm.lead.list and crm.duplicate.findbycomm), Leadgate's journal, no n8n history",
      sources_read_code: { entities: 132, input: { code: "bitrix24_api" }, journal: true, executions: null },
    } as unknown as ReportData;
    expect(sourcesReadText(report, en)).toBe(report.sources_read);
    expect(sourcesReadText(report, ru)).toBe("132 сущности CRM (Bitrix24: crm.lead.list и crm.duplicate.findbycomm), журнал Leadgate, без истории n8n");
    const none = { ...report, sources_read_code: { entities: 1, input: { code: "csv", args: { file: "a.csv" } }, journal: false, executions: 6 } } as unknown as ReportData;
    expect(sourcesReadText(none, ru)).toBe("1 сущность CRM (выгрузка CSV a.csv), без журнала Leadgate, 6 выполнений n8n");
    expect(sourceName("(unknown)", ru)).toBe("(неизвестен)");
    expect(sourceName("WEB", ru)).toBe("WEB");
  });

  it("fall back to the English text of a report saved before the codes, or of a code unknown here", () => {
    const old = { ...pairWith(EVIDENCE.slice(0, 2), LINES.slice(0, 1)), trigger: null, evidence_codes: [] } as PairData;
    old.timeline = old.timeline.map((l) => ({ ...l, text_code: null }));
    expect(evidenceLines(old, ru)).toEqual(EVIDENCE.slice(0, 2).map(([, text]) => text));
    expect(lineText(old.timeline[0], ru)).toBe(LINES[0][1]);
    expect(triggerText(old, REPORT, ru)).toBe("timeout after a successful create");
    // Saved by an older version: the fields are missing altogether.
    const older = { ...old } as Partial<PairData>;
    delete older.evidence_codes;
    expect(evidenceLines(older as PairData, ru)).toEqual(old.evidence);
    const oldCause = { verdict: "technical_duplicate", cause: "Technical duplicate: two workers", pairs: 2 } as CauseCount;
    expect(causeText(oldCause, REPORT, ru)).toBe("Technical duplicate: two workers");
    expect(inputText("CSV export leads.csv", null, ru)).toBe("CSV export leads.csv");
    expect(sourcesReadText({ sources_read: "3 CRM entities (x)" } as ReportData, ru)).toBe("3 CRM entities (x)");
    const newer = pairWith([[{ code: "from_a_newer_leadgate" } as unknown as Evidence, "a newer sentence"]], []);
    expect(evidenceLines(newer, ru)).toEqual(["a newer sentence"]);
  });

  it("the check for English finds English and passes ids, names and Russian", () => {
    expect(englishRuns("the source delivered it 3 times")).toEqual(["the source delivered it"]);
    expect(englishRuns("сущность 101 создана в CRM (источник WEB, ORIGINATOR_ID leadgate, ORIGIN_ID site:1)")).toEqual([]);
    expect(englishRuns("Bitrix24: crm.lead.list и crm.duplicate.findbycomm")).toEqual([]);
  });
});
