//! The queue between intake and a backend's intake writer (`sqlite.rs`, `postgres/grouped.rs`):
//! deliveries wait here to be recorded together, and each sender waits for the answer of
//! the transaction that recorded its delivery — an answer still means "durable".
//!
//! Both backends' writers take their groups from here, so the bounds are the same on
//! both: a sender waits at most [`PATIENCE`] (10 s) from the moment it handed its
//! delivery over, then hears "unavailable" (503). A delivery no writer has taken by then
//! is never written; one already in a running group may still commit, and the sender's
//! next attempt is answered as a duplicate. A writer gives a group up after
//! [`GROUP_DEADLINE`] (30 s), so a connection that stopped answering cannot keep it. A
//! gateway whose database is away, held or silent therefore says so in about that time
//! (`tests/it/insiders.rs`, `every_sender_hears_unavailable_in_time_…` on both backends).

use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use leadgate_domain::TenantId;

use super::{DbError, DbFault, DeliveryRecord, NewDelivery, Result, StoreError};

/// How long a sender waits for its delivery's answer, from the moment it handed the
/// delivery over: to be queued, taken into a group and committed. Past it the sender is
/// answered "unavailable" (503, send again). A delivery not taken yet is then never
/// written; one whose group is already running may still commit, and the sender's next
/// attempt finds it (a duplicate). While the database is away, held by someone else or
/// silent on a connection that stopped answering, senders hear so in about this time,
/// not after every group queued before theirs, and not never.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// How long a writer may spend on one group before it gives the group up (its senders
/// have heard "unavailable" by then) and takes the next: a connection that stopped
/// answering must not keep a writer for ever. PostgreSQL's own `statement_timeout`
/// (`postgres::connect_options`) ends a statement the server is still running sooner.
pub(crate) const GROUP_DEADLINE: Duration = Duration::from_secs(30);

/// Deliveries waiting at most; a sender beyond it waits for room (at most `PATIENCE`).
const CAPACITY: usize = 1024;

/// Where a delivery's answer goes.
pub(crate) type Reply = oneshot::Sender<Result<DeliveryRecord>>;

/// A delivery and the tenant it was delivered to: the writer records each delivery of a
/// group as its own tenant's.
pub(crate) type Queued = (TenantId, NewDelivery);

/// A delivery waiting for the writer: when it was handed over, and where its answer goes.
pub(crate) struct Job {
    delivery: Queued,
    queued: Instant,
    reply: Reply,
}

/// The senders' end of the queue.
#[derive(Clone)]
pub(crate) struct IntakeQueue(mpsc::Sender<Job>);

/// The writer's end of the queue.
pub(crate) struct Jobs(mpsc::Receiver<Job>);

/// "Unavailable": the writer did not take the delivery in time, or is gone.
fn unavailable() -> StoreError {
    StoreError::Database(DbError::new(
        DbFault::PoolTimedOut,
        None,
        "the intake writer did not take the delivery in time",
    ))
}

pub(crate) fn queue() -> (IntakeQueue, Jobs) {
    let (tx, rx) = mpsc::channel(CAPACITY);
    (IntakeQueue(tx), Jobs(rx))
}

impl IntakeQueue {
    /// Hands `delivery`, `tenant`'s, to the writer and waits for its answer.
    pub(crate) async fn record(
        &self,
        tenant: TenantId,
        delivery: NewDelivery,
    ) -> Result<DeliveryRecord> {
        let (reply, answer) = oneshot::channel();
        let closed = || {
            StoreError::Database(DbError::new(
                DbFault::PoolClosed,
                None,
                "the intake writer has stopped",
            ))
        };
        let queued = Instant::now();
        let deadline = tokio::time::Instant::from_std(queued + PATIENCE);
        let job = Job {
            delivery: (tenant, delivery),
            queued,
            reply,
        };
        match tokio::time::timeout_at(deadline, self.0.send(job)).await {
            Ok(sent) => sent.map_err(|_| closed())?,
            Err(_) => return Err(unavailable()),
        }
        // Dropping `answer` at the deadline closes the reply: a writer that has not taken
        // the delivery yet drops it unwritten.
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(answer) => answer.map_err(|_| closed())?,
            Err(_) => Err(unavailable()),
        }
    }
}

impl Jobs {
    /// Waits for a delivery and takes, with it, what else is waiting, up to `max`: the
    /// group the writer records next. A delivery whose sender is gone (its request was
    /// cancelled: it heard nothing and will send again, and that delivery is the one to
    /// record) is dropped; one that waited longer than `PATIENCE` is answered
    /// "unavailable", unwritten. `None` once every sender is gone.
    pub(crate) async fn take(&mut self, max: usize) -> Option<Vec<(Queued, Reply)>> {
        loop {
            let mut next = Some(self.0.recv().await?);
            let mut group = vec![];
            while let Some(job) = next.take() {
                if job.reply.is_closed() {
                    // dropped
                } else if job.queued.elapsed() > PATIENCE {
                    let _ = job.reply.send(Err(unavailable()));
                } else {
                    group.push((job.delivery, job.reply));
                }
                if group.len() < max {
                    next = self.0.try_recv().ok();
                }
            }
            if !group.is_empty() {
                return Some(group);
            }
        }
    }
}
