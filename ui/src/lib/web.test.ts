import { describe, expect, it } from "vitest";
import { caseFromPath, mayOpen, pathOfCase, WebTransport } from "./web";

type Seen = { url: string; init: RequestInit };

function fake(answers: Response[]) {
  const seen: Seen[] = [];
  const fetcher = (async (url: string, init: RequestInit) => {
    seen.push({ url, init });
    const next = answers.shift();
    if (!next) throw new TypeError("network down");
    return next;
  }) as unknown as typeof fetch;
  return { seen, web: new WebTransport(fetcher) };
}

const json = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

describe("the web transport", () => {
  it("sends the CSRF token sign-in answered on every later call, the Tauri arguments as the body", async () => {
    const { seen, web } = fake([json({ csrf: "tok", connection: { actor: "anna" } }), json({ needs_review: 2 })]);
    const c = await web.signIn("anna", "secret");
    expect(c.actor).toBe("anna");
    expect(new Headers(seen[0].init.headers).get("X-CSRF-Token")).toBeNull();
    const counts = await web.call<{ needs_review: number }>("case_detail", { operationId: "k", caseId: 3 });
    expect(counts.needs_review).toBe(2);
    expect(seen[1].url).toBe("/api/call/case_detail");
    expect(seen[1].init.method).toBe("POST");
    expect(new Headers(seen[1].init.headers).get("X-CSRF-Token")).toBe("tok");
    expect(JSON.parse(seen[1].init.body as string)).toEqual({ operationId: "k", caseId: 3 });
    expect(seen[1].init.credentials).toBe("same-origin");
  });

  it("rejects with the gateway's ConsoleError, or one made up from the status", async () => {
    const { web } = fake([
      json({ kind: "forbidden", message: "wrong login or password" }, 403),
      new Response("<html>bad gateway</html>", { status: 502, statusText: "Bad Gateway" }),
      new Response("", { status: 401 }),
    ]);
    await expect(web.signIn("anna", "x")).rejects.toEqual({ kind: "forbidden", message: "wrong login or password" });
    await expect(web.call("counts")).rejects.toEqual({ kind: "failed", message: "the gateway answered 502 Bad Gateway" });
    await expect(web.call("counts")).rejects.toEqual({ kind: "not_connected" });
  });

  it("says the gateway is unreachable when the network fails", async () => {
    const { web } = fake([]);
    await expect(web.call("counts")).rejects.toMatchObject({ kind: "unreachable" });
  });

  it("forgets the CSRF token when the session is gone", async () => {
    const { seen, web } = fake([json({ csrf: "tok", connection: {} }), json({ kind: "not_connected" }, 401), json({})]);
    await web.session();
    await expect(web.call("counts")).rejects.toEqual({ kind: "not_connected" });
    await web.call("counts");
    expect(new Headers(seen[2].init.headers).get("X-CSRF-Token")).toBeNull();
  });

  it("marks the UI's own polling, and only it, as background", async () => {
    const { seen, web } = fake([json({}), json({}), json({})]);
    await web.call("counts");
    await web.inBackground(() => web.call("counts"));
    await web.call("counts");
    const flags = seen.map((s) => new Headers(s.init.headers).get("X-Leadgate-Background"));
    expect(flags).toEqual([null, "1", null]);
  });

  it("downloads an export under the name the gateway gave, with its row count", async () => {
    const { web } = fake([
      new Response("a,b\n1,2\n", {
        headers: { "Content-Disposition": 'attachment; filename="leadgate-export.csv"', "X-Leadgate-Rows": "1" },
      }),
    ]);
    const saved: string[] = [];
    const [name, n] = await web.exportCsv({}, (blob, file) => saved.push(`${file}:${blob.size}`));
    expect([name, n]).toEqual(["leadgate-export.csv", 1]);
    expect(saved).toEqual(["leadgate-export.csv:8"]);
  });
});

describe("what the web console may open", () => {
  it("opens the CRM's own origins only", () => {
    const origins = ["https://b24-x.bitrix24.ru"];
    expect(mayOpen("https://b24-x.bitrix24.ru/crm/lead/details/5/", origins)).toBe(true);
    expect(mayOpen("https://evil.example/b24-x.bitrix24.ru", origins)).toBe(false);
    expect(mayOpen("javascript:alert(1)", origins)).toBe(false);
    expect(mayOpen("not a url", origins)).toBe(false);
  });
});

describe("deep links", () => {
  it("name an operation's case and read back as the same operation", () => {
    for (const id of ["site:1002", "calls:call-7788", "tg:Ивan/42 x?y#z"]) {
      expect(pathOfCase(id).startsWith("/case/")).toBe(true);
      expect(caseFromPath(pathOfCase(id))).toBe(id);
    }
    expect(pathOfCase(null)).toBe("/");
    expect(caseFromPath("/")).toBeNull();
    expect(caseFromPath("/case/")).toBeNull();
    expect(caseFromPath("/case/%E0%A4%A")).toBeNull();
    expect(caseFromPath("/cases/site:1")).toBeNull();
  });
});
