// The words for the store's codes, in the operator's language: statuses, review reasons,
// error classes, resolutions, actors and CRMs. Every view takes them from here; the
// strings are in i18n/events.{en,ru}.ts. A code this console does not know is shown as
// it is (underscores as spaces), never as an empty label.
import { languages, type Lang, type Strings } from "./i18n";
import { eventsEn, type EventStrings } from "./i18n/events.en";
import { eventsRu } from "./i18n/events.ru";

const strings: Record<Lang, EventStrings> = { en: eventsEn, ru: eventsRu };

export function eventStrings(lang: Lang): EventStrings {
  return strings[lang] ?? eventsEn;
}

/** The language of a console string table (`t` as App.svelte passes it down). */
export function langOf(t: Strings): Lang {
  const found = (Object.keys(languages) as Lang[]).find((l) => languages[l] === t);
  return found ?? "en";
}

/** `map[key]`, or the code itself made readable. */
export function pick(map: Record<string, string>, key: string): string {
  return Object.hasOwn(map, key) ? map[key] : key.replace(/_/g, " ");
}

/** `failed_terminal` → `failed` / `не выполнена`. */
export function statusLabel(status: string, lang: Lang): string {
  return pick(eventStrings(lang).status, status);
}

/** `retries_exhausted` → `retries exhausted` / `попытки исчерпаны`. */
export function reasonLabel(reason: string, lang: Lang): string {
  return pick(eventStrings(lang).reason, reason);
}

/** `rate_limited` → `CRM rate limit` / `лимит запросов CRM`. */
export function errorClassLabel(cls: string, lang: Lang): string {
  return pick(eventStrings(lang).errorClass, cls);
}

/** A pause reason the worker wrote as `<error class>: <the CRM's words>` → the class in
 *  `lang` (`credentials rejected` / `доступ отклонён`); null when it starts otherwise. */
export function pauseCause(reason: string | null, lang: Lang): string | null {
  const cls = reason?.split(":", 1)[0]?.trim() ?? "";
  const words = eventStrings(lang).errorClass as Record<string, string>;
  return cls in words ? words[cls] : null;
}

/** `retry_authorized` → `retry authorized` / `разрешён повтор`. */
export function resolutionLabel(resolution: string, lang: Lang): string {
  return pick(eventStrings(lang).resolution, resolution);
}

/** `bitrix24` → `Bitrix24`; no connector → `the CRM` / `CRM`. */
export function crmLabel(connector: string | null | undefined, lang: Lang): string {
  const c = eventStrings(lang).crm;
  if (!connector) return c.unknown;
  return connector !== "unknown" && Object.hasOwn(c, connector) ? c[connector as keyof typeof c] : connector;
}

/**
 * Who wrote an event: `gateway`, `worker:<id>`, `reconciler:<id>`, `reconciler`,
 * `claim_api`, `console`, `retention`, `migration`, or a person's name (kept as written).
 */
export function actorLabel(actor: string, lang: Lang): string {
  const a = eventStrings(lang).actor;
  const fixed: Record<string, string> = {
    gateway: a.gateway,
    console: a.console,
    retention: a.retention,
    migration: a.migration,
    claim_api: a.claim_api,
    reconciler: a.reconciler,
  };
  if (Object.hasOwn(fixed, actor)) return fixed[actor];
  if (actor.startsWith("worker:") && actor.length > 7) return a.worker(actor.slice(7));
  if (actor.startsWith("reconciler:") && actor.length > 11) {
    // The reconciler of a worker process is `reconciler:worker:<host>:<pid>`.
    return a.reconcilerOf(actor.slice(11).replace(/^worker:/, ""));
  }
  return actor;
}
