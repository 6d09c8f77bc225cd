import { describe, expect, it } from "vitest";
import type { EventView } from "./bindings";
import { groupTimeline, isProblem } from "./timeline";

let id = 0;
function ev(kind: string, at: string, error_class: string | null = null): EventView {
  return { id: ++id, at, kind, actor: "gateway", error_class, detail: {} };
}

describe("timeline grouping", () => {
  it("splits intake, attempts, review and decision", () => {
    const phases = groupTimeline([
      ev("delivery", "2026-11-30T10:00:00.000000Z"),
      ev("delivery", "2026-11-30T10:00:01.000000Z"),
      ev("claimed", "2026-11-30T10:00:02.000000Z"),
      ev("status_changed", "2026-11-30T10:00:02.000001Z"),
      ev("crm_request", "2026-11-30T10:00:02.100000Z"),
      ev("crm_response", "2026-11-30T10:00:12.100000Z", "uncertain"),
      ev("retry_scheduled", "2026-11-30T10:00:12.100001Z", "uncertain"),
      ev("claimed", "2026-11-30T10:00:20.000000Z"),
      ev("review_opened", "2026-11-30T10:00:30.000000Z"),
      ev("human_action", "2026-11-30T10:05:00.000000Z"),
      ev("status_changed", "2026-11-30T10:05:00.000000Z"),
    ]);
    expect(phases.map((p) => [p.kind, p.n, p.events.length])).toEqual([
      ["intake", 0, 2],
      ["attempt", 1, 5],
      ["attempt", 2, 1],
      ["review", 0, 1],
      ["decision", 0, 2],
    ]);
    expect(phases[1].spanMs).toBe(10_100);
  });

  it("keeps leading events without a phase start", () => {
    const phases = groupTimeline([ev("notification", "2026-11-30T10:00:00Z")]);
    expect(phases[0].kind).toBe("other");
  });

  it("flags problem events", () => {
    expect(isProblem(ev("crm_response", "2026-11-30T10:00:00Z", "auth"))).toBe(true);
    expect(isProblem(ev("crm_created", "2026-11-30T10:00:00Z"))).toBe(false);
  });
});
