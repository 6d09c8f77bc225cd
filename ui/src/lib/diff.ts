// Side-by-side diff of two JSON payloads, flattened to JSON-pointer-like paths.
import type { JsonValue } from "./bindings";

export type DiffKind = "same" | "changed" | "added" | "removed";

export interface DiffRow {
  path: string;
  left: string | undefined;
  right: string | undefined;
  kind: DiffKind;
}

function render(v: JsonValue): string {
  return typeof v === "string" ? JSON.stringify(v) : JSON.stringify(v);
}

/** Flattens objects and arrays into `/a/b/0`-style leaves; empty containers stay leaves. */
export function flatten(v: JsonValue | undefined, prefix = "", out = new Map<string, string>()): Map<string, string> {
  if (v === undefined) return out;
  if (v !== null && typeof v === "object") {
    const entries = Array.isArray(v) ? v.map((x, i) => [String(i), x] as const) : Object.entries(v);
    if (entries.length === 0) out.set(prefix || "/", Array.isArray(v) ? "[]" : "{}");
    for (const [k, child] of entries) {
      if (child === undefined) continue;
      flatten(child, `${prefix}/${k.replace(/~/g, "~0").replace(/\//g, "~1")}`, out);
    }
    return out;
  }
  out.set(prefix || "/", render(v));
  return out;
}

/** Rows for every path in either payload, in the left payload's order, new paths after. */
export function diffPayloads(left: JsonValue | undefined, right: JsonValue | undefined): DiffRow[] {
  const l = flatten(left);
  const r = flatten(right);
  const rows: DiffRow[] = [];
  for (const [path, lv] of l) {
    const rv = r.get(path);
    rows.push({ path, left: lv, right: rv, kind: rv === undefined ? "removed" : rv === lv ? "same" : "changed" });
  }
  for (const [path, rv] of r) {
    if (!l.has(path)) rows.push({ path, left: undefined, right: rv, kind: "added" });
  }
  return rows;
}

export function diffSummary(rows: DiffRow[]): Record<DiffKind, number> {
  const s: Record<DiffKind, number> = { same: 0, changed: 0, added: 0, removed: 0 };
  for (const r of rows) s[r.kind]++;
  return s;
}
