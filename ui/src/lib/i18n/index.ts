import { en, type Strings } from "./en";
import { ru } from "./ru";

export type Lang = "ru" | "en";
export const languages: Record<Lang, Strings> = { ru, en };

/** Russian when the system locale is Russian, English otherwise. */
export function defaultLang(locales: readonly string[] = navigator.languages ?? [navigator.language]): Lang {
  return locales.some((l) => l.toLowerCase().startsWith("ru")) ? "ru" : "en";
}

export type { Strings };
