import { render } from "svelte/server";
import { describe, expect, it } from "vitest";
import Timeline from "../components/Timeline.svelte";
import type { EventView } from "./bindings";
import { languages } from "./i18n";
import { localTime } from "./format";

const events: EventView[] = [
  { id: 1, at: "2026-11-30T11:03:07.000001Z", kind: "delivery", actor: "gateway", error_class: null, detail: { delivery_id: 47, outcome: "new", payload_hash: "ab" } },
  { id: 2, at: "2026-11-30T11:03:08Z", kind: "claimed", actor: "worker:web-1:1:0", error_class: null, detail: { attempt: 1, lease_expires_at: "2026-11-30T11:04:08Z", granted: false } },
  { id: 3, at: "2026-11-30T11:03:08.1Z", kind: "crm_request", actor: "worker:web-1:1:0", error_class: null, detail: { connector: "bitrix24", method: "crm.lead.add" } },
  { id: 4, at: "2026-11-30T11:03:18.1Z", kind: "crm_response", actor: "worker:web-1:1:0", error_class: "uncertain", detail: { cut_after_ms: 10000, class: "uncertain", error: "no answer <b>" } },
  { id: 5, at: "2026-11-30T11:09:00Z", kind: "human_action", actor: "Anna", error_class: null, detail: { case_id: 12, action: "retry_authorized", comment: "ok", crm_id: null, new_operation: null } },
];

describe("Timeline view", () => {
  it("renders each event as its sentence, in phases, with the raw JSON one click away", () => {
    const { body } = render(Timeline, { props: { events, t: languages.ru } });
    expect(body).toContain('data-testid="timeline"');
    // The selectors the end-to-end test waits for.
    expect(body).toMatch(/<details[^>]*data-kind="crm_response"/);
    expect(body).toMatch(/<details[^>]*data-kind="human_action"/);
    expect(body.match(/data-testid="event"/g)?.length).toBe(5);
    expect(body.match(/data-testid="phase"/g)?.length).toBe(3);
    expect(body).toContain("Доставка #47 — новая операция");
    expect(body).toContain("Нет ответа за 10 с — исход неизвестен");
    expect(body).toContain("Anna: разрешён один повтор — «ok»");
    expect(body).toContain("обработчик web-1:1:0");
    expect(body).toContain("исход неизвестен</span>");
    expect(body).toContain(localTime(events[0].at));
    // The stored detail, escaped, in the <details>.
    expect(body).toContain(`"cut_after_ms": 10000`);
    expect(body).toContain("no answer &lt;b>");
    expect(body).not.toContain("<b>");
  });

  it("marks problems and speaks English in English", () => {
    const { body } = render(Timeline, { props: { events, t: languages.en } });
    expect(body).toMatch(/<details class="event[^"]*problem[^"]*"[^>]*data-kind="crm_response"/);
    expect(body).not.toMatch(/<details class="event[^"]*problem[^"]*"[^>]*data-kind="delivery"/);
    expect(body).toContain("No answer within 10 s — outcome unknown");
    expect(body).toContain("Anna authorized one retry: «ok»");
    expect(body).toContain("Timeline · 5");
    expect(body).not.toContain('data-testid="older-events"');
  });

  it("shows a page of a long timeline and offers the older events", () => {
    const { body } = render(Timeline, { props: { events, t: languages.en, older: 19995, onolder: () => {} } });
    expect(body.match(/data-testid="event"/g)?.length).toBe(5);
    expect(body).toContain("Timeline · 20000");
    expect(body).toMatch(/<button[^>]*data-testid="older-events"[^>]*>Older events… \(19995 more\)<\/button>/);
    const ru = render(Timeline, { props: { events, t: languages.ru, older: 3, onolder: () => {} } }).body;
    expect(ru).toContain("Более ранние события… (ещё 3)");
  });
});
