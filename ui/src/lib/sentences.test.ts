import { describe as group, expect, it } from "vitest";
import type { EventView, JsonValue } from "./bindings";
import { EVENT_KINDS } from "./i18n/event-kinds";
import { duration } from "./format";
import { describe, describeAll, DESCRIBED_KINDS, technical, type Context } from "./sentences";

const T = "2026-11-30T11:03:07.123456Z";
const plus = (s: number) => new Date(Date.parse(T) + s * 1000).toISOString();

let id = 0;
function ev(kind: string, detail: JsonValue, more: Partial<EventView> = {}): EventView {
  return { id: ++id, at: T, kind, actor: "gateway", error_class: null, detail, ...more };
}

interface Row {
  kind: string;
  detail: JsonValue;
  more?: Partial<EventView>;
  ctx?: Context;
  en: string;
  ru: string;
}

// Details as the Rust code writes them (the file that writes each is in i18n/event-kinds.ts).
const MSK: Context = { timeZone: "Europe/Moscow" };
const TABLE: Row[] = [
  {
    kind: "delivery",
    detail: { delivery_id: 47, outcome: "new", payload_hash: "9f2c0c5e1b7a" },
    en: "Delivery #47 — new operation",
    ru: "Доставка #47 — новая операция",
  },
  {
    kind: "delivery",
    detail: { delivery_id: 48, outcome: "duplicate" },
    en: "Delivery #48 — same lead again, absorbed",
    ru: "Доставка #48 — тот же лид повторно, поглощён",
  },
  {
    kind: "delivery",
    detail: { delivery_id: 49, outcome: "conflict", via: "claim_api" },
    more: { error_class: "conflict", actor: "claim_api" },
    en: "Delivery #49 — same key, different data: payload conflict (through the claim API)",
    ru: "Доставка #49 — тот же ключ, другие данные: конфликт (через API захвата)",
  },
  {
    kind: "contact_match",
    detail: { rule: "review", matches: [{ operation_id: "site:1001", crm_id: "7001", status: "completed" }] },
    en: "Same phone or e-mail as 1 earlier operation (site:1001): a person decides",
    ru: "Тот же телефон или e-mail у более ранних операций: 1 (site:1001); решает человек",
  },
  {
    kind: "linked",
    detail: { crm_id: "7001", by_rule: "link" },
    en: "Linked to the existing CRM entity 7001 (matching rule), no CRM call",
    ru: "Связано с существующей сущностью CRM 7001 (правило сопоставления), без вызова CRM",
  },
  {
    kind: "linked",
    detail: { crm_id: "7001", by_rule: "same_channel" },
    en: "Linked to the existing CRM entity 7001: the same request again through the same channel, no CRM call",
    ru: "Связано с существующей сущностью CRM 7001: та же заявка повторно через тот же канал, без вызова CRM",
  },
  {
    kind: "accepted_as_new",
    detail: { from_operation: "site:1004", case_id: 12, delivery_id: 49 },
    more: { actor: "Anna" },
    en: "New operation made of delivery #49 of site:1004, accepted as new (case #12)",
    ru: "Новая операция из доставки #49 операции site:1004, принятой как новая (кейс #12)",
  },
  {
    kind: "status_changed",
    detail: { from: "received", to: "in_progress" },
    en: "Status: received → in progress",
    ru: "Статус: получена → в работе",
  },
  {
    kind: "review_opened",
    detail: { case_id: 12, reason: "retries_exhausted", detail: { attempts: 5, granted: false } },
    en: "Case #12 opened: retries exhausted; after 5 attempts",
    ru: "Открыт кейс #12: попытки исчерпаны; после попыток: 5",
  },
  {
    kind: "review_opened",
    detail: { case_id: 14, reason: "uncertain_outcome", detail: { opened_from: "console", comment: "stuck since Monday" } },
    more: { actor: "Anna" },
    en: "Case #14 opened: uncertain outcome; sent to review from the console; «stuck since Monday»",
    ru: "Открыт кейс #14: исход неизвестен; отправлено на разбор из консоли; «stuck since Monday»",
  },
  {
    kind: "review_noted",
    detail: { case_id: 12, reason: "uncertain_outcome", detail: { reported_by: "claim_api" } },
    en: "Added to the open case #12: uncertain outcome",
    ru: "Добавлено в открытый кейс #12: исход неизвестен",
  },
  {
    kind: "review_superseded",
    detail: { case_id: 12, by_case: 13, why: "case #13 settled the operation", status: "completed" },
    en: "Case #12 closed as superseded: case #13 settled the operation",
    ru: "Кейс #12 закрыт как утративший смысл: операцию решил кейс #13",
  },
  {
    // Migration 0006's text.
    kind: "review_superseded",
    detail: { case_id: 4, by_case: null, status: "failed_terminal" },
    more: { actor: "migration" },
    en: "Case #4 closed as superseded: the operation is failed already",
    ru: "Кейс #4 закрыт как утративший смысл: операция уже не выполнена",
  },
  {
    kind: "claimed",
    detail: { attempt: 2, lease_expires_at: "2026-11-30T11:05:07.123456Z", granted: true },
    more: { actor: "worker:web-1:4242:0" },
    ctx: MSK,
    en: "Attempt 2 claimed, lease until 14:05:07 GMT+3 — the one retry a person granted",
    ru: "Попытка 2 взята в работу, аренда до 14:05:07 GMT+3 — повтор, разрешённый человеком",
  },
  {
    kind: "lease_taken_over",
    detail: { previous_owner: "worker:web-1:4242:0", expired_at: "2026-11-30T11:02:00Z" },
    more: { actor: "reconciler:worker:web-1:4242" },
    en: "The lease of worker web-1:4242:0 ran out — taken over to look the key up in the CRM",
    ru: "Аренда (обработчик web-1:4242:0) истекла — перехвачено для поиска по ключу в CRM",
  },
  {
    kind: "released_unsent",
    detail: { previous_owner: "worker:web-1:4242:1", expired_at: "2026-11-30T11:02:00Z", granted: true },
    en: "The lease of worker web-1:4242:1 ran out before anything was sent — put back, the attempt and the person's grant given back",
    ru: "Аренда (обработчик web-1:4242:1) истекла до отправки — возвращено в очередь, попытка и разрешение человека не израсходованы",
  },
  {
    kind: "contact_wait",
    detail: { at: plus(30), granted: false },
    more: { actor: "worker:web-1:4242:1" },
    en: "Another lead with this phone or e-mail is finding or making the client's contact — put back unsent, due again in 30 s, the attempt given back",
    ru: "Контакт клиента с этим телефоном или e-mail сейчас ищет или создаёт другой лид — возвращено без отправки, снова через 30 с, попытка не израсходована",
  },
  {
    kind: "attempt_started",
    detail: { connector: "bitrix24", attempt: 2, granted: false, batch: 12 },
    en: "Attempt 2: sending to Bitrix24 (one request of 12 creates)",
    ru: "Попытка 2: отправка в Bitrix24 (один запрос на 12 созданий)",
  },
  {
    // Store::start_attempt's own mark, when the caller wrote none.
    kind: "attempt_started",
    detail: {},
    ctx: { attempt: 3, connector: "amocrm" },
    en: "Attempt 3: sending to amoCRM",
    ru: "Попытка 3: отправка в amoCRM",
  },
  {
    kind: "not_sent",
    detail: { class: "auth", error: "amocrm: the refresh token was refused (400)" },
    en: "Nothing was sent to the CRM: credentials rejected",
    ru: "В CRM ничего не отправлено: доступ отклонён",
  },
  {
    kind: "crm_request",
    detail: { connector: "bitrix24", method: "crm.lead.add", entity: "lead", originator_id: "leadgate", origin_id: "site:1002", fields: ["TITLE", "NAME", "PHONE"] },
    en: "Request to Bitrix24: crm.lead.add",
    ru: "Запрос в Bitrix24: crm.lead.add",
  },
  {
    kind: "crm_response",
    detail: { status: 200, duration_ms: 420, id: "5555" },
    ctx: { connector: "bitrix24" },
    en: "Bitrix24 answered HTTP 200 in 420 ms: id 5555",
    ru: "Ответ Bitrix24 HTTP 200 за 420 мс: ID 5555",
  },
  {
    // attempt::cut_off
    kind: "crm_response",
    detail: { cut_after_ms: 10000, class: "uncertain", error: "no answer within 10000 ms (the call's whole budget): the CRM may still execute it" },
    more: { error_class: "uncertain" },
    en: "No answer within 10 s — outcome unknown",
    ru: "Нет ответа за 10 с — исход неизвестен",
  },
  {
    kind: "crm_response",
    detail: { status: 429, duration_ms: 120, class: "rate_limited", message: "bitrix24 crm.lead.add: QUERY_LIMIT_EXCEEDED", error: "bitrix24 crm.lead.add: QUERY_LIMIT_EXCEEDED" },
    more: { error_class: "rate_limited" },
    ctx: { connector: "bitrix24" },
    en: "Bitrix24 answered HTTP 429 in 120 ms: CRM rate limit",
    ru: "Ответ Bitrix24 HTTP 429 за 120 мс: лимит запросов CRM",
  },
  {
    kind: "reconcile_request",
    detail: { connector: "bitrix24", method: "crm.lead.list", entity: "lead", originator_id: "leadgate", origin_id: "site:1002" },
    en: "Looking the key up in Bitrix24",
    ru: "Поиск по ключу в Bitrix24",
  },
  {
    kind: "reconcile_response",
    detail: { status: 200, duration_ms: 80, found: 0, ids: [] },
    en: "The lookup answered in 80 ms: nothing found",
    ru: "Ответ на поиск за 80 мс: ничего не найдено",
  },
  {
    kind: "reconcile_response",
    detail: { status: 200, duration_ms: 1500, found: 2, ids: ["5555", "5556"] },
    en: "The lookup answered in 1.5 s: found 2 (5555, 5556)",
    ru: "Ответ на поиск за 1,5 с: найдено 2 (5555, 5556)",
  },
  {
    kind: "reconciliation",
    detail: { verdict: "not_found", authoritative: false, verify_pass: false },
    en: "Looked up by key: not found — this CRM's search may lag, not proof that nothing was created",
    ru: "Сверка по ключу: не найдено — поиск этой CRM может запаздывать, это не доказательство",
  },
  {
    kind: "reconciliation",
    detail: { verdict: "found_one", authoritative: true, verify_pass: true },
    en: "Looked up by key before creating again: found",
    ru: "Сверка по ключу перед повторным созданием: найдено",
  },
  {
    kind: "crm_created",
    detail: { crm_id: "5555" },
    ctx: { connector: "bitrix24", durationMs: 420 },
    en: "Lead 5555 created in Bitrix24 in 420 ms",
    ru: "Лид 5555 создан в Bitrix24 за 420 мс",
  },
  {
    kind: "recovered",
    detail: { crm_id: "5555", late: true },
    ctx: { connector: "amocrm" },
    en: "A late answer: lead 5555 found in amoCRM — the earlier create had landed, nothing created twice",
    ru: "Поздний ответ: лид 5555 найден в amoCRM — прежнее создание прошло, второй раз не создаётся",
  },
  {
    kind: "retry_scheduled",
    detail: { class: "rate_limited", error: "bitrix24 crm.lead.add: QUERY_LIMIT_EXCEEDED", at: plus(30) },
    more: { error_class: "rate_limited" },
    ctx: { attempt: 1, maxAttempts: 5 },
    en: "Retry 2 of 5 scheduled in 30 s (CRM rate limit)",
    ru: "Повтор 2 из 5 назначен через 30 с (лимит запросов CRM)",
  },
  {
    kind: "verify_scheduled",
    detail: { class: "uncertain", error: "no answer within 10000 ms", at: plus(75) },
    more: { error_class: "uncertain" },
    en: "Outcome unknown — the key is looked up again in 1 min 15 s, before anything is created",
    ru: "Исход неизвестен — повторный поиск по ключу через 1 мин 15 с, до любого нового создания",
  },
  {
    kind: "failed",
    detail: { class: "validation", error: "bitrix24 crm.lead.add: TITLE is required" },
    more: { error_class: "validation" },
    en: "Failed for good: data refused by the CRM",
    ru: "Окончательная ошибка: CRM отклонила данные",
  },
  {
    kind: "connector_unreachable",
    detail: { class: "not_sent", error: "connection refused", at: plus(30), verify: true },
    more: { error_class: "not_sent" },
    ctx: { connector: "bitrix24" },
    en: "Bitrix24 does not answer — waiting for its next probe in 30 s; this attempt is not counted, the key is looked up first",
    ru: "Нет ответа от Bitrix24 — ждём следующей проверки связи через 30 с; попытка не засчитана, сначала поиск по ключу",
  },
  {
    kind: "connector_paused",
    detail: { class: "auth", error: "bitrix24: invalid webhook (401)", connector: "bitrix24" },
    more: { error_class: "auth" },
    en: "Connector Bitrix24 paused: credentials rejected. Nothing is sent to it until someone resumes it",
    ru: "Коннектор Bitrix24 приостановлен: доступ отклонён. Ничего не отправляется, пока его не возобновят",
  },
  {
    kind: "notification",
    detail: { what: "connector_paused", connector: "bitrix24" },
    en: "Notification: connector Bitrix24 paused",
    ru: "Уведомление: коннектор Bitrix24 приостановлен",
  },
  {
    // The console model's record_notification.
    kind: "notification",
    detail: { what: "review_opened", channel: "desktop", to: "Anna" },
    more: { actor: "console" },
    en: "Anna was notified on the desktop: new review case",
    ru: "Уведомление на рабочем столе для Anna: новый кейс разбора",
  },
  {
    kind: "late_outcome",
    detail: { outcome: 'Retry { failure: Some(Failure { class: RateLimited, message: "HTTP 429" }), at: 2026-11-30T11:05:00Z }' },
    en: "A late report after the lease was lost (retry) — kept on the timeline, nothing changed",
    ru: "Поздний отчёт после потери аренды (повтор) — сохранён в хронологии, ничего не изменилось",
  },
  {
    kind: "late_outcome",
    detail: { crm_id: "5555", same_as_known: true },
    en: "A late answer repeats the known CRM id 5555",
    ru: "Поздний ответ повторяет известный ID в CRM 5555",
  },
  {
    kind: "crm_step",
    detail: { step: "contact", entity: "contact", crm_id: "41", how: "linked" },
    en: "Contact 41 linked: the client is known in the CRM (found by phone or e-mail)",
    ru: "Контакт 41 привязан: клиент уже есть в CRM (найден по телефону или e-mail)",
  },
  {
    kind: "crm_step",
    detail: { step: "final", entity: "deal", crm_id: "7", how: "recovered" },
    en: "Deal 7 found again by its key — the earlier create had landed, nothing created twice",
    ru: "Сделка 7 найдена по ключу — прежнее создание прошло, второй раз не создаётся",
  },
  {
    kind: "crm_step",
    detail: { step: "contact", entity: "contact", crm_id: "42", how: "created" },
    en: "Contact 42 created",
    ru: "Контакт 42 создан",
  },
  {
    kind: "extra_crm_entity",
    detail: { crm_id: "5556", known_crm_id: "5555" },
    en: "A second CRM entity 5556 was created (5555 was already known) — a person decides",
    ru: "Создана вторая сущность в CRM 5556 (уже известна 5555) — решает человек",
  },
  {
    kind: "human_action",
    detail: { case_id: 12, action: "retry_authorized", comment: "the portal was down", crm_id: null, new_operation: null },
    more: { actor: "Anna" },
    en: "Anna authorized one retry: «the portal was down»",
    ru: "Anna: разрешён один повтор — «the portal was down»",
  },
  {
    kind: "human_action",
    detail: { case_id: 3, action: "confirmed_crm_result", comment: null, crm_id: "5555", new_operation: null },
    more: { actor: "Иван" },
    en: "Иван confirmed the CRM result 5555",
    ru: "Иван: результат в CRM подтверждён — 5555",
  },
  {
    kind: "human_action",
    detail: { case_id: 9, action: "accepted_as_new", comment: null, crm_id: null, new_operation: "site:1004#accepted-49" },
    more: { actor: "Anna" },
    en: "Anna accepted the conflicting delivery as a new operation site:1004#accepted-49",
    ru: "Anna: конфликтующая доставка принята как новая операция site:1004#accepted-49",
  },
  {
    kind: "human_action",
    detail: {
      case_id: 14,
      action: "resent_edited",
      comment: "fixed the phone",
      crm_id: null,
      new_operation: null,
      edited: { added: ["comment"], changed: ["phone"], removed: [] },
    },
    more: { actor: "Olga" },
    en: "Olga fixed the lead's data (phone, comment) and sent it again: «fixed the phone»",
    ru: "Olga: данные лида исправлены (phone, comment) и отправлены заново — «fixed the phone»",
  },
  {
    kind: "redelivered",
    detail: { redelivery: 2, due_at: "2026-11-30T11:00:00Z" },
    en: "Sent back to the integration to be claimed again (redelivery 2)",
    ru: "Отправлено обратно в интеграцию для повторного захвата (переотправка 2)",
  },
  {
    kind: "redelivery_failed",
    detail: { redelivery: 2, error: "the webhook answered 502" },
    en: "Sending back to the integration failed (redelivery 2); tried again later",
    ru: "Отправка обратно в интеграцию не удалась (переотправка 2); будет повторена",
  },
  {
    // store/review/ops.rs
    kind: "crm_update_requested",
    detail: { update_id: 3, case_id: 12, crm_id: "5555", delivery_id: 49 },
    more: { actor: "ann" },
    en: "The CRM entity 5555 is to get the changed fields of delivery #49; the worker sends them",
    ru: "Сущность CRM 5555 получит изменённые поля доставки #49; их отправит воркер",
  },
  {
    // worker/update.rs (Bitrix24's request summary)
    kind: "crm_update_request",
    detail: { connector: "bitrix24", method: "crm.lead.update", id: "5555", entity: "lead", fields: ["PHONE", "COMMENTS"] },
    en: "Update sent to Bitrix24: crm.lead.update (PHONE, COMMENTS)",
    ru: "Обновление отправлено в Bitrix24: crm.lead.update (PHONE, COMMENTS)",
  },
  {
    kind: "crm_update_request",
    detail: { connector: "amocrm", method: "update", id: "77", fields: ["name", "phone"], not_sent: [] },
    en: "Update sent to amoCRM: update (name, phone)",
    ru: "Обновление отправлено в amoCRM: update (имя, телефон)",
  },
  {
    kind: "crm_update_response",
    detail: { status: 200, duration_ms: 310 },
    ctx: { connector: "bitrix24" },
    en: "Bitrix24 answered HTTP 200 in 310 ms",
    ru: "Ответ Bitrix24 HTTP 200 за 310 мс",
  },
  {
    kind: "crm_update_response",
    detail: { cut_after_ms: 10000, class: "uncertain", error: "no answer within 10000 ms" },
    more: { error_class: "uncertain" },
    en: "No answer within 10 s — outcome unknown",
    ru: "Нет ответа за 10 с — исход неизвестен",
  },
  {
    // store/updates/ops.rs
    kind: "crm_updated",
    detail: { update_id: 3, crm_id: "5555", case_id: 12, fields: ["phone", "comment"] },
    en: "CRM entity 5555 updated: phone, comment",
    ru: "Сущность CRM 5555 обновлена: телефон, комментарий",
  },
  {
    kind: "crm_update_skipped",
    detail: { update_id: 3, crm_id: "5555", case_id: 12, fields: [] },
    en: "Nothing the CRM holds differs in the later delivery: no update sent",
    ru: "В поздней доставке нет отличий в полях, которые есть в CRM: обновление не отправлено",
  },
  {
    kind: "crm_update_retry",
    detail: { update_id: 3, crm_id: "5555", case_id: 12, class: "uncertain", error: "no answer", due_at: plus(30) },
    more: { error_class: "uncertain" },
    en: "The update was not confirmed (outcome unknown) — sent again in 30 s",
    ru: "Обновление не подтверждено (исход неизвестен) — будет отправлено снова через 30 с",
  },
  {
    kind: "crm_update_failed",
    detail: { update_id: 3, crm_id: "5555", case_id: 12, class: "validation", error: "bitrix24 crm.lead.update: Not found", review_case: 14 },
    more: { error_class: "validation" },
    en: "The update of 5555 failed: data refused by the CRM; case #14 asks a person again",
    ru: "Обновление 5555 не удалось: CRM отклонила данные; кейс #14 снова ждёт решения",
  },
  {
    kind: "purged",
    detail: { finished_before: "2026-08-30T11:00:00Z" },
    more: { actor: "retention" },
    ctx: MSK,
    en: "Retention removed the payload and contact data (finished before 2026-08-30 14:00:00 GMT+3)",
    ru: "Очистка удалила данные и контакты (завершена до 2026-08-30 14:00:00 GMT+3)",
  },
];

group("sentences", () => {
  it("has a row for every kind the Rust code writes", () => {
    const covered = new Set(TABLE.map((r) => r.kind));
    expect(EVENT_KINDS.filter((k) => !covered.has(k))).toEqual([]);
    expect([...DESCRIBED_KINDS].sort()).toEqual([...EVENT_KINDS].sort());
  });

  it.each(TABLE.map((r) => [`${r.kind} ${JSON.stringify(r.detail).slice(0, 40)}`, r] as const))(
    "tells %s in English and Russian",
    (_, r) => {
      const e = ev(r.kind, r.detail, r.more);
      expect(describe(e, "en", r.ctx)).toBe(r.en);
      expect(describe(e, "ru", r.ctx)).toBe(r.ru);
    },
  );

  it("carries what earlier events said: the CRM, the answer's duration, the attempt", () => {
    const events = [
      ev("claimed", { attempt: 1, lease_expires_at: plus(60), granted: false }),
      ev("attempt_started", { connector: "bitrix24", attempt: 1, granted: false }),
      ev("crm_request", { connector: "bitrix24", method: "crm.lead.add" }),
      ev("crm_response", { status: 429, duration_ms: 95, class: "rate_limited", error: "QUERY_LIMIT_EXCEEDED" }, { error_class: "rate_limited" }),
      ev("retry_scheduled", { class: "rate_limited", error: "QUERY_LIMIT_EXCEEDED", at: plus(2) }, { error_class: "rate_limited" }),
      ev("claimed", { attempt: 2, lease_expires_at: plus(60), granted: false }),
      ev("crm_response", { status: 200, duration_ms: 640, id: "5555" }),
      ev("crm_created", { crm_id: "5555" }),
    ];
    const said = describeAll(events, "en", { timeZone: "UTC" });
    expect(said[3]).toBe("Bitrix24 answered HTTP 429 in 95 ms: CRM rate limit");
    expect(said[4]).toBe("Retry 2 scheduled in 2 s (CRM rate limit)");
    expect(said[6]).toBe("Bitrix24 answered HTTP 200 in 640 ms: id 5555");
    expect(said[7]).toBe("Lead 5555 created in Bitrix24 in 640 ms");
    expect(describeAll(events, "ru", { timeZone: "UTC" })[7]).toBe("Лид 5555 создан в Bitrix24 за 640 мс");
  });

  it("does not reuse an earlier attempt's duration for a create after a new claim", () => {
    const events = [
      ev("crm_response", { status: 200, duration_ms: 640 }),
      ev("claimed", { attempt: 2 }),
      ev("crm_created", { crm_id: "5555", late: false }),
    ];
    expect(describeAll(events, "en")[2]).toBe("Lead 5555 created in the CRM");
  });

  it("reads the demo seed's simplified details too", () => {
    // crates/leadgate-testkit/src/seed.rs
    expect(describe(ev("crm_response", { timeout_ms: 10000 }, { error_class: "uncertain" }), "en")).toBe(
      "No answer within 10 s — outcome unknown",
    );
    expect(describe(ev("crm_response", { result: 7001 }), "ru", { connector: "bitrix24" })).toBe("Ответ Bitrix24: ID 7001");
    expect(describe(ev("reconciliation", { verdict: "cannot_tell", authoritative: false }), "en")).toBe(
      "Looked up by key: cannot tell",
    );
  });
});

group("the generic sentence", () => {
  it("names a kind this console does not know, with the detail's plain fields", () => {
    const e = ev("carrier_pigeon", { bird: "Gerda", legs: 2, nested: { x: 1 }, none: null });
    expect(describe(e, "en")).toBe("Event “carrier_pigeon” (bird: Gerda, legs: 2)");
    expect(describe(e, "ru")).toBe("Событие «carrier_pigeon» (bird: Gerda, legs: 2)");
    expect(describe(ev("carrier_pigeon", null), "en")).toBe("Event “carrier_pigeon”");
  });

  it("uses the kind's name when a known kind's detail lacks what its sentence needs", () => {
    expect(describe(ev("status_changed", { reason: "x" }), "en")).toBe("Status changed (reason: x)");
    expect(describe(ev("linked", {}), "ru")).toBe("Связано с существующей сущностью");
    expect(describe(ev("human_action", { case_id: 4 }), "en")).toBe("A person's decision (case_id: 4)");
  });

  it("never throws and never shows undefined, whatever the detail is", () => {
    const odd: JsonValue[] = [null, {}, [], "text", 42, true, { detail: "x", matches: "y", at: "not a time" }, [1, 2]];
    for (const kind of [...EVENT_KINDS, "unknown_kind"]) {
      for (const detail of odd) {
        for (const lang of ["en", "ru"] as const) {
          const s = describe(ev(kind, detail), lang);
          expect(s.length, `${kind} ${JSON.stringify(detail)}`).toBeGreaterThan(3);
          expect(s, `${kind} ${JSON.stringify(detail)}`).not.toMatch(/undefined|null|NaN|\[object/);
        }
      }
    }
  });

  it("survives an event that is not even well formed", () => {
    const broken = { id: 1, at: "garbage", kind: 7, actor: null, error_class: null, detail: undefined } as unknown as EventView;
    expect(describe(broken, "en")).toBe("Event “7”");
  });
});

group("humanized durations", () => {
  it.each([
    [0, "0 ms", "0 мс"],
    [420, "420 ms", "420 мс"],
    [999.6, "1 s", "1 с"],
    [1000, "1 s", "1 с"],
    [1500, "1.5 s", "1,5 с"],
    [9960, "10 s", "10 с"],
    [30_000, "30 s", "30 с"],
    [59_600, "1 min", "1 мин"],
    [75_000, "1 min 15 s", "1 мин 15 с"],
    [3_600_000, "1 h", "1 ч"],
    [3 * 3_600_000 + 10 * 60_000, "3 h 10 min", "3 ч 10 мин"],
    [2 * 86_400_000 + 4 * 3_600_000, "2 d 4 h", "2 дн 4 ч"],
    [-5000, "−5 s", "−5 с"],
  ])("%d ms is %s", (ms, en, ru) => {
    expect(duration(ms, "en")).toBe(en);
    expect(duration(ms, "ru")).toBe(ru);
  });

  it("is a dash when it is not a number", () => {
    expect(duration(NaN, "en")).toBe("—");
  });

  it("keeps the CRM's own words out of the sentence and shows them apart, in any language", () => {
    const e = ev("failed", { class: "validation", error: "bitrix24 crm.lead.add: TITLE is required" }, { error_class: "validation" });
    for (const lang of ["en", "ru"] as const) expect(describe(e, lang)).not.toContain("TITLE");
    expect(technical(e)).toBe("bitrix24 crm.lead.add: TITLE is required");
    expect(technical(ev("claimed", { attempt: 1 }))).toBeNull();
  });

  it("says when a fix and resend found the lead already there: the fix was not sent", () => {
    const said = describeAll(
      [
        ev("human_action", { action: "resent_edited", case_id: 3, edited: { changed: ["phone"] } }),
        ev("recovered", { crm_id: "21" }),
        ev("recovered", { crm_id: "21" }),
      ],
      "ru",
    );
    expect(said[1]).toContain("Исправленные данные не отправлены");
    expect(said[2]).not.toContain("Исправленные данные");
    expect(describeAll([ev("recovered", { crm_id: "21" })], "en")[0]).not.toContain("fixed data");
  });
});
