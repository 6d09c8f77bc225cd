import { describe, expect, it } from "vitest";
import { defaultLang, languages } from "./i18n";

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
