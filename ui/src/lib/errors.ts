import type { ConsoleError } from "./bindings";
import type { Strings } from "./i18n";

/** The message an operator reads for a command's error. */
export function errorText(e: ConsoleError, t: Strings): string {
  switch (e.kind) {
    case "not_connected":
      return t.errors.not_connected;
    case "unreachable":
      return `${t.unreachableHints[unreachableCause(e.message)]} ${t.technicalDetail}: ${e.message}`;
    case "schema_missing":
      return t.errors.schema_missing;
    case "schema_too_old":
      return t.errors.schema_too_old(e.found, e.known);
    case "schema_too_new":
      return t.errors.schema_too_new(e.found, e.known);
    case "already_resolved":
      return t.errors.already_resolved(e.case_id, e.by);
    case "changed":
      return t.errors.changed;
    case "refused": {
      const say = (t.refusals as Record<string, ((d: string) => string) | undefined>)[e.code];
      return say ? say(e.detail ?? "") : e.message;
    }
    case "forbidden":
      return `${t.errors.forbidden} ${t.technicalDetail}: ${e.message}`;
    case "invalid":
    case "not_found":
    case "failed":
      return e.message;
  }
}

/** What most likely stands behind a driver's "cannot connect" message, for a sentence
 *  the operator can act on (the message itself follows as the technical detail). */
export function unreachableCause(message: string): "refused" | "auth" | "missing" | "timeout" | "tls" | "file" | "other" {
  const m = message.toLowerCase();
  if (/password|authentication|no pg_hba|role .* does not exist/.test(m)) return "auth";
  if (/database .* does not exist/.test(m)) return "missing";
  if (/refused|no route|unreachable|name or service not known|failed to lookup|dns/.test(m)) return "refused";
  if (/timed? ?out|timeout/.test(m)) return "timeout";
  if (/tls|ssl|certificate/.test(m)) return "tls";
  if (/unable to open database file|sqlite|no such file|permission denied|\(code: 14\)/.test(m)) return "file";
  return "other";
}
