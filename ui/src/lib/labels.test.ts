import { describe, expect, it } from "vitest";
import { languages } from "./i18n";
import { eventsEn } from "./i18n/events.en";
import { eventsRu } from "./i18n/events.ru";
import { actorLabel, crmLabel, errorClassLabel, langOf, pauseCause, reasonLabel, resolutionLabel, statusLabel } from "./labels";

/** Every key path of a string table, functions as leaves. */
function keys(o: object, prefix = ""): string[] {
  return Object.entries(o).flatMap(([k, v]) =>
    v && typeof v === "object" ? keys(v, `${prefix}${k}.`) : [`${prefix}${k}`],
  );
}

/** Every leaf of a table: strings as they are, functions called with plausible arguments. */
function leaves(o: object): string[] {
  return Object.values(o).flatMap((v): string[] => {
    if (typeof v === "string") return [v];
    if (typeof v === "function") return [String(v("x", 2, "y", "z", "w"))];
    return v && typeof v === "object" ? leaves(v) : [];
  });
}

describe("event strings", () => {
  it("have the same keys in both languages", () => {
    expect(keys(eventsRu).sort()).toEqual(keys(eventsEn).sort());
  });

  it("have no empty word in either language", () => {
    for (const table of [eventsEn, eventsRu]) {
      const words = leaves(table);
      expect(words.length).toBeGreaterThan(100);
      expect(words.filter((w) => w.trim() === "")).toEqual([]);
    }
  });

  it("are Russian in Russian", () => {
    const cyrillic = (s: string) => /[а-яё]/i.test(s);
    const notRussian = Object.entries(eventsRu.kinds).filter(([, s]) => !cyrillic(s));
    expect(notRussian).toEqual([]);
  });
});

describe("labels", () => {
  it.each([
    ["received", "received", "получена"],
    ["in_progress", "in progress", "в работе"],
    ["completed", "completed", "завершена"],
    ["failed_terminal", "failed", "не выполнена"],
    ["needs_review", "needs review", "на разборе"],
  ])("status %s", (s, en, ru) => {
    expect(statusLabel(s, "en")).toBe(en);
    expect(statusLabel(s, "ru")).toBe(ru);
  });

  it("translate reasons, error classes and resolutions", () => {
    expect(reasonLabel("retries_exhausted", "en")).toBe("retries exhausted");
    expect(reasonLabel("cross_channel_match", "ru")).toBe("совпадение по каналам");
    expect(errorClassLabel("rate_limited", "en")).toBe("CRM rate limit");
    expect(errorClassLabel("auth", "ru")).toBe("доступ отклонён");
    expect(resolutionLabel("retry_authorized", "en")).toBe("retry authorized");
    expect(resolutionLabel("kept_original", "ru")).toBe("оставлены исходные");
  });

  it("show a code this console does not know as readable text", () => {
    expect(statusLabel("on_hold", "ru")).toBe("on hold");
    expect(reasonLabel("from_a_newer_gateway", "en")).toBe("from a newer gateway");
    expect(errorClassLabel("toString", "en")).toBe("toString");
  });

  it.each([
    ["gateway", "gateway", "шлюз"],
    ["worker:web-1:4242:0", "worker web-1:4242:0", "обработчик web-1:4242:0"],
    ["reconciler:worker:web-1:4242", "reconciler web-1:4242", "сверка web-1:4242"],
    ["reconciler", "reconciler", "сверка"],
    ["claim_api", "claim API", "API захвата"],
    ["console", "console", "консоль"],
    ["retention", "retention", "очистка"],
    ["migration", "migration", "миграция"],
    ["Anna", "Anna", "Anna"],
    ["Иван Петров", "Иван Петров", "Иван Петров"],
    ["worker:", "worker:", "worker:"],
  ])("actor %s", (actor, en, ru) => {
    expect(actorLabel(actor, "en")).toBe(en);
    expect(actorLabel(actor, "ru")).toBe(ru);
  });

  it("name the CRMs", () => {
    expect(crmLabel("bitrix24", "ru")).toBe("Bitrix24");
    expect(crmLabel("amocrm", "en")).toBe("amoCRM");
    expect(crmLabel(null, "en")).toBe("the CRM");
    expect(crmLabel(undefined, "ru")).toBe("CRM");
    expect(crmLabel("megaplan", "en")).toBe("megaplan");
  });

  it("tell the language of a console string table", () => {
    expect(langOf(languages.ru)).toBe("ru");
    expect(langOf(languages.en)).toBe("en");
  });

  it("reads a pause reason's error class, and nothing from other words", () => {
    expect(pauseCause("auth: expired_token", "ru")).toBe("доступ отклонён");
    expect(pauseCause("auth: expired_token", "en")).toBe("credentials rejected");
    expect(pauseCause("the portal is moving", "en")).toBeNull();
    expect(pauseCause(null, "en")).toBeNull();
  });
});
