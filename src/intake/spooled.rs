//! Intake's side of the durable spool (`crate::spool`): a pushed delivery, authenticated
//! and parsed, that the operations database does not take within `[spool] patience` is
//! appended to the gateway's spool (fsynced) and answered `202` `"outcome": "spooled"`;
//! [`drain`] records the spooled deliveries in order, as soon as the database answers,
//! through the same admission as a delivery arriving now (its received time is the one
//! it arrived at), so a key spooled on two gateways, or spooled and then delivered again,
//! is one operation. A spool that is full, too old or cannot be written answers 503 as a
//! gateway without one does.
//!
//! What the spool keeps of a delivery is what the journal would: the body and payload
//! with the source's `redact` values replaced, and of its headers only those that key or
//! sign it — never its credentials.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::admission::{self, Admitted, Arrival, NotAdmitted};
use super::sources::{self, KeySpec, Source};
use super::{ApiError, IntakeState};
use crate::domain::OperationId;
use crate::spool::{Spool, SpooledDelivery};
use crate::store::{DbError, DbFault, StoreError};

/// A gateway's spool and how long intake waits for the database before using it.
pub struct Spooling {
    pub spool: Arc<Spool>,
    pub patience: Duration,
    /// A record found torn when the spool was opened, until the journal has its warning.
    pub torn: std::sync::Mutex<Option<crate::spool::Torn>>,
}

impl std::fmt::Debug for Spooling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spooling")
            .field("dir", &self.spool.dir())
            .field("patience", &self.patience)
            .finish()
    }
}

/// What the database said by not answering within the patience.
pub(super) fn silent() -> StoreError {
    StoreError::Database(DbError::new(
        DbFault::PoolTimedOut,
        None,
        "the operations database did not take the delivery within [spool] patience",
    ))
}

/// The slug the spool gives the default tenant.
const DEFAULT_TENANT: &str = "default";

/// A content-keyed delivery drained later than this after it arrived may find its
/// content's window forgotten (the journal keeps a window's row an hour after it ends,
/// `FirstUse::KEPT_AFTER`): it is recorded for a person to look at (`late_duplicate`)
/// rather than sent on as a new lead.
pub(super) const CONTENT_DRAINED_LATE: chrono::TimeDelta = chrono::TimeDelta::minutes(30);

/// Times in a row the database may fail on a spooled delivery with a fault of Leadgate's
/// own (`internal_error`) before it is journaled as refused, with its body, so that the
/// deliveries after it are not held behind it for ever.
const INTERNAL_FAULTS_AT_MOST: u32 = 5;

/// What the spool keeps of a pushed delivery of `source` (see the module's documentation).
pub(super) fn kept(
    state: &IntakeState,
    source: &Source,
    headers: &HeaderMap,
    body: &[u8],
    payload: &Value,
    received_at: chrono::DateTime<chrono::Utc>,
) -> SpooledDelivery {
    let content_type = sources::content_type(headers);
    let (payload, body) =
        admission::stored_form(source, content_type.as_deref(), body, payload.clone());
    let keyed = match &source.key {
        KeySpec::Header(h) => Some(h.as_str()),
        _ => None,
    };
    let headers = [keyed, Some(sources::SIGNATURE_HEADER)]
        .into_iter()
        .flatten()
        .filter_map(|name| {
            let value = headers.get(name)?.to_str().ok()?;
            Some((name.to_ascii_lowercase(), value.to_owned()))
        })
        .collect();
    SpooledDelivery {
        tenant: if state.tenant.is_default() {
            DEFAULT_TENANT.to_owned()
        } else {
            state.tenant.as_str().to_owned()
        },
        source: source.name.clone(),
        received_at,
        content_type,
        headers,
        body,
        payload,
    }
}

/// Appends `kept` to the spool and says what its sender hears: spooled, or `error` (503)
/// when there is no room or the spool cannot be written.
pub(super) async fn keep(
    state: &IntakeState,
    kept: SpooledDelivery,
    error: ApiError,
) -> Result<Admitted, ApiError> {
    let Some(spooling) = &state.spool else {
        return Err(error);
    };
    let spool = Arc::clone(&spooling.spool);
    let now = chrono::Utc::now();
    let operation_id = named_by_key(state, &kept.source)
        .then(|| OperationId::new_in(&state.tenant, &kept.source, &key_of(state, &kept)).ok())
        .flatten();
    let appended = tokio::task::spawn_blocking(move || spool.append(&kept, now)).await;
    match appended {
        Ok(Ok(())) => {
            tracing::warn!(error = %error, "the operations database did not take a delivery: spooled");
            Ok(Admitted::Spooled { operation_id })
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "a delivery could not be spooled");
            Err(error)
        }
        Err(e) => {
            tracing::error!(error = %e, "spooling a delivery failed");
            Err(error)
        }
    }
}

/// Whether a delivery of `source` is named by its key alone: not by its content's window,
/// nor by an `Idempotency-Key` an earlier draft may have stored under another operation.
fn named_by_key(state: &IntakeState, source: &str) -> bool {
    match state.sources.get(source).map(|s| &s.key) {
        Some(KeySpec::Json(_) | KeySpec::Form(_)) => true,
        Some(KeySpec::Header(h)) => !super::idempotency::is_idempotency_key(h),
        _ => false,
    }
}

/// The key of a spooled delivery as its source reads it (empty when it has none: then no
/// operation is named in the answer).
fn key_of(state: &IntakeState, d: &SpooledDelivery) -> String {
    let Some(source) = state.sources.get(&d.source) else {
        return String::new();
    };
    source
        .key(&d.payload, Some(&header_map(&d.headers)))
        .ok()
        .flatten()
        .unwrap_or_default()
}

fn header_map(headers: &[(String, String)]) -> HeaderMap {
    headers
        .iter()
        .filter_map(|(k, v)| {
            Some((
                HeaderName::from_bytes(k.as_bytes()).ok()?,
                HeaderValue::from_str(v).ok()?,
            ))
        })
        .collect()
}

/// How long the drainer waits after the database did not take a spooled delivery.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Records the spooled deliveries of `root`'s gateway in order, each through admission as
/// it would be taken now (a tenant's by its tenant's state), moving the spool's offset
/// past each once the database has it — recorded, or refused and journaled as any
/// delivery would be. Returns when `shutdown` says so; an error of the spool's file is
/// logged and the drain tried again a little later.
pub async fn drain(root: IntakeState, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let Some(spooling) = root.spool.clone() else {
        return;
    };
    let mut faults = Faults::default();
    while !*shutdown.borrow() {
        let pause = match drain_next(&root, &spooling, &mut faults).await {
            Ok(Drained::One) => continue,
            Ok(Drained::Empty) => {
                tokio::select! {
                    _ = spooling.spool.appended.notified() => {}
                    _ = tokio::time::sleep(RETRY_AFTER) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            Ok(Drained::Waiting) => RETRY_AFTER,
            Err(e) => {
                tracing::error!(error = %e, dir = %spooling.spool.dir().display(), "the spool could not be read or moved on");
                RETRY_AFTER * 5
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// What one step of [`drain`] did.
enum Drained {
    One,
    Empty,
    /// The database did not take the first record (or the torn record's warning).
    Waiting,
}

/// The internal faults in a row of the record that ends at `end`.
#[derive(Default)]
struct Faults {
    end: u64,
    count: u32,
}

async fn drain_next(
    root: &IntakeState,
    spooling: &Spooling,
    faults: &mut Faults,
) -> anyhow::Result<Drained> {
    let torn = spooling
        .torn
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(torn) = torn {
        if !journal_torn(root, &torn).await {
            return Ok(Drained::Waiting);
        }
        *spooling.torn.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
    let s = Arc::clone(&spooling.spool);
    let Some((d, end)) = tokio::task::spawn_blocking(move || s.next()).await?? else {
        return Ok(Drained::Empty);
    };
    match admit(root, &d).await {
        Admission::Done => {}
        Admission::Waiting => return Ok(Drained::Waiting),
        Admission::Fault(fault) => {
            let (state, e) = *fault;
            if faults.end != end {
                *faults = Faults { end, count: 0 };
            }
            faults.count += 1;
            if faults.count < INTERNAL_FAULTS_AT_MOST {
                return Ok(Drained::Waiting);
            }
            tracing::error!(error = %e, source = %d.source, "a spooled delivery failed {INTERNAL_FAULTS_AT_MOST} times: journaled as refused");
            let reject = admission::refusal(
                state.sources.get(&d.source),
                d.content_type.clone(),
                d.body.clone(),
                format!("spooled, then not recorded: {e}"),
                d.received_at,
            );
            if state.store.record_rejected(reject).await.is_err() {
                return Ok(Drained::Waiting);
            }
        }
    }
    let s = Arc::clone(&spooling.spool);
    tokio::task::spawn_blocking(move || s.drained(end)).await??;
    Ok(Drained::One)
}

/// How a spooled delivery's admission ended.
enum Admission {
    /// Recorded, or refused and journaled as any delivery would be.
    Done,
    /// The database did not take it: tried again.
    Waiting,
    /// A fault of Leadgate's own, in this state.
    Fault(Box<(IntakeState, ApiError)>),
}

/// Admits a spooled delivery.
async fn admit(root: &IntakeState, d: &SpooledDelivery) -> Admission {
    let state = if d.tenant == DEFAULT_TENANT {
        Some(root.clone())
    } else {
        root.tenants.get(&d.tenant)
    };
    let Some(state) = state else {
        return unserved_tenant(root, d).await;
    };
    let headers = header_map(&d.headers);
    let arrival = Arrival::Spooled {
        headers: &headers,
        body: &d.body,
        content_type: d.content_type.as_deref(),
        payload: d.payload.clone(),
    };
    match admission::receive(&state, &d.source, arrival, d.received_at).await {
        Ok(Admitted::Recorded {
            operation_id,
            record,
        }) => {
            tracing::info!(operation_id = %operation_id, outcome = record.outcome.name(), "spooled delivery recorded");
            Admission::Done
        }
        Ok(Admitted::ConnectionCheck | Admitted::Spooled { .. }) => Admission::Done,
        Err(NotAdmitted::Answer(e @ ApiError::Internal(_))) => {
            Admission::Fault(Box::new((state, e)))
        }
        Err(NotAdmitted::Answer(e @ (ApiError::Unavailable(_) | ApiError::Conflict(_)))) => {
            tracing::warn!(error = %e, source = %d.source, "a spooled delivery waits for the database");
            Admission::Waiting
        }
        Err(NotAdmitted::Store(e)) => {
            tracing::warn!(error = %e, source = %d.source, "a spooled delivery waits for the database");
            Admission::Waiting
        }
        Err(NotAdmitted::Answer(e)) => {
            tracing::warn!(error = e.code().as_str(), source = %d.source, "a spooled delivery was refused (journaled)");
            Admission::Done
        }
    }
}

/// A spooled delivery of a tenant this gateway does not serve now. While the registry
/// still has the tenant (its intake is being built again, or is coming back) it waits;
/// a tenant gone from the registry (pruned, its data erased) has its delivery dropped,
/// with a journal entry that keeps none of it.
async fn unserved_tenant(root: &IntakeState, d: &SpooledDelivery) -> Admission {
    match root.store.tenants().await {
        Ok(registry) if registry.iter().any(|t| t.slug == d.tenant) => {
            tracing::warn!(tenant = %d.tenant, "a spooled delivery waits for its tenant to be served");
            Admission::Waiting
        }
        Ok(_) => {
            let reason = format!(
                "spool: a delivery of tenant `{}` (source `{}`), spooled at {}, was dropped: \
                 the tenant was removed before the database took it",
                d.tenant,
                d.source,
                d.received_at.to_rfc3339()
            );
            let reject = admission::refusal(None, None, Vec::new(), reason, root.store.now());
            match root.store.record_rejected(reject).await {
                Ok(_) => Admission::Done,
                Err(_) => Admission::Waiting,
            }
        }
        Err(_) => Admission::Waiting,
    }
}

/// Journals a warning for a record found torn when the spool was opened: it was never
/// answered (its sender heard no `202` and sends it again, if it does), and its bytes
/// were kept aside in the spool's directory. `false`: the journal could not take it yet.
async fn journal_torn(state: &IntakeState, torn: &crate::spool::Torn) -> bool {
    let reason = format!(
        "spool: a record torn by a crash before it was answered was dropped ({} bytes at \
         offset {}, kept in {})",
        torn.bytes,
        torn.offset,
        torn.kept_in.display()
    );
    let reject = admission::refusal(None, None, Vec::new(), reason.clone(), state.store.now());
    match state.store.record_rejected(reject).await {
        Ok(_) => {
            tracing::warn!(%reason, "spool");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "the torn spool record's warning waits for the database");
            false
        }
    }
}

/// The spool's figures in OpenMetrics text: records waiting, their bytes, the oldest's
/// age, and records appended and drained since the gateway started.
pub fn exposition(spooling: &Spooling, now: chrono::DateTime<chrono::Utc>) -> String {
    let s = spooling.spool.stats();
    let age = s
        .oldest
        .map_or(0.0, |o| (now - o).num_milliseconds().max(0) as f64 / 1000.0);
    format!(
        "# TYPE leadgate_spool_records gauge\n\
         # HELP leadgate_spool_records Deliveries in this gateway's spool waiting for the database.\n\
         leadgate_spool_records {}\n\
         # TYPE leadgate_spool_bytes gauge\n\
         # HELP leadgate_spool_bytes Bytes of this gateway's spool waiting for the database.\n\
         leadgate_spool_bytes {}\n\
         # TYPE leadgate_spool_oldest_age_seconds gauge\n\
         # HELP leadgate_spool_oldest_age_seconds How long the oldest spooled delivery has waited (0: none).\n\
         leadgate_spool_oldest_age_seconds {age}\n\
         # TYPE leadgate_spool_appended counter\n\
         # HELP leadgate_spool_appended Deliveries spooled since this gateway started.\n\
         leadgate_spool_appended_total {}\n\
         # TYPE leadgate_spool_drained counter\n\
         # HELP leadgate_spool_drained Spooled deliveries recorded since this gateway started.\n\
         leadgate_spool_drained_total {}\n",
        s.records, s.bytes, s.appended, s.drained
    )
}
