//! Updates of CRM entities a person asked for (*Keep original and update the CRM*): the
//! worker sends them as it sends creates, one due update at a time, under a lease. An
//! update names its entity by id, so an answer that did not come is simply sent again,
//! but only after the settle window (`domain::update`): an older update must never land
//! after a newer one.

use std::time::Instant;

use tracing::Instrument;

use crate::attempt::{cut_off, exchange_events, through_hiccups};
use crate::config::LEASE_MARGIN;
use crate::crm::{CrmError, EntityUpdate, Lead};
use crate::domain::outage::counts_against_connector;
use crate::domain::update::{after_failed_update, UpdateNext};
use crate::domain::EventKind;
use crate::domain::{ErrorClass, RetryDecision};
use crate::store::{Failure, NewEvent, StoreError, UpdateClaim, UpdateOutcome};

use super::{not_sent_event, Worker};

impl Worker {
    /// Sends one due update of a CRM entity; false when none was due. `probe`: this step
    /// took the outage's probe.
    pub async fn update_step(&self, probe: bool) -> Result<bool, StoreError> {
        let claim = self
            .store
            .claim_update(
                self.crm.connector(),
                &self.owner,
                self.settings.lease,
                self.store.now(),
            )
            .await?;
        let Some(claim) = claim else {
            return Ok(false);
        };
        let span =
            tracing::info_span!("update", operation_id = %claim.operation_id, update = claim.id);
        match self.update(&claim, probe).instrument(span).await {
            Ok(()) | Err(StoreError::LeaseLost(_)) => Ok(true),
            Err(e) => Err(e),
        }
    }

    async fn update(&self, claim: &UpdateClaim, mut probe: bool) -> Result<(), StoreError> {
        let fields = self
            .settings
            .fields
            .get(&claim.source)
            .cloned()
            .unwrap_or_default();
        let (Some(original), Some(later)) = (&claim.original, &claim.later) else {
            let failure = Failure {
                class: ErrorClass::Validation,
                message: "the lead's data was removed by retention: nothing to send".into(),
            };
            return self
                .finish_update(claim, UpdateOutcome::Failed { failure }, vec![])
                .await;
        };
        let was = Lead::from_payload(&claim.operation_id, &claim.source, original, &fields);
        let later = Lead::from_payload(&claim.operation_id, &claim.source, later, &fields);
        let changes = was.changes_to(&later);
        let mut redact: Vec<String> = [&was, &later]
            .iter()
            .flat_map(|l| l.contact_values().into_iter().chain(l.comment.as_deref()))
            .map(str::to_owned)
            .collect();
        redact.dedup();
        let update = EntityUpdate {
            crm_id: claim.crm_id.clone(),
            target: was.overlaid(&changes),
            changes,
            redact,
        };
        if update.changes.is_empty() {
            tracing::info!("nothing the CRM holds changed: no update sent");
            return self
                .finish_update(claim, UpdateOutcome::Skipped, vec![])
                .await;
        }
        if let Err(e) = self.crm.pace().await {
            // Nothing was sent.
            let outcome = self.after_update_failed(claim, &e).await;
            return self
                .finish_update(claim, outcome, vec![not_sent_event(&e)])
                .await;
        }
        if let Err(held) = self.may_call(&mut probe).await {
            // The breaker opened, or a person paused the connector, since this step
            // passed its gate: nothing was sent.
            let outcome = UpdateOutcome::Retry {
                at: self.store.now(),
                failure: held.failure(),
                refund: true,
            };
            return self.finish_update(claim, outcome, vec![]).await;
        }
        // An update may take several requests (a read, then the write): its budget is
        // that many calls, and its lease covers the whole of it.
        let budget = self.settings.call_timeout * self.crm.update_calls().max(1);
        let lease_for = self.settings.lease.max(budget + LEASE_MARGIN);
        let armed_at = Instant::now();
        match self
            .store
            .start_update(claim, lease_for, self.settings.settle, self.store.now())
            .await
        {
            Ok(()) => {}
            Err(StoreError::LeaseLost(_)) => {
                tracing::warn!("the update's lease ran out before the call: not calling the CRM");
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        let (result, exchange) = match tokio::time::timeout_at(
            (armed_at + budget).into(),
            crate::crm::rate::prepaid(self.crm.update(&update)),
        )
        .await
        {
            Ok(answer) => answer,
            Err(_) => cut_off("update", budget),
        };
        let events = exchange_events(
            EventKind::CrmUpdateRequest,
            EventKind::CrmUpdateResponse,
            &exchange,
            result.as_ref().err(),
        );
        let outcome = match result {
            Ok(fields) => {
                tracing::info!(crm_id = %claim.crm_id, "updated in the CRM");
                self.answered().await;
                UpdateOutcome::Done { fields }
            }
            Err(e) => {
                tracing::warn!(class = %e.class, "CRM update failed");
                self.after_update_failed(claim, &e).await
            }
        };
        self.finish_update(claim, outcome, events).await
    }

    /// What follows a failed update. The CRM's own trouble is the connector's, as for
    /// creates: counted against it (an outage opens the breaker, whose probes then carry
    /// the update too), and the try is given back; refused credentials pause the
    /// connector until a person resumes it. Otherwise `domain::update` decides.
    async fn after_update_failed(&self, claim: &UpdateClaim, e: &CrmError) -> UpdateOutcome {
        let failure = Failure::from(e);
        let now = self.store.now();
        if e.class.decision() == RetryDecision::PauseConnector {
            let connector = self.crm.connector();
            if let Err(err) = self
                .store
                .pause_connector(connector, &e.message, &self.owner, now)
                .await
            {
                tracing::error!(error = %err, "pausing the connector failed");
            }
            return UpdateOutcome::Retry {
                at: now,
                failure,
                refund: true,
            };
        }
        if counts_against_connector(e.class) {
            match self
                .store
                .connector_failed(self.crm.connector(), &self.settings.outage, now)
                .await
            {
                Ok(Some(outage))
                    if now < crate::store::after(outage.since, self.settings.outage.limit) =>
                {
                    // Unreachable: the update waits for the next probe, not counted (an
                    // answer that did not come: not before its settle window either).
                    let at = if e.class.may_have_executed() {
                        outage
                            .probe_at
                            .max(crate::store::after(now, self.settings.settle))
                    } else {
                        outage.probe_at
                    };
                    return UpdateOutcome::Retry {
                        at,
                        failure,
                        refund: true,
                    };
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::error!(error = %err, "recording the connector's failure failed")
                }
            }
        } else {
            self.answered().await;
        }
        match after_failed_update(
            e.class,
            claim.attempts,
            false,
            e.retry_after,
            &self.settings.retry,
            self.settings.settle,
            self.store.now(),
        ) {
            UpdateNext::Retry { at } => UpdateOutcome::Retry {
                at,
                failure,
                refund: false,
            },
            UpdateNext::Fail => UpdateOutcome::Failed { failure },
        }
    }

    /// Records the outcome, through transient database errors for as long as the lease
    /// and the settle window last (as an attempt's outcome is).
    async fn finish_update(
        &self,
        claim: &UpdateClaim,
        outcome: UpdateOutcome,
        events: Vec<NewEvent>,
    ) -> Result<(), StoreError> {
        let recorded = through_hiccups(self.settings.keep_trying(), || {
            self.store
                .finish_update(claim, outcome.clone(), events.clone(), self.store.now())
        })
        .await;
        if let Err(e) = &recorded {
            tracing::warn!(error = %e, "the update's outcome was not recorded");
        }
        recorded
    }
}
