//! The state machine's decisions, as pure functions: what a person's action does to an
//! operation (or why it is refused), where intake and the claim API send a delivery,
//! what a contact match or a late report does. The store takes the row locks, calls
//! these, and writes down what they decided; nothing here touches a database, so every
//! rule is tested as a table below.

use chrono::{DateTime, Utc};

use super::{HumanAction, MatchRule, Resolution, ReviewReason, Status};

/// Why a person's action (or a request to open a review) was refused. Each has a stable
/// [`code`](Refusal::code) the console translates, and an English sentence for the CLI
/// and logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum Refusal {
    #[error("the operator's name is required")]
    ActorRequired,
    #[error("a CRM id is required")]
    CrmIdRequired,
    /// Longer than `text::MAX_CRM_ID_CHARS`, or with a control or invisible character.
    #[error("{problem}: a CRM id is at most 256 printable characters")]
    CrmIdInvalid { problem: String },
    #[error("the operation is already completed with CRM id {crm_id}")]
    AlreadyCompleted { crm_id: String },
    #[error("a retry can only be authorized for an operation in review or failed, not `{status}`")]
    RetryNotInReview { status: Status },
    #[error("an attempt is still in flight; wait for its outcome")]
    RetryWhileInFlight,
    #[error("a payload conflict is resolved by keeping the original or accepting the new data")]
    RetryOnConflict,
    #[error("the operation already has CRM id {crm_id}; a retry would create a second entity")]
    RetryOverKnownResult { crm_id: String },
    #[error("the CRM already holds several entities under this key; confirm the one that stands instead of creating another")]
    RetryOnAmbiguousMatch,
    #[error("the lead's data was removed by retention; a retry would create an empty lead")]
    RetryWithoutData,
    #[error("keep original / accept as new apply to payload conflicts, not `{reason}`")]
    NotAPayloadConflict { reason: ReviewReason },
    #[error("create new applies to cross-channel matches and late duplicates, not `{reason}`")]
    CreateNewNotApplicable { reason: ReviewReason },
    #[error("this operation was already attempted; use confirm, link or authorize retry")]
    CreateNewAfterAttempt,
    #[error("only an operation in review can be rejected, not `{status}`")]
    RejectNotInReview { status: Status },
    /// A reject while a CRM call may still create the lead (the store reports it as
    /// `StoreError::AttemptInFlight`, with the time the lease ends).
    #[error("an attempt is in flight until {until}; wait for its outcome")]
    AttemptInFlight { until: DateTime<Utc> },
    #[error("an attempt is in flight (its lease is live); wait for its outcome")]
    ReviewWhileInFlight,
    #[error("the conflicting delivery's payload was already purged")]
    ConflictPayloadPurged,
    #[error("`{operation_id}` exists already")]
    AcceptedExists { operation_id: String },
    #[error("say in the comment why")]
    CommentRequired,
    #[error("the lead is in the CRM as {crm_id}: confirm it instead of rejecting")]
    RejectOverKnownResult { crm_id: String },
    #[error("a payload conflict is resolved by keeping the original or accepting the new data, not rejected")]
    RejectOnConflict,
    #[error("a `{reason}` case needs a person to look at it: decide it alone, not in bulk")]
    NotInBulk { reason: ReviewReason },
    #[error("nothing was sent to the CRM for this lead yet, so a re-check would create it: decide it alone, not in bulk")]
    BulkWouldCreate,
    #[error("your role does not decide a `{reason}` case: it waits for a manager")]
    NotYourRole { reason: ReviewReason },
    #[error("the lead is not in the CRM yet, so there is nothing to update: keep the original or accept the new data as a lead of its own")]
    UpdateWithoutEntity,
    #[error("this lead is sent to the CRM by an integration, not by Leadgate: update it there")]
    UpdateNotOurs,
    #[error("a later delivery's changes were already sent to this CRM entity (or are on their way): keep the original, or accept this delivery as new")]
    UpdateSuperseded,
    #[error("there are no business rules for the source `{name}` (a source gets them when a gateway configured with it starts)")]
    UnknownRuleSource { name: String },
    #[error("a matching window of {secs} s is out of range: from 1 second to 365 days")]
    RuleWindowOutOfRange { secs: i64 },
    #[error("`{channel}` is not a channel name: use letters, digits, `-` and `_` (up to 64)")]
    RuleChannelName { channel: String },
    #[error("someone changed these rules since you opened them (now version {current}); reload and edit again")]
    RulesChanged { current: i64 },
    /// *Fix and resend*: the edited text does not read as JSON.
    #[error("the edited data is not valid JSON ({problem}); nothing was changed")]
    PayloadMalformed { problem: String },
    #[error("the edited data must be a JSON object (`{{…}}`), as the source sent it; nothing was changed")]
    PayloadNotObject,
    #[error("the edited data is larger than {most} bytes; nothing was changed")]
    PayloadTooLarge { most: usize },
    /// A retry on a failed lead while a payload conflict is open on it: the grant would
    /// wait behind the conflict, and settling the conflict does not move a failed lead.
    #[error("a payload conflict is open on this lead: settle it first (keep the original or accept the new data), then send it again")]
    RetryWhileConflictOpen,
    /// A connector paused by hand says why (`text::check_pause_reason`).
    #[error("say why the connector is paused: everyone sees it, and the alerts carry it")]
    PauseReasonRequired,
    #[error("a pause reason is at most {most} printable characters")]
    PauseReasonInvalid { most: usize },
}

impl Refusal {
    /// Every [`code`](Refusal::code), for the console's translation check.
    pub const CODES: &'static [&'static str] = &[
        "actor_required",
        "crm_id_required",
        "crm_id_invalid",
        "already_completed",
        "retry_not_in_review",
        "retry_while_in_flight",
        "retry_on_conflict",
        "retry_over_known_result",
        "retry_on_ambiguous_match",
        "retry_without_data",
        "not_a_payload_conflict",
        "create_new_not_applicable",
        "create_new_after_attempt",
        "reject_not_in_review",
        "attempt_in_flight",
        "review_while_in_flight",
        "conflict_payload_purged",
        "accepted_exists",
        "comment_required",
        "reject_over_known_result",
        "reject_on_conflict",
        "not_in_bulk",
        "bulk_would_create",
        "not_your_role",
        "update_without_entity",
        "update_not_ours",
        "update_superseded",
        "retry_while_conflict_open",
        "unknown_rule_source",
        "rule_window_out_of_range",
        "rule_channel_name",
        "rules_changed",
        "payload_malformed",
        "payload_not_object",
        "payload_too_large",
        "pause_reason_required",
        "pause_reason_invalid",
    ];

    /// The refusal's variable part (a CRM id, a status, a reason, a time, an operation
    /// id), for a translated sentence.
    pub fn detail(&self) -> Option<String> {
        match self {
            Refusal::AlreadyCompleted { crm_id }
            | Refusal::RetryOverKnownResult { crm_id }
            | Refusal::RejectOverKnownResult { crm_id } => Some(crm_id.clone()),
            Refusal::RetryNotInReview { status } | Refusal::RejectNotInReview { status } => {
                Some(status.to_string())
            }
            Refusal::NotAPayloadConflict { reason }
            | Refusal::CreateNewNotApplicable { reason }
            | Refusal::NotInBulk { reason }
            | Refusal::NotYourRole { reason } => Some(reason.to_string()),
            Refusal::AttemptInFlight { until } => Some(until.to_rfc3339()),
            Refusal::AcceptedExists { operation_id } => Some(operation_id.clone()),
            Refusal::UnknownRuleSource { name } => Some(name.clone()),
            Refusal::RuleWindowOutOfRange { secs } => Some(secs.to_string()),
            Refusal::RuleChannelName { channel } => Some(channel.clone()),
            Refusal::RulesChanged { current } => Some(current.to_string()),
            Refusal::CrmIdInvalid { problem } | Refusal::PayloadMalformed { problem } => {
                Some(problem.clone())
            }
            Refusal::PayloadTooLarge { most } | Refusal::PauseReasonInvalid { most } => {
                Some(most.to_string())
            }
            _ => None,
        }
    }

    /// A stable snake_case name, for the console's translations and the API.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::ActorRequired => "actor_required",
            Refusal::CrmIdRequired => "crm_id_required",
            Refusal::CrmIdInvalid { .. } => "crm_id_invalid",
            Refusal::AlreadyCompleted { .. } => "already_completed",
            Refusal::RetryNotInReview { .. } => "retry_not_in_review",
            Refusal::RetryWhileInFlight => "retry_while_in_flight",
            Refusal::RetryOnConflict => "retry_on_conflict",
            Refusal::RetryOverKnownResult { .. } => "retry_over_known_result",
            Refusal::RetryOnAmbiguousMatch => "retry_on_ambiguous_match",
            Refusal::RetryWithoutData => "retry_without_data",
            Refusal::NotAPayloadConflict { .. } => "not_a_payload_conflict",
            Refusal::CreateNewNotApplicable { .. } => "create_new_not_applicable",
            Refusal::CreateNewAfterAttempt => "create_new_after_attempt",
            Refusal::RejectNotInReview { .. } => "reject_not_in_review",
            Refusal::AttemptInFlight { .. } => "attempt_in_flight",
            Refusal::ReviewWhileInFlight => "review_while_in_flight",
            Refusal::ConflictPayloadPurged => "conflict_payload_purged",
            Refusal::AcceptedExists { .. } => "accepted_exists",
            Refusal::CommentRequired => "comment_required",
            Refusal::RejectOverKnownResult { .. } => "reject_over_known_result",
            Refusal::RejectOnConflict => "reject_on_conflict",
            Refusal::NotInBulk { .. } => "not_in_bulk",
            Refusal::BulkWouldCreate => "bulk_would_create",
            Refusal::NotYourRole { .. } => "not_your_role",
            Refusal::UpdateWithoutEntity => "update_without_entity",
            Refusal::UpdateNotOurs => "update_not_ours",
            Refusal::UpdateSuperseded => "update_superseded",
            Refusal::UnknownRuleSource { .. } => "unknown_rule_source",
            Refusal::RuleWindowOutOfRange { .. } => "rule_window_out_of_range",
            Refusal::RuleChannelName { .. } => "rule_channel_name",
            Refusal::RulesChanged { .. } => "rules_changed",
            Refusal::PayloadMalformed { .. } => "payload_malformed",
            Refusal::PayloadNotObject => "payload_not_object",
            Refusal::PayloadTooLarge { .. } => "payload_too_large",
            Refusal::RetryWhileConflictOpen => "retry_while_conflict_open",
            Refusal::PauseReasonRequired => "pause_reason_required",
            Refusal::PauseReasonInvalid { .. } => "pause_reason_invalid",
        }
    }
}

/// What the rules need to know of an operation, read under its row lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpFacts<'a> {
    pub status: Status,
    pub crm_id: Option<&'a str>,
    /// How the CRM id was obtained (`created`, `recovered`, `linked`, `confirmed`).
    pub crm_link: Option<&'a str>,
    pub attempts: i32,
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// A lease token is set (an attempt was started and its outcome is owed).
    pub lease_held: bool,
    /// Until when a create sent under the last lease may still land.
    pub quiet_after: Option<DateTime<Utc>>,
    /// The payload is still there (not purged by retention).
    pub has_payload: bool,
}

impl OpFacts<'_> {
    fn lease_live(&self, now: DateTime<Utc>) -> bool {
        self.lease_expires_at.is_some_and(|t| t > now)
    }
}

/// What a person's action does, once allowed. [`Decision::target`] is the status it
/// moves the operation to; every decision also resolves the case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Confirm or link: `crm_id` stands. `link` is how it was obtained, when that is
    /// recorded anew (an entity Leadgate created stays counted as created). Any lease
    /// is cleared.
    SettleCrmId {
        crm_id: String,
        link: Option<&'static str>,
    },
    /// Exactly one more attempt, due at `due_at` (after the settle window of an earlier
    /// call); with `verify_first` the key is looked up before anything is created.
    GrantRetry {
        due_at: DateTime<Utc>,
        verify_first: bool,
    },
    /// A payload conflict closed: the operation goes back to `to` (`None`: as it is);
    /// with `accept_as_new` the conflicting delivery becomes an operation of its own;
    /// with `update_crm` the CRM entity of that id gets the conflicting delivery's
    /// changed fields (a `crm_updates` row the worker sends).
    ResolveConflict {
        accept_as_new: bool,
        update_crm: Option<String>,
        to: Option<Status>,
    },

    /// A match that is a new request after all: due at once.
    CreateNew { due_at: DateTime<Utc> },
    /// Dropped for good; any ran-out lease is cleared.
    Reject,
}

impl Decision {
    pub fn target(&self) -> Option<Status> {
        match self {
            Decision::SettleCrmId { .. } => Some(Status::Completed),
            Decision::GrantRetry { .. } | Decision::CreateNew { .. } => Some(Status::Received),
            Decision::ResolveConflict { to, .. } => *to,
            Decision::Reject => Some(Status::FailedTerminal),
        }
    }
}

/// Decides a person's `action` on a case opened for `reason`, on an operation as
/// `op` describes it: what it does, or why it is refused.
pub fn decide(
    action: &HumanAction,
    actor: &str,
    reason: ReviewReason,
    op: OpFacts<'_>,
    now: DateTime<Utc>,
) -> Result<Decision, Refusal> {
    if actor.trim().is_empty() {
        return Err(Refusal::ActorRequired);
    }
    match action {
        HumanAction::ConfirmCrmResult { crm_id } | HumanAction::LinkExisting { crm_id } => {
            let crm_id = crm_id.trim();
            if crm_id.is_empty() {
                return Err(Refusal::CrmIdRequired);
            }
            if let Err(e) = super::text::check_crm_id(crm_id) {
                return Err(Refusal::CrmIdInvalid {
                    problem: e.to_string(),
                });
            }
            // Two entities under one key (a late answer, or a lookup that found several):
            // the person says which one stands, even on a completed operation.
            if op.status == Status::Completed && reason != ReviewReason::AmbiguousMatch {
                return Err(Refusal::AlreadyCompleted {
                    crm_id: op.crm_id.unwrap_or("?").to_owned(),
                });
            }
            // On a completed operation the entities stay counted as Leadgate made them:
            // only which id stands changes.
            let counted = matches!(op.crm_link, Some("created" | "recovered"));
            let link = (op.status != Status::Completed && !counted).then_some(
                if matches!(action, HumanAction::LinkExisting { .. }) {
                    "linked"
                } else {
                    "confirmed"
                },
            );
            Ok(Decision::SettleCrmId {
                crm_id: crm_id.to_owned(),
                link,
            })
        }
        HumanAction::AuthorizeRetry => grant_retry(reason, op, now),
        // Refused wherever a retry is; then the edited data is checked.
        HumanAction::ResendEdited { payload } => {
            let decision = grant_retry(reason, op, now)?;
            check_edited_payload(payload)?;
            Ok(decision)
        }
        HumanAction::KeepOriginal | HumanAction::AcceptAsNew | HumanAction::UpdateCrm => {
            if reason != ReviewReason::PayloadConflict {
                return Err(Refusal::NotAPayloadConflict { reason });
            }
            let update_crm = match action {
                // Only an entity that exists can be updated: while the create is still
                // owed (or its outcome unknown) there is nothing to send the fields to.
                HumanAction::UpdateCrm => {
                    let crm_id = op.crm_id.ok_or(Refusal::UpdateWithoutEntity)?;
                    // The lead as created is what the changes are read against.
                    if !op.has_payload {
                        return Err(Refusal::ConflictPayloadPurged);
                    }
                    Some(crm_id.to_owned())
                }
                _ => None,
            };
            Ok(Decision::ResolveConflict {
                accept_as_new: *action == HumanAction::AcceptAsNew,
                update_crm,
                to: unblocked_status(op),
            })
        }
        HumanAction::CreateNew => {
            if !matches!(
                reason,
                ReviewReason::CrossChannelMatch | ReviewReason::LateDuplicate
            ) {
                return Err(Refusal::CreateNewNotApplicable { reason });
            }
            if op.status != Status::NeedsReview || op.attempts > 0 {
                return Err(Refusal::CreateNewAfterAttempt);
            }
            Ok(Decision::CreateNew { due_at: now })
        }
        HumanAction::Reject => {
            if op.status != Status::NeedsReview {
                return Err(Refusal::RejectNotInReview { status: op.status });
            }
            // The CRM call may still create the lead: a failed operation holding a
            // crm_id. Wait for its outcome (or for the lease to run out).
            if let Some(until) = op.lease_expires_at.filter(|t| *t > now) {
                return Err(Refusal::AttemptInFlight { until });
            }
            if reason == ReviewReason::PayloadConflict {
                return Err(Refusal::RejectOnConflict);
            }
            // The create landed (say a late answer while the case was open): the lead is
            // in the CRM, and a failed operation must never hold a crm_id.
            if let Some(crm_id) = op.crm_id {
                return Err(Refusal::RejectOverKnownResult {
                    crm_id: crm_id.to_owned(),
                });
            }
            Ok(Decision::Reject)
        }
    }
}

/// *Authorize one retry* (and *Fix and resend*, which is one with other data): refused on
/// top of a known result, on a conflict or an ambiguous match, while a lease is live and
/// once the payload is purged.
fn grant_retry(
    reason: ReviewReason,
    op: OpFacts<'_>,
    now: DateTime<Utc>,
) -> Result<Decision, Refusal> {
    if !matches!(op.status, Status::NeedsReview | Status::FailedTerminal) {
        return Err(Refusal::RetryNotInReview { status: op.status });
    }
    if op.lease_live(now) {
        return Err(Refusal::RetryWhileInFlight);
    }
    if reason == ReviewReason::PayloadConflict {
        return Err(Refusal::RetryOnConflict);
    }
    // Never a second create on top of a known result.
    if let Some(crm_id) = op.crm_id {
        return Err(Refusal::RetryOverKnownResult {
            crm_id: crm_id.to_owned(),
        });
    }
    if reason == ReviewReason::AmbiguousMatch {
        return Err(Refusal::RetryOnAmbiguousMatch);
    }
    if !op.has_payload {
        return Err(Refusal::RetryWithoutData);
    }
    Ok(Decision::GrantRetry {
        // A create sent under an earlier lease may still land: the granted
        // attempt is not due before its settle window is over.
        due_at: op.quiet_after.map_or(now, |q| q.max(now)),
        // An earlier attempt may have landed meanwhile: the granted attempt
        // looks the key up before it creates. The attempt counter alone cannot say so
        // (an outage gives an attempt back even when its create went out): a settle
        // window still open says a create may land, and the store never lowers a
        // `verify_first` already set.
        verify_first: op.attempts > 0 || op.quiet_after.is_some(),
    })
}

/// The most bytes an edited payload may have: intake's default `[server] max_body`.
pub const MAX_EDITED_PAYLOAD_BYTES: usize = 256 * 1024;

/// *Fix and resend*'s data as a person typed it: a JSON object of at most
/// [`MAX_EDITED_PAYLOAD_BYTES`], or why not.
pub fn parse_edited_payload(text: &str) -> Result<serde_json::Value, Refusal> {
    if text.len() > MAX_EDITED_PAYLOAD_BYTES {
        return Err(Refusal::PayloadTooLarge {
            most: MAX_EDITED_PAYLOAD_BYTES,
        });
    }
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| Refusal::PayloadMalformed {
            problem: e.to_string(),
        })?;
    check_edited_payload(&value)?;
    Ok(value)
}

/// An edited payload is a JSON object (what every source's payload is), within
/// [`MAX_EDITED_PAYLOAD_BYTES`].
pub fn check_edited_payload(payload: &serde_json::Value) -> Result<(), Refusal> {
    if !payload.is_object() {
        return Err(Refusal::PayloadNotObject);
    }
    if payload.to_string().len() > MAX_EDITED_PAYLOAD_BYTES {
        return Err(Refusal::PayloadTooLarge {
            most: MAX_EDITED_PAYLOAD_BYTES,
        });
    }
    Ok(())
}

/// What an edit changed, as field paths (`phone`, `contact.email`; an array counts as one
/// field): for the timeline, which records what was edited, never the values.
pub fn edited_fields(
    before: Option<&serde_json::Value>,
    after: &serde_json::Value,
) -> EditedFields {
    let mut out = EditedFields::default();
    let empty = serde_json::Map::new();
    let before = before
        .and_then(serde_json::Value::as_object)
        .unwrap_or(&empty);
    if let Some(after) = after.as_object() {
        diff_fields("", before, after, &mut out);
    }
    out
}

/// Field paths an edit added, changed and removed, each sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct EditedFields {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
}

fn diff_fields(
    prefix: &str,
    before: &serde_json::Map<String, serde_json::Value>,
    after: &serde_json::Map<String, serde_json::Value>,
    out: &mut EditedFields,
) {
    let path = |k: &str| {
        if prefix.is_empty() {
            k.to_owned()
        } else {
            format!("{prefix}.{k}")
        }
    };
    for (k, v) in after {
        match (before.get(k), v) {
            (None, _) => out.added.push(path(k)),
            (Some(serde_json::Value::Object(b)), serde_json::Value::Object(a)) => {
                diff_fields(&path(k), b, a, out)
            }
            (Some(b), a) if b != a => out.changed.push(path(k)),
            _ => {}
        }
    }
    for k in before.keys() {
        if !after.contains_key(k) {
            out.removed.push(path(k));
        }
    }
    out.added.sort();
    out.changed.sort();
    out.removed.sort();
}

/// Whether an action may be taken in bulk on a case opened for `reason` (on top of what
/// [`decide`] allows): a payload conflict needs its two payloads compared, and an
/// ambiguous match needs someone to see which of the CRM's entities stands — neither is
/// decided for a case nobody opened.
pub fn bulk_allowed(reason: ReviewReason) -> Result<(), Refusal> {
    match reason {
        ReviewReason::PayloadConflict | ReviewReason::AmbiguousMatch => {
            Err(Refusal::NotInBulk { reason })
        }
        _ => Ok(()),
    }
}

/// Whether a `decision` [`decide`] allowed may be taken in bulk: a retry on a lead nothing
/// was sent for is a create (no look-up first), which nobody decides for many leads at
/// once — *Re-check in CRM* in bulk only re-checks.
pub fn bulk_decision_allowed(decision: &Decision) -> Result<(), Refusal> {
    match decision {
        Decision::GrantRetry {
            verify_first: false,
            ..
        } => Err(Refusal::BulkWouldCreate),
        _ => Ok(()),
    }
}

/// Whether `decision` on a case of `reason`, for a lead in `status`, would wait behind an
/// open payload conflict: a retry grant on a failed lead does (settling the conflict does
/// not move a failed lead), so it is refused with [`Refusal::RetryWhileConflictOpen`] when
/// one is open. The store checks it under the lock, the console before it asks anything.
pub fn waits_behind_a_conflict(decision: &Decision, status: Status, reason: ReviewReason) -> bool {
    matches!(decision, Decision::GrantRetry { .. })
        && status == Status::FailedTerminal
        && reason != ReviewReason::PayloadConflict
}

/// Whether a person must say why: a lead is dropped for good only with its reason, and an
/// action taken on many cases at once (`bulk`) always carries one, since nobody looked at
/// each case alone.
pub fn needs_comment(resolution: Resolution, bulk: bool) -> bool {
    bulk || resolution == Resolution::Rejected
}

/// The comment rule of [`needs_comment`]: a blank comment counts as none.
pub fn check_comment(
    resolution: Resolution,
    bulk: bool,
    comment: Option<&str>,
) -> Result<(), Refusal> {
    match comment.map(str::trim) {
        Some(c) if !c.is_empty() => Ok(()),
        _ if needs_comment(resolution, bulk) => Err(Refusal::CommentRequired),
        _ => Ok(()),
    }
}

/// Whether a review case may be opened on an operation now (a stale attempt, a failed
/// one): not while an attempt's lease is live, whose outcome would then race the person.
pub fn may_open_review(op: OpFacts<'_>, now: DateTime<Utc>) -> Result<(), Refusal> {
    if op.lease_live(now) {
        return Err(Refusal::ReviewWhileInFlight);
    }
    Ok(())
}

/// The actions a person may take on a case now, as the resolution each would record:
/// exactly those [`decide`] allows (a CRM id is assumed typed in).
pub fn allowed_actions(
    reason: ReviewReason,
    op: OpFacts<'_>,
    now: DateTime<Utc>,
) -> Vec<Resolution> {
    let id = || "1".to_owned();
    [
        HumanAction::ConfirmCrmResult { crm_id: id() },
        HumanAction::LinkExisting { crm_id: id() },
        HumanAction::AuthorizeRetry,
        HumanAction::KeepOriginal,
        HumanAction::UpdateCrm,
        HumanAction::AcceptAsNew,
        HumanAction::CreateNew,
        HumanAction::Reject,
        HumanAction::ResendEdited {
            payload: serde_json::Value::Object(Default::default()),
        },
    ]
    .into_iter()
    .filter(|a| decide(a, "operator", reason, op, now).is_ok())
    .map(|a| a.resolution())
    .collect()
}

/// Where a payload-conflict resolution leaves the original operation (`None`: as it is).
pub fn unblocked_status(op: OpFacts<'_>) -> Option<Status> {
    if op.status != Status::NeedsReview {
        return None;
    }
    Some(if op.crm_id.is_some() {
        Status::Completed
    } else if op.lease_held {
        // An attempt was in flight when the conflict arrived: its worker reports the
        // outcome, or, once the lease runs out, the reconciler asks the CRM. Never a
        // blind new attempt.
        Status::InProgress
    } else {
        Status::Received
    })
}

/// The status a new review case moves an operation to: a final operation stays as it is
/// (a conflict on a completed lead changes nothing in the CRM); anything else waits for
/// the person.
pub fn status_on_review(status: Status) -> Option<Status> {
    (!status.is_final() && status != Status::NeedsReview).then_some(Status::NeedsReview)
}

/// A delivery of a key the store already holds: the same payload or another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryKind {
    New,
    Duplicate,
    Conflict,
}

impl DeliveryKind {
    /// `created`: this delivery inserted the operation; otherwise the stored payload
    /// hash decides.
    pub fn of(created: bool, stored_hash: &str, hash: &str) -> DeliveryKind {
        if created {
            DeliveryKind::New
        } else if stored_hash == hash {
            DeliveryKind::Duplicate
        } else {
            DeliveryKind::Conflict
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryKind::New => "new",
            DeliveryKind::Duplicate => "duplicate",
            DeliveryKind::Conflict => "conflict",
        }
    }
}

/// A delivery whose event is older than the key horizon (tombstones are kept that
/// long): if its key turns out to be new, a person decides whether it is a new lead.
pub fn late_review(
    event_time: Option<DateTime<Utc>>,
    horizon: DateTime<Utc>,
) -> Option<ReviewReason> {
    event_time
        .filter(|t| *t < horizon)
        .map(|_| ReviewReason::LateDuplicate)
}

/// What a claim through the claim API does with a known, non-conflicting key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimStep {
    /// Answer with the saved result.
    Completed,
    Failed,
    NeedsReview,
    /// Someone holds the lease, or the next attempt is not due: come back at `until`.
    InFlight {
        until: DateTime<Utc>,
    },
    /// The integration's lease ran out with the outcome unknown: a person decides,
    /// never a fresh claim.
    LeaseRanOut,
    ConnectorPaused,
    /// The caller gets the lease and may call the CRM.
    Claim,
}

pub fn claim_step(
    status: Status,
    lease_expires_at: Option<DateTime<Utc>>,
    next_attempt_at: Option<DateTime<Utc>>,
    connector_paused: bool,
    now: DateTime<Utc>,
) -> ClaimStep {
    match status {
        Status::Completed => ClaimStep::Completed,
        Status::FailedTerminal => ClaimStep::Failed,
        Status::NeedsReview => ClaimStep::NeedsReview,
        Status::InProgress => match lease_expires_at {
            Some(until) if until > now => ClaimStep::InFlight { until },
            _ => ClaimStep::LeaseRanOut,
        },
        Status::Received => match next_attempt_at {
            Some(at) if at > now => ClaimStep::InFlight { until: at },
            _ if connector_paused => ClaimStep::ConnectorPaused,
            _ => ClaimStep::Claim,
        },
    }
}

/// What a source's matching rule does with a new operation whose contact matches
/// earlier ones (`linked`: the newest match's CRM id, if any has one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MatchStep {
    /// Created as usual; the match is only noted.
    Create,
    /// Completed with the earlier entity's id, no CRM call.
    Link(String),
    /// A manager decides.
    Review,
}

pub fn match_step(rule: MatchRule, linked: Option<String>) -> MatchStep {
    match (rule, linked) {
        (MatchRule::Create, _) => MatchStep::Create,
        (MatchRule::Link, Some(crm_id)) => MatchStep::Link(crm_id),
        // Nothing to link to yet (the earlier lead is still on its way): a person decides
        // rather than a guess.
        (MatchRule::Link, None) | (MatchRule::Review, _) => MatchStep::Review,
    }
}

/// A CRM id reported after the lease was lost, against the one the operation knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateId {
    /// The same entity: noted, nothing changes.
    SameAsKnown,
    /// The operation had no result: the late answer completes it.
    Completes,
    /// A second entity under one key: a person says which one stands.
    SecondEntity,
}

pub fn late_id(known: Option<&str>, reported: &str) -> LateId {
    match known {
        Some(k) if k == reported => LateId::SameAsKnown,
        None => LateId::Completes,
        Some(_) => LateId::SecondEntity,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    fn now() -> DateTime<Utc> {
        "2026-12-01T12:00:00Z".parse().unwrap()
    }

    fn op(status: Status) -> OpFacts<'static> {
        OpFacts {
            status,
            crm_id: None,
            crm_link: None,
            attempts: 1,
            lease_expires_at: None,
            lease_held: false,
            quiet_after: None,
            has_payload: true,
        }
    }

    fn confirm() -> HumanAction {
        HumanAction::ConfirmCrmResult {
            crm_id: " 77 ".into(),
        }
    }

    use HumanAction as A;
    use ReviewReason as R;
    use Status as S;

    #[test]
    fn every_refusal_of_a_human_action() {
        let until = now() + TimeDelta::seconds(5);
        let live = Some(until);
        let gone = Some(now() - TimeDelta::seconds(5));
        let completed = OpFacts {
            crm_id: Some("5"),
            crm_link: Some("created"),
            ..op(S::Completed)
        };
        let table: Vec<(A, &str, R, OpFacts, Refusal)> = vec![
            (
                A::Reject,
                " ",
                R::UncertainOutcome,
                op(S::NeedsReview),
                Refusal::ActorRequired,
            ),
            (
                A::LinkExisting {
                    crm_id: "  ".into(),
                },
                "ann",
                R::CrossChannelMatch,
                op(S::NeedsReview),
                Refusal::CrmIdRequired,
            ),
            (
                A::LinkExisting {
                    crm_id: "9".repeat(500_000),
                },
                "ann",
                R::CrossChannelMatch,
                op(S::NeedsReview),
                Refusal::CrmIdInvalid {
                    problem: "the CRM id is 500000 characters long; at most 256 are allowed".into(),
                },
            ),
            (
                A::ConfirmCrmResult {
                    crm_id: "55\u{1b}[2J".into(),
                },
                "ann",
                R::UncertainOutcome,
                op(S::NeedsReview),
                Refusal::CrmIdInvalid {
                    problem: "the CRM id contains a control character".into(),
                },
            ),
            (
                confirm(),
                "ann",
                R::PayloadConflict,
                completed,
                Refusal::AlreadyCompleted { crm_id: "5".into() },
            ),
            (
                A::AuthorizeRetry,
                "ann",
                R::UncertainOutcome,
                op(S::Received),
                Refusal::RetryNotInReview {
                    status: S::Received,
                },
            ),
            (
                A::AuthorizeRetry,
                "ann",
                R::UncertainOutcome,
                OpFacts {
                    lease_expires_at: live,
                    ..op(S::NeedsReview)
                },
                Refusal::RetryWhileInFlight,
            ),
            (
                A::AuthorizeRetry,
                "ann",
                R::PayloadConflict,
                op(S::NeedsReview),
                Refusal::RetryOnConflict,
            ),
            (
                A::AuthorizeRetry,
                "ann",
                R::UncertainOutcome,
                OpFacts {
                    crm_id: Some("9"),
                    ..op(S::NeedsReview)
                },
                Refusal::RetryOverKnownResult { crm_id: "9".into() },
            ),
            (
                A::AuthorizeRetry,
                "ann",
                R::AmbiguousMatch,
                op(S::NeedsReview),
                Refusal::RetryOnAmbiguousMatch,
            ),
            (
                A::AuthorizeRetry,
                "ann",
                R::RetriesExhausted,
                OpFacts {
                    has_payload: false,
                    ..op(S::FailedTerminal)
                },
                Refusal::RetryWithoutData,
            ),
            (
                A::KeepOriginal,
                "ann",
                R::UncertainOutcome,
                op(S::NeedsReview),
                Refusal::NotAPayloadConflict {
                    reason: R::UncertainOutcome,
                },
            ),
            (
                A::AcceptAsNew,
                "ann",
                R::CrossChannelMatch,
                op(S::NeedsReview),
                Refusal::NotAPayloadConflict {
                    reason: R::CrossChannelMatch,
                },
            ),
            (
                A::UpdateCrm,
                "ann",
                R::PayloadConflict,
                op(S::NeedsReview),
                Refusal::UpdateWithoutEntity,
            ),
            (
                A::UpdateCrm,
                "ann",
                R::UncertainOutcome,
                OpFacts {
                    crm_id: Some("5"),
                    ..op(S::Completed)
                },
                Refusal::NotAPayloadConflict {
                    reason: R::UncertainOutcome,
                },
            ),
            (
                A::CreateNew,
                "ann",
                R::UncertainOutcome,
                op(S::NeedsReview),
                Refusal::CreateNewNotApplicable {
                    reason: R::UncertainOutcome,
                },
            ),
            (
                A::CreateNew,
                "ann",
                R::CrossChannelMatch,
                op(S::NeedsReview),
                Refusal::CreateNewAfterAttempt,
            ),
            (
                A::Reject,
                "ann",
                R::UncertainOutcome,
                op(S::FailedTerminal),
                Refusal::RejectNotInReview {
                    status: S::FailedTerminal,
                },
            ),
            (
                A::Reject,
                "ann",
                R::UncertainOutcome,
                OpFacts {
                    lease_expires_at: live,
                    ..op(S::NeedsReview)
                },
                Refusal::AttemptInFlight { until },
            ),
            // A lease that ran out does not hold a reject back.
            (
                A::Reject,
                "ann",
                R::UncertainOutcome,
                OpFacts {
                    lease_expires_at: gone,
                    ..op(S::Completed)
                },
                Refusal::RejectNotInReview {
                    status: S::Completed,
                },
            ),
        ];
        for (action, actor, reason, facts, refusal) in table {
            let got = decide(&action, actor, reason, facts, now());
            assert_eq!(
                got,
                Err(refusal.clone()),
                "{action:?} on {reason} {facts:?}"
            );
            assert!(Refusal::CODES.contains(&refusal.code()), "{refusal:?}");
        }
    }

    #[test]
    fn a_reject_never_fails_a_lead_the_crm_holds_nor_a_conflict() {
        let with_id = OpFacts {
            crm_id: Some("77"),
            ..op(S::NeedsReview)
        };
        assert_eq!(
            decide(&A::Reject, "ann", R::UncertainOutcome, with_id, now()),
            Err(Refusal::RejectOverKnownResult {
                crm_id: "77".into()
            })
        );
        assert_eq!(
            decide(
                &A::Reject,
                "ann",
                R::PayloadConflict,
                op(S::NeedsReview),
                now()
            ),
            Err(Refusal::RejectOnConflict)
        );
        assert!(decide(
            &A::Reject,
            "ann",
            R::UncertainOutcome,
            op(S::NeedsReview),
            now()
        )
        .is_ok());
        for r in [R::PayloadConflict, R::AmbiguousMatch] {
            assert_eq!(bulk_allowed(r), Err(Refusal::NotInBulk { reason: r }));
        }
        for r in [
            R::UncertainOutcome,
            R::RetriesExhausted,
            R::CrossChannelMatch,
            R::LateDuplicate,
        ] {
            assert_eq!(bulk_allowed(r), Ok(()));
        }
        // A retry that looks the key up first may go in bulk; one that creates may not.
        let grant = |verify_first| Decision::GrantRetry {
            due_at: now(),
            verify_first,
        };
        assert_eq!(bulk_decision_allowed(&grant(true)), Ok(()));
        assert_eq!(
            bulk_decision_allowed(&grant(false)),
            Err(Refusal::BulkWouldCreate)
        );
        assert_eq!(bulk_decision_allowed(&Decision::Reject), Ok(()));
        for r in [
            Refusal::RejectOverKnownResult { crm_id: "1".into() },
            Refusal::RejectOnConflict,
            Refusal::NotInBulk {
                reason: R::AmbiguousMatch,
            },
            Refusal::BulkWouldCreate,
            Refusal::NotYourRole {
                reason: R::CrossChannelMatch,
            },
        ] {
            assert!(Refusal::CODES.contains(&r.code()), "{r:?}");
        }
    }

    #[test]
    fn a_reject_and_every_bulk_action_need_a_comment() {
        use Resolution as Z;
        let all = [
            Z::ConfirmedCrmResult,
            Z::LinkedExisting,
            Z::RetryAuthorized,
            Z::KeptOriginal,
            Z::AcceptedAsNew,
            Z::Rejected,
            Z::CreatedNew,
        ];
        for r in all {
            for bulk in [false, true] {
                let needed = bulk || r == Z::Rejected;
                assert_eq!(needs_comment(r, bulk), needed, "{r:?} bulk={bulk}");
                for blank in [None, Some(""), Some("  \n")] {
                    let got = check_comment(r, bulk, blank);
                    assert_eq!(got.is_err(), needed, "{r:?} bulk={bulk} {blank:?}");
                }
                assert_eq!(check_comment(r, bulk, Some("outage of 1 Dec")), Ok(()));
            }
        }
        assert_eq!(
            check_comment(Z::Rejected, false, None),
            Err(Refusal::CommentRequired)
        );
    }

    #[test]
    fn every_refusal_code_is_listed_once() {
        let rest = [
            Refusal::CommentRequired,
            Refusal::ReviewWhileInFlight,
            Refusal::ConflictPayloadPurged,
            Refusal::AcceptedExists {
                operation_id: "a".into(),
            },
        ];
        for r in rest {
            assert!(Refusal::CODES.contains(&r.code()), "{r:?}");
        }
        let mut codes = Refusal::CODES.to_vec();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Refusal::CODES.len());
    }

    #[test]
    fn what_each_allowed_action_decides() {
        let quiet = now() + TimeDelta::seconds(75);
        let never_attempted = OpFacts {
            attempts: 0,
            ..op(S::NeedsReview)
        };
        let table: Vec<(A, R, OpFacts, Decision, Option<Status>)> = vec![
            (
                confirm(),
                R::UncertainOutcome,
                op(S::NeedsReview),
                Decision::SettleCrmId {
                    crm_id: "77".into(),
                    link: Some("confirmed"),
                },
                Some(S::Completed),
            ),
            (
                A::LinkExisting {
                    crm_id: "77".into(),
                },
                R::CrossChannelMatch,
                op(S::NeedsReview),
                Decision::SettleCrmId {
                    crm_id: "77".into(),
                    link: Some("linked"),
                },
                Some(S::Completed),
            ),
            // Two entities under one key on a completed operation: the person picks one;
            // both stay counted as created.
            (
                confirm(),
                R::AmbiguousMatch,
                OpFacts {
                    crm_id: Some("5"),
                    crm_link: Some("created"),
                    ..op(S::Completed)
                },
                Decision::SettleCrmId {
                    crm_id: "77".into(),
                    link: None,
                },
                Some(S::Completed),
            ),
            (
                A::AuthorizeRetry,
                R::UncertainOutcome,
                OpFacts {
                    quiet_after: Some(quiet),
                    ..op(S::NeedsReview)
                },
                Decision::GrantRetry {
                    due_at: quiet,
                    verify_first: true,
                },
                Some(S::Received),
            ),
            // A settle window, even one over, says a create went out under a lease: the
            // attempt counter may have been given back (an outage), the lookup is owed.
            (
                A::AuthorizeRetry,
                R::RetriesExhausted,
                OpFacts {
                    quiet_after: Some(now() - TimeDelta::seconds(1)),
                    attempts: 0,
                    ..op(S::FailedTerminal)
                },
                Decision::GrantRetry {
                    due_at: now(),
                    verify_first: true,
                },
                Some(S::Received),
            ),
            (
                A::AuthorizeRetry,
                R::RetriesExhausted,
                OpFacts {
                    attempts: 0,
                    ..op(S::FailedTerminal)
                },
                Decision::GrantRetry {
                    due_at: now(),
                    verify_first: false,
                },
                Some(S::Received),
            ),
            (
                A::KeepOriginal,
                R::PayloadConflict,
                OpFacts {
                    lease_held: true,
                    ..op(S::NeedsReview)
                },
                Decision::ResolveConflict {
                    accept_as_new: false,
                    update_crm: None,
                    to: Some(S::InProgress),
                },
                Some(S::InProgress),
            ),
            (
                A::AcceptAsNew,
                R::PayloadConflict,
                OpFacts {
                    crm_id: Some("5"),
                    ..op(S::NeedsReview)
                },
                Decision::ResolveConflict {
                    accept_as_new: true,
                    update_crm: None,
                    to: Some(S::Completed),
                },
                Some(S::Completed),
            ),
            (
                A::UpdateCrm,
                R::PayloadConflict,
                OpFacts {
                    crm_id: Some("5"),
                    ..op(S::Completed)
                },
                Decision::ResolveConflict {
                    accept_as_new: false,
                    update_crm: Some("5".into()),
                    to: None,
                },
                None,
            ),
            (
                A::KeepOriginal,
                R::PayloadConflict,
                op(S::Completed),
                Decision::ResolveConflict {
                    accept_as_new: false,
                    update_crm: None,
                    to: None,
                },
                None,
            ),
            (
                A::CreateNew,
                R::LateDuplicate,
                never_attempted,
                Decision::CreateNew { due_at: now() },
                Some(S::Received),
            ),
            (
                A::Reject,
                R::UncertainOutcome,
                op(S::NeedsReview),
                Decision::Reject,
                Some(S::FailedTerminal),
            ),
        ];
        for (action, reason, facts, decision, target) in table {
            let got = decide(&action, "ann", reason, facts, now()).expect("allowed");
            assert_eq!(got, decision, "{action:?} on {reason}");
            assert_eq!(got.target(), target, "{action:?} on {reason}");
        }
    }

    #[test]
    fn fix_and_resend_is_a_retry_with_other_data() {
        let edited = || A::ResendEdited {
            payload: serde_json::json!({"phone": "+79001234567"}),
        };
        // Granted as a retry is: after an attempt it looks the key up first.
        for (attempts, verify_first) in [(0, false), (1, true)] {
            let failed = OpFacts {
                attempts,
                ..op(S::FailedTerminal)
            };
            assert_eq!(
                decide(&edited(), "ann", R::UncertainOutcome, failed, now()),
                decide(
                    &A::AuthorizeRetry,
                    "ann",
                    R::UncertainOutcome,
                    failed,
                    now()
                )
            );
            assert_eq!(
                decide(&edited(), "ann", R::UncertainOutcome, failed, now()),
                Ok(Decision::GrantRetry {
                    due_at: now(),
                    verify_first
                })
            );
        }
        // Refused where a retry is.
        let known = OpFacts {
            crm_id: Some("77"),
            ..op(S::NeedsReview)
        };
        assert_eq!(
            decide(&edited(), "ann", R::UncertainOutcome, known, now()),
            Err(Refusal::RetryOverKnownResult {
                crm_id: "77".into()
            })
        );
        assert_eq!(
            decide(
                &edited(),
                "ann",
                R::UncertainOutcome,
                op(S::Completed),
                now()
            ),
            Err(Refusal::RetryNotInReview {
                status: S::Completed
            })
        );
        assert_eq!(
            decide(
                &edited(),
                "ann",
                R::PayloadConflict,
                op(S::NeedsReview),
                now()
            ),
            Err(Refusal::RetryOnConflict)
        );
        // Data that is not an object, or not JSON, is refused.
        for bad in [
            serde_json::json!([1]),
            serde_json::json!("x"),
            serde_json::Value::Null,
        ] {
            let action = A::ResendEdited { payload: bad };
            assert_eq!(
                decide(
                    &action,
                    "ann",
                    R::UncertainOutcome,
                    op(S::FailedTerminal),
                    now()
                ),
                Err(Refusal::PayloadNotObject)
            );
        }
        assert!(matches!(
            parse_edited_payload("{\"phone\": "),
            Err(Refusal::PayloadMalformed { .. })
        ));
        assert_eq!(parse_edited_payload("[]"), Err(Refusal::PayloadNotObject));
        let big = format!("{{\"a\": \"{}\"}}", "x".repeat(MAX_EDITED_PAYLOAD_BYTES));
        assert!(matches!(
            parse_edited_payload(&big),
            Err(Refusal::PayloadTooLarge { .. })
        ));
        assert_eq!(
            parse_edited_payload(" {\"a\": 1} "),
            Ok(serde_json::json!({"a": 1}))
        );
        for r in [
            Refusal::PayloadMalformed {
                problem: "x".into(),
            },
            Refusal::PayloadNotObject,
            Refusal::PayloadTooLarge { most: 1 },
        ] {
            assert!(Refusal::CODES.contains(&r.code()), "{r:?}");
        }
        assert_eq!(edited().resolution(), Resolution::ResentEdited);
    }

    #[test]
    fn an_edit_names_the_fields_it_changed_never_their_values() {
        let before = serde_json::json!({"name": "Ann", "phone": "8-900", "form": "a",
                                        "contact": {"email": "a@x", "city": "Msk"}});
        let after = serde_json::json!({"name": "Ann", "phone": "+7900", "note": "fixed",
                                       "contact": {"email": "b@x", "city": "Msk"}});
        let got = edited_fields(Some(&before), &after);
        assert_eq!(
            got,
            EditedFields {
                added: vec!["note".into()],
                changed: vec!["contact.email".into(), "phone".into()],
                removed: vec!["form".into()],
            }
        );
        let text = serde_json::to_string(&got).unwrap();
        assert!(!text.contains("+7900") && !text.contains("b@x"), "{text}");
        assert_eq!(edited_fields(None, &after).added.len(), 4);
    }

    #[test]
    fn allowed_actions_are_exactly_what_decide_allows() {
        use Resolution as Res;
        let ambiguous_done = OpFacts {
            crm_id: Some("5"),
            crm_link: Some("created"),
            ..op(S::Completed)
        };
        let fresh = OpFacts {
            attempts: 0,
            ..op(S::NeedsReview)
        };
        let in_flight = OpFacts {
            lease_expires_at: Some(now() + TimeDelta::seconds(9)),
            ..op(S::NeedsReview)
        };
        let table = [
            (
                R::AmbiguousMatch,
                ambiguous_done,
                vec![Res::ConfirmedCrmResult, Res::LinkedExisting],
            ),
            (
                R::CrossChannelMatch,
                fresh,
                vec![
                    Res::ConfirmedCrmResult,
                    Res::LinkedExisting,
                    Res::RetryAuthorized,
                    Res::CreatedNew,
                    Res::Rejected,
                    Res::ResentEdited,
                ],
            ),
            (
                R::PayloadConflict,
                op(S::NeedsReview),
                vec![
                    Res::ConfirmedCrmResult,
                    Res::LinkedExisting,
                    Res::KeptOriginal,
                    Res::AcceptedAsNew,
                ],
            ),
            (
                R::PayloadConflict,
                ambiguous_done,
                vec![Res::KeptOriginal, Res::UpdatedCrm, Res::AcceptedAsNew],
            ),
            (
                R::UncertainOutcome,
                in_flight,
                vec![Res::ConfirmedCrmResult, Res::LinkedExisting],
            ),
        ];
        for (reason, facts, allowed) in table {
            assert_eq!(
                allowed_actions(reason, facts, now()),
                allowed,
                "{reason} {facts:?}"
            );
        }
    }

    #[test]
    fn intake_claim_match_and_late_report_rules() {
        assert_eq!(DeliveryKind::of(true, "a", "b"), DeliveryKind::New);
        assert_eq!(DeliveryKind::of(false, "a", "a"), DeliveryKind::Duplicate);
        assert_eq!(DeliveryKind::of(false, "a", "b"), DeliveryKind::Conflict);

        let horizon = now();
        assert_eq!(
            late_review(Some(horizon - TimeDelta::seconds(1)), horizon),
            Some(R::LateDuplicate)
        );
        assert_eq!(late_review(Some(horizon), horizon), None);
        assert_eq!(late_review(None, horizon), None);

        let later = now() + TimeDelta::seconds(30);
        let earlier = now() - TimeDelta::seconds(30);
        for (status, lease, next, paused, step) in [
            (S::Completed, None, None, true, ClaimStep::Completed),
            (S::FailedTerminal, None, None, false, ClaimStep::Failed),
            (
                S::NeedsReview,
                Some(later),
                None,
                false,
                ClaimStep::NeedsReview,
            ),
            (
                S::InProgress,
                Some(later),
                None,
                false,
                ClaimStep::InFlight { until: later },
            ),
            (
                S::InProgress,
                Some(earlier),
                None,
                false,
                ClaimStep::LeaseRanOut,
            ),
            (S::InProgress, None, None, false, ClaimStep::LeaseRanOut),
            (
                S::Received,
                None,
                Some(later),
                true,
                ClaimStep::InFlight { until: later },
            ),
            (
                S::Received,
                None,
                Some(earlier),
                true,
                ClaimStep::ConnectorPaused,
            ),
            (S::Received, None, None, false, ClaimStep::Claim),
        ] {
            assert_eq!(
                claim_step(status, lease, next, paused, now()),
                step,
                "{status} {lease:?} {next:?}"
            );
        }

        assert_eq!(
            match_step(MatchRule::Create, Some("1".into())),
            MatchStep::Create
        );
        assert_eq!(
            match_step(MatchRule::Link, Some("1".into())),
            MatchStep::Link("1".into())
        );
        assert_eq!(match_step(MatchRule::Link, None), MatchStep::Review);
        assert_eq!(
            match_step(MatchRule::Review, Some("1".into())),
            MatchStep::Review
        );

        assert_eq!(late_id(Some("1"), "1"), LateId::SameAsKnown);
        assert_eq!(late_id(None, "1"), LateId::Completes);
        assert_eq!(late_id(Some("1"), "2"), LateId::SecondEntity);

        let live = OpFacts {
            lease_expires_at: Some(later),
            ..op(S::InProgress)
        };
        let ran_out = OpFacts {
            lease_expires_at: Some(earlier),
            ..op(S::InProgress)
        };
        assert_eq!(
            may_open_review(live, now()),
            Err(Refusal::ReviewWhileInFlight)
        );
        assert_eq!(may_open_review(ran_out, now()), Ok(()));
        assert_eq!(may_open_review(op(S::FailedTerminal), now()), Ok(()));

        assert_eq!(status_on_review(S::Received), Some(S::NeedsReview));
        assert_eq!(status_on_review(S::InProgress), Some(S::NeedsReview));
        assert_eq!(status_on_review(S::NeedsReview), None);
        assert_eq!(status_on_review(S::Completed), None);
        assert_eq!(status_on_review(S::FailedTerminal), None);
    }
}
