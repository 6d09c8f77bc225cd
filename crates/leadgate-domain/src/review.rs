use super::named_enum;

/// Why an operation waits for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReviewReason {
    /// The same key arrived with a different payload.
    PayloadConflict,
    /// An attempt's result is unknown (stale lease, failed or non-authoritative lookup).
    UncertainOutcome,
    /// Every allowed attempt failed with a retryable error.
    RetriesExhausted,
    /// The CRM lookup by external key found several entities.
    AmbiguousMatch,
    /// A new operation's contact matches another operation's (form, then a call).
    CrossChannelMatch,
    /// A delivery older than every retained key horizon.
    LateDuplicate,
}

named_enum!(ReviewReason, "review reason", {
    PayloadConflict => "payload_conflict",
    UncertainOutcome => "uncertain_outcome",
    RetriesExhausted => "retries_exhausted",
    AmbiguousMatch => "ambiguous_match",
    CrossChannelMatch => "cross_channel_match",
    LateDuplicate => "late_duplicate",
});

/// How a person closed a review case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resolution {
    /// The operator found the entity in the CRM and confirmed its id.
    ConfirmedCrmResult,
    /// The operation was linked to an entity that already exists.
    LinkedExisting,
    /// Exactly one more CRM attempt was granted.
    RetryAuthorized,
    /// Payload conflict: the first payload stands, the later one is dropped.
    KeptOriginal,
    /// Payload conflict: the later payload becomes an operation of its own.
    AcceptedAsNew,
    /// Payload conflict: the first payload stands as the operation, and the CRM entity
    /// gets the later delivery's changed fields (sent by the worker).
    UpdatedCrm,
    /// A person rejected the operation for good.
    Rejected,
    /// A cross-channel or late match is a new request after all: create it.
    CreatedNew,
    /// A failed lead's data was fixed by a person and sent again: one more attempt with
    /// the edited payload (looked up by key first after an earlier attempt).
    ResentEdited,
    /// Closed by the store, not a person: the operation got its result another way
    /// (a late CRM answer, or another case's resolution), so the question is moot.
    Superseded,
}

named_enum!(Resolution, "resolution", {
    ConfirmedCrmResult => "confirmed_crm_result",
    LinkedExisting => "linked_existing",
    RetryAuthorized => "retry_authorized",
    KeptOriginal => "kept_original",
    AcceptedAsNew => "accepted_as_new",
    UpdatedCrm => "updated_crm",
    Rejected => "rejected",
    CreatedNew => "created_new",
    ResentEdited => "resent_edited",
    Superseded => "superseded",
});

/// How many other operations in the matching window may carry a phone or e-mail before
/// it counts as shared (a placeholder, a switchboard), not one person's: `[matching]
/// shared_after`'s default.
pub const SHARED_CONTACT_AFTER: u32 = 20;

/// What a new operation does when its contact (phone or e-mail) matches another
/// operation's within the matching window: the third kind of repeat (a form, then a
/// call), which is a business decision, not idempotency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum MatchRule {
    /// Create a new CRM entity; the match is only noted on the timeline.
    #[default]
    Create,
    /// Complete with the earlier operation's crm_id; no CRM call.
    Link,
    /// A manager decides (`needs_review` / `cross_channel_match`).
    Review,
}

named_enum!(MatchRule, "matching rule", {
    Create => "create",
    Link => "link",
    Review => "review",
});

/// A person's decision on a review case.
#[derive(Debug, Clone, PartialEq)]
pub enum HumanAction {
    /// The entity exists in the CRM with this id.
    ConfirmCrmResult { crm_id: String },
    /// Link to an entity that already exists (a duplicate or a cross-channel match).
    LinkExisting { crm_id: String },
    /// Exactly one more create attempt.
    AuthorizeRetry,
    /// Payload conflict: the first payload stands.
    KeepOriginal,
    /// Payload conflict: the conflicting delivery becomes an operation of its own.
    AcceptAsNew,
    /// Payload conflict: keep the original, and send the conflicting delivery's changed
    /// fields to the CRM entity the operation created.
    UpdateCrm,
    /// The lead is dropped for good.
    Reject,
    /// A cross-channel or late match is a new request after all: send it to the CRM.
    CreateNew,
    /// Fix and resend: `payload` (a JSON object) replaces the operation's payload and
    /// exactly one more attempt sends it, as [`AuthorizeRetry`](HumanAction::AuthorizeRetry)
    /// grants one (the key looked up first after an earlier attempt). The fingerprint
    /// stays the original delivery's.
    ResendEdited { payload: serde_json::Value },
}

impl HumanAction {
    pub fn resolution(&self) -> Resolution {
        match self {
            HumanAction::ConfirmCrmResult { .. } => Resolution::ConfirmedCrmResult,
            HumanAction::LinkExisting { .. } => Resolution::LinkedExisting,
            HumanAction::AuthorizeRetry => Resolution::RetryAuthorized,
            HumanAction::KeepOriginal => Resolution::KeptOriginal,
            HumanAction::AcceptAsNew => Resolution::AcceptedAsNew,
            HumanAction::UpdateCrm => Resolution::UpdatedCrm,
            HumanAction::Reject => Resolution::Rejected,
            HumanAction::CreateNew => Resolution::CreatedNew,
            HumanAction::ResendEdited { .. } => Resolution::ResentEdited,
        }
    }
}
