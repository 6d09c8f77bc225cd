//! The worker: the single owner of CRM calls and retries.
//!
//! It claims due work (the store has already persisted `in_progress` and counted the
//! attempt), calls the CRM through an adapter, and reports the outcome by error class:
//! retry what cannot have executed, stop on validation, pause the connector on auth,
//! and never repeat an uncertain create blindly: reconcile by external key instead.
//!
//! Once `attempt_started` is on the timeline, nothing but the create's departure follows:
//! the wait for the CRM's pace (`crm::rate`), a token refresh and a one-call create's
//! reads (`Crm::choose_contact`, amoCRM's contact searches) all come before it, so a
//! kill strands as few leads as possible that look sent; a claim whose call never left is
//! put back, not reconciled (`store::work_queue::attempts`).
//!
//! **Outages** are the connector's, not the leads' (`domain::outage`). Failures the CRM
//! is to blame for are counted on the connector's row; after `[outage] after_failures` in
//! a row it is unreachable and `WorkQueue::probe_gate` lets one probe out per slot of the
//! schedule, taken under the row's lock so processes sharing a database send one. The
//! gate before a claim is not the last word: every call — a create, a batch, an update,
//! a lookup, the reconciler's too — reads the connector's row right before it leaves
//! (`Worker::may_call`); while the connector is unreachable only a probe's first call
//! goes, a call held back is an `Outage` with nothing sent and its attempt given back,
//! and a batch's lookups stop at the first failure the connector is to blame for. So a
//! CRM that answers nothing gets at most `OutageConfig::max_calls_while_down`. An
//! outcome during an outage is due at the next probe, its attempt refunded,
//! `verify_first` kept when a create may have landed. Health is bookkeeping: failing to
//! record it never changes an outcome beyond what the retry policy decided.
//!
//! A **paused** connector gets no calls at all — no attempts, lookups, updates or
//! redeliveries — until a person resumes it. The worker and the reconciler never take an
//! operation an integration executes (claim API); its retries go back to the
//! integration (`redeliver`).

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tokio::sync::watch;
use tracing::Instrument;

use crate::crm::{Crm, CrmError, Lead, Lookup, StepError};
use crate::domain::outage::{counts_against_connector, during_outage, Gate};
use crate::domain::EventKind;
use crate::domain::{ErrorClass, RetryDecision, ReviewReason};
use crate::reconcile;
use crate::store::{self, AttemptOutcome, Claim, Failure, Lease, NewEvent, Store, StoreError};
use crate::supervise::{supervise, RESTART_DELAY};
use crate::turns::Turns;

pub use crate::attempt::WorkerSettings;
use crate::attempt::{cut_off, exchange_events, finish_attempt, hold, Hold};

mod batch;
mod contacts;
mod steps;
mod update;

#[derive(Clone)]
pub struct Worker {
    pub store: Arc<dyn Store>,
    pub crm: Arc<dyn Crm>,
    pub settings: Arc<WorkerSettings>,
    /// Names this process on the timeline (`worker:<host>:<pid>:<n>`).
    pub owner: String,
    /// A fleet tenant's worker: its steps take the fleet's shared lanes, and its idle
    /// loops wait for the fleet's board instead of polling (`turns`). `None`: the
    /// default tenant's worker, which polls every `poll_interval` on lanes of its own.
    pub turns: Option<Arc<Turns>>,
}

impl Worker {
    /// Runs `concurrency` claim loops and the reconciler until `shutdown` turns true. An
    /// attempt in flight is finished before a loop stops.
    pub async fn run(self, shutdown: watch::Receiver<bool>) {
        let mut tasks = tokio::task::JoinSet::new();
        // Supervised: a loop that panics is logged and restarted (crate::supervise).
        for n in 0..self.settings.concurrency.max(1) {
            let mut w = self.clone();
            w.owner = format!("{}:{n}", self.owner);
            let rx = shutdown.clone();
            tasks.spawn(supervise(
                "claim loop",
                rx.clone(),
                RESTART_DELAY,
                move || w.clone().claim_loop(rx.clone()),
            ));
        }
        let r = self.clone();
        tasks.spawn(supervise(
            "reconciler",
            shutdown.clone(),
            RESTART_DELAY,
            move || {
                let (r, shutdown) = (r.clone(), shutdown.clone());
                async move {
                    reconcile::run(
                        r.store,
                        r.crm,
                        r.settings,
                        format!("reconciler:{}", r.owner),
                        r.turns,
                        shutdown,
                    )
                    .await
                }
            },
        ));
        while tasks.join_next().await.is_some() {}
    }

    async fn claim_loop(self, mut shutdown: watch::Receiver<bool>) {
        while !*shutdown.borrow() {
            let Some(lane) = crate::turns::turn(self.turns.as_deref(), &mut shutdown).await else {
                break;
            };
            let stepped = self.step().await;
            drop(lane);
            match stepped {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => tracing::error!(error = %e, "worker step failed"),
            }
            crate::turns::idle(
                self.turns.as_deref(),
                crate::turns::Wait::Work,
                self.settings.poll_interval,
                &mut shutdown,
            )
            .await;
        }
    }

    /// Claims and processes one due operation; false when nothing was due.
    pub async fn step(&self) -> Result<bool, StoreError> {
        // While the CRM is unreachable only its probe goes out.
        let gate = self
            .store
            .probe_gate(
                self.crm.connector(),
                &self.settings.outage,
                self.store.now(),
            )
            .await?;
        if gate == Gate::Wait {
            return Ok(false);
        }
        let probe = gate == Gate::Probe;
        if probe {
            tracing::info!(
                connector = self.crm.connector(),
                "probing the unreachable CRM"
            );
        } else if self.crm.batch_limit() > 1
            && !self.crm.links_contacts()
            // Looking every lead up one call at a time would not fit a batch's lease.
            && !(self.settings.look_up_first && self.crm.lookup_batch_limit() <= 1)
        {
            // Waiting work goes out in batches; an outage's probe is one lead.
            if self.drain().await? {
                return Ok(true);
            }
            return self.update_step(false).await;
        }
        let claim = self
            .store
            .claim_due(
                self.crm.connector(),
                &self.owner,
                self.settings.lease,
                self.store.now(),
            )
            .await?;
        let Some(claim) = claim else {
            // Updates a person asked for go out when no create is waiting; while the CRM
            // is unreachable one may be the probe.
            return self.update_step(probe).await;
        };
        match self.attempt(&claim, probe).await {
            Ok(()) | Err(StoreError::LeaseLost(_)) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// `probe`: this step took the outage's probe (its first call may go out).
    async fn attempt(&self, claim: &Claim, probe: bool) -> Result<(), StoreError> {
        let op = &claim.operation;
        let span =
            tracing::info_span!("attempt", operation_id = %op.operation_id, attempt = op.attempts);
        self.attempt_in(claim, probe).instrument(span).await
    }

    /// Whether a call may leave now, asked right before each one ([`hold`]): the gate
    /// before the claim is passed before a pace wait, a claim and earlier calls of the
    /// same attempt, while other lanes and processes may open the breaker or a person
    /// pause the connector. While the connector is unreachable only the step holding the
    /// probe calls, and only once (its first call spends `probe`): its follow-up calls
    /// wait like everyone's. A call admitted just before the breaker opens is the
    /// in-flight allowance of `OutageConfig::max_calls_while_down`; a paused connector
    /// holds back even the probe.
    async fn may_call(&self, probe: &mut bool) -> Result<(), Hold> {
        let probing = std::mem::take(probe);
        match hold(self.store.as_ref(), self.crm.connector()).await {
            Some(Hold::Unreachable) if probing => Ok(()),
            Some(held) => Err(held),
            None => Ok(()),
        }
    }

    /// The outcome of a claim whose call [`may_call`](Worker::may_call) held back: nothing
    /// was sent, so it is due again at once (while the outage lasts only a probe takes
    /// it, while the pause lasts nobody), its attempt not counted, a lookup still owed
    /// kept owed.
    fn held_back(&self, claim: &Claim, held: Hold) -> AttemptOutcome {
        let verify = claim.operation.verify_first;
        match held {
            Hold::Unreachable => AttemptOutcome::Outage {
                failure: held.failure(),
                at: self.store.now(),
                verify,
            },
            Hold::Paused => AttemptOutcome::Paused {
                failure: held.failure(),
                verify,
                granted: claim.granted,
            },
        }
    }

    /// The lead the CRM gets for a claimed operation (its source's field map applied).
    fn lead_of(&self, claim: &Claim) -> Lead {
        let op = &claim.operation;
        let fields = self
            .settings
            .fields
            .get(&op.source)
            .cloned()
            .unwrap_or_default();
        let payload = op.payload.clone().unwrap_or_default();
        Lead::from_payload(&op.operation_id, &op.source, &payload, &fields)
    }

    async fn attempt_in(&self, claim: &Claim, probe: bool) -> Result<(), StoreError> {
        // One lead at a time per phone and e-mail finds or makes its contact.
        match self.take_contacts(claim).await? {
            contacts::Turn::Free => self.attempt_held(claim, None, probe).await,
            contacts::Turn::HandedBack => Ok(()),
            contacts::Turn::Taken(mut held) => {
                let result = self.attempt_held(claim, Some(&mut held), probe).await;
                self.leave_contacts(&claim.lease, held).await;
                result
            }
        }
    }

    async fn attempt_held(
        &self,
        claim: &Claim,
        mut contacts: Option<&mut contacts::Contacts>,
        mut probe: bool,
    ) -> Result<(), StoreError> {
        let op = &claim.operation;
        let lead = self.lead_of(claim);
        let mut before = vec![];
        if self.settings.looks_up_first(op) {
            if let Err(held) = self.may_call(&mut probe).await {
                return self
                    .finish(&claim.lease, self.held_back(claim, held), before)
                    .await;
            }
            // An earlier attempt's outcome is unknown and its settle window is over:
            // ask the CRM once more before anything is created.
            let (found, events) =
                reconcile::look_up(self.crm.as_ref(), claim, self.settings.call_timeout).await;
            let failed = found.as_ref().err().map(|e| e.class);
            let decided = self.after_verify(claim, found);
            before = events;
            match decided {
                Some(outcome) => {
                    let outcome = self.weigh(failed, outcome).await;
                    return self.finish(&claim.lease, outcome, before).await;
                }
                None => self.answered().await,
            }
        }
        // A token refresh and the connector's pacing wait come first: they are not part
        // of the call's budget. If they fail, nothing was sent.
        if let Err(e) = self.crm.pace().await {
            tracing::warn!(class = %e.class, "could not get ready to call the CRM");
            return self.unsent(claim, &e, before).await;
        }
        if let Err(held) = self.may_call(&mut probe).await {
            return self
                .finish(&claim.lease, self.held_back(claim, held), before)
                .await;
        }
        // The reads a one-call create makes before it (amoCRM's contact searches) go
        // out before the attempt is recorded, and the create's own turn of the pace is
        // taken after them: a process that dies meanwhile leaves a lead that was never
        // sent, never one that looks sent (a lagging search cannot prove it was not).
        let mut choice = None;
        if self.crm.steps().is_empty() && self.crm.links_contacts() {
            let known = contacts.as_ref().map_or(&[][..], |c| &c.known[..]);
            let budget = self.settings.call_timeout * 2;
            let (chosen, exchange) = match tokio::time::timeout(
                budget,
                crate::crm::rate::prepaid(self.crm.choose_contact(&lead, known)),
            )
            .await
            {
                Ok(answer) => answer,
                Err(_) => {
                    let e = CrmError::new(
                        ErrorClass::NotSent,
                        format!(
                            "the contact search did not answer within {} ms: nothing was created",
                            budget.as_millis()
                        ),
                    );
                    let exchange = crate::crm::Exchange {
                        request: json!({"call": "contact search"}),
                        response: json!({"cut_after_ms": budget.as_millis() as u64}),
                    };
                    (Err(e), exchange)
                }
            };
            let ready = match chosen {
                Ok(c) => self.crm.pace().await.map(|()| c),
                Err(e) => Err(e),
            };
            match ready {
                Ok(c) => {
                    self.answered().await;
                    choice = Some(c);
                }
                Err(e) => {
                    tracing::warn!(class = %e.class, "could not choose the lead's contact");
                    before.extend(exchange_events(
                        EventKind::CrmRequest,
                        EventKind::CrmResponse,
                        &exchange,
                        Some(&e),
                    ));
                    return self.unsent(claim, &e, before).await;
                }
            }
            if let Err(held) = self.may_call(&mut probe).await {
                return self
                    .finish(&claim.lease, self.held_back(claim, held), before)
                    .await;
            }
        }
        // Recorded before the call: if this process dies mid-call, the timeline still
        // shows that a create may have reached the CRM. The lease is extended to cover
        // the whole call; a holder whose lease ran out does not call at all.
        before.push(self.attempt_started(claim, None));
        // A create of several steps is several calls: its budget and its lease cover
        // them all.
        let calls = self.crm.create_calls().max(1);
        let armed_at = Instant::now();
        let lease = match self
            .store
            .start_attempt(
                &claim.lease,
                self.settings.lease_for_calls(calls),
                self.settings.settle,
                before,
                self.store.now(),
            )
            .await
        {
            Ok(lease) => lease,
            Err(StoreError::LeaseLost(_)) => {
                tracing::warn!("the lease ran out before the call: not calling the CRM");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let budget = self.settings.call_timeout * calls;
        let (result, mut events) = if self.crm.steps().is_empty() {
            let call = self
                .crm
                .create_with_contact(&lead, choice.take().unwrap_or_default());
            let (result, exchange) = match tokio::time::timeout_at(
                (armed_at + budget).into(),
                crate::crm::rate::prepaid(call),
            )
            .await
            {
                Ok(answer) => answer,
                Err(_) => cut_off("create", budget),
            };
            let result = result.map(|(crm_id, contact)| {
                if let Some(c) = contacts.as_deref_mut() {
                    c.settled = true;
                    c.contact = contact;
                }
                crm_id
            });
            let events = exchange_events(
                EventKind::CrmRequest,
                EventKind::CrmResponse,
                &exchange,
                result.as_ref().err(),
            );
            (result.map_err(StepError::Crm), events)
        } else {
            self.stepped(claim, &lease, &lead, contacts, armed_at + budget, budget)
                .await?
        };
        let now = self.store.now();
        let mut failed = match &result {
            Err(StepError::Crm(e)) => Some(e.class),
            _ => None,
        };
        let outcome = match result {
            Ok(crm_id) => {
                tracing::info!(crm_id = %crm_id, "created in the CRM");
                AttemptOutcome::Created { crm_id }
            }
            Err(StepError::Ambiguous { step, ids }) => {
                tracing::warn!(
                    step,
                    count = ids.len(),
                    "several entities match: a person decides"
                );
                AttemptOutcome::Review {
                    reason: ReviewReason::AmbiguousMatch,
                    failure: None,
                    detail: json!({"step": step, "matches": ids}),
                }
            }
            Err(StepError::Crm(e)) => {
                tracing::warn!(class = %e.class, "CRM attempt failed");
                let next = self.settings.retry.after_failed_call(
                    Failure::from(&e),
                    claim.operation.attempts,
                    claim.granted,
                    e.retry_after,
                    self.crm.connector(),
                    json!({}),
                    now,
                );
                match next {
                    Ok(outcome) => outcome,
                    Err(failure) => {
                        // Found at once: recovered at once. Found nothing: the CRM may
                        // still be executing it, so ask again after the settle window.
                        // While the CRM is unreachable (this was its probe, or another
                        // lane opened the breaker meanwhile) that first lookup waits too.
                        let found = match self.may_call(&mut probe).await {
                            Ok(()) => {
                                let (found, more) = reconcile::look_up(
                                    self.crm.as_ref(),
                                    claim,
                                    self.settings.call_timeout,
                                )
                                .await;
                                events.extend(more);
                                // The lookup says whether the CRM is there at all.
                                failed = found.as_ref().err().map(|e| e.class);
                                found
                            }
                            Err(held) => Err(held.into()),
                        };
                        reconcile::after_uncertain(
                            found,
                            Some(failure),
                            store::after(now, self.settings.settle),
                        )
                    }
                }
            }
        };
        let outcome = self.weigh(failed, outcome).await;
        self.finish(&lease, outcome, events).await
    }

    /// Weighs a call for the connector's health (`domain::outage`): a failure the
    /// connector is to blame for is counted and, while the CRM is unreachable, the
    /// outcome waits for its next probe without using up the lead's attempts; any answer
    /// of the CRM ends an outage. Health is bookkeeping: if the store cannot record it,
    /// the outcome stands as the retry policy decided it.
    async fn weigh(&self, failed: Option<ErrorClass>, outcome: AttemptOutcome) -> AttemptOutcome {
        let mut weighed = self.weigh_all(failed, vec![outcome]).await;
        weighed.remove(0)
    }

    /// [`weigh`](Worker::weigh) for the outcomes of one request (a batch). A request
    /// that failed as a whole counts once per lead it carried, up to the breaker's
    /// threshold: fifty leads refused at once are as much evidence of an outage as fifty
    /// single refusals, and a lead must not spend an attempt on each of the requests it
    /// would otherwise take to open the breaker. An answered request is one answer.
    async fn weigh_all(
        &self,
        failed: Option<ErrorClass>,
        outcomes: Vec<AttemptOutcome>,
    ) -> Vec<AttemptOutcome> {
        let connector = self.crm.connector();
        let now = self.store.now();
        match failed {
            Some(class) if counts_against_connector(class) => {
                let times = outcomes
                    .len()
                    .clamp(1, self.settings.outage.after_failures.max(1) as usize);
                let mut recorded = Ok(None);
                for _ in 0..times {
                    recorded = self
                        .store
                        .connector_failed(connector, &self.settings.outage, now)
                        .await;
                    if !matches!(recorded, Ok(None)) {
                        break;
                    }
                }
                match recorded {
                    Ok(outage) => outcomes
                        .into_iter()
                        .map(|o| during_outage(o, outage, self.settings.outage.limit, now))
                        .collect(),
                    Err(e) => {
                        tracing::error!(error = %e, "recording the connector's failure failed");
                        outcomes
                    }
                }
            }
            _ => {
                self.answered().await;
                outcomes
            }
        }
    }

    /// The outcome of a claim whose call could not even be prepared (`Crm::pace`
    /// failed): nothing was sent.
    fn not_ready(&self, claim: &Claim, e: &CrmError) -> AttemptOutcome {
        let failure = Failure::from(e);
        match e.class.decision() {
            RetryDecision::PauseConnector => AttemptOutcome::PauseConnector {
                connector: self.crm.connector().to_owned(),
                failure,
            },
            _ => self.settings.retry.after_failure(
                claim.operation.attempts,
                claim.granted,
                failure,
                e.retry_after,
                self.store.now(),
            ),
        }
    }

    /// Records that a claim's create could not be got ready (`e`; nothing was sent):
    /// weighed for the connector's health, `not_sent` on the timeline after `before`.
    async fn unsent(
        &self,
        claim: &Claim,
        e: &CrmError,
        mut before: Vec<NewEvent>,
    ) -> Result<(), StoreError> {
        let outcome = self.not_ready(claim, e);
        let outcome = self.weigh(Some(e.class), outcome).await;
        before.push(not_sent_event(e));
        self.finish(&claim.lease, outcome, before).await
    }

    /// The event recorded right before a create leaves (`batch`: how many creates its
    /// request carries).
    fn attempt_started(&self, claim: &Claim, batch: Option<usize>) -> NewEvent {
        let mut detail = json!({
            "connector": self.crm.connector(),
            "attempt": claim.operation.attempts,
            "granted": claim.granted,
        });
        if let (Some(n), serde_json::Value::Object(m)) = (batch, &mut detail) {
            m.insert("batch".into(), json!(n));
        }
        NewEvent::new(EventKind::AttemptStarted, detail)
    }

    /// The CRM answered: an outage (or a run of failures) of the connector ends.
    async fn answered(&self) {
        let now = self.store.now();
        if let Err(e) = self
            .store
            .connector_answered(self.crm.connector(), now)
            .await
        {
            tracing::error!(error = %e, "recording the connector's answer failed");
        }
    }

    /// The verify pass's decision; `None`: nothing under the key and a create may go out.
    fn after_verify(
        &self,
        claim: &Claim,
        found: Result<Lookup, CrmError>,
    ) -> Option<AttemptOutcome> {
        let op = &claim.operation;
        let retry = &self.settings.retry;
        let failure = op.last_error_class.map(|class| Failure {
            class,
            message: op.last_error.clone().unwrap_or_default(),
        });
        match found {
            Ok(Lookup::One(crm_id)) => Some(AttemptOutcome::Recovered { crm_id }),
            Ok(Lookup::Many(ids)) => Some(reconcile::several(ids, failure)),
            // Only after an uncertain outcome: a look before a lead's first create
            // (`look_up_first`) asks about creates made elsewhere long before.
            Ok(Lookup::NotFound)
                if op.verify_first && !self.crm.lookup_is_authoritative() && !claim.granted =>
            {
                Some(AttemptOutcome::Review {
                    reason: ReviewReason::UncertainOutcome,
                    failure,
                    detail: json!({"lookup": "not found after the settle window, but this CRM's search may lag: not proof that nothing was created"}),
                })
            }
            // This claim counted one more attempt: the create it is about to make.
            Ok(Lookup::NotFound)
                if !claim.granted && op.attempts.max(0) as u32 > retry.max_attempts =>
            {
                Some(AttemptOutcome::Review {
                    reason: ReviewReason::RetriesExhausted,
                    failure,
                    detail: json!({"attempts": op.attempts - 1, "lookup": "not found"}),
                })
            }
            Ok(Lookup::NotFound) => None,
            Err(e) => {
                let lookup_failure = Failure::from(&e);
                Some(match e.class.decision() {
                    RetryDecision::PauseConnector => AttemptOutcome::PauseConnector {
                        connector: self.crm.connector().to_owned(),
                        failure: lookup_failure,
                    },
                    RetryDecision::RetryWithBackoff | RetryDecision::Reconcile
                        if !claim.granted && (op.attempts.max(0) as u32) < retry.max_attempts =>
                    {
                        let delay = retry.backoff(op.attempts.max(0) as u32, e.retry_after);
                        let at = store::after(self.store.now(), delay);
                        if op.verify_first {
                            AttemptOutcome::Verify {
                                failure: Some(lookup_failure),
                                at,
                            }
                        } else {
                            // A look before the first create (`look_up_first`) that
                            // failed: nothing was sent, and nothing needs verifying.
                            AttemptOutcome::Retry {
                                failure: Some(lookup_failure),
                                at,
                            }
                        }
                    }
                    _ => AttemptOutcome::Review {
                        reason: ReviewReason::UncertainOutcome,
                        failure: Some(lookup_failure),
                        detail: json!({"lookup": "failed", "class": e.class, "error": e.message}),
                    },
                })
            }
        }
    }

    async fn finish(
        &self,
        lease: &Lease,
        outcome: AttemptOutcome,
        mut events: Vec<NewEvent>,
    ) -> Result<(), StoreError> {
        events.extend(self.final_step(&outcome));
        finish_attempt(
            self.store.as_ref(),
            lease,
            outcome,
            events,
            self.settings.keep_trying(),
        )
        .await
        .map(|_| ())
    }
}

/// The timeline's note that a call was never sent.
fn not_sent_event(e: &CrmError) -> NewEvent {
    NewEvent::new(
        EventKind::NotSent,
        json!({"class": e.class, "error": e.message}),
    )
}
