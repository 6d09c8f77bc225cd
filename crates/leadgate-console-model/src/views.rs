//! The console's wire format: every view a command answers with (queue, case, timeline,
//! dashboard), as the TypeScript twins in `ui/src/lib/bindings.ts` are generated from.

use super::*;

/// The queue tabs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum Tab {
    /// Open review cases other than payload conflicts (filter by reason).
    NeedsReview,
    PayloadConflict,
    Stale,
    FailedTerminal,
    Connectors,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct QueueQuery {
    pub reason: Option<String>,
    pub source: Option<String>,
    /// Only items older than this many minutes.
    #[ts(type = "number | null")]
    pub older_than_minutes: Option<i64>,
    /// Newest first instead of oldest first (the default: who waited longest).
    #[serde(default)]
    pub newest_first: bool,
    /// The `next` cursor of the previous page.
    pub cursor: Option<String>,
    #[ts(type = "number | null")]
    pub limit: Option<i64>,
}

/// One line of the queue: a review case, a stale or failed operation, or a connector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct QueueRow {
    #[ts(type = "number | null")]
    pub case_id: Option<i64>,
    pub operation_id: Option<String>,
    pub source: String,
    pub status: String,
    pub reason: Option<String>,
    /// When it started waiting (case opened, lease expired, failure, connector paused).
    pub since: String,
    pub attempts: i32,
    pub crm_id: Option<String>,
    pub note: Option<String>,
    /// Who the lead is, as the queue shows it first.
    pub lead: LeadSummary,
}

/// The lead's name, phone, e-mail and form, as far as the payload tells.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct LeadSummary {
    pub name: Option<String>,
    pub phone: Option<String>,
    pub email: Option<String>,
    /// The form (or channel) it came from, when the payload names one.
    pub form: Option<String>,
}

impl LeadSummary {
    /// From the normalized contact keys and the payload's usual top-level fields
    /// (`name`, `phone`, `email`, `form`/`formname`/`form_name`/`formid`, any case).
    pub fn of(op: &Operation) -> LeadSummary {
        let field = |keys: &[&str]| -> Option<String> {
            let obj = op.payload.as_ref()?.as_object()?;
            keys.iter().find_map(|k| {
                obj.iter()
                    .find(|(name, _)| name.eq_ignore_ascii_case(k))
                    .and_then(|(_, v)| match v {
                        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
                        Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    })
            })
        };
        LeadSummary {
            name: op
                .contact
                .name
                .clone()
                .or_else(|| field(&["name", "fio", "full_name"])),
            phone: op.contact.phone.clone().or_else(|| field(&["phone"])),
            email: op.contact.email.clone().or_else(|| field(&["email"])),
            form: field(&["form", "formname", "form_name", "formid"]),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct QueuePage {
    pub rows: Vec<QueueRow>,
    pub next: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, TS)]
pub struct TabCounts {
    #[ts(type = "number")]
    pub needs_review: i64,
    #[ts(type = "Record<string, number>")]
    pub by_reason: BTreeMap<String, i64>,
    #[ts(type = "number")]
    pub payload_conflict: i64,
    #[ts(type = "number")]
    pub stale: i64,
    #[ts(type = "number")]
    pub failed_terminal: i64,
    #[ts(type = "number")]
    pub paused_connectors: i64,
    /// Of `needs_review`, the cases this person's role does not decide (for sales ops the
    /// cross-channel matches, which wait for a manager).
    #[ts(type = "number")]
    pub others_decide: i64,
    /// A gateway or worker beat within [`GATEWAY_SILENT_AFTER`]: leads are being sent,
    /// and a person's action is applied (on PostgreSQL) within a second.
    pub gateway_running: bool,
    /// When one last did, if ever.
    pub gateway_last_beat: Option<String>,
    /// Deliveries waiting in the gateways' intake spools for the operations database, as
    /// the gateways last said (`Upkeep::beats`), and when the oldest of them arrived.
    #[ts(type = "number")]
    pub spooled: i64,
    pub spooled_since: Option<String>,
}

/// A gateway silent this long is taken for gone (it beats every 5 s, `app::BEAT_EVERY`).
pub const GATEWAY_SILENT_AFTER: chrono::TimeDelta = chrono::TimeDelta::seconds(30);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct OperationView {
    pub operation_id: String,
    pub source: String,
    pub status: String,
    pub payload_hash: String,
    pub payload: Option<Value>,
    pub crm_id: Option<String>,
    pub crm_link: Option<String>,
    /// Opens the entity in the CRM (from the settings' template, else the address the
    /// gateway published for its CRM).
    pub crm_url: Option<String>,
    /// The CRM's list searched for this lead's phone (else e-mail, else name): to look
    /// before deciding. Set on a case's own operation only.
    pub crm_search_url: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub last_error_class: Option<String>,
    pub review_reason: Option<String>,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<String>,
    pub retry_grants: i32,
    /// A retry looks the key up in the CRM before it creates: an attempt was made, or a
    /// lookup is owed (an outage gave an attempt back after its create went out). The
    /// console says "re-check" then, and "send" only when nothing can have reached the CRM.
    pub checks_first: bool,
    pub contact_phone: Option<String>,
    pub contact_email: Option<String>,
    pub lead: LeadSummary,
    #[ts(type = "number")]
    pub version: i64,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct CaseView {
    #[ts(type = "number")]
    pub id: i64,
    pub operation_id: String,
    pub reason: String,
    pub opened_at: String,
    pub resolved_at: Option<String>,
    pub resolution: Option<String>,
    pub resolved_by: Option<String>,
    pub comment: Option<String>,
    pub detail: Value,
    #[ts(type = "number")]
    pub version: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct EventView {
    #[ts(type = "number")]
    pub id: i64,
    /// RFC 3339 with microseconds, UTC.
    pub at: String,
    pub kind: String,
    pub actor: String,
    pub error_class: Option<String>,
    pub detail: Value,
}

/// How many timeline events one read of the console shows: a timeline of any length is
/// read a page at a time ("older events…").
pub const TIMELINE_PAGE: i64 = 200;

/// Older events of a timeline ([`Console::older_events`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct TimelinePageView {
    /// Oldest first.
    pub events: Vec<EventView>,
    /// How many are older still.
    #[ts(type = "number")]
    pub older: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct DeliveryPayload {
    #[ts(type = "number")]
    pub delivery_id: i64,
    pub received_at: String,
    pub payload: Option<Value>,
    pub payload_hash: Option<String>,
}

/// The two sides of a payload conflict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Conflict {
    pub original: Option<Value>,
    pub original_hash: String,
    pub incoming: DeliveryPayload,
}

/// Everything about one operation on one screen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct CaseDetail {
    pub operation: OperationView,
    /// The case the operator opened (or the newest open one).
    pub case: Option<CaseView>,
    pub cases: Vec<CaseView>,
    /// The newest [`TIMELINE_PAGE`] events, oldest first; `older_events` more before
    /// them ([`Console::older_events`]).
    pub timeline: Vec<EventView>,
    #[ts(type = "number")]
    pub older_events: i64,
    pub conflict: Option<Conflict>,
    pub candidates: Vec<OperationView>,
    /// What the steps of a stepped create (contact + deal) found or made, each entity
    /// once (its latest `crm_step` event), with the CRM page to open it on.
    pub crm_entities: Vec<CrmEntityView>,
    /// An ambiguous match's entities: the ids the lookup by key found in the CRM, each
    /// with its page, so the person opens them and picks the one that stands.
    pub found_in_crm: Vec<FoundInCrm>,
    /// What a person may do on `case` now, as the resolution each would record
    /// (`domain::rules::allowed_actions`: the same rules `Review::resolve` applies); empty
    /// when the case is resolved.
    pub allowed: Vec<String>,
    /// False when this person's role decides no case of this reason (a cross-channel
    /// match is a manager's): the console says whose it is instead of offering buttons.
    pub role_decides: bool,
    /// Those of `allowed` that need a comment saying why (`rules::needs_comment`).
    pub needs_comment: Vec<String>,
    /// Whether this person may *Fix and resend…* this lead now ([`Console::resend`]):
    /// their role may, and the rules would grant a retry on the case it would resolve.
    pub may_resend: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Action {
    Confirm {
        crm_id: String,
    },
    Link {
        crm_id: String,
    },
    AuthorizeRetry,
    KeepOriginal,
    /// Keep the original and send the conflicting delivery's changed fields to the CRM
    /// entity (the worker does, in the background; the timeline shows how it went).
    UpdateCrm,
    AcceptAsNew,
    /// A cross-channel or late match is a new request after all: send it to the CRM.
    CreateNew,
    /// The lead is dropped for good (`failed_terminal`), with the reason in the comment.
    Reject,
    /// Fix and resend: `payload` (the edited JSON text, an object) replaces the lead's
    /// data, and one more attempt sends it (`HumanAction::ResendEdited`).
    ResendEdited {
        payload: String,
    },
}

/// *Fix and resend…* on a lead (a failed one, typically): opens a review case for it
/// unless one is open, and resolves it with [`Action::ResendEdited`], in one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ResendRequest {
    pub operation_id: String,
    /// The operation version the person saw.
    #[ts(type = "number")]
    pub expected_version: i64,
    /// The edited payload, as typed (JSON text of an object).
    pub payload: String,
    pub comment: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ActionRequest {
    #[ts(type = "number")]
    pub case_id: i64,
    /// The operation version the operator saw.
    #[ts(type = "number")]
    pub expected_version: i64,
    pub comment: Option<String>,
    pub action: Action,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ActionOutcome {
    pub operation: OperationView,
    pub new_operation: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct ConnectorView {
    pub name: String,
    pub paused: bool,
    /// Why: the CRM's error after an auth failure, or a person's words when `by_hand`.
    pub reason: Option<String>,
    pub since: String,
    pub changed_by: String,
    /// Paused by a person (`changed_by`), not by the worker.
    pub by_hand: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct SeriesPointView {
    pub start: String,
    #[ts(type = "number")]
    pub deliveries: i64,
    #[ts(type = "number")]
    pub new_operations: i64,
    #[ts(type = "number")]
    pub crm_entities: i64,
    #[ts(type = "number")]
    pub duplicates_absorbed: i64,
    #[ts(type = "number")]
    pub cases_opened: i64,
    #[ts(type = "number")]
    pub cases_resolved: i64,
    #[ts(type = "Record<string, number>")]
    pub retries_by_class: BTreeMap<String, i64>,
}

/// One CRM entity a step of a create found or made (a `crm_step` event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct CrmEntityView {
    /// `contact`, `deal`, `lead` or an HTTP CRM step's name.
    pub entity: String,
    pub crm_id: String,
    /// `created`, `linked` (an existing one was found) or `recovered` (found by its key
    /// after an answer that did not come).
    pub how: String,
    pub url: Option<String>,
}

/// One entity a lookup by key found (an ambiguous match lists several).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct FoundInCrm {
    pub crm_id: String,
    pub url: Option<String>,
}

/// The ids an open ambiguous-match case's lookup found (`reconcile::several` writes them
/// as `crm_ids` in the case's detail), with their pages.
pub(crate) fn found_in_crm(case: Option<&ReviewCase>, template: Option<&str>) -> Vec<FoundInCrm> {
    let Some(c) = case.filter(|c| c.reason == ReviewReason::AmbiguousMatch) else {
        return vec![];
    };
    c.detail
        .get("crm_ids")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| {
            v.as_str()
                .map(str::to_owned)
                .or_else(|| v.as_i64().map(|n| n.to_string()))
        })
        .map(|crm_id| FoundInCrm {
            url: template.and_then(|t| crm_url(t, &crm_id)),
            crm_id,
        })
        .collect()
}

/// Each entity's latest `crm_step`, in the order the steps first ran; the contact opens on
/// `contact_url`, any other entity on the operation's own entity page.
pub(crate) fn crm_entities(
    timeline: &[TimelineEvent],
    contact_url: Option<&str>,
    entity_url: Option<&str>,
) -> Vec<CrmEntityView> {
    let mut out: Vec<CrmEntityView> = vec![];
    for e in timeline.iter().filter(|e| e.is(EventKind::CrmStep)) {
        let text = |k: &str| e.detail.get(k).and_then(Value::as_str).map(str::to_owned);
        let (Some(entity), Some(crm_id)) = (text("entity"), text("crm_id")) else {
            continue;
        };
        let template = if entity == "contact" {
            contact_url
        } else {
            entity_url
        };
        let view = CrmEntityView {
            url: template.and_then(|t| crm_url(t, &crm_id)),
            how: text("how").unwrap_or_else(|| "created".into()),
            entity,
            crm_id,
        };
        match out.iter_mut().find(|v| v.entity == view.entity) {
            Some(v) => *v = view,
            None => out.push(view),
        }
    }
    out
}

/// docs/SPEC.md "Metrics" now, and over the chosen range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS)]
pub struct Dashboard {
    #[ts(type = "number")]
    pub unique_operations: i64,
    #[ts(type = "number")]
    pub crm_entities_created: i64,
    #[ts(type = "Record<string, number>")]
    pub duplicates_absorbed: BTreeMap<String, i64>,
    #[ts(type = "Record<string, number>")]
    pub retries_by_class: BTreeMap<String, i64>,
    #[ts(type = "Record<string, number>")]
    pub operations_by_status: BTreeMap<String, i64>,
    #[ts(type = "number")]
    pub stale_in_progress: i64,
    #[ts(type = "number")]
    pub unprocessed: i64,
    #[ts(type = "number")]
    pub lost: i64,
    #[ts(type = "Record<string, number>")]
    pub open_cases_by_reason: BTreeMap<String, i64>,
    #[ts(type = "number")]
    pub resolved_cases: i64,
    pub mean_seconds_to_resolve: Option<f64>,
    #[ts(type = "number")]
    pub unreconstructable: i64,
    pub paused_connectors: Vec<String>,
    /// Connectors whose CRM does not answer, and since when (leads wait for its probes).
    pub unreachable_connectors: BTreeMap<String, String>,
    pub series: Vec<SeriesPointView>,
    /// Entities made or found by stepped creates (contact + deal), all time:
    /// `"<entity>:<how>"` (`contact:created`, `contact:linked`, `deal:created`, …).
    #[ts(type = "Record<string, number>")]
    pub crm_steps: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TS)]
#[serde(rename_all = "snake_case")]
pub enum Range {
    Hour,
    Day,
    Week,
    Month,
}

impl Range {
    pub(crate) fn span_and_buckets(self) -> (chrono::TimeDelta, u32) {
        match self {
            Range::Hour => (chrono::TimeDelta::hours(1), 12),
            Range::Day => (chrono::TimeDelta::days(1), 48),
            Range::Week => (chrono::TimeDelta::days(7), 56),
            Range::Month => (chrono::TimeDelta::days(30), 60),
        }
    }
}
