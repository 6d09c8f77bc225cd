//! A create that takes several steps (Bitrix24 `contact_deal`: find or create the
//! contact, then the deal linked to it), with a recovery point per step.
//!
//! Each step's result is committed (`WorkQueue::record_step`, a `crm_step` event) before the
//! next call goes out, under the lease armed for the whole create. A later attempt —
//! after a crash, a kill, a lost answer — reads the recorded steps from the timeline and
//! resumes at the first step without one, with the saved ids. A step whose answer was
//! lost is never sent blindly again: the attempt that follows an unknown outcome comes
//! after the settle window (the operation's usual `Verify`), and the step looks its own
//! external key up first (`may_exist`).
//!
//! An adapter declares its steps through `Crm::steps`, `step`, `create_after` and
//! `create_calls`. The recovery points are `crm_step` events, read back with
//! `Reads::timeline`; the entities they made are counted per kind by migration 0016's
//! trigger.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::attempt::{cut_off, exchange_events, through_hiccups};
use crate::crm::{ContactSearch, StepDone, StepError};
use crate::domain::EventKind;
use crate::store::{AttemptOutcome, Claim, Lease, NewEvent, StoreError, TimelineEvent};

use super::Worker;

/// The step results recorded on an operation's timeline, oldest first; of two for one
/// step (which the lease makes impossible) the first stands.
pub fn recorded_steps(timeline: &[TimelineEvent]) -> Vec<StepDone> {
    let mut done: Vec<StepDone> = Vec::new();
    for e in timeline.iter().filter(|e| e.is(EventKind::CrmStep)) {
        if let Ok(step) = serde_json::from_value::<StepDone>(e.detail.clone()) {
            if !done.iter().any(|d| d.step == step.step) && step.step != FINAL_STEP {
                done.push(step);
            }
        }
    }
    done
}

pub use crate::attempt::FINAL_STEP;

impl Worker {
    /// Runs the steps of `lead`'s create not yet recorded, each committed before the
    /// next, then the final create, all before `deadline`. The answer is the final
    /// entity's id or the first failure, with the events not yet committed.
    pub(super) async fn stepped(
        &self,
        claim: &Claim,
        lease: &Lease,
        lead: &crate::crm::Lead,
        mut contacts: Option<&mut super::contacts::Contacts>,
        deadline: Instant,
        budget: Duration,
    ) -> Result<(Result<String, StepError>, Vec<NewEvent>), StoreError> {
        let op = &claim.operation;
        let timeline = self.store.timeline(&op.operation_id).await?;
        let mut done = recorded_steps(&timeline);
        let search = ContactSearch {
            phone: op.contact.phone.clone(),
            email: op.contact.email.clone(),
            known: contacts
                .as_ref()
                .map(|c| c.known.clone())
                .unwrap_or_default(),
        };
        // An earlier attempt (or the holder before a takeover) may have sent a step's
        // create: its key is looked up before anything is created again. Judged by the
        // timeline, not by counters: an outage hands the attempt back and a verify pass
        // clears `verify_first`, while the contact's create may still have landed.
        let attempts_started = timeline
            .iter()
            .filter(|e| e.is(EventKind::AttemptStarted))
            .count();
        let may_exist = attempts_started > 1
            || timeline.iter().any(|e| e.is(EventKind::LeaseTakenOver))
            || self.settings.looks_up_first(op)
            || claim.granted;
        let mut first = true;
        for step in self.crm.steps() {
            if done.iter().any(|d| d.step == step) {
                continue;
            }
            let call = self.crm.step(step, lead, &search, &done, may_exist);
            let answer = if std::mem::take(&mut first) {
                tokio::time::timeout_at(deadline.into(), crate::crm::rate::prepaid(call)).await
            } else {
                tokio::time::timeout_at(deadline.into(), call).await
            };
            let (result, exchange) = match answer {
                Ok(answer) => answer,
                Err(_) => {
                    let (r, e) = cut_off::<StepDone>(step, budget);
                    (r.map_err(StepError::Crm), e)
                }
            };
            let error = match &result {
                Err(StepError::Crm(e)) => Some(e),
                _ => None,
            };
            let mut events = exchange_events(
                EventKind::CrmRequest,
                EventKind::CrmResponse,
                &exchange,
                error,
            );
            match result {
                Ok(step_done) => {
                    tracing::info!(step, crm_id = %step_done.crm_id, how = %step_done.how, "step done");
                    events.push(NewEvent::new(EventKind::CrmStep, json!(step_done)));
                    // The recovery point: committed before the next call goes out.
                    through_hiccups(self.settings.keep_trying(), || {
                        self.store
                            .record_step(lease, events.clone(), self.store.now())
                    })
                    .await?;
                    if step_done.entity == "contact" {
                        // Recorded: `record_step` left the contact locks, remembering it.
                        if let Some(c) = contacts.as_deref_mut() {
                            c.settled = true;
                        }
                    }
                    done.push(step_done);
                }
                Err(e) => return Ok((Err(e), events)),
            }
        }
        let call = self.crm.create_after(lead, &done);
        let answer = if first {
            tokio::time::timeout_at(deadline.into(), crate::crm::rate::prepaid(call)).await
        } else {
            tokio::time::timeout_at(deadline.into(), call).await
        };
        let (result, exchange) = answer.unwrap_or_else(|_| cut_off("create", budget));
        let events = exchange_events(
            EventKind::CrmRequest,
            EventKind::CrmResponse,
            &exchange,
            result.as_ref().err(),
        );
        Ok((result.map_err(StepError::Crm), events))
    }

    /// The `crm_step` event of a stepped create's final entity, when `outcome` settles
    /// it ([`crate::attempt::final_step`]).
    pub(super) fn final_step(&self, outcome: &AttemptOutcome) -> Option<NewEvent> {
        crate::attempt::final_step(self.crm.as_ref(), outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, detail: serde_json::Value) -> TimelineEvent {
        TimelineEvent {
            id: 1,
            at: chrono::Utc::now(),
            kind: kind.into(),
            actor: "worker:test".into(),
            error_class: None,
            detail,
        }
    }

    #[test]
    fn recorded_steps_are_read_from_the_timeline_first_one_standing() {
        let step = |id: &str, how: &str| json!({"step": "contact", "entity": "contact", "crm_id": id, "how": how});
        let timeline = vec![
            event("claimed", json!({})),
            event("crm_step", step("7", "created")),
            event("crm_step", step("8", "linked")),
            event(
                "crm_step",
                json!({"step": "final", "entity": "deal", "crm_id": "3", "how": "created"}),
            ),
            event("crm_step", json!({"broken": true})),
        ];
        let done = recorded_steps(&timeline);
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!(done[0].crm_id, "7");
        assert_eq!(done[0].how, "created");
        assert!(recorded_steps(&timeline[..1]).is_empty());
    }
}
