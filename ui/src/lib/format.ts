// Formatting shared by every view: exact times, ages, durations, counts.
import type { Lang } from "./i18n";
import { eventStrings } from "./labels";

/** Exact UTC time with microseconds as stored: `2026-11-30 23:18:24.123456`. */
export function exactTime(rfc3339: string): string {
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(\.\d+)?/.exec(rfc3339);
  if (!m) return rfc3339;
  const frac = (m[3] ?? ".").slice(1).padEnd(6, "0").slice(0, 6);
  return `${m[1]} ${m[2]}.${frac}`;
}

/** Parses an RFC 3339 time to epoch milliseconds (microseconds are dropped). */
export function toMillis(rfc3339: string): number {
  return Date.parse(rfc3339);
}

/**
 * A duration as people say it, in the operator's language: `420 ms`, `1.5 s`, `30 s`,
 * `2 min 5 s`, `3 h 10 min`, `2 d 4 h` (Russian: `420 мс`, `1,5 с`, `2 мин 5 с`…).
 */
export function duration(ms: number, lang: Lang = "en"): string {
  const u = eventStrings(lang).units;
  if (!Number.isFinite(ms)) return "—";
  const sign = ms < 0 ? "−" : "";
  ms = Math.abs(ms);
  if (ms < 999.5) return `${sign}${Math.round(ms)} ${u.ms}`;
  if (ms < 9950) return `${sign}${String(Math.round(ms / 100) / 10).replace(".", u.decimal)} ${u.s}`;
  const total = Math.round(ms / 1000);
  if (total < 60) return `${sign}${total} ${u.s}`;
  const two = (big: number, bu: string, small: number, su: string) =>
    `${sign}${big} ${bu}${small ? ` ${small} ${su}` : ""}`;
  const m = Math.floor(total / 60);
  if (m < 60) return two(m, u.min, total % 60, u.s);
  const h = Math.floor(m / 60);
  if (h < 24) return two(h, u.h, m % 60, u.min);
  return two(Math.floor(h / 24), u.d, h % 24, u.h);
}

/** How long ago `rfc3339` was, relative to `now` (ms). */
export function age(rfc3339: string, lang: Lang = "en", now: number = Date.now()): string {
  return duration(now - toMillis(rfc3339), lang);
}

/** Thousands separated by a thin space: 1 234 567. */
export function count(n: number | null | undefined): string {
  if (n === null || n === undefined) return "—";
  return Math.round(n)
    .toString()
    .replace(/\B(?=(\d{3})+(?!\d))/g, "\u2009");
}

/** Seconds as a duration, or a dash. */
export function seconds(s: number | null | undefined, lang: Lang = "en"): string {
  return s === null || s === undefined ? "—" : duration(s * 1000, lang);
}

/** Year, month, day, hours, minutes, seconds and the zone's short name of `ms` in `timeZone`. */
function zoned(ms: number, timeZone?: string): Record<string, string> {
  const f = new Intl.DateTimeFormat("en-US", {
    timeZone,
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    hourCycle: "h23",
    timeZoneName: "short",
  });
  return Object.fromEntries(f.formatToParts(new Date(ms)).map((p) => [p.type, p.value]));
}

/**
 * The wall-clock time of `rfc3339` in the local time zone (or `timeZone`), with the zone
 * shown: `14:03:07 GMT+3`, `09:15:00 UTC`. The input as it is when it is not a time.
 */
export function localTime(rfc3339: string, timeZone?: string): string {
  const ms = toMillis(rfc3339);
  if (!Number.isFinite(ms)) return rfc3339;
  const p = zoned(ms, timeZone);
  return `${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
}

/** The local date and minute with the zone: `2026-11-30 14:03 GMT+3`. */
export function localMinute(rfc3339: string, timeZone?: string): string {
  const ms = toMillis(rfc3339);
  if (!Number.isFinite(ms)) return rfc3339;
  const p = zoned(ms, timeZone);
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute} ${p.timeZoneName}`;
}

/** Like [`localTime`], with the local date first: `2026-11-30 14:03:07 GMT+3`. */
export function localDateTime(rfc3339: string, timeZone?: string): string {
  const ms = toMillis(rfc3339);
  if (!Number.isFinite(ms)) return rfc3339;
  const p = zoned(ms, timeZone);
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${p.timeZoneName}`;
}

export type WindowUnit = "days" | "hours" | "minutes" | "seconds";
const UNIT_SECS: Record<WindowUnit, number> = { days: 86400, hours: 3600, minutes: 60, seconds: 1 };

/** A matching window in the largest unit that divides it: 1209600 → 14 days. */
export function windowParts(secs: number): { n: number; unit: WindowUnit } {
  for (const unit of ["days", "hours", "minutes"] as WindowUnit[]) {
    if (secs > 0 && secs % UNIT_SECS[unit] === 0) return { n: secs / UNIT_SECS[unit], unit };
  }
  return { n: secs, unit: "seconds" };
}

/** The seconds of `n` `unit`s (the store refuses what is out of range). */
export function windowSecs(n: number, unit: WindowUnit): number {
  return Math.round(n * UNIT_SECS[unit]);
}
