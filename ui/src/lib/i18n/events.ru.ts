// Русские слова хронологии кейса и подписей всех экранов: статусы, причины разбора,
// классы ошибок, решения, исполнители. Ключи те же, что в events.en.ts (проверяется
// типом). Что из какого поля берётся — в ../sentences.ts; здесь только слова.
import type { EventStrings } from "./events.en";

/** ` #47` или ничего, если номер неизвестен. */
const no = (n: number | null) => (n === null ? "" : ` #${n}`);
/** ` — «текст»` или ничего. */
const quoted = (s: string | null) => (s ? ` — «${s}»` : "");

export const eventsRu: EventStrings = {
  locale: "ru-RU",
  status: {
    received: "получена",
    in_progress: "в работе",
    completed: "завершена",
    failed_terminal: "не выполнена",
    needs_review: "на разборе",
  },
  reason: {
    payload_conflict: "конфликт данных",
    uncertain_outcome: "исход неизвестен",
    retries_exhausted: "попытки исчерпаны",
    ambiguous_match: "несколько совпадений",
    cross_channel_match: "совпадение по каналам",
    late_duplicate: "поздний дубль",
  },
  errorClass: {
    not_sent: "не отправлено",
    rate_limited: "лимит запросов CRM",
    uncertain: "исход неизвестен",
    validation: "CRM отклонила данные",
    auth: "доступ отклонён",
    conflict: "конфликт данных",
  },
  resolution: {
    confirmed_crm_result: "результат в CRM подтверждён",
    linked_existing: "связано с существующей",
    retry_authorized: "разрешён повтор",
    kept_original: "оставлены исходные",
    updated_crm: "оставлены исходные, CRM обновлена",
    accepted_as_new: "принято как новая",
    rejected: "отклонено",
    created_new: "создаётся как новая",
    resent_edited: "исправлено и отправлено заново",
    superseded: "утратил смысл",
  },
  actor: {
    gateway: "шлюз",
    console: "консоль",
    retention: "очистка",
    migration: "миграция",
    claim_api: "API захвата",
    reconciler: "сверка",
    worker: (id: string) => `обработчик ${id}`,
    reconcilerOf: (id: string) => `сверка ${id}`,
  },
  crm: {
    bitrix24: "Bitrix24",
    amocrm: "amoCRM",
    http: "HTTP-CRM",
    unknown: "CRM",
  },
  units: { ms: "мс", s: "с", min: "мин", h: "ч", d: "дн", decimal: "," },
  kinds: {
    delivery: "Доставка",
    contact_match: "Совпадение контакта",
    linked: "Связано с существующей сущностью",
    accepted_as_new: "Принято как новая операция",
    status_changed: "Смена статуса",
    review_opened: "Открыт кейс разбора",
    review_noted: "Добавлено в кейс разбора",
    review_superseded: "Кейс разбора утратил смысл",
    claimed: "Взято в работу",
    lease_taken_over: "Аренда перехвачена",
    released_unsent: "Возвращено без отправки",
    contact_wait: "Ожидание контакта",
    attempt_started: "Начата попытка",
    not_sent: "Не отправлено",
    crm_request: "Запрос в CRM",
    crm_response: "Ответ CRM",
    reconcile_request: "Поиск по ключу",
    reconcile_response: "Ответ на поиск",
    reconciliation: "Сверка по ключу",
    crm_created: "Создано в CRM",
    recovered: "Найдено в CRM",
    retry_scheduled: "Назначен повтор",
    verify_scheduled: "Назначена сверка",
    failed: "Окончательная ошибка",
    connector_unreachable: "CRM недоступна",
    connector_paused: "Коннектор приостановлен",
    notification: "Уведомление",
    late_outcome: "Поздний отчёт",
    extra_crm_entity: "Вторая сущность в CRM",
    crm_step: "Шаг выполнен в CRM",
    human_action: "Решение человека",
    redelivered: "Отправлено обратно в интеграцию",
    redelivery_failed: "Повторная отправка не удалась",
    purged: "Данные удалены очисткой",
    crm_update_requested: "Запрошено обновление в CRM",
    crm_update_request: "Обновление отправлено в CRM",
    crm_update_response: "Ответ на обновление",
    crm_updated: "Обновлено в CRM",
    crm_update_skipped: "Обновление не нужно",
    crm_update_retry: "Обновление повторяется",
    crm_update_failed: "Обновление не удалось",
  },
  generic: (title: string, fields: string) => (fields ? `${title} (${fields})` : title),
  unknownKind: (kind: string) => `Событие «${kind}»`,
  ev: {
    deliveryNew: (n: number | null) => `Доставка${no(n)} — новая операция`,
    deliveryDuplicate: (n: number | null) => `Доставка${no(n)} — тот же лид повторно, поглощён`,
    deliveryConflict: (n: number | null) => `Доставка${no(n)} — тот же ключ, другие данные: конфликт`,
    deliveryOther: (n: number | null, outcome: string) => `Доставка${no(n)} — ${outcome}`,
    viaClaimApi: " (через API захвата)",
    contactMatch: (count: number, list: string, rule: string) =>
      `Тот же телефон или e-mail у более ранних операций: ${count}${list ? ` (${list})` : ""}; ${rule}`,
    rule: {
      create: "новая сущность в CRM всё равно создаётся",
      link: "связывается с их сущностью в CRM",
      review: "решает человек",
    },
    ruleOther: (rule: string) => `правило «${rule}»`,
    linked: (crmId: string) => `Связано с существующей сущностью CRM ${crmId} (правило сопоставления), без вызова CRM`,
    linkedSameChannel: (crmId: string) => `Связано с существующей сущностью CRM ${crmId}: та же заявка повторно через тот же канал, без вызова CRM`,
    statusChanged: (from: string, to: string) => `Статус: ${from} → ${to}`,
    statusChangedTo: (to: string) => `Статус: ${to}`,
    reviewOpened: (caseNo: number | null, reason: string, extra: string) =>
      `Открыт кейс${no(caseNo)}: ${reason}${extra ? `; ${extra}` : ""}`,
    reviewNoted: (caseNo: number | null, reason: string, extra: string) =>
      `Добавлено в открытый кейс${no(caseNo)}: ${reason}${extra ? `; ${extra}` : ""}`,
    afterAttempts: (n: number) => `после попыток: ${n}`,
    crmIds: (ids: string) => `ID в CRM: ${ids}`,
    lookupSaid: (what: string) => `поиск: ${what}`,
    comment: (c: string) => `«${c}»`,
    openedFromConsole: "отправлено на разбор из консоли",
    reviewSuperseded: (caseNo: number | null, why: string) => `Кейс${no(caseNo)} закрыт как утративший смысл${why ? `: ${why}` : ""}`,
    supersededByCase: (caseNo: number) => `операцию решил кейс #${caseNo}`,
    supersededStatus: (status: string) => `операция уже ${status}`,
    claimed: (attempt: number | null, until: string | null, granted: boolean) =>
      `${attempt === null ? "Взято в работу" : `Попытка ${attempt} взята в работу`}${until ? `, аренда до ${until}` : ""}${granted ? " — повтор, разрешённый человеком" : ""}`,
    leaseTakenOver: (owner: string | null) =>
      `Аренда${owner ? ` (${owner})` : ""} истекла — перехвачено для поиска по ключу в CRM`,
    releasedUnsent: (owner: string | null, granted: boolean) =>
      `Аренда${owner ? ` (${owner})` : ""} истекла до отправки — возвращено в очередь, попытка${granted ? " и разрешение человека" : ""} не израсходованы`,
    contactWait: (when: string | null, granted: boolean) =>
      `Контакт клиента с этим телефоном или e-mail сейчас ищет или создаёт другой лид — возвращено без отправки${when ? `, снова ${when}` : ""}, ${granted ? "попытка и разрешение человека не израсходованы" : "попытка не израсходована"}`,
    attemptStarted: (attempt: number | null, crm: string, batch: number | null) =>
      `${attempt === null ? "Создание уходит" : `Попытка ${attempt}`}: отправка в ${crm}${batch && batch > 1 ? ` (один запрос на ${batch} созданий)` : ""}`,
    crmRequest: (crm: string, method: string | null, batch: number | null) =>
      `Запрос в ${crm}${method ? `: ${method}` : ""}${batch && batch > 1 ? ` (${batch} созданий одним запросом)` : ""}`,
    cutOff: (d: string) => `Нет ответа за ${d} — исход неизвестен`,
    notSentCall: () => `Запрос не отправлен`,
    answered: (crm: string, status: number | null, d: string | null, id: string | null) =>
      `Ответ ${crm}${status !== null ? ` HTTP ${status}` : ""}${d ? ` за ${d}` : ""}${id ? `: ID ${id}` : ""}`,
    answerError: (crm: string, status: number | null, d: string | null, cls: string) =>
      `Ответ ${crm}${status !== null ? ` HTTP ${status}` : ""}${d ? ` за ${d}` : ""}: ${cls}`,
    lookupRequest: (crm: string, keys: number | null) =>
      `Поиск по ключу в ${crm}${keys && keys > 1 ? ` (ключей в одном запросе: ${keys})` : ""}`,
    lookupAnswered: (d: string | null, found: number, ids: string) =>
      `Ответ на поиск${d ? ` за ${d}` : ""}: ${found === 0 ? "ничего не найдено" : `найдено ${found}${ids ? ` (${ids})` : ""}`}`,
    lookupError: (d: string | null, cls: string) =>
      `Поиск не удался${d ? ` за ${d}` : ""}: ${cls}`,
    lookupCutOff: (d: string) => `Нет ответа на поиск за ${d}`,
    reconciliation: (verdict: string, notProof: boolean, verifyPass: boolean) =>
      `Сверка по ключу${verifyPass ? " перед повторным созданием" : ""}: ${verdict}${notProof ? " — поиск этой CRM может запаздывать, это не доказательство" : ""}`,
    verdict: {
      found_one: "найдено",
      found_several: "найдено несколько сущностей",
      not_found: "не найдено",
      lookup_failed: "поиск не удался",
    },
    crmCreated: (id: string, crm: string, d: string | null, late: boolean) =>
      `${late ? "Поздний ответ: лид" : "Лид"} ${id} создан в ${crm}${d ? ` за ${d}` : ""}`,
    recovered: (id: string, crm: string, late: boolean) =>
      `${late ? "Поздний ответ: лид" : "Лид"} ${id} найден в ${crm} — прежнее создание прошло, второй раз не создаётся`,
    editsNotSent: "Исправленные данные не отправлены: лид уже был в CRM — поправьте его там (Открыть в CRM)",
    step: (entity: string, id: string, how: string) =>
      `${entity === "contact" ? "Контакт" : entity === "deal" ? "Сделка" : entity} ${id} ${
        how === "linked"
          ? "привязан: клиент уже есть в CRM (найден по телефону или e-mail)"
          : how === "recovered"
            ? (entity === "deal" ? "найдена" : "найден") + " по ключу — прежнее создание прошло, второй раз не создаётся"
            : entity === "deal"
              ? "создана"
              : "создан"
      }`,
    retry: (n: number | null, of: number | null, inD: string | null, cls: string | null) =>
      `Повтор${n === null ? "" : ` ${n}`}${n !== null && of !== null ? ` из ${of}` : ""} назначен${inD ? ` ${inD}` : ""}${cls ? ` (${cls})` : ""}`,
    verify: (inD: string | null, cls: string | null) =>
      `Исход неизвестен${cls ? ` (${cls})` : ""} — повторный поиск по ключу${inD ? ` ${inD}` : ""}, до любого нового создания`,
    failed: (cls: string | null) => `Окончательная ошибка${cls ? `: ${cls}` : ""}`,
    unreachable: (crm: string, inD: string | null, verify: boolean) =>
      `Нет ответа от ${crm} — ждём следующей проверки связи${inD ? ` ${inD}` : ""}; попытка не засчитана${verify ? ", сначала поиск по ключу" : ""}`,
    paused: (connector: string, cls: string | null) =>
      `Коннектор ${connector} приостановлен${cls ? `: ${cls}` : ""}. Ничего не отправляется, пока его не возобновят`,
    notifiedPerson: (who: string, channel: string | null, what: string) =>
      `Уведомление${channel === "desktop" ? " на рабочем столе" : channel ? ` (${channel})` : ""} для ${who}: ${what}`,
    notified: (what: string) => `Уведомление: ${what}`,
    what: {
      review_opened: "новый кейс разбора",
      connector_paused: "коннектор приостановлен",
    },
    connectorPausedNamed: (c: string) => `коннектор ${c} приостановлен`,
    lateOutcome: (what: string | null) =>
      `Поздний отчёт после потери аренды${what ? ` (${what})` : ""} — сохранён в хронологии, ничего не изменилось`,
    lateOutcomes: {
      Retry: "повтор",
      Verify: "повторный поиск",
      Terminal: "ошибка",
      Review: "нужен разбор",
      Outage: "CRM недоступна",
      PauseConnector: "доступ отклонён",
    },
    lateSame: (id: string) => `Поздний ответ повторяет известный ID в CRM ${id}`,
    extraEntity: (id: string, known: string | null) =>
      `Создана вторая сущность в CRM ${id}${known ? ` (уже известна ${known})` : ""} — решает человек`,
    human: {
      confirmed_crm_result: (who: string, crmId: string | null) => `${who}: результат в CRM подтверждён${crmId ? ` — ${crmId}` : ""}`,
      linked_existing: (who: string, crmId: string | null) => `${who}: связано с существующей сущностью${crmId ? ` ${crmId}` : ""}`,
      retry_authorized: (who: string) => `${who}: разрешён один повтор`,
      kept_original: (who: string) => `${who}: оставлены исходные данные`,
      accepted_as_new: (who: string, _crmId: string | null, newOp: string | null) =>
        `${who}: конфликтующая доставка принята как новая операция${newOp ? ` ${newOp}` : ""}`,
      updated_crm: (who: string, crmId: string | null) =>
        `${who}: оставлены исходные данные, изменённые поля отправляются в сущность CRM${crmId ? ` ${crmId}` : ""}`,
      rejected: (who: string) => `${who}: лид отклонён`,
      created_new: (who: string) => `${who}: отправить в CRM как новый лид`,
      resent_edited: (who: string, fields: string | null) => `${who}: данные лида исправлены${fields ? ` (${fields})` : ""} и отправлены заново`,
    },
    humanOther: (who: string, caseNo: number | null, resolution: string) => `${who}: кейс${no(caseNo)} решён — ${resolution}`,
    withComment: (s: string, c: string | null) => `${s}${quoted(c)}`,
    acceptedAsNew: (delivery: number | null, from: string | null, caseNo: number | null) =>
      `Новая операция из доставки${no(delivery)}${from ? ` операции ${from}` : ""}, принятой как новая${caseNo === null ? "" : ` (кейс #${caseNo})`}`,
    redelivered: (n: number | null) => `Отправлено обратно в интеграцию для повторного захвата${n === null ? "" : ` (переотправка ${n})`}`,
    redeliveryFailed: (n: number | null) =>
      `Отправка обратно в интеграцию не удалась${n === null ? "" : ` (переотправка ${n})`}; будет повторена`,
    purged: (before: string | null) =>
      `Очистка удалила данные и контакты${before ? ` (завершена до ${before})` : ""}`,
    notSent: (cls: string | null) => `В CRM ничего не отправлено${cls ? `: ${cls}` : ""}`,
    field: { title: "название", name: "имя", phone: "телефон", email: "e-mail", comment: "комментарий" },
    updateRequested: (crmId: string | null, delivery: number | null) =>
      `Сущность CRM${crmId ? ` ${crmId}` : ""} получит изменённые поля доставки${no(delivery)}; их отправит воркер`,
    updateRequest: (crm: string, method: string | null, fields: string) =>
      `Обновление отправлено в ${crm}${method ? `: ${method}` : ""}${fields ? ` (${fields})` : ""}`,
    updated: (crmId: string | null, fields: string) =>
      `Сущность CRM${crmId ? ` ${crmId}` : ""} обновлена${fields ? `: ${fields}` : ""}`,
    updateSkipped: "В поздней доставке нет отличий в полях, которые есть в CRM: обновление не отправлено",
    updateRetry: (cls: string | null, inD: string | null) =>
      `Обновление не подтверждено${cls ? ` (${cls})` : ""} — будет отправлено снова${inD ? ` ${inD}` : ""}`,
    updateFailed: (crmId: string | null, cls: string | null, caseNo: number | null) =>
      `Обновление${crmId ? ` ${crmId}` : " сущности CRM"} не удалось${cls ? `: ${cls}` : ""}${caseNo === null ? "" : `; кейс #${caseNo} снова ждёт решения`}`,
    inDelay: (d: string) => `через ${d}`,
    now: "сейчас",
  },
};
