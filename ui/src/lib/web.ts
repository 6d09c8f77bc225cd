// The console's second transport: HTTP to the gateway that served this page
// (`leadgate serve` with `[console]`). Each call is the Tauri command of the same name
// with the same arguments, POSTed to `/api/call/<command>`; the session is an HttpOnly
// cookie the page cannot read, and every call carries the CSRF token sign-in answered.
import type { Connection, ConsoleError } from "./bindings";

type Fetch = typeof fetch;

export class WebTransport {
  private csrf: string | null = null;
  /** Calls made while this is above 0 are the UI's own polling: they do not count as the
   *  person's activity (an unattended tab still times out). */
  private background = 0;

  constructor(private readonly fetcher: Fetch = (...a) => fetch(...a)) {}

  /** An answer that is not 2xx as the `ConsoleError` the gateway sent, or one made up. */
  private async failure(r: Response): Promise<ConsoleError> {
    try {
      const body = await r.json();
      if (body && typeof body === "object" && "kind" in body) return body as ConsoleError;
    } catch {
      // not JSON: a proxy's page, most likely
    }
    if (r.status === 401) return { kind: "not_connected" };
    return { kind: "failed", message: `the gateway answered ${r.status} ${r.statusText}` };
  }

  private async request(path: string, init: RequestInit): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.csrf) headers.set("X-CSRF-Token", this.csrf);
    if (this.background > 0) headers.set("X-Leadgate-Background", "1");
    if (init.body !== undefined) headers.set("Content-Type", "application/json");
    let r: Response;
    try {
      r = await this.fetcher(path, { ...init, headers, credentials: "same-origin" });
    } catch (e) {
      throw { kind: "unreachable", message: String(e) } satisfies ConsoleError;
    }
    if (!r.ok) {
      const e = await this.failure(r);
      if (e.kind === "not_connected") this.csrf = null;
      throw e;
    }
    return r;
  }

  /** Runs `work` as background polling (see `background`). */
  async inBackground<T>(work: () => Promise<T>): Promise<T> {
    this.background++;
    try {
      return await work();
    } finally {
      this.background--;
    }
  }

  async call<T>(command: string, args?: Record<string, unknown>): Promise<T> {
    const r = await this.request(`/api/call/${encodeURIComponent(command)}`, {
      method: "POST",
      body: JSON.stringify(args ?? {}),
    });
    return (await r.json()) as T;
  }

  /** The signed-in session (a reload keeps it), or `not_connected`. */
  async session(): Promise<Connection> {
    const r = await this.request("/api/session", { method: "GET" });
    const s = (await r.json()) as { csrf: string; connection: Connection };
    this.csrf = s.csrf;
    return s.connection;
  }

  async signIn(login: string, password: string): Promise<Connection> {
    this.csrf = null;
    const r = await this.request("/api/session", { method: "POST", body: JSON.stringify({ login, password }) });
    const s = (await r.json()) as { csrf: string; connection: Connection };
    this.csrf = s.csrf;
    return s.connection;
  }

  /** The session's console showing another of the person's tenants. */
  async selectTenant(slug: string): Promise<Connection> {
    const r = await this.request("/api/session/tenant", { method: "POST", body: JSON.stringify({ slug }) });
    return (await r.json()) as Connection;
  }

  async signOut(): Promise<void> {
    try {
      await this.request("/api/session", { method: "DELETE" });
    } finally {
      this.csrf = null;
    }
  }

  /** The tab's rows as a CSV file the browser downloads; answers its name and row count. */
  async exportCsv(request: unknown, save: (blob: Blob, name: string) => void): Promise<[string, number]> {
    const r = await this.request("/api/export", { method: "POST", body: JSON.stringify(request) });
    const name = /filename="([^"]+)"/.exec(r.headers.get("Content-Disposition") ?? "")?.[1] ?? "leadgate-export.csv";
    const rows = Number(r.headers.get("X-Leadgate-Rows") ?? "0");
    save(await r.blob(), name);
    return [name, rows];
  }
}

/** Whether an address may be opened: only the CRM's own origins, as on the desktop. */
export function mayOpen(url: string, origins: string[]): boolean {
  try {
    const u = new URL(url);
    return (u.protocol === "https:" || u.protocol === "http:") && origins.includes(u.origin);
  } catch {
    return false;
  }
}

/** The operation a console address names (`/case/<operation id>`), or null. */
export function caseFromPath(path: string): string | null {
  const m = /^\/case\/(.+)$/.exec(path);
  if (!m) return null;
  try {
    const id = decodeURIComponent(m[1]);
    return id.trim() ? id : null;
  } catch {
    return null;
  }
}

/** The console's address of an operation's case. */
export function pathOfCase(operationId: string | null): string {
  return operationId ? `/case/${encodeURIComponent(operationId)}` : "/";
}
