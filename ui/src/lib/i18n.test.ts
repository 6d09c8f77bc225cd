import { describe, expect, it } from "vitest";
import { defaultLang, languages } from "./i18n";
import { plural } from "./i18n/ru";
import { errorText, unreachableCause } from "./errors";

function keys(o: object, prefix = ""): string[] {
  return Object.entries(o).flatMap(([k, v]) =>
    v && typeof v === "object" ? keys(v, `${prefix}${k}.`) : [`${prefix}${k}`],
  );
}

describe("i18n", () => {
  it("picks Russian for a Russian locale", () => {
    expect(defaultLang(["ru-RU", "en-US"])).toBe("ru");
    expect(defaultLang(["en-GB"])).toBe("en");
  });

  it("says Russian counts with the right word", () => {
    const w = (n: number) => plural(n, "кейс", "кейса", "кейсов");
    expect([1, 2, 5, 11, 21, 22, 25, 111].map(w)).toEqual(["кейс", "кейса", "кейсов", "кейсов", "кейс", "кейса", "кейсов", "кейсов"]);
    expect(languages.ru.forManager(1)).toBe("1 кейс ждёт менеджера");
    expect(languages.ru.forManager(3)).toBe("3 кейса ждут менеджера");
    expect(languages.ru.emptyFiltered(21)).toContain("ждёт 21 кейс.");
  });

  it("has the same keys in both languages", () => {
    expect(keys(languages.ru).sort()).toEqual(keys(languages.en).sort());
  });
});

describe("refusals", () => {
  it("are told in the operator's language, with their detail", () => {
    const e = { kind: "refused", code: "already_completed", message: "English", detail: "5555" } as const;
    expect(errorText(e, languages.ru)).toBe("Операция уже завершена, id в CRM: 5555.");
    expect(errorText(e, languages.en)).toContain("5555");
  });

  it("never show an empty placeholder or a raw code, with or without their detail", () => {
    for (const lang of ["ru", "en"] as const) {
      const refusals = languages[lang].refusals as Record<string, (d: string) => string>;
      for (const [code, say] of Object.entries(refusals)) {
        expect(say(""), `${lang} ${code} without detail`).not.toMatch(/\(\)|«»|``|\(\s*\)/);
      }
      for (const code of ["not_in_bulk", "not_your_role", "create_new_not_applicable", "not_a_payload_conflict"]) {
        const text = refusals[code]("cross_channel_match");
        expect(text, `${lang} ${code}`).not.toContain("cross_channel_match");
        expect(text).toContain(lang === "ru" ? "совпадение по каналам" : "cross-channel match");
      }
      expect(refusals.retry_not_in_review("completed")).not.toContain("`");
    }
  });

  it("fall back to the store's sentence for a code this console does not know", () => {
    const e = { kind: "refused", code: "from_a_newer_gateway", message: "English", detail: null } as const;
    expect(errorText(e, languages.ru)).toBe("English");
  });
});

describe("connection errors", () => {
  it("say what to check before the driver's words", () => {
    const cases: [string, string][] = [
      ["error communicating with database: Connection refused (os error 111)", "refused"],
      ['password authentication failed for user "olga"', "auth"],
      ['database "leads" does not exist', "missing"],
      ["pool timed out while waiting for an open connection", "timeout"],
      ["error with configuration: invalid certificate: UnknownIssuer", "tls"],
      ["error returned from database: (code: 14) unable to open database file", "file"],
      ["something else", "other"],
    ];
    for (const [message, cause] of cases) expect(unreachableCause(message), message).toBe(cause);
    const e = { kind: "unreachable", message: "Connection refused (os error 111)" } as const;
    expect(errorText(e, languages.ru)).toMatch(/^По этому адресу никто не отвечает.*Connection refused/);
    expect(errorText(e, languages.en)).toMatch(/^Nothing answers at that address.*Technical detail: Connection refused/);
  });
});
