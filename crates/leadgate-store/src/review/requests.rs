//! A person's requests (PostgreSQL personal logins, migration 0017): a gateway applies
//! the oldest waiting one through the same functions the CLI calls, in one transaction
//! with the answer, the person's login as the actor. A request the rules refuse is
//! answered in a transaction of its own, so nothing of it is written.
//!
//! A gateway takes a request with `for update skip locked`, so each is applied once
//! however many gateways share the database (migration 0017). It takes them in turn per
//! login (`lock_waiting_request`: each login's oldest waiting request, the login whose
//! last request was applied longest ago first), so one person's backlog delays another's
//! request by at most one of theirs. The database's side of the queue (who may insert
//! what, and how many) is described in `store::requests`.

use chrono::{DateTime, Utc};

use crate::requests::{outcome_text, Answer, Ask};
use crate::{NewEvent, Resolve, Result, StoreError};
use leadgate_domain::roles::may_ask;
use leadgate_domain::EventKind;
use leadgate_domain::ReviewReason;

use crate::ops::WriteTx;
use crate::review::ops as review;
use crate::work_queue::attempts;

/// One row of `human_requests` no gateway has applied yet.
pub(crate) struct RequestRow {
    pub id: i64,
    pub actor: String,
    /// The tenant whose case, operation or connector it is about (the database checked
    /// it is, and that it is one of the asker's, migration 0039): applied as its.
    pub tenant: leadgate_domain::TenantId,
    /// A body that does not read back is declined, not retried forever.
    pub ask: Result<Ask>,
}

pub(crate) enum Applied {
    Nothing,
    Done(i64),
    /// Refused: to be answered by [`decline`] (the transaction that tried was rolled back).
    Declined(i64, StoreError),
}

/// Applies the oldest waiting request, skipping one another gateway is applying.
pub(crate) async fn apply_next<T: WriteTx>(mut tx: T, now: DateTime<Utc>) -> Result<Applied> {
    let Some(row) = tx.lock_waiting_request().await? else {
        return Ok(Applied::Nothing);
    };
    tx.write_as(row.tenant);
    let outcome = match row.ask {
        Ok(ask) => match may_still_ask(&mut tx, &row.actor, &ask).await {
            Ok(()) => apply(&mut tx, &row.actor, ask, now).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    match outcome {
        Ok(answer) => {
            tx.answer_request(row.id, &outcome_text(&Ok(answer)), now)
                .await?;
            tx.commit().await?;
            Ok(Applied::Done(row.id))
        }
        // The database failed, not the request: tried again on the next round.
        Err(e) if e.is_transient() => Err(e),
        Err(e) => Ok(Applied::Declined(row.id, e)),
    }
}

/// Does what `ask` asks, directly, as `actor` (the CLI, the owner's console, SQLite).
pub(crate) async fn perform<T: WriteTx>(
    mut tx: T,
    actor: &str,
    ask: Ask,
    now: DateTime<Utc>,
) -> Result<Answer> {
    let answer = apply(&mut tx, actor, ask, now).await?;
    tx.commit().await?;
    Ok(answer)
}

/// The database checked the role when the request was written; checked again here, under
/// the case's lock, with the role the login has now (one lowered since is refused).
async fn may_still_ask<T: WriteTx>(tx: &mut T, actor: &str, ask: &Ask) -> Result<()> {
    let role = tx.role_of(actor).await?;
    let reason = match ask {
        Ask::Resolve { case_id, .. } => tx.lock_case(*case_id).await?.map(|c| c.reason),
        _ => None,
    };
    let allowed = match (role, ask.kind(reason)) {
        (Some(role), Some(kind)) => may_ask(role, kind),
        // An unknown case: the rules say so when it is applied.
        (Some(_), None) => true,
        (None, _) => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(StoreError::Forbidden(format!(
            "the role of `{actor}` may not ask for this"
        )))
    }
}

/// Answers request `id` with why it was not applied, unless a gateway applied it since.
pub(crate) async fn decline<T: WriteTx>(
    mut tx: T,
    id: i64,
    why: StoreError,
    now: DateTime<Utc>,
) -> Result<()> {
    if tx.lock_request(id).await?.is_some() {
        tx.answer_request(id, &outcome_text(&Err(why)), now).await?;
    }
    tx.commit().await
}

async fn apply<T: WriteTx>(
    tx: &mut T,
    actor: &str,
    ask: Ask,
    now: DateTime<Utc>,
) -> Result<Answer> {
    Ok(match ask {
        Ask::Resolve {
            case_id,
            expected_version,
            action,
            comment,
            bulk,
        } => {
            let r = review::resolve_in(
                tx,
                Resolve {
                    case_id,
                    expected_version,
                    actor: actor.to_owned(),
                    comment,
                    action,
                    now,
                    bulk,
                },
            )
            .await?;
            Answer::Resolved {
                operation_id: r.operation.operation_id.to_string(),
                new_operation: r.new_operation.map(|o| o.to_string()),
            }
        }
        Ask::OpenReview {
            operation_id,
            detail,
        } => Answer::CaseOpened {
            case_id: review::open_review_in(
                tx,
                &operation_id,
                ReviewReason::UncertainOutcome,
                actor,
                detail,
                now,
            )
            .await?,
        },
        Ask::Notified {
            operation_id,
            detail,
        } => {
            let event = NewEvent::new(EventKind::Notification, detail);
            attempts::note_in(tx, operation_id.as_str(), actor, &event, now).await?;
            Answer::Noted
        }
        Ask::ResumeConnector { name } => Answer::Resumed {
            resumed: tx.resume_connector(&name, actor, now).await?,
        },
        Ask::PauseConnector { name, reason } => {
            let reason = reason.trim();
            leadgate_domain::text::check_pause_reason(reason)?;
            Answer::Paused {
                paused: tx
                    .pause_connector_by_hand(&name, reason, actor, now)
                    .await?,
            }
        }
        Ask::FeedSubscribe {
            url,
            events,
            secret,
        } => {
            // The CLI's checks (`feed::check`); a person's sentence, not a database error.
            let url = url.trim();
            let refused = StoreError::RequestRefused;
            crate::check_feed_url(url).map_err(refused)?;
            let events = crate::feed_event_types(&events.join(",")).map_err(refused)?;
            crate::feed_secret_key(&secret).map_err(refused)?;
            Answer::FeedSubscribed {
                id: tx
                    .insert_feed_subscriber(url, &secret, &events, now)
                    .await?,
            }
        }
        Ask::FeedRemove { id } => Answer::FeedChanged {
            done: tx.delete_feed_subscriber(id).await?,
        },
        Ask::FeedEnable { id } => Answer::FeedChanged {
            done: tx.enable_feed_subscriber(id).await?,
        },
        Ask::SetRules {
            expected_version,
            rules,
        } => Answer::RulesSet {
            version: crate::rules::ops::set_in(tx, actor, expected_version, rules, now).await?,
        },
    })
}
