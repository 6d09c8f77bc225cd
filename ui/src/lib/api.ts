// The one module that talks to Tauri: every command, typed with the generated bindings,
// the shell's events, and the opener plugin (scoped by the shell to the CRM's own address).
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
  ConsoleError,
  Dashboard,
  DiagnosisRow,
  DiagnosisView,
  ExportRequest,
  QueuePage,
  QueueQuery,
  QueueRow,
  Range,
  RulesEdit,
  RulesView,
  SearchResults,
  Selection,
  Settings,
  Tab,
  TabCounts,
  TimelinePageView,
} from "./bindings";

/** What clicking a desktop notification opens; the shell sends it back as `leadgate://open`. */
export type OpenTarget = { case: { operation_id: string; case_id: number | null } } | { tab: Tab };

async function call<T>(cmd: string, args?: Record<string, unknown>): Promise<T> {
  try {
    return await invoke<T>(cmd, args);
  } catch (e) {
    throw asConsoleError(e);
  }
}

/** Commands reject with a `ConsoleError`; anything else (a bridge failure) is wrapped. */
export function asConsoleError(e: unknown): ConsoleError {
  if (e && typeof e === "object" && "kind" in e) return e as ConsoleError;
  return { kind: "failed", message: String(e) };
}

export const api = {
  settings: () => call<Settings>("settings"),
  saveSettings: (settings: Settings) => call<Settings>("save_settings", { settings }),
  connect: (url: string | null) => call<Connection>("connect", { url }),
  counts: () => call<TabCounts>("counts"),
  queue: (tab: Tab, query: QueueQuery) => call<QueuePage>("queue", { tab, query }),
  caseDetail: (operationId: string, caseId: number | null) =>
    call<CaseDetail>("case_detail", { operationId, caseId }),
  /** The events of a timeline before event `before` (the first one shown), a page at a time. */
  olderEvents: (operationId: string, before: number) =>
    call<TimelinePageView>("older_events", { operationId, before }),
  act: (request: ActionRequest) => call<ActionOutcome>("act", { request }),
  openCase: (operationId: string, comment: string | null) => call<number>("open_case", { operationId, comment }),
  resumeConnector: (name: string) => call<boolean>("resume_connector", { name }),
  connectors: () => call<ConnectorView[]>("connectors"),
  casesAfter: (after: number | null) => call<QueueRow[]>("cases_after", { after }),
  dashboard: (range: Range) => call<Dashboard>("dashboard", { range }),
  /** A desktop notification, recorded on the timeline of the operations it is about;
   *  clicking it brings the window to the front and sends `open` to `onOpen`. */
  notify: (title: string, body: string, what: string, operationIds: string[], open: OpenTarget | null) =>
    call<null>("notify", { title, body, what, operationIds, open }),
  /** The database changed (PostgreSQL pushes it). */
  onRefresh: (handler: () => void): Promise<UnlistenFn> => listen("leadgate://refresh", () => handler()),
  /** A desktop notification was clicked. */
  onOpen: (handler: (target: OpenTarget) => void): Promise<UnlistenFn> =>
    listen<OpenTarget>("leadgate://open", (e) => handler(e.payload)),
  /** What a bulk action would do to every case the tab's filters select. */
  bulkPreview: (selection: Selection, action: BulkAction) => call<BulkPreview>("bulk_preview", { selection, action }),
  /** Starts it in the background; answers the run's id. */
  bulkStart: (request: BulkRequest) => call<string>("bulk_start", { request }),
  bulkProgress: (id: string) => call<BulkProgress>("bulk_progress", { id }),
  /** Writes the tab's rows as CSV; answers the file's path and the row count. */
  exportCsv: (request: ExportRequest) => call<[string, number]>("export_csv", { request }),
  /** Operations of any status by key, phone in any format, e-mail, crm_id or name. */
  search: (query: string, cursor: string | null) => call<SearchResults>("search", { query, cursor }),
  /** The reports `leadgate diagnose` saved in this database, the newest first. */
  diagnoses: () => call<DiagnosisRow[]>("diagnoses"),
  diagnosis: (id: number) => call<DiagnosisView>("diagnosis", { id }),
  /** Every source's business rules and their history. */
  rules: () => call<RulesView>("rules"),
  /** A manager's edit of one source's rules, at the version shown; answers the rules after it. */
  setRules: (edit: RulesEdit) => call<RulesView>("set_rules", { edit }),
  /** Opens a CRM page in the system browser; any other address is refused by the shell. */
  openInBrowser: async (url: string): Promise<void> => {
    try {
      await openUrl(url);
    } catch (e) {
      throw asConsoleError(e);
    }
  },
};
