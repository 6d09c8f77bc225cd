import { describe, expect, it } from "vitest";
import { diffPayloads, diffSummary, flatten } from "./diff";

describe("diff", () => {
  it("flattens nested payloads to pointer paths", () => {
    const f = flatten({ a: { b: 1, "x/y": true }, list: ["p", null], empty: {} });
    expect([...f.entries()]).toEqual([
      ["/a/b", "1"],
      ["/a/x~1y", "true"],
      ["/list/0", '"p"'],
      ["/list/1", "null"],
      ["/empty", "{}"],
    ]);
  });

  it("marks changed, added, removed and same leaves", () => {
    const rows = diffPayloads(
      { name: "Ann", phone: "+7 999", utm: { source: "ads" } },
      { name: "Anna", phone: "+7 999", comment: "call me" },
    );
    expect(rows).toEqual([
      { path: "/name", left: '"Ann"', right: '"Anna"', kind: "changed" },
      { path: "/phone", left: '"+7 999"', right: '"+7 999"', kind: "same" },
      { path: "/utm/source", left: '"ads"', right: undefined, kind: "removed" },
      { path: "/comment", left: undefined, right: '"call me"', kind: "added" },
    ]);
    expect(diffSummary(rows)).toEqual({ same: 1, changed: 1, added: 1, removed: 1 });
  });

  it("tells a number from a string with the same digits", () => {
    const rows = diffPayloads({ n: 1 }, { n: "1" });
    expect(rows[0].kind).toBe("changed");
  });

  it("handles a purged (missing) side", () => {
    const rows = diffPayloads(undefined, { a: 1 });
    expect(rows).toEqual([{ path: "/a", left: undefined, right: "1", kind: "added" }]);
  });
});
