// WebKitGTK reports the POSIX locale as the language tag (`C` under LANG=C, as on servers
// and CI), which `Intl` rejects; uPlot formats numbers with `navigator.language` when its
// module loads. Imported first by main.ts so a bad tag becomes `en-US` before that.
function valid(tag: string | undefined): boolean {
  try {
    return !!tag && Intl.NumberFormat.supportedLocalesOf([tag]).length > 0;
  } catch {
    return false;
  }
}

if (typeof navigator !== "undefined" && !valid(navigator.language)) {
  Object.defineProperty(navigator, "language", { get: () => "en-US" });
  Object.defineProperty(navigator, "languages", { get: () => ["en-US"] });
}

export {};
