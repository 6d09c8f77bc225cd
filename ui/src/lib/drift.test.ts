// Drift guard: reads the Rust sources that name the codes the console labels, and fails
// when they say something this console has no words for (or when the guard itself stops
// seeing what it is meant to see).
import { describe, expect, it } from "vitest";
import { EVENT_KINDS } from "./i18n/event-kinds";
import { eventsEn } from "./i18n/events.en";
import { eventsRu } from "./i18n/events.ru";
import { DESCRIBED_KINDS } from "./sentences";

const rust = import.meta.glob(["../../../src/**/*.rs", "../../../crates/*/src/**/*.rs"], {
  query: "?raw",
  import: "default",
  eager: true,
}) as Record<string, string>;
/** `../../../crates/leadgate-store/src/ops/mod.rs` → `crates/leadgate-store/src/ops/mod.rs`. */
const rel = (path: string) => path.replace(/^(\.\.\/)+/, "");
const files = (glob: Record<string, string>) => Object.entries(glob).map(([p, text]) => [rel(p), text] as const);
const source = (path: string) => rust[`../../../${path}`] ?? "";

/** Every capture of every match of `re` in `text`. */
function all(re: RegExp, text: string): string[] {
  return [...text.matchAll(re)].flatMap((m) => m.slice(1).filter((g): g is string => g !== undefined));
}

describe("drift guard: timeline kinds", () => {
  // The kinds are Rust's one list (`EventKind`), generated into bindings.ts; the store
  // takes no other, and tests/it/boundaries.rs checks the migrations' SQL against it.
  it("is Rust's list", () => {
    expect(EVENT_KINDS.length).toBeGreaterThan(40);
    expect([...EVENT_KINDS].sort()).toEqual(namedEnum("EventKind").sort());
  });

  it("has a sentence for every kind Leadgate writes, and none for a kind it does not", () => {
    expect(EVENT_KINDS.filter((k) => !DESCRIBED_KINDS.includes(k))).toEqual([]);
    expect(DESCRIBED_KINDS.filter((k) => !(EVENT_KINDS as readonly string[]).includes(k))).toEqual([]);
  });
});

/** `named_enum!(Status, "status", { Received => "received", … })` → its names. */
function namedEnum(name: string): string[] {
  for (const [, text] of files(rust)) {
    const m = new RegExp(`named_enum!\\(${name},\\s*"[^"]*",\\s*\\{([^}]*)\\}`).exec(text);
    if (m) return all(/=>\s*"([a-z_]+)"/g, m[1]);
  }
  return [];
}

describe("drift guard: codes the console labels", () => {
  it.each([
    ["Status", "status"],
    ["ReviewReason", "reason"],
    ["ErrorClass", "errorClass"],
    ["Resolution", "resolution"],
  ] as const)("every %s of the domain has a label in both languages", (rustName, key) => {
    const names = namedEnum(rustName).sort();
    expect(names.length).toBeGreaterThan(2);
    expect(Object.keys(eventsEn[key]).sort()).toEqual(names);
    expect(Object.keys(eventsRu[key]).sort()).toEqual(names);
  });

  it("every matching rule has words in both languages", () => {
    const names = namedEnum("MatchRule").sort();
    expect(names).toContain("review");
    expect(Object.keys(eventsEn.ev.rule).sort()).toEqual(names);
    expect(Object.keys(eventsRu.ev.rule).sort()).toEqual(names);
  });

  it("every verdict the reconciler writes has words", () => {
    const text = source("src/reconcile.rs");
    const verdicts = all(/=>\s*"([a-z_]+)",/g, text.slice(text.indexOf("fn verdict"))).slice(0, 4).sort();
    expect(verdicts).toEqual(["found_one", "found_several", "lookup_failed", "not_found"]);
    expect(Object.keys(eventsEn.ev.verdict).sort()).toEqual(verdicts);
  });
});
