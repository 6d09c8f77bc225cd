//! One CRM attempt under a lease, as the worker and the reconciler both make it: the
//! settings that bound it, the answer of a call cut at its budget, the timeline events of
//! an exchange, and recording the outcome through database hiccups.
//!
//! A lease never ends while its holder's CRM call may still be running:
//! `WorkQueue::start_attempt`, right before a create leaves, refuses a lease that has run out
//! (the call is not made) and extends a live one to the call's budget (`[crm] timeout`)
//! plus `LEASE_MARGIN` (1 s); the call is cut at the budget, measured from before the
//! extension, so the cut always comes before the lease's end. The configuration refuses a
//! `[worker] lease` shorter than timeout plus margin, but nothing here relies on that.
//! Grant, expiry, takeover and due times are all judged by `Clock::now()`, so processes
//! whose clocks disagree still agree on when a lease ends.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::config::{RetryConfig, LEASE_MARGIN};
use crate::crm::{Crm, CrmError, Exchange, FieldMap, StepDone};
use crate::domain::ErrorClass;
use crate::domain::EventKind;
use crate::store::{
    AttemptOutcome, Dashboard, Failure, Lease, NewEvent, Operation, StoreError, WorkQueue,
};

#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub poll_interval: Duration,
    /// How long a claim holds the operation before the reconciler may take it over.
    /// A create's lease is extended to `call_timeout + LEASE_MARGIN` if it is shorter.
    pub lease: Duration,
    /// The longest one CRM call may take, redirects and a re-send after a refused
    /// token included (a due token refresh and the pacing wait come before it, in
    /// `Crm::pace`): the worker cuts it there (the outcome is then uncertain), so the
    /// call never outlives its lease.
    pub call_timeout: Duration,
    /// How long after an uncertain outcome the CRM may still land the create: a lookup
    /// that finds nothing counts only after this window.
    pub settle: Duration,
    pub retry: RetryConfig,
    /// When the connector counts as unreachable, and its probes (`domain::outage`).
    pub outage: crate::domain::outage::OutageConfig,
    /// Attempts processed at once by this process.
    pub concurrency: usize,
    /// Field mapping per source.
    pub fields: HashMap<String, FieldMap>,
    /// Look every lead's key up before its create, not only after an uncertain outcome
    /// (a tenant's `look_up_first`: its portal holds leads created elsewhere).
    pub look_up_first: bool,
}

impl WorkerSettings {
    /// A worker's settings for one CRM: the deployment's `[worker]` poll, `[retry]` and
    /// `[outage]`, the CRM's own timeout, settle window and lease, the sources' field
    /// maps, and `concurrency` attempts at once.
    pub fn of(
        config: &crate::config::Config,
        crm: &crate::config::CrmConfig,
        sources: &[crate::config::SourceConfig],
        concurrency: usize,
    ) -> WorkerSettings {
        WorkerSettings {
            poll_interval: config.worker.poll_interval,
            lease: config.lease_for(Some(crm)),
            call_timeout: crm.timeout(),
            settle: crm.settle(),
            retry: config.retry.clone(),
            outage: config.outage.clone(),
            concurrency,
            fields: sources
                .iter()
                .map(|s| (s.name.clone(), s.fields.clone()))
                .collect(),
            look_up_first: false,
        }
    }

    /// Whether `op`'s key is looked up before it is created: an earlier attempt may have
    /// landed (`verify_first`), or the CRM may hold it from before Leadgate served it
    /// (`look_up_first`).
    pub fn looks_up_first(&self, op: &Operation) -> bool {
        op.verify_first || self.look_up_first
    }

    /// What a lease that may see a CRM call is armed for: the whole call plus the margin.
    pub fn lease_for_call(&self) -> Duration {
        self.lease_for_calls(1)
    }

    /// What a lease that may see `calls` CRM calls in a row (the steps of one create)
    /// is armed for: all of them plus the margin.
    pub fn lease_for_calls(&self, calls: u32) -> Duration {
        self.lease
            .max(self.call_timeout * calls.max(1) + LEASE_MARGIN)
    }

    /// How long recording an outcome is tried through database hiccups: while the lease
    /// holds, and through the settle window after it (a late report is still kept).
    pub fn keep_trying(&self) -> Duration {
        self.lease_for_call() + self.settle
    }
}

/// Why a call to the CRM may not leave now ([`hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// The connector is unreachable (an outage, `domain::outage`): calls wait for its
    /// probes.
    Unreachable,
    /// A person paused the connector, or an auth failure did: no call until it is
    /// resumed.
    Paused,
}

impl Hold {
    /// What the timeline and the operation keep of a call held back.
    pub fn failure(self) -> Failure {
        Failure {
            class: ErrorClass::NotSent,
            message: match self {
                Hold::Unreachable => "not sent: the CRM is unreachable, waiting for its probe",
                Hold::Paused => "not sent: the connector is paused; sent once it is resumed",
            }
            .into(),
        }
    }
}

impl From<Hold> for CrmError {
    /// A call held back, as the error of a call that was not sent.
    fn from(held: Hold) -> Self {
        let f = held.failure();
        CrmError::new(f.class, f.message)
    }
}

/// Whether a call to `connector` must wait, read from its row right before the call
/// leaves: every call — a create, a batch, an update, a lookup, the reconciler's — asks,
/// since the gate before its claim was passed earlier. A read, not a lock. Health is
/// bookkeeping: if the row cannot be read, the call goes.
pub async fn hold(store: &dyn Dashboard, connector: &str) -> Option<Hold> {
    match store.connector(connector).await {
        Ok(Some(c)) if c.paused => Some(Hold::Paused),
        Ok(Some(c)) if c.unreachable_since.is_some() => Some(Hold::Unreachable),
        Ok(_) => None,
        Err(e) => {
            tracing::error!(error = %e, "reading the connector's health failed");
            None
        }
    }
}

/// Records an attempt's outcome, trying again with backoff for up to `keep_trying` when
/// the database fails transiently (a deadlock, a serialization failure, a connection
/// reset, a restart): a CRM answer that came back must not become a lookup or a review
/// because of a database hiccup. Repeating is safe: the store recognises a report it
/// has already recorded by its lease token.
pub async fn finish_attempt(
    store: &dyn WorkQueue,
    lease: &Lease,
    outcome: AttemptOutcome,
    events: Vec<NewEvent>,
    keep_trying: Duration,
) -> Result<Operation, StoreError> {
    through_hiccups(keep_trying, || {
        store.finish_attempt(lease, outcome.clone(), events.clone(), store.now())
    })
    .await
}

/// Runs `record` (a store write that is safe to repeat) until it succeeds or fails for
/// good, trying again with backoff for up to `keep_trying` when the database fails
/// transiently.
pub async fn through_hiccups<T, F, Fut>(
    keep_trying: Duration,
    mut record: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let give_up = Instant::now() + keep_trying;
    let mut delay = Duration::from_millis(50);
    loop {
        match record().await {
            Err(e) if e.is_transient() && Instant::now() + delay < give_up => {
                tracing::warn!(error = %e, "recording the outcome failed; trying again");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// The answer of a call the worker cut at its budget: the request may have reached the
/// CRM, so the outcome is unknown.
pub fn cut_off<T>(what: &str, budget: Duration) -> (Result<T, CrmError>, Exchange) {
    let message = format!(
        "no answer within {} ms (the call's whole budget): the CRM may still execute it",
        budget.as_millis()
    );
    (
        Err(CrmError::new(ErrorClass::Uncertain, message)),
        Exchange {
            request: json!({"call": what}),
            response: json!({"cut_after_ms": budget.as_millis() as u64}),
        },
    )
}

/// Timeline events for one CRM exchange: the request summary and the answer (with its
/// error class when it failed).
pub fn exchange_events(
    request_kind: EventKind,
    response_kind: EventKind,
    exchange: &Exchange,
    error: Option<&CrmError>,
) -> Vec<NewEvent> {
    let mut response = NewEvent::new(response_kind, exchange.response.clone());
    if let Some(e) = error {
        response.error_class = Some(e.class);
        if let serde_json::Value::Object(m) = &mut response.detail {
            m.insert("class".into(), json!(e.class));
            m.insert("error".into(), json!(e.message));
        }
    }
    vec![
        NewEvent::new(request_kind, exchange.request.clone()),
        response,
    ]
}

/// The name the final entity's `crm_step` event carries.
pub const FINAL_STEP: &str = "final";

/// The `crm_step` event of a stepped create's final entity (Bitrix24 `contact_deal`: the
/// deal), when `outcome` settles it — created, or found again by its key, by the worker
/// or by the reconciler that took over a dead holder's lease. The event is what counts
/// the entity in `leadgate_crm_steps_total` (migration 0016), so every path that
/// completes a stepped create records it. `None` for a one-call create.
pub fn final_step(crm: &dyn Crm, outcome: &AttemptOutcome) -> Option<NewEvent> {
    if crm.steps().is_empty() {
        return None;
    }
    let (crm_id, how) = match outcome {
        AttemptOutcome::Created { crm_id } => (crm_id, "created"),
        AttemptOutcome::Recovered { crm_id } => (crm_id, "recovered"),
        _ => return None,
    };
    let step = StepDone {
        step: FINAL_STEP.into(),
        entity: crm.final_entity().into(),
        crm_id: crm_id.clone(),
        how: how.into(),
    };
    Some(NewEvent::new(EventKind::CrmStep, json!(step)))
}
