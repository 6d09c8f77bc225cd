// Drift guard: reads the Rust and SQL sources that write the timeline and the codes the
// console labels, and fails when they say something this console has no words for
// (or when the guard itself stops seeing what it is meant to see).
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
const sql = import.meta.glob("../../../migrations/*/*.sql", { query: "?raw", import: "default", eager: true }) as Record<
  string,
  string
>;

/** `../../../src/store/ops/mod.rs` → `src/store/ops/mod.rs`. */
const rel = (path: string) => path.replace(/^(\.\.\/)+/, "");
const files = (glob: Record<string, string>) => Object.entries(glob).map(([p, text]) => [rel(p), text] as const);

/** Every capture of every match of `re` in `text`. */
function all(re: RegExp, text: string): string[] {
  return [...text.matchAll(re)].flatMap((m) => m.slice(1).filter((g): g is string => g !== undefined));
}

// Where a kind is written as a literal, wherever it is.
const LITERAL_SITES: RegExp[] = [
  /NewEvent::new\(\s*"([a-z_]+)"/g,
  /NewEvent\s*\{\s*kind:\s*"([a-z_]+)"/g,
];

// Where an event is made with a kind from a variable, and where that variable's literals
// are: `[file, pattern]`, each of which must find at least one. A new such site fails the
// guard until it is taught here.
const EXCHANGE = /exchange_events\(\s*"([a-z_]+)",\s*"([a-z_]+)"/g;
const INDIRECT: Record<string, { vars: string[]; literals: [string, RegExp][] }> = {
  // NewEvent::new itself.
  "src/store/mod.rs": { vars: ["kind"], literals: [] },
  // exchange_events(request_kind, response_kind, …): its callers pass literals.
  "src/attempt.rs": {
    vars: ["request_kind", "response_kind"],
    literals: [
      ["src/worker.rs", EXCHANGE],
      ["src/worker/batch.rs", EXCHANGE],
      ["src/reconcile.rs", EXCHANGE],
      ["src/worker/update.rs", EXCHANGE],
    ],
  },
  // failure_event("retry_scheduled", …) and late_outcome's (crm_id, "crm_created", "created").
  "src/store/ops/attempts.rs": {
    vars: ["kind"],
    literals: [
      ["src/store/ops/attempts.rs", /failure_event\(\s*"([a-z_]+)"/g],
      ["src/store/ops/attempts.rs", /\(crm_id,\s*"([a-z_]+)",\s*"[a-z_]+"\)/g],
    ],
  },
  // open_case: (id, "review_noted") / (id, "review_opened").
  "src/store/ops/mod.rs": { vars: ["kind"], literals: [["src/store/ops/mod.rs", /\(id,\s*"([a-z_]+)"\)/g]] },
};

const source = (path: string) => rust[`../../../${path}`] ?? "";

/** `NewEvent::new(<ident>` and `NewEvent { kind: <ident>` / `NewEvent { kind,` sites. */
function indirectSites(text: string): string[] {
  return [
    ...all(/NewEvent::new\(\s*([a-z_][a-z0-9_]*)\s*,/g, text),
    ...[...text.matchAll(/NewEvent\s*\{\s*kind(?::\s*([a-z_][a-z0-9_]*))?\s*,/g)].map((m) => m[1] ?? "kind"),
  ];
}

function rustKinds(): Set<string> {
  const kinds = new Set<string>();
  for (const [, text] of files(rust)) {
    for (const re of LITERAL_SITES) all(re, text).forEach((k) => kinds.add(k));
  }
  for (const t of Object.values(INDIRECT)) {
    for (const [path, re] of t.literals) all(re, source(path)).forEach((k) => kinds.add(k));
  }
  return kinds;
}

/** Splits `a, f(b, c), 'x, y'` at its top-level commas. */
function splitTop(s: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let quoted = false;
  let cur = "";
  for (const ch of s) {
    if (ch === "'") quoted = !quoted;
    if (!quoted) {
      if (ch === "(") depth++;
      if (ch === ")" && --depth < 0) break;
      if (ch === "," && depth === 0) {
        out.push(cur.trim());
        cur = "";
        continue;
      }
    }
    cur += ch;
  }
  out.push(cur.trim());
  return out;
}

/** The kind of every `insert into timeline (…) values (…)` / `… select …` in the migrations. */
function sqlKinds(): { kinds: Set<string>; unreadable: string[] } {
  const kinds = new Set<string>();
  const unreadable: string[] = [];
  const re = /insert\s+into\s+timeline\s*\(([^)]*)\)\s*(values\s*\(|select\s)/gi;
  for (const [path, text] of files(sql)) {
    for (const m of text.matchAll(re)) {
      const columns = m[1].split(",").map((c) => c.trim());
      const values = splitTop(text.slice(m.index + m[0].length));
      const value = values[columns.indexOf("kind")] ?? "";
      const literal = /^'([a-z_]+)'$/.exec(value);
      if (literal) kinds.add(literal[1]);
      else unreadable.push(`${path}: ${value}`);
    }
  }
  return { kinds, unreadable };
}

describe("drift guard: timeline kinds", () => {
  it("reads the sources at all", () => {
    expect(Object.keys(rust)).toContain("../../../src/store/ops/attempts.rs");
    expect(Object.keys(rust)).toContain("../../../crates/leadgate-console-model/src/lib.rs");
    expect(Object.keys(sql)).toContain("../../../migrations/postgres/0008_one_statement_intake.sql");
  });

  it("knows every place that makes an event with a kind from a variable", () => {
    const found: Record<string, string[]> = {};
    for (const [path, text] of files(rust)) {
      const vars = indirectSites(text);
      if (vars.length) found[path] = [...new Set(vars)].sort();
    }
    const taught = Object.fromEntries(Object.entries(INDIRECT).map(([p, t]) => [p, [...t.vars].sort()]));
    expect(found).toEqual(taught);
    for (const t of Object.values(INDIRECT)) {
      for (const [path, re] of t.literals) expect(all(re, source(path)).length, `${path} ${re}`).toBeGreaterThan(0);
    }
  });

  it("has a sentence for every kind the Rust code writes, and no kind written nowhere", () => {
    const written = rustKinds();
    // What the guard must see, or it is blind.
    for (const k of ["delivery", "claimed", "crm_request", "reconcile_response", "review_noted", "retry_scheduled", "crm_created", "notification"]) {
      expect(written).toContain(k);
    }
    expect([...written].filter((k) => !DESCRIBED_KINDS.includes(k)).sort()).toEqual([]);
    const { kinds: inSql } = sqlKinds();
    expect(EVENT_KINDS.filter((k) => !written.has(k) && !inSql.has(k))).toEqual([]);
  });

  it("has a sentence for every kind the migrations write", () => {
    const { kinds, unreadable } = sqlKinds();
    expect(unreadable).toEqual([]);
    expect(kinds).toContain("review_superseded");
    expect(kinds).toContain("delivery");
    expect([...kinds].filter((k) => !DESCRIBED_KINDS.includes(k))).toEqual([]);
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
