// Groups an operation's timeline into the phases a person reads it by: intake, each
// attempt, reconciliation, review and decisions.
import type { EventView } from "./bindings";
import { toMillis } from "./format";

export type PhaseKind = "intake" | "attempt" | "reconcile" | "review" | "decision" | "other";

export interface Phase {
  kind: PhaseKind;
  /** 1-based attempt number for attempts. */
  n: number;
  events: EventView[];
  /** Milliseconds between the phase's first and last event. */
  spanMs: number;
}

const STARTS: Record<string, PhaseKind> = {
  delivery: "intake",
  claimed: "attempt",
  lease_taken_over: "reconcile",
  review_opened: "review",
  human_action: "decision",
  accepted_as_new: "intake",
};

export function phaseOf(kind: string): PhaseKind | undefined {
  return STARTS[kind];
}

/** Consecutive deliveries share one intake phase; every other start opens a new phase. */
export function groupTimeline(events: EventView[]): Phase[] {
  const phases: Phase[] = [];
  let attempts = 0;
  for (const e of events) {
    const start = STARTS[e.kind];
    const cur = phases[phases.length - 1];
    const sameIntake = start === "intake" && cur?.kind === "intake";
    if (start && !sameIntake) {
      if (start === "attempt") attempts++;
      phases.push({ kind: start, n: start === "attempt" ? attempts : 0, events: [e], spanMs: 0 });
    } else if (cur) {
      cur.events.push(e);
    } else {
      phases.push({ kind: "other", n: 0, events: [e], spanMs: 0 });
    }
  }
  for (const p of phases) {
    p.spanMs = toMillis(p.events[p.events.length - 1].at) - toMillis(p.events[0].at);
  }
  return phases;
}

/** Events that mean something went wrong, for highlighting. */
export function isProblem(e: EventView): boolean {
  return e.error_class !== null || e.kind === "connector_paused" || e.kind === "late_outcome";
}
