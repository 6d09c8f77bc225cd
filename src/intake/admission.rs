//! Admission of a delivery: the one path from "this arrived for source S" to "journaled,
//! and its operation claimed", for deliveries POSTed to the intake URL and for the events
//! the gateway pulls from a sender itself (`src/pull`: mail, Telegram, Bitrix24's offline
//! events) alike.
//!
//! [`admit`] authenticates and parses a pushed delivery ([`Source::open`], the one call
//! that knows every authentication method), keys and fingerprints it, reads its contact
//! keys and matching rules ([`delivery`]), lets a header-keyed signature name one key only
//! ([`signature_used_once`]) and records it. [`receive`] adds the journal of what was
//! refused: a refusal that is the delivery's own doing is journaled before its sender
//! hears it (a stranger's within the refusal budget, without its body); the database or
//! the gateway failing is not the delivery's, and is only answered, so a sender's next
//! attempt may well be taken. A pulled event is keyed and journaled by the same steps,
//! with no headers: it arrived through the gateway's own credentials, not a request.

use axum::http::HeaderMap;
use serde_json::Value;

use super::idempotency;
use super::problem::Code;
use super::sources::{self, BodyKind, Opened, Source, TRANSFORM_VERSION};
use super::{refusals, ApiError, IntakeState, UNKNOWN_SOURCE};
use crate::domain::{contact, fingerprint, OperationId};
use crate::store::{
    self, ContactKeys, DeliveryRecord, Matching, NewDelivery, RejectedDelivery, StoreError,
};

/// Something that arrived for a source.
pub(crate) enum Arrival<'a> {
    /// POSTed to the source's intake URL: authenticated and parsed here.
    Pushed {
        headers: &'a HeaderMap,
        query: Option<&'a str>,
        body: &'a [u8],
        /// The client's address: what the budget of refusals before authentication counts.
        peer: Option<std::net::IpAddr>,
    },
    /// Fetched by the gateway from the source's sender and parsed by its puller.
    Pulled {
        body: &'a [u8],
        content_type: &'a str,
        payload: Value,
    },
    /// Authenticated and parsed when it was pushed, kept in the gateway's spool while the
    /// database could not take it, and admitted again now (`spooled::drain`).
    Spooled {
        headers: &'a HeaderMap,
        body: &'a [u8],
        content_type: Option<&'a str>,
        payload: Value,
    },
}

impl Arrival<'_> {
    fn body(&self) -> &[u8] {
        match self {
            Arrival::Pushed { body, .. }
            | Arrival::Pulled { body, .. }
            | Arrival::Spooled { body, .. } => body,
        }
    }

    fn headers(&self) -> Option<&HeaderMap> {
        match self {
            Arrival::Pushed { headers, .. } | Arrival::Spooled { headers, .. } => Some(headers),
            Arrival::Pulled { .. } => None,
        }
    }

    fn content_type(&self) -> Option<String> {
        match self {
            Arrival::Pushed { headers, .. } => sources::content_type(headers),
            Arrival::Pulled { content_type, .. } => Some((*content_type).to_owned()),
            Arrival::Spooled { content_type, .. } => content_type.map(str::to_owned),
        }
    }
}

/// What was admitted.
#[derive(Debug)]
pub(crate) enum Admitted {
    /// A form builder's connection check: answered, nothing recorded.
    ConnectionCheck,
    /// Journaled, and its operation claimed (or found).
    Recorded {
        operation_id: OperationId,
        record: DeliveryRecord,
    },
    /// The database did not take it in time: kept in the gateway's spool, to be recorded
    /// when the database answers (`spooled`). Its operation, when its key alone names it.
    Spooled { operation_id: Option<OperationId> },
}

/// Why a delivery was not admitted.
#[derive(Debug)]
pub(crate) enum NotAdmitted {
    /// What its sender is told: its own refusal (journaled), the refusal budget's 429, or
    /// that the database is unavailable.
    Answer(ApiError),
    /// A pulled event the database did not take (it is not journaled): it stays
    /// unacknowledged, to be pulled again.
    Store(StoreError),
}

/// [`admit`], and the journal entry of a refusal. A refusal that is the delivery's own
/// doing is journaled before it is answered (a stranger's within the refusal budget,
/// without its body); the database or the gateway failing is not the delivery's, and is
/// only answered, so a sender's next attempt may well be taken.
pub(super) async fn receive(
    state: &IntakeState,
    source_name: &str,
    arrival: Arrival<'_>,
    received_at: chrono::DateTime<chrono::Utc>,
) -> Result<Admitted, NotAdmitted> {
    let source = state.sources.get(source_name);
    let e = match admit(state, source, &arrival, received_at).await {
        Ok(admitted) => return Ok(admitted),
        Err(Failed::Delivery(e)) => e,
        Err(Failed::Recording(e)) => match arrival {
            Arrival::Pulled { .. } => return Err(NotAdmitted::Store(e)),
            // A refusal by the database's checks is the delivery's, like any other.
            Arrival::Pushed { .. } | Arrival::Spooled { .. } => ApiError::from(e),
        },
        Err(Failed::Waiting { kept, error }) => {
            return super::spooled::keep(state, kept, error)
                .await
                .map_err(NotAdmitted::Answer)
        }
    };
    if matches!(
        e,
        ApiError::Unavailable(_) | ApiError::Conflict(_) | ApiError::Internal(_)
    ) {
        return Err(NotAdmitted::Answer(e));
    }
    let (raw_body, reason) = rejected_body(source, &arrival, &e);
    let reject = refusal(
        source,
        arrival.content_type(),
        raw_body,
        reason,
        received_at,
    );
    Err(NotAdmitted::Answer(match (&e, &arrival) {
        (ApiError::Unauthorized { .. } | ApiError::UnknownSource, Arrival::Pushed { peer, .. }) => {
            journal_refusal(state, reject, e, *peer).await
        }
        _ => journal_rejection(state, reject, e).await,
    }))
}

/// A refused delivery's journal row. Only configured names are journaled as sources.
pub(super) fn refusal(
    source: Option<&Source>,
    content_type: Option<String>,
    raw_body: Vec<u8>,
    reason: String,
    received_at: chrono::DateTime<chrono::Utc>,
) -> RejectedDelivery {
    RejectedDelivery {
        source: source
            .map_or(UNKNOWN_SOURCE, |s| s.name.as_str())
            .to_owned(),
        operation_id: None,
        content_type,
        raw_body,
        reason,
        received_at,
        transform_version: TRANSFORM_VERSION,
    }
}

/// Where [`admit`] stopped.
enum Failed {
    /// At the delivery itself (its credentials, body, key) or a check of it.
    Delivery(ApiError),
    /// While recording it.
    Recording(StoreError),
    /// A pushed delivery, authenticated and parsed, that the database did not take within
    /// the spool's patience (`error`: what it said, or that it was silent); `kept` is what
    /// the spool keeps of it.
    Waiting {
        kept: crate::spool::SpooledDelivery,
        error: ApiError,
    },
}

impl From<ApiError> for Failed {
    fn from(e: ApiError) -> Self {
        Failed::Delivery(e)
    }
}

/// Authenticates, parses, keys and records a delivery of `source`.
async fn admit(
    state: &IntakeState,
    source: Option<&Source>,
    arrival: &Arrival<'_>,
    received_at: chrono::DateTime<chrono::Utc>,
) -> Result<Admitted, Failed> {
    let source = source.ok_or(ApiError::UnknownSource)?;
    let payload = match arrival {
        Arrival::Pushed {
            headers,
            query,
            body,
            ..
        } => match source.open(headers, *query, body, received_at)? {
            Opened::ConnectionCheck => return Ok(Admitted::ConnectionCheck),
            Opened::Payload(payload) => payload,
        },
        Arrival::Pulled { payload, .. } | Arrival::Spooled { payload, .. } => payload.clone(),
    };
    // A pushed delivery the database does not take within the spool's patience is kept in
    // the spool instead (`spooled`); without a spool it waits as long as the store lets it.
    // Only a delivery whose key reads (or that is keyed by its content) is spooled: one
    // the database would refuse must hear so now, not after a `202`.
    let spooling = match (&state.spool, arrival) {
        (Some(spooling), Arrival::Pushed { headers, .. })
            if matches!(source.key, sources::KeySpec::Content(_))
                || matches!(source.key(&payload, Some(headers)), Ok(Some(_))) =>
        {
            Some((spooling, *headers))
        }
        _ => None,
    };
    let Some((spooling, headers)) = spooling else {
        return record(state, source, payload, arrival, received_at).await;
    };
    let kept = super::spooled::kept(
        state,
        source,
        headers,
        arrival.body(),
        &payload,
        received_at,
    );
    let error = match tokio::time::timeout(
        spooling.patience,
        record(state, source, payload, arrival, received_at),
    )
    .await
    {
        Ok(Err(Failed::Recording(e))) if e.kind() == store::ErrorKind::Unavailable => {
            ApiError::Unavailable(e)
        }
        Ok(Err(Failed::Delivery(ApiError::Unavailable(e)))) => ApiError::Unavailable(e),
        Ok(done) => return done,
        Err(_) => ApiError::Unavailable(super::spooled::silent()),
    };
    Err(Failed::Waiting { kept, error })
}

/// Keys and records a parsed, authenticated delivery of `source`.
async fn record(
    state: &IntakeState,
    source: &Source,
    payload: Value,
    arrival: &Arrival<'_>,
    received_at: chrono::DateTime<chrono::Utc>,
) -> Result<Admitted, Failed> {
    let operation_id = operation_of(state, source, &payload, arrival, received_at).await?;
    let delivery = delivery(state, source, payload, &operation_id, arrival, received_at)?;
    if let Some(headers) = arrival.headers() {
        signature_used_once(state, source, headers, &operation_id, received_at).await?;
    }
    let record = state
        .store
        .record_delivery(delivery)
        .await
        .map_err(Failed::Recording)?;
    Ok(Admitted::Recorded {
        operation_id,
        record,
    })
}

/// The operation a parsed, authenticated delivery of `source` belongs to, from its key:
/// an `Idempotency-Key` stored before the draft's parsing
/// ([`idempotency::earlier_operation`]), a content key's window ([`content_window`]), or
/// the key itself.
async fn operation_of(
    state: &IntakeState,
    source: &Source,
    payload: &Value,
    arrival: &Arrival<'_>,
    received_at: chrono::DateTime<chrono::Utc>,
) -> Result<OperationId, ApiError> {
    reject_nul(payload)?;
    if let (sources::KeySpec::Header(h), Some(headers)) = (&source.key, arrival.headers()) {
        // Keys stored before the draft's parsing are the default tenant's: no other
        // tenant existed then.
        if idempotency::is_idempotency_key(h) && state.tenant.is_default() {
            let store = state.store.as_ref();
            if let Some(id) = idempotency::earlier_operation(store, &source.name, headers).await? {
                return Ok(id);
            }
        }
    }
    let key = source
        .key(payload, arrival.headers())
        .map_err(|e| ApiError::bad(Code::InvalidKey, e.to_string()))?
        .ok_or_else(|| {
            ApiError::bad(
                Code::MissingKey,
                format!(
                    "the delivery has no operation key: {} is missing or empty",
                    source.key.describe()
                ),
            )
        })?;
    if let sources::KeySpec::Content(_) = &source.key {
        return content_window(state, source, &key, received_at).await;
    }
    OperationId::new_in(&state.tenant, &source.name, &key)
        .map_err(|e| ApiError::bad(Code::InvalidKey, e.to_string()))
}

/// A delivery of `source` for `operation_id` as the store records it: the fingerprint,
/// the event time and the contact keys.
fn delivery(
    state: &IntakeState,
    source: &Source,
    payload: Value,
    operation_id: &OperationId,
    arrival: &Arrival<'_>,
    received_at: chrono::DateTime<chrono::Utc>,
) -> Result<NewDelivery, ApiError> {
    let payload_hash = fingerprint(
        &sources::fingerprinted(&source.key, &payload),
        &source.ignore,
    )
    .map_err(|e| ApiError::bad(Code::MalformedBody, e.to_string()))?;
    let event_time = source.event_time(&payload);
    let horizon = store::before(received_at, state.tombstone);
    // A content-keyed delivery drained long after it arrived may not find its window any
    // more (`spooled::CONTENT_DRAINED_LATE`): new to the journal is not new to the CRM.
    let drained_late = matches!(arrival, Arrival::Spooled { .. })
        && matches!(source.key, sources::KeySpec::Content(_))
        && state.store.now() - received_at > super::spooled::CONTENT_DRAINED_LATE;
    // Applies only if the key turns out to be new: a known key is answered as usual.
    let review = (event_time.is_some_and(|t| t < horizon) || drained_late)
        .then_some(crate::domain::ReviewReason::LateDuplicate);
    // Contact keys for cross-channel matching, from the same field mapping the CRM gets.
    let lead = crate::crm::Lead::from_payload(operation_id, &source.name, &payload, &source.fields);
    let contact = ContactKeys {
        phone: lead
            .phone
            .as_deref()
            .and_then(|p| contact::normalize_phone(p, state.matching.region)),
        email: lead.email.as_deref().and_then(contact::normalize_email),
        name: lead
            .name
            .as_deref()
            .and_then(crate::domain::search::display_name),
    };
    let rules = state.rules.current();
    let matching = Some(match rules.sources.get(&source.name) {
        Some(m) => Matching {
            rule: m.rule,
            since: store::before(received_at, m.window),
            same_channel: m.same_channel.clone(),
            shared_after: state.matching.shared_after,
        },
        None => Matching {
            rule: source.on_contact_match,
            since: store::before(received_at, state.matching.window),
            same_channel: vec![],
            shared_after: state.matching.shared_after,
        },
    });
    // Credentials the sender put in the delivery are never stored: not in the payload,
    // not in the journaled body (the key, fingerprint and contact keys are taken above).
    let content_type = arrival.content_type();
    let (payload, raw_body) = stored_form(source, content_type.as_deref(), arrival.body(), payload);
    Ok(NewDelivery {
        operation_id: operation_id.clone(),
        source: source.name.clone(),
        content_type,
        raw_body,
        payload,
        payload_hash,
        transform_version: TRANSFORM_VERSION,
        contact,
        event_time,
        received_at,
        review,
        matching,
    })
}

/// A delivery's payload and body as they are stored (journaled, spooled): a source's
/// `redact` values replaced.
pub(super) fn stored_form(
    source: &Source,
    content_type: Option<&str>,
    body: &[u8],
    mut payload: Value,
) -> (Value, Vec<u8>) {
    if sources::redact(&mut payload, &source.redact) {
        let body = sources::redacted_body(BodyKind::detect(content_type, body), &payload);
        (payload, body)
    } else {
        (payload, body.to_vec())
    }
}

/// The operation a content-keyed delivery belongs to (`key = "content:/…"`; `hash` is
/// [`sources::content_hash`]): the one its content's window keys if that window is still open, else a new one whose key is the
/// content's stem and the time this window began (`c<24 hex>-<UTC time>`), for the
/// source's `content_window`. Two real submissions with the same content inside one
/// window are one operation; that is what a sender without ids allows (README, *Content
/// keys*).
async fn content_window(
    state: &IntakeState,
    source: &Source,
    hash: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<OperationId, ApiError> {
    let key = format!("c{}-{}", &hash[..24], now.format("%Y%m%dT%H%M%SZ"));
    let candidate = OperationId::new_in(&state.tenant, &source.name, &key)
        .map_err(|e| ApiError::bad(Code::InvalidKey, e.to_string()))?;
    let expires_at = crate::domain::after(now, source.content_window);
    let first = state
        .store
        .use_content_key(&source.name, hash, candidate.as_str(), expires_at, now)
        .await?;
    OperationId::try_from(first)
        .map_err(|e| ApiError::Internal(store::StoreError::Corrupt(format!("content key: {e}"))))
}

/// A signed source whose key is a header (`generic-json`): the signature does not cover
/// the key, so each signature may name one operation only, for as long as its replay
/// window lasts — a captured request sent again under another key is refused
/// (`signature_replayed`), not a new lead. The same key again is a duplicate as before.
async fn signature_used_once(
    state: &IntakeState,
    source: &Source,
    headers: &HeaderMap,
    operation_id: &OperationId,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), ApiError> {
    let (sources::Auth::Hmac { window, .. }, sources::KeySpec::Header(_)) =
        (&source.auth, &source.key)
    else {
        return Ok(());
    };
    let Some(mac) = headers
        .get(sources::SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(sources::signature_mac)
    else {
        return Ok(());
    };
    use sha2::Digest;
    let hash = hex::encode(sha2::Sha256::digest(&mac));
    // The timestamp may be up to a window in the future or the past of `now`.
    let expires_at = crate::domain::after(now, *window * 2);
    let first = state
        .store
        .use_signature(&source.name, &hash, operation_id.as_str(), expires_at, now)
        .await?;
    if first == operation_id.as_str() {
        Ok(())
    } else {
        Err(ApiError::Unauthorized {
            code: Code::SignatureReplayed,
            message: "this signature was already used for another key: a captured request sent again is refused; sign each delivery anew".into(),
        })
    }
}

/// What a refused delivery's journal row keeps of its body, and the reason it gives. A
/// request that did not authenticate (or names no source) keeps no body, only its size
/// and a hash: strangers must not be able to store what they like. A source's `redact`
/// values are never kept: a body that cannot be read to find them is not kept either.
fn rejected_body(
    source: Option<&Source>,
    arrival: &Arrival<'_>,
    e: &ApiError,
) -> (Vec<u8>, String) {
    let body = arrival.body();
    let summary = || {
        use sha2::Digest;
        let hash = sha2::Sha256::digest(body);
        format!(
            "{e} (body not kept: {} bytes, sha256 {})",
            body.len(),
            hex::encode(&hash[..8])
        )
    };
    let source = match (e, source) {
        // Authenticated when it arrived, and redacted when it was spooled: a source gone
        // since then does not make it a stranger's.
        (_, _) if matches!(arrival, Arrival::Spooled { .. }) => {
            return (body.to_vec(), e.to_string())
        }
        (ApiError::Unauthorized { .. } | ApiError::UnknownSource, _) | (_, None) => {
            return (Vec::new(), summary())
        }
        (_, Some(source)) => source,
    };
    if source.redact.is_empty() {
        return (body.to_vec(), e.to_string());
    }
    let kind = BodyKind::detect(arrival.content_type().as_deref(), body);
    match kind.map(|k| sources::parse_body(k, body)) {
        Some(Ok(mut payload)) => {
            sources::redact(&mut payload, &source.redact);
            (sources::redacted_body(kind, &payload), e.to_string())
        }
        _ => (Vec::new(), summary()),
    }
}

/// A refusal before authentication: journaled while its address and the gateway are
/// within their budget (`refusals`), else only counted and answered 429. Returns what
/// its sender is told.
pub(super) async fn journal_refusal(
    state: &IntakeState,
    reject: RejectedDelivery,
    e: ApiError,
    peer: Option<std::net::IpAddr>,
) -> ApiError {
    match state.refusals.note(peer) {
        refusals::Verdict::Journal => journal_rejection(state, reject, e).await,
        refusals::Verdict::CountOnly => ApiError::TooManyRefusals(Box::new(e)),
    }
}

/// Journals a refusal. Returns what its sender is told: the refusal itself, or that the
/// database is unavailable when the journal could not take it.
async fn journal_rejection(state: &IntakeState, reject: RejectedDelivery, e: ApiError) -> ApiError {
    tracing::info!(source = %reject.source, error = e.code().as_str(), "delivery rejected");
    match state.store.record_rejected(reject).await {
        Ok(_) => e,
        Err(db) => ApiError::Unavailable(db),
    }
}

/// Journals a rejection the puller itself decided (an event it cannot read or take:
/// too large, refused by the sender), so a person sees it in the journal and the
/// metrics (`outcome="rejected"`); `Err` when the database is not available.
pub async fn reject_pulled(
    state: &IntakeState,
    source_name: &str,
    raw_body: Vec<u8>,
    content_type: &str,
    reason: String,
) -> Result<(), StoreError> {
    state
        .store
        .record_rejected(RejectedDelivery {
            source: source_name.to_owned(),
            operation_id: None,
            content_type: Some(content_type.to_owned()),
            raw_body,
            reason,
            received_at: state.store.now(),
            transform_version: TRANSFORM_VERSION,
        })
        .await?;
    Ok(())
}

/// PostgreSQL stores no NUL character in text or JSON: refused here, with a clear
/// answer, rather than failing in the database as "unavailable".
pub(crate) fn reject_nul(payload: &Value) -> Result<(), ApiError> {
    match sources::find_nul(payload) {
        Some(at) => Err(ApiError::bad(
            Code::NulCharacter,
            format!(
                "the field {} contains a NUL character (\\u0000), which cannot be stored",
                at.chars().take(120).collect::<String>()
            ),
        )),
        None => Ok(()),
    }
}
