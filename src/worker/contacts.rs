//! One lead at a time per phone and e-mail finds or makes the client's contact (a CRM
//! that [`links_contacts`](crate::crm::Crm::links_contacts): Bitrix24 `contact_deal`,
//! amoCRM `link_contacts`). Two leads of one new client arriving together would each
//! search, find nothing (the other's contact is not made yet, or the CRM's search does
//! not show it yet) and make a contact each.
//!
//! Before anything is sent (before the verify pass and the pace), the attempt takes the
//! contact locks of its phone and e-mail ([`WorkQueue::take_contact_locks`]); a lead that
//! finds one held is handed back, due again shortly, and the lane goes on with other
//! leads. The locks end with the lease, are left when the contact step is recorded, and
//! otherwise after the attempt: free, remembering the contact it made or linked, or —
//! when a contact create of the attempt may still land — held until it can no longer
//! land.
//!
//! [`WorkQueue::take_contact_locks`]: crate::store::WorkQueue::take_contact_locks

use std::time::Duration;

use crate::store::{Claim, ContactLeave, ContactTurn, Lease, StoreError};

use super::steps::recorded_steps;
use super::Worker;

/// How long a contact a lead made or linked is linked directly by the next lead with its
/// phone or e-mail, whatever the CRM's search shows. Bitrix24's duplicate index and
/// amoCRM's contact search catch up with a create within seconds to a minute or two; ten
/// minutes is well past that, and short enough that a card a person merged or deleted
/// since is seldom linked (it is looked up again after that).
pub const REMEMBER_CONTACT: Duration = Duration::from_secs(600);

/// How soon a lead that found its contact locked is due again (at most; sooner when the
/// holder's lease ends first), plus up to as much again at random so that leads waiting
/// for one phone do not come back all at once.
pub const CONTACT_WAIT: Duration = Duration::from_millis(500);

/// The contact locks an attempt holds, and how it leaves them.
#[derive(Debug, Default)]
pub(super) struct Contacts {
    /// Contacts other leads with this phone or e-mail made or linked a moment ago.
    pub known: Vec<String>,
    /// The contact is settled: made or linked (its step recorded, or the create answered).
    pub settled: bool,
    /// The contact the create was linked to or made with, when the CRM said.
    pub contact: Option<String>,
}

/// What an attempt does about contact locks.
pub(super) enum Turn {
    /// Nothing to lock.
    Free,
    /// Held by this attempt.
    Taken(Contacts),
    /// Another lead holds one: the claim was handed back; send nothing.
    HandedBack,
}

impl Worker {
    /// Takes the claim's contact locks when its create links contacts and a contact step
    /// is still to come.
    pub(super) async fn take_contacts(&self, claim: &Claim) -> Result<Turn, StoreError> {
        let op = &claim.operation;
        if !self.crm.links_contacts() || (op.contact.phone.is_none() && op.contact.email.is_none())
        {
            return Ok(Turn::Free);
        }
        let steps = self.crm.steps();
        if !steps.is_empty() {
            // A resumed create whose contact step is recorded needs no lock.
            let timeline = self.store.timeline(&op.operation_id).await?;
            let done = recorded_steps(&timeline);
            if steps.iter().all(|s| done.iter().any(|d| d.step == *s)) {
                return Ok(Turn::Free);
            }
        }
        let wait = CONTACT_WAIT + CONTACT_WAIT.mul_f64(rand::random::<f64>());
        match self
            .store
            .take_contact_locks(claim, REMEMBER_CONTACT, wait, self.store.now())
            .await?
        {
            ContactTurn::Taken { known } => Ok(Turn::Taken(Contacts {
                known,
                ..Contacts::default()
            })),
            ContactTurn::Held { at } => {
                tracing::info!(due_at = %at, "another lead is finding or making this contact: put back");
                Ok(Turn::HandedBack)
            }
        }
    }

    /// Leaves the locks after the attempt (its outcome recorded). Bookkeeping: a failure
    /// is logged, and the locks end with the lease anyway.
    pub(super) async fn leave_contacts(&self, lease: &Lease, contacts: Contacts) {
        let how = if contacts.settled {
            ContactLeave::Settled(contacts.contact)
        } else {
            ContactLeave::Unsettled
        };
        if let Err(e) = self
            .store
            .leave_contact_locks(lease, how, self.store.now())
            .await
        {
            tracing::warn!(error = %e, "leaving the contact locks failed: they end with the lease");
        }
    }
}
