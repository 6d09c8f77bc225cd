import { describe, expect, it } from "vitest";
import { age, count, duration, exactTime, localDateTime, localTime, windowParts, windowSecs } from "./format";

describe("format", () => {
  it("shows exact times with microseconds", () => {
    expect(exactTime("2026-11-30T23:18:24.123456Z")).toBe("2026-11-30 23:18:24.123456");
    expect(exactTime("2026-11-30T23:18:24Z")).toBe("2026-11-30 23:18:24.000000");
    expect(exactTime("2026-11-30T23:18:24.5+00:00")).toBe("2026-11-30 23:18:24.500000");
    expect(exactTime("garbage")).toBe("garbage");
  });

  it("formats durations in the operator's language (one formatter for ages and the timeline)", () => {
    expect(duration(850)).toBe("850 ms");
    expect(duration(12_000)).toBe("12 s");
    expect(duration(77_000)).toBe("1 min 17 s");
    expect(duration(77_000, "ru")).toBe("1 мин 17 с");
    expect(duration(2 * 3600_000 + 7 * 60_000, "ru")).toBe("2 ч 7 мин");
    expect(duration(3 * 86400_000 + 4 * 3600_000, "ru")).toBe("3 дн 4 ч");
    expect(duration(-5000)).toBe("−5 s");
    expect(duration(NaN)).toBe("—");
  });

  it("computes ages against a given now, in either language", () => {
    const now = Date.parse("2026-11-30T12:00:00Z");
    expect(age("2026-11-30T11:55:00Z", "en", now)).toBe("5 min");
    expect(age("2026-11-30T11:58:43Z", "ru", now)).toBe("1 мин 17 с");
  });

  it("writes a matching window in its largest whole unit and back", () => {
    expect(windowParts(14 * 86400)).toEqual({ n: 14, unit: "days" });
    expect(windowParts(36 * 3600)).toEqual({ n: 36, unit: "hours" });
    expect(windowParts(90 * 60)).toEqual({ n: 90, unit: "minutes" });
    expect(windowParts(61)).toEqual({ n: 61, unit: "seconds" });
    expect(windowSecs(14, "days")).toBe(1209600);
    expect(windowSecs(1.5, "hours")).toBe(5400);
    for (const s of [1, 59, 3600, 86400 * 365]) {
      const { n, unit } = windowParts(s);
      expect(windowSecs(n, unit)).toBe(s);
    }
  });

  it("groups thousands", () => {
    expect(count(1234567)).toBe("1\u2009234\u2009567");
    expect(count(12)).toBe("12");
    expect(count(null)).toBe("—");
  });
});

describe("local time with its zone", () => {
  const at = "2026-11-30T11:03:07.123456Z";

  it("shows the wall clock of the zone and names the zone", () => {
    expect(localTime(at, "Europe/Moscow")).toBe("14:03:07 GMT+3");
    expect(localTime(at, "UTC")).toBe("11:03:07 UTC");
    expect(localTime(at, "Asia/Kolkata")).toBe("16:33:07 GMT+5:30");
    expect(localTime(at, "America/New_York")).toBe("06:03:07 EST");
    expect(localTime("2026-07-01T12:00:00Z", "America/New_York")).toBe("08:00:00 EDT");
  });

  it("uses a 24-hour clock", () => {
    expect(localTime("2026-11-30T21:00:00Z", "Europe/Moscow")).toBe("00:00:00 GMT+3");
  });

  it("puts the local date first where asked, which may be another day than UTC's", () => {
    expect(localDateTime("2026-11-30T22:30:00Z", "Europe/Moscow")).toBe("2026-12-01 01:30:00 GMT+3");
    expect(localDateTime(at, "UTC")).toBe("2026-11-30 11:03:07 UTC");
  });

  it("defaults to the machine's zone", () => {
    const here = Intl.DateTimeFormat().resolvedOptions().timeZone;
    expect(localTime(at)).toBe(localTime(at, here));
  });

  it("leaves what is not a time as it is", () => {
    expect(localTime("garbage", "UTC")).toBe("garbage");
    expect(localDateTime("", "UTC")).toBe("");
  });
});
