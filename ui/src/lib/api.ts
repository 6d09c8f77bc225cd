// The one module that talks to the shell: every command, typed with the generated
// bindings, the shell's events, and opening the CRM's pages. Two shells run this same UI,
// chosen at start: the desktop app (Tauri: `invoke`, its events, the opener plugin scoped
// to the CRM's own address) and a browser served by the gateway (HTTP: ./web.ts).
import { invoke } from "@tauri-apps/api/core";
import { listen, type UnlistenFn } from "@tauri-apps/api/event";
import { openUrl } from "@tauri-apps/plugin-opener";
import type {
  ActionOutcome,
  ActionRequest,
  BulkAction,
  BulkPreview,
  BulkProgress,
  BulkRequest,
  CaseDetail,
  Connection,
  ConnectorView,
  FeedAttemptView,
  FeedSubscribed,
  FeedSubscriberView,
  ConsoleError,
  Dashboard,
  DiagnosisRow,
  DiagnosisView,
  ExportRequest,
  QueuePage,
  QueueQuery,
  QueueRow,
  Range,
  ResendRequest,
  RulesEdit,
  RulesView,
  LookupResult,
  SearchResults,
  Selection,
  Settings,
  Tab,
  TabCounts,
  TimelinePageView,
} from "./bindings";
import { mayOpen, WebTransport } from "./web";

/** Which shell this UI runs in: the Tauri window, or a browser. */
export const shell: "desktop" | "web" =
  typeof window !== "undefined" && "__TAURI_INTERNALS__" in window ? "desktop" : "web";
const web = new WebTransport();
const SETTINGS_KEY = "leadgate.settings";

/** What clicking a desktop notification opens; the shell sends it back as `leadgate://open`. */
export type OpenTarget = { case: { operation_id: string; case_id: number | null } } | { tab: Tab };

/** Runs `work`; whatever it rejects with becomes a `ConsoleError`. */
async function guarded<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (e) {
    throw asConsoleError(e);
  }
}

function call<T>(cmd: string, args?: Record<string, unknown>): Promise<T> {
  return guarded(() => (shell === "web" ? web.call<T>(cmd, args) : invoke<T>(cmd, args)));
}

/** In a browser the settings (the language and the tenant shown last) stay in the browser. */
function webSettings(): Settings {
  try {
    const s = JSON.parse(localStorage.getItem(SETTINGS_KEY) ?? "{}") as Partial<Settings>;
    return { database_url: null, language: s.language ?? null, crm_url_template: null, tenant: s.tenant ?? null };
  } catch {
    return { database_url: null, language: null, crm_url_template: null, tenant: null };
  }
}

function saveWebSettings(s: Pick<Settings, "language" | "tenant">) {
  localStorage.setItem(SETTINGS_KEY, JSON.stringify({ language: s.language, tenant: s.tenant }));
}

/** A browser's session showing the tenant this browser showed last, when the person may
 *  still show it (the desktop remembers it in its settings file). */
async function webTenantShownLast(c: Connection): Promise<Connection> {
  const last = webSettings().tenant;
  if (!last || last === c.tenant || !c.tenants.some((t) => t.slug === last)) return c;
  return guarded(() => web.selectTenant(last)).catch(() => c);
}

/** Handlers of clicked browser notifications (the desktop's `leadgate://open`). */
const openHandlers = new Set<(target: OpenTarget) => void>();

function browserNotify(title: string, body: string, open: OpenTarget | null) {
  if (typeof Notification === "undefined" || Notification.permission !== "granted") return;
  const n = new Notification(title, { body });
  n.onclick = () => {
    window.focus();
    if (open) for (const h of openHandlers) h(open);
    n.close();
  };
}

/** Refreshes pushed by the gateway (server-sent events), when the database pushes them:
 *  the stream opens once a session exists (a browser never retries one refused) and
 *  closes at sign-out. */
const refreshHandlers = new Set<() => void>();
let events: EventSource | null = null;

function openEvents() {
  if (typeof EventSource === "undefined" || events) return;
  events = new EventSource("/api/events");
  events.addEventListener("refresh", () => refreshHandlers.forEach((h) => h()));
  // A stream the gateway ended (session over, gateway gone) is not reopened by itself.
  events.onerror = () => {
    if (events?.readyState === EventSource.CLOSED) events = null;
  };
}

function closeEvents() {
  events?.close();
  events = null;
}

function webRefresh(handler: () => void): Promise<UnlistenFn> {
  refreshHandlers.add(handler);
  return Promise.resolve(() => void refreshHandlers.delete(handler));
}

function download(blob: Blob, name: string) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

/** Commands reject with a `ConsoleError`; anything else (a bridge failure) is wrapped. */
export function asConsoleError(e: unknown): ConsoleError {
  if (e && typeof e === "object" && "kind" in e) return e as ConsoleError;
  return { kind: "failed", message: String(e) };
}

export const api = {
  settings: async (): Promise<Settings> => (shell === "web" ? webSettings() : call<Settings>("settings")),
  saveSettings: async (settings: Settings): Promise<Settings> => {
    if (shell === "desktop") return call<Settings>("save_settings", { settings });
    saveWebSettings({ language: settings.language, tenant: webSettings().tenant });
    return webSettings();
  },
  /** The desktop connects to a database URL; a browser resumes its signed-in session. */
  connect: async (url: string | null): Promise<Connection> => {
    if (shell === "desktop") return call<Connection>("connect", { url });
    const c = await guarded(() => web.session());
    openEvents();
    return webTenantShownLast(c);
  },
  /** A browser signs in with the person's login and password (web shell only). */
  signIn: async (login: string, password: string): Promise<Connection> => {
    const c = await guarded(() => web.signIn(login, password));
    closeEvents();
    openEvents();
    return webTenantShownLast(c);
  },
  /** Shows another of the login's tenants (fleet mode); remembered for the next start. */
  selectTenant: async (slug: string): Promise<Connection> => {
    if (shell === "desktop") return call<Connection>("select_tenant", { slug });
    const c = await guarded(() => web.selectTenant(slug));
    saveWebSettings({ language: webSettings().language, tenant: c.tenant });
    return c;
  },
  signOut: (): Promise<void> => {
    closeEvents();
    return web.signOut();
  },
  /** Runs `work` as the UI's own polling: in a browser it does not keep the session alive. */
  background: <T>(work: () => Promise<T>): Promise<T> => (shell === "web" ? web.inBackground(work) : work()),
  counts: () => call<TabCounts>("counts"),
  queue: (tab: Tab, query: QueueQuery) => call<QueuePage>("queue", { tab, query }),
  caseDetail: (operationId: string, caseId: number | null) =>
    call<CaseDetail>("case_detail", { operationId, caseId }),
  /** The events of a timeline before event `before` (the first one shown), a page at a time. */
  olderEvents: (operationId: string, before: number) =>
    call<TimelinePageView>("older_events", { operationId, before }),
  act: (request: ActionRequest) => call<ActionOutcome>("act", { request }),
  openCase: (operationId: string, comment: string | null) => call<number>("open_case", { operationId, comment }),
  /** Fix and resend: the edited data replaces the lead's and one more attempt sends it. */
  resend: (request: ResendRequest) => call<ActionOutcome>("resend", { request }),
  resumeConnector: (name: string) => call<boolean>("resume_connector", { name }),
  /** Pauses a connector by hand (admins), saying why; false: it was paused already. */
  pauseConnector: (name: string, reason: string) => call<boolean>("pause_connector", { name, reason }),
  connectors: () => call<ConnectorView[]>("connectors"),
  /** The event feed's subscribers (admins; never a secret). */
  feedSubscribers: () => call<FeedSubscriberView[]>("feed_subscribers"),
  /** A subscriber's newest delivery attempts, newest first. */
  feedAttempts: (id: number) => call<FeedAttemptView[]>("feed_attempts", { id }),
  /** Adds a subscriber; its secret is in the answer, this once. */
  feedSubscribe: (url: string, events: string[]) => call<FeedSubscribed>("feed_subscribe", { url, events }),
  feedRemove: (id: number) => call<boolean>("feed_remove", { id }),
  feedEnable: (id: number) => call<boolean>("feed_enable", { id }),
  casesAfter: (after: number | null) => call<QueueRow[]>("cases_after", { after }),
  dashboard: (range: Range) => call<Dashboard>("dashboard", { range }),
  /** A desktop notification, recorded on the timeline of the operations it is about;
   *  clicking it brings the window to the front and sends `open` to `onOpen`. */
  notify: (title: string, body: string, what: string, operationIds: string[], open: OpenTarget | null) => {
    if (shell === "web") browserNotify(title, body, open);
    return call<null>("notify", { title, body, what, operationIds, open });
  },
  /** Asks the browser to allow notifications (the desktop app has them already). */
  /** Asks the browser whether new cases may raise notifications, without waiting for the
   *  answer: Firefox holds the promise until the person answers its prompt, and the
   *  console must not wait for that. */
  allowNotifications: (): void => {
    if (shell === "web" && typeof Notification !== "undefined" && Notification.permission === "default")
      void Notification.requestPermission().catch(() => undefined);
  },
  /** The database changed (PostgreSQL pushes it). */
  onRefresh: (handler: () => void): Promise<UnlistenFn> =>
    shell === "web" ? webRefresh(handler) : listen("leadgate://refresh", () => handler()),
  /** A notification was clicked. */
  onOpen: (handler: (target: OpenTarget) => void): Promise<UnlistenFn> => {
    if (shell === "desktop") return listen<OpenTarget>("leadgate://open", (e) => handler(e.payload));
    openHandlers.add(handler);
    return Promise.resolve(() => void openHandlers.delete(handler));
  },
  /** What a bulk action would do to every case the tab's filters select. */
  bulkPreview: (selection: Selection, action: BulkAction) => call<BulkPreview>("bulk_preview", { selection, action }),
  /** Starts it in the background; answers the run's id. */
  bulkStart: (request: BulkRequest) => call<string>("bulk_start", { request }),
  bulkProgress: (id: string) => call<BulkProgress>("bulk_progress", { id }),
  /** Writes the tab's rows as CSV (a browser downloads it); answers the file's path or
   *  name and the row count. */
  exportCsv: async (request: ExportRequest): Promise<[string, number]> => {
    if (shell === "desktop") return call<[string, number]>("export_csv", { request });
    return guarded(() => web.exportCsv(request, download));
  },
  /** Operations of any status by key, phone in any format, e-mail, crm_id or name. */
  search: (query: string, cursor: string | null) => call<SearchResults>("search", { query, cursor }),
  /** "Did my lead arrive?": status, received-at and CRM id, nothing a lead said. */
  lookup: (query: string) => call<LookupResult>("lookup", { query }),
  /** The reports `leadgate diagnose` saved in this database, the newest first. */
  diagnoses: () => call<DiagnosisRow[]>("diagnoses"),
  diagnosis: (id: number) => call<DiagnosisView>("diagnosis", { id }),
  /** Every source's business rules and their history. */
  rules: () => call<RulesView>("rules"),
  /** A manager's edit of one source's rules, at the version shown; answers the rules after it. */
  setRules: (edit: RulesEdit) => call<RulesView>("set_rules", { edit }),
  /** Opens a CRM page in the system browser (a new tab); any other address is refused. */
  openInBrowser: (url: string): Promise<void> =>
    guarded(async () => {
      if (shell === "desktop") return await openUrl(url);
      const origins = await call<string[]>("crm_origins");
      if (!mayOpen(url, origins)) throw { kind: "forbidden", message: `not a CRM address: ${url}` };
      window.open(url, "_blank", "noopener,noreferrer");
    }),
};
