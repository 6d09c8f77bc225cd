import { describe, expect, it } from "vitest";
import { defaultLang, languages } from "./i18n";
import { errorText } from "./errors";

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

  it("fall back to the store's sentence for a code this console does not know", () => {
    const e = { kind: "refused", code: "from_a_newer_gateway", message: "English", detail: null } as const;
    expect(errorText(e, languages.ru)).toBe("English");
  });
});
