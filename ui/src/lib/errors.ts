import type { ConsoleError } from "./bindings";
import type { Strings } from "./i18n";

/** The message an operator reads for a command's error. */
export function errorText(e: ConsoleError, t: Strings): string {
  switch (e.kind) {
    case "not_connected":
      return t.errors.not_connected;
    case "unreachable":
      return `${t.errors.unreachable}: ${e.message}`;
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
    case "invalid":
    case "not_found":
    case "failed":
      return e.message;
  }
}
