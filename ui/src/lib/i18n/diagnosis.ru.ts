// Предложения экрана «Диагностика» по кодам отчёта — то же, что diagnosis.en.ts, по-русски.
// Идентификаторы, источники, id в CRM и имена узлов n8n — данные, они остаются как есть.
import type { ContentMeasure, KeyKind, LineDetail } from "../bindings";
import { actorLabel, errorClassLabel, reasonLabel, resolutionLabel } from "../labels";
import { durationIn, type DiagnosisWords } from "./diagnosis.en";
import { eventsRu } from "./events.ru";

const rules = new Intl.PluralRules("ru");
/** `n` и слово в нужной форме: `1 доставка`, `3 доставки`, `5 доставок`. */
function plural(n: number, one: string, few: string, many: string): string {
  const form = rules.select(n);
  return `${n} ${form === "one" ? one : form === "few" ? few : many}`;
}

const duration = durationIn(eventsRu.units);
const keyKind: Record<KeyKind, string> = {
  leadgate_operation: "операция Leadgate",
  submission_id: "id заявки",
  origin_id: "ORIGIN_ID",
};
const measure: Record<ContentMeasure, string> = {
  payload_hash: "хеш данных заявки",
  n8n_body: "тело запроса в n8n",
  crm_fields: "поля CRM",
};

/** Режим запуска n8n; незнакомый — как есть. */
const modes: Record<string, string> = {
  webhook: "вебхук",
  retry: "повтор",
  manual: "вручную",
  trigger: "триггер",
  trigger_mode: "триггер",
  integrated: "из другого сценария",
  cli: "командная строка",
  error: "обработчик ошибок",
  internal: "внутренний запуск",
  evaluation: "оценка",
};
const mode = (m: string) => (Object.hasOwn(modes, m) ? modes[m] : m);

/** Статус выполнения n8n; незнакомый — как есть. */
const statuses: Record<string, string> = {
  success: "успешно",
  error: "ошибка",
  crashed: "сбой",
  canceled: "отменено",
  waiting: "ожидание",
  running: "выполняется",
  new: "новое",
  unknown: "неизвестно",
};
const status = (s: string) => (Object.hasOwn(statuses, s) ? statuses[s] : s);

/** Поля события журнала Leadgate. */
const fields: Record<string, string> = {
  outcome: "исход",
  attempt: "попытка",
  method: "метод",
  status: "статус",
  crm_id: "id в CRM",
  known_crm_id: "известный id в CRM",
  found: "найдено",
  error: "ошибка",
  class: "класс ошибки",
  action: "действие",
  resolution: "решение",
  reason: "причина",
  redirects: "перенаправления",
};
/** Исход доставки (`delivery.outcome`). */
const outcomes: Record<string, string> = {
  new: "новая",
  duplicate: "повтор",
  conflict: "конфликт",
  late: "поздняя",
  rejected: "отклонена",
};
function value(field: string, v: string): string {
  switch (field) {
    case "class":
      return errorClassLabel(v, "ru");
    case "resolution":
      return resolutionLabel(v, "ru");
    case "reason":
      return reasonLabel(v, "ru");
    case "outcome":
      return Object.hasOwn(outcomes, v) ? outcomes[v] : v;
    case "found":
      return v === "true" ? "да" : v === "false" ? "нет" : v;
    default:
      return v;
  }
}
const details = (d: LineDetail[]) =>
  d.length ? ` (${d.map((x) => `${Object.hasOwn(fields, x.field) ? fields[x.field] : x.field}: ${value(x.field, x.value)}`).join(", ")})` : "";
/** Вид события журнала со строчной буквы: «начата попытка». */
function kind(k: string): string {
  const name = Object.hasOwn(eventsRu.kinds, k) ? eventsRu.kinds[k as keyof typeof eventsRu.kinds] : k.replace(/_/g, " ");
  return name.charAt(0).toLowerCase() + name.slice(1);
}

export const diagnosisRu: DiagnosisWords = {
  evidence: {
    created_after: (a) => `сущность ${a.later} создана через ${duration(a.secs)} после сущности ${a.earlier}`,
    same_operation: (a) =>
      `обе относятся к операции Leadgate ${a.operation} (${plural(a.deliveries, "доставка", "доставки", "доставок")}, ${plural(a.attempts, "попытка", "попытки", "попыток")})`,
    outcome_unknown_sent_again: () => "исход попытки остался неизвестен, и создание отправили ещё раз",
    attempts_by: (a) => `попытки делали ${a.workers.map((w) => actorLabel(w, "ru")).join(" и ")}`,
    delivered_times: (a) => `источник доставил заявку ${plural(a.n, "раз", "раза", "раз")}`,
    execution_retry: (a) => `выполнение n8n ${a.later} (${mode(a.mode)}) повторяет выполнение ${a.earlier} (${status(a.status)})`,
    execution_failed_yet_created: (a) =>
      `выполнение ${a.execution} завершилось со статусом «${status(a.status)}», хотя сущность ${a.entity} есть: создание прошло`,
    same_submission: (a) => `выполнения n8n ${a.earlier} и ${a.later} несут одну и ту же заявку ${a.submission}`,
    started_by_hand: (a) => `выполнение ${a.execution} запустили вручную`,
    triggered_again: (a) => `выполнение ${a.execution} запущено через «${mode(a.mode)}»: источник доставил событие ещё раз`,
    same_origin_id: (a) => `у обеих ORIGIN_ID ${a.origin_id}`,
    same_content: (a) => `одинаковое содержимое (${measure[a.measure]})`,
    two_identities: (a) => `но два разных ключа: ${keyKind[a.kind]} ${a.first} и ${a.second}`,
    no_shared_key: () => "и ни одного общего ключа",
    different_sources: (a) => `разные источники: сначала ${a.first}, затем ${a.then}`,
    two_events: (a) => `два разных события: ${keyKind[a.first_kind]} ${a.first} и ${keyKind[a.second_kind]} ${a.second}`,
    different_content: (a) => `разное содержимое (${measure[a.measure]})`,
    no_key: (a) => `у сущности ${a.entity} нет ключа: ни ORIGIN_ID, ни операции Leadgate, ни выполнения n8n`,
  },
  line: {
    crm_created: (a) => {
      const about: string[] = [];
      if (a.source !== null) about.push(`источник ${a.source}`);
      if (a.origin_id !== null) about.push(a.originator_id !== null ? `ORIGINATOR_ID ${a.originator_id}, ORIGIN_ID ${a.origin_id}` : `ORIGIN_ID ${a.origin_id}`);
      else about.push("без ORIGIN_ID");
      if (a.utm_source !== null) about.push(`utm_source ${a.utm_source}`);
      return `сущность ${a.entity} создана в CRM (${about.join(", ")})`;
    },
    journal_event: (a) => `${a.operation}: ${kind(a.kind)} — ${actorLabel(a.actor, "ru")}${details(a.details)}`,
    execution_started: (a) =>
      `выполнение n8n ${a.execution} сценария ${a.workflow} началось (${mode(a.mode)}${a.retry_of !== null ? `, повтор выполнения ${a.retry_of}` : ""})` +
      (a.submission !== null ? `: заявка ${a.submission}` : ": в запросе нет id заявки"),
    execution_ended: (a) =>
      `выполнение n8n ${a.execution} завершилось (${status(a.status)}) после узлов ${a.nodes.join(" → ")}` +
      (a.crm_ids.length ? `; CRM ответила id ${a.crm_ids.join(", ")}` : ""),
  },
  input: {
    csv: (a) => `выгрузка CSV ${a.file}`,
    bitrix24_api: () => "Bitrix24: crm.lead.list и crm.duplicate.findbycomm",
    amo_crm_api: () => "amoCRM: сделки и поиск контактов (API v4)",
  },
  sourcesRead: (s, input) =>
    `${plural(s.entities, "сущность", "сущности", "сущностей")} CRM (${input}), ${s.journal ? "журнал Leadgate" : "без журнала Leadgate"}, ` +
    (s.executions !== null ? `${plural(s.executions, "выполнение", "выполнения", "выполнений")} n8n` : "без истории n8n"),
  trigger: {
    timeout_after_create: "тайм-аут после успешного создания",
    two_workers: "два обработчика",
    redelivery: "повторная доставка того же события",
    retry_execution: "повтор выполнения n8n",
    manual_rerun: "ручной перезапуск сценария",
    same_key_twice: "один и тот же ключ создан дважды",
  },
  keyKind,
  measure,
  duration,
  unknownSource: "(неизвестен)",
};
