//! A delivery's journal entry and its claim on the key: new, duplicate or conflict.
//!
//! The claim is `insert … on conflict do nothing` on the unique key, never "select, then
//! insert". A conflict (same key, other fingerprint) never changes a completed or failed
//! operation: unfinished work is blocked in `needs_review`, an attempt in flight still has
//! its outcome recorded, and after *keep original* the reconciler checks the CRM before
//! anything is attempted again.
//!
//! Cross-channel matching must see a concurrent intake of the same client: before it
//! looks, a delivery locks the intake slot of each normalized phone and e-mail, sorted
//! (on PostgreSQL a row of `intake_contact_slots`; on SQLite the one writer suffices), so
//! of two concurrent leads sharing a phone the second sees the first. A *shared* value —
//! one that `[matching] shared_after` other operations of the window already carry — is
//! counted before any lock and is neither locked nor matched, here and in PostgreSQL's
//! grouped intake alike. Both paths write the name's search words (`operation_names`).

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::{
    contact_lock_key, contact_slot, ContactKeys, DeliveryOutcome, DeliveryRecord, Matching,
    NewDelivery, NewEvent, Result,
};
use leadgate_domain::business::{step_for, MatchFact};
use leadgate_domain::rules::{DeliveryKind, MatchStep};
use leadgate_domain::{ErrorClass, ReviewReason, Status};
use leadgate_domain::{EventKind, TenantId};

use crate::ops::{must_lock, open_case, save, set_status, ContactMatch, Locked, WriteTx};

/// Records `deliveries`, each its tenant's, in order in the write transaction `tx` and
/// commits it: all of them or, on the first error, none.
pub(crate) async fn record_all<'a, T: WriteTx>(
    mut tx: T,
    deliveries: impl IntoIterator<Item = (TenantId, &'a NewDelivery)> + Send,
) -> Result<Vec<DeliveryRecord>> {
    let mut records = vec![];
    for (tenant, d) in deliveries {
        tx.write_as(tenant);
        records.push(record(&mut tx, d).await?);
    }
    tx.commit().await?;
    Ok(records)
}

/// Journals one delivery and claims its key, inside the caller's write transaction (the
/// backend decides how transactions are grouped).
async fn record<T: WriteTx>(tx: &mut T, d: &NewDelivery) -> Result<DeliveryRecord> {
    let id = d.operation_id.as_str();
    let now = d.received_at;
    // Two concurrent intakes sharing a phone would each look before the other committed
    // and see nothing. Where the backend needs it, the second waits on these locks until
    // the first commits and then sees it, as under SQLite's single writer. Taken before the
    // key is claimed, as PostgreSQL's grouped intake takes them (migration 0022), so the
    // two never wait for each other crosswise.
    // A shared phone or e-mail is neither locked nor matched: counted first, so it is
    // never waited on (PostgreSQL's grouped intake counts the same way).
    let mut matched = Shared::default();
    if d.review.is_none() {
        if let Some(m) = &d.matching {
            matched = shared(tx, id, &d.contact, m).await?;
            let slots = intake_slots(&matched.contact);
            if !slots.is_empty() {
                tx.lock_contacts(&slots).await?;
            }
        }
    }
    if tx.insert_operation(d, "worker", now).await? {
        let delivery_id = tx.insert_delivery(d, DeliveryKind::New.as_str()).await?;
        let mut detail =
            json!({"delivery_id": delivery_id, "outcome": "new", "payload_hash": d.payload_hash});
        if !matched.shared.is_empty() {
            detail["shared_contact"] = json!(matched.shared);
        }
        tx.append(
            id,
            "gateway",
            &NewEvent::new(EventKind::Delivery, detail),
            now,
        )
        .await?;
        // The common path (a plain new lead) stops here, without reading the row back:
        // four statements per delivery.
        let mut status = Status::Received;
        if let Some(reason) = d.review {
            let mut l = must_lock(tx, id).await?;
            open_case(
                tx,
                &mut l,
                reason,
                Some(delivery_id),
                "gateway",
                json!({}),
                now,
            )
            .await?;
            save(tx, &mut l, now).await?;
            status = l.op.status;
        } else if let Some(m) = &d.matching {
            if let Some(mut l) = match_contacts(tx, id, &matched.contact, m, now).await? {
                save(tx, &mut l, now).await?;
                status = l.op.status;
            }
        }
        return Ok(DeliveryRecord {
            delivery_id,
            outcome: DeliveryOutcome::New { status },
        });
    }
    let mut l = must_lock(tx, id).await?;
    let kind = DeliveryKind::of(false, &l.op.payload_hash, d.payload_hash.as_str());
    let delivery_id = tx.insert_delivery(d, kind.as_str()).await?;
    let outcome = if kind == DeliveryKind::Duplicate {
        let event = NewEvent::new(
            EventKind::Delivery,
            json!({"delivery_id": delivery_id, "outcome": "duplicate"}),
        );
        tx.append(id, "gateway", &event, now).await?;
        DeliveryOutcome::Duplicate {
            status: l.op.status,
            crm_id: l.op.crm_id.clone(),
        }
    } else {
        let event = conflict_event(json!({"delivery_id": delivery_id, "outcome": "conflict",
                "payload_hash": d.payload_hash, "original_hash": l.op.payload_hash}));
        tx.append(id, "gateway", &event, now).await?;
        let case_id = open_conflict(tx, &mut l, delivery_id, "gateway", now).await?;
        DeliveryOutcome::Conflict {
            status: l.op.status,
            case_id,
        }
    };
    Ok(DeliveryRecord {
        delivery_id,
        outcome,
    })
}

/// A new delivery's contact as it is matched: without its shared values, and which those
/// were (`Matching::shared_after`).
#[derive(Debug, Default)]
struct Shared {
    contact: ContactKeys,
    shared: Vec<&'static str>,
}

/// `contact` without the values that `m.shared_after` other operations of the window carry
/// already.
async fn shared<T: WriteTx>(
    tx: &mut T,
    id: &str,
    contact: &ContactKeys,
    m: &Matching,
) -> Result<Shared> {
    let mut out = Shared {
        contact: contact.clone(),
        shared: vec![],
    };
    if m.shared_after == 0 || (contact.phone.is_none() && contact.email.is_none()) {
        return Ok(out);
    }
    let at_most = i64::from(m.shared_after);
    let (on_phone, on_email) = tx.contact_uses(id, m.since, contact, at_most).await?;
    if contact.phone.is_some() && on_phone >= at_most {
        out.contact.phone = None;
        out.shared.push("phone");
    }
    if contact.email.is_some() && on_email >= at_most {
        out.contact.email = None;
        out.shared.push("email");
    }
    Ok(out)
}

/// The intake slots of a contact's values (`store::contact_slot`), in one order (sorted,
/// no repeats): two intakes never wait for each other's phone and e-mail crosswise.
pub(crate) fn intake_slots(contact: &ContactKeys) -> Vec<i64> {
    let mut slots: Vec<i64> = [("phone", &contact.phone), ("email", &contact.email)]
        .into_iter()
        .filter_map(|(kind, v)| v.as_deref().map(|v| contact_slot(kind, v)))
        .collect();
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// The contact-lock keys of a contact's values (`contact_locks`, migration 0023), in one
/// order (sorted, no repeats).
pub(crate) fn contact_lock_keys(contact: &ContactKeys) -> Vec<i64> {
    let mut keys: Vec<i64> = [("phone", &contact.phone), ("email", &contact.email)]
        .into_iter()
        .filter_map(|(kind, v)| v.as_deref().map(|v| contact_lock_key(kind, v)))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// What a backend's grouped intake (PostgreSQL: `leadgate_record_deliveries`, migration
/// 0022) needs to do what [`record`] does in the two cases it takes — a new key whose
/// contact matches nothing, and a duplicate — with the same locks and the same lookup.
/// Everything else it hands back, unwritten, to [`record_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OneStatement {
    /// Contact matching for a new key (`None` when `record` would not match: no rule, or
    /// no phone and no e-mail).
    pub matching: Option<OneMatch>,
}

/// What the grouped intake needs to match a new key as [`record`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OneMatch {
    /// The window's start.
    pub since: DateTime<Utc>,
    /// The intake slots of the phone and of the e-mail.
    pub phone_slot: Option<i64>,
    pub email_slot: Option<i64>,
    /// `Matching::shared_after`, `None` for 0.
    pub shared_after: Option<i32>,
}

/// `None` when the delivery would open a review case if its key is new (a late
/// delivery): [`record`] handles it whole.
pub(crate) fn one_statement(d: &NewDelivery) -> Option<OneStatement> {
    if d.review.is_some() {
        return None;
    }
    let matching = d.matching.as_ref().and_then(|m| {
        let phone_slot = d.contact.phone.as_deref().map(|v| contact_slot("phone", v));
        let email_slot = d.contact.email.as_deref().map(|v| contact_slot("email", v));
        (phone_slot.is_some() || email_slot.is_some()).then_some(OneMatch {
            since: m.since,
            phone_slot,
            email_slot,
            shared_after: (m.shared_after > 0)
                .then(|| i32::try_from(m.shared_after).unwrap_or(i32::MAX)),
        })
    });
    Some(OneStatement { matching })
}

/// The `delivery` event of a conflicting delivery.
pub(crate) fn conflict_event(detail: Value) -> NewEvent {
    NewEvent {
        kind: EventKind::Delivery,
        error_class: Some(ErrorClass::Conflict),
        detail,
    }
}

/// Opens the payload-conflict case of a conflicting delivery and writes the operation
/// back.
pub(crate) async fn open_conflict<T: WriteTx>(
    tx: &mut T,
    l: &mut Locked,
    delivery_id: i64,
    actor: &str,
    now: DateTime<Utc>,
) -> Result<i64> {
    let detail = json!({"delivery_id": delivery_id});
    let case_id = open_case(
        tx,
        l,
        ReviewReason::PayloadConflict,
        Some(delivery_id),
        actor,
        detail,
        now,
    )
    .await?;
    save(tx, l, now).await?;
    Ok(case_id)
}

/// Applies the source's matching rule to a new operation whose contact matches earlier
/// operations; the operation, when it changed.
async fn match_contacts<T: WriteTx>(
    tx: &mut T,
    id: &str,
    contact: &ContactKeys,
    m: &Matching,
    now: DateTime<Utc>,
) -> Result<Option<Locked>> {
    if contact.phone.is_none() && contact.email.is_none() {
        return Ok(None);
    }
    // The contacts are locked (`record`, before the claim).
    let rows = tx.contact_matches(id, m.since, contact).await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let same_channel = |r: &ContactMatch| m.same_channel.contains(&r.source);
    let matches: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut v =
                json!({"operation_id": r.operation_id, "crm_id": r.crm_id, "status": r.status});
            // Only when the channel has other sources: the event reads as before otherwise.
            if same_channel(r) {
                v["same_channel"] = json!(true);
            }
            v
        })
        .collect();
    let event = NewEvent::new(
        EventKind::ContactMatch,
        json!({"rule": m.rule, "matches": matches}),
    );
    tx.append(id, "gateway", &event, now).await?;
    let facts: Vec<MatchFact> = rows
        .iter()
        .map(|r| MatchFact {
            same_channel: same_channel(r),
            crm_id: r.crm_id.as_deref(),
        })
        .collect();
    let step = step_for(m.rule, &facts);
    if step == MatchStep::Create {
        return Ok(None);
    }
    let mut l = must_lock(tx, id).await?;
    match step {
        MatchStep::Link(crm_id) => {
            let by_rule = if facts.iter().any(|f| f.same_channel) {
                "same_channel"
            } else {
                "link"
            };
            let event = NewEvent::new(
                EventKind::Linked,
                json!({"crm_id": crm_id, "by_rule": by_rule}),
            );
            tx.append(id, "gateway", &event, now).await?;
            l.op.crm_id = Some(crm_id);
            l.op.crm_link = Some("linked".into());
            set_status(tx, &mut l, Status::Completed, "gateway", now).await?;
        }
        MatchStep::Review | MatchStep::Create => {
            let detail = json!({"matches": matches});
            open_case(
                tx,
                &mut l,
                ReviewReason::CrossChannelMatch,
                None,
                "gateway",
                detail,
                now,
            )
            .await?;
        }
    }
    Ok(Some(l))
}

#[cfg(test)]
mod tests {
    use super::*;
    use leadgate_domain::{fingerprint, MatchRule, OperationId};

    fn delivery(phone: Option<&str>, email: Option<&str>) -> NewDelivery {
        let payload = json!({"k": 1});
        NewDelivery {
            operation_id: OperationId::new("site", "k").unwrap(),
            source: "site".into(),
            content_type: None,
            raw_body: vec![],
            payload_hash: fingerprint(&payload, &[]).unwrap(),
            payload,
            transform_version: 1,
            contact: ContactKeys {
                phone: phone.map(Into::into),
                email: email.map(Into::into),
                name: None,
            },
            event_time: None,
            received_at: crate::local_now(),
            review: None,
            matching: None,
        }
    }

    #[test]
    fn the_one_statement_intake_gets_what_record_would_lock_and_match() {
        let since = crate::local_now();
        let matching = Some(Matching {
            rule: MatchRule::Review,
            since,
            same_channel: vec![],
            shared_after: Matching::SHARED_AFTER,
        });
        // No rule: no matching, whatever the contact.
        let d = delivery(Some("+79990001122"), Some("a@example.com"));
        assert_eq!(one_statement(&d), Some(OneStatement { matching: None }));
        // A rule but no contact: `record` does not match either.
        let d = NewDelivery {
            matching: matching.clone(),
            ..delivery(None, None)
        };
        assert_eq!(one_statement(&d), Some(OneStatement { matching: None }));
        // Both slots, and the shared rule, as `record` takes them.
        let d = NewDelivery {
            matching,
            ..delivery(Some("+79990001122"), Some("a@example.com"))
        };
        let one = one_statement(&d).unwrap().matching.unwrap();
        assert_eq!(
            one,
            OneMatch {
                since,
                phone_slot: Some(contact_slot("phone", "+79990001122")),
                email_slot: Some(contact_slot("email", "a@example.com")),
                shared_after: Some(20),
            }
        );
        let mut slots = vec![one.phone_slot.unwrap(), one.email_slot.unwrap()];
        slots.sort_unstable();
        assert_eq!(intake_slots(&d.contact), slots);
        assert!(slots.iter().all(|s| (0..65536).contains(s)));
        // A late delivery would open a case if its key is new: `record` handles it.
        let d = NewDelivery {
            review: Some(ReviewReason::LateDuplicate),
            ..d
        };
        assert_eq!(one_statement(&d), None);
    }
}
