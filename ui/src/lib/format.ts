// Formatting shared by every view: exact times, ages, durations, counts.

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

/** A compact duration: `850 ms`, `12 s`, `5 m 03 s`, `2 h 07 m`, `3 d 4 h`. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return "—";
  const neg = ms < 0;
  ms = Math.abs(ms);
  const sign = neg ? "−" : "";
  if (ms < 1000) return `${sign}${Math.round(ms)} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${sign}${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${sign}${m} m ${String(s % 60).padStart(2, "0")} s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${sign}${h} h ${String(m % 60).padStart(2, "0")} m`;
  const d = Math.floor(h / 24);
  return `${sign}${d} d ${h % 24} h`;
}

/** How long ago `rfc3339` was, relative to `now` (ms). */
export function age(rfc3339: string, now: number = Date.now()): string {
  return duration(now - toMillis(rfc3339));
}

/** Thousands separated by a thin space: 1 234 567. */
export function count(n: number | null | undefined): string {
  if (n === null || n === undefined) return "—";
  return Math.round(n)
    .toString()
    .replace(/\B(?=(\d{3})+(?!\d))/g, "\u2009");
}

/** Seconds as a duration, or a dash. */
export function seconds(s: number | null | undefined): string {
  return s === null || s === undefined ? "—" : duration(s * 1000);
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
