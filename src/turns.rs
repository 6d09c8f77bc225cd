//! The fleet's shared lanes, and when a tenant's worker looks for work (issue 35, step 7).
//!
//! **Lanes.** A gateway runs `[fleet] lanes` steps of tenants' workers at once, whatever
//! the number of tenants. A tenant's claim loops and reconciler take a [`Lane`] for each
//! step; while every lane is taken they wait, and the lane freed next goes to the tenant
//! whose turn it is by deficit round robin in lane-time (`domain::fairness::Drr`,
//! weighted by the registry's `weight`): a step is charged the wall time it held the lane.
//! So a tenant whose CRM hangs until the call's timeout pays for every second it held,
//! a tenant with a 50,000-lead backlog gets its share and no more, and a tenant with one
//! new lead waits at most for the round to come to it. A tenant also never holds more
//! lanes than its `max_in_flight` claim loops and its reconciler, one each.
//!
//! **Wake-ups.** An idle tenant's loops do not poll the database: they wait until the
//! [`board`] says the tenant has work. The board is one statement per `[worker]
//! poll_interval` for every tenant at once (`Tenants::tenants_with_work`, on indexes that
//! lead with the tenant), instead of three queries per loop per tenant; it wakes a
//! tenant's claim loops when work is due and its reconciler when a lease ran out. While
//! it cannot read the database it wakes every tenant, so a tenant's work never waits on
//! the board; and every loop looks on its own after [`LOOK_ANYWAY`] whatever the board
//! said.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{oneshot, watch, Notify};
use tokio::time::Instant;

use crate::domain::fairness::Drr;
use crate::store::{Store, TenantWork};

/// How long an idle loop waits for the board before it looks for work itself.
pub const LOOK_ANYWAY: Duration = Duration::from_secs(60);

/// Lane-time a tenant earns per visit of the round, per unit of weight.
const QUANTUM: Duration = Duration::from_millis(100);

/// The lanes tenants' steps share, and each served tenant's wake-up.
pub struct Lanes {
    inner: Mutex<Inner>,
}

struct Inner {
    free: usize,
    drr: Drr<i32>,
    /// Loops waiting for a lane, by tenant, first come first served within a tenant.
    waiting: HashMap<i32, VecDeque<oneshot::Sender<Lane>>>,
    wakes: HashMap<i32, Wakes>,
}

/// A tenant's two wake-ups: its claim loops' (work due) and its reconciler's (a lease ran
/// out), so a lead due wakes no reconciler and a stale lease no claim loop.
#[derive(Clone, Default)]
struct Wakes {
    work: Arc<Notify>,
    stale: Arc<Notify>,
}

impl Wakes {
    fn all(&self) {
        self.work.notify_waiters();
        self.stale.notify_waiters();
    }
}

/// What an idle loop waits for the board to say about its tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// An operation or a CRM update is due (the claim loops).
    Work,
    /// A lease ran out (the reconciler).
    Stale,
}

impl Lanes {
    pub fn new(lanes: usize) -> Arc<Lanes> {
        Arc::new(Lanes {
            inner: Mutex::new(Inner {
                free: lanes.max(1),
                drr: Drr::new(QUANTUM),
                waiting: HashMap::new(),
                wakes: HashMap::new(),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while holding it; a poisoned lock's data is still whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves `tenant` with `weight` (or changes its weight): its loops' turns.
    pub fn join(self: &Arc<Self>, tenant: i32, weight: i32) -> Arc<Turns> {
        let mut inner = self.lock();
        inner
            .drr
            .set_weight(tenant, u32::try_from(weight).unwrap_or(1));
        let wakes = inner.wakes.entry(tenant).or_default().clone();
        Arc::new(Turns {
            lanes: Arc::clone(self),
            tenant,
            wakes,
        })
    }

    /// Stops serving `tenant` (its loops have stopped).
    pub fn leave(&self, tenant: i32) {
        let mut inner = self.lock();
        inner.drr.remove(&tenant);
        inner.waiting.remove(&tenant);
        inner.wakes.remove(&tenant);
    }

    /// Wakes the idle loops of the tenants with work, those the work is for.
    pub fn wake(&self, work: &[TenantWork]) {
        let inner = self.lock();
        for w in work {
            if let Some(wakes) = inner.wakes.get(&w.tenant) {
                if w.due {
                    wakes.work.notify_waiters();
                }
                if w.stale {
                    wakes.stale.notify_waiters();
                }
            }
        }
    }

    /// Wakes every tenant's idle loops.
    pub fn wake_all(&self) {
        for w in self.lock().wakes.values() {
            w.all();
        }
    }

    /// Whether any tenant is served (has joined and not left).
    pub fn serves_anyone(&self) -> bool {
        !self.lock().wakes.is_empty()
    }

    /// Lanes free now (for tests and the log).
    pub fn free(&self) -> usize {
        self.lock().free
    }

    /// A lane for `tenant`: at once when one is free and nobody waits, else when the
    /// round gives it one.
    async fn take(self: &Arc<Self>, tenant: i32) -> Lane {
        let rx = {
            let mut inner = self.lock();
            if inner.free > 0 && inner.waiting.values().all(VecDeque::is_empty) {
                inner.free -= 1;
                return Lane::new(self, tenant);
            }
            let (tx, rx) = oneshot::channel();
            inner.waiting.entry(tenant).or_default().push_back(tx);
            rx
        };
        match rx.await {
            Ok(lane) => lane,
            // The tenant left while its loop waited: it stops at its next look at
            // shutdown; until then it runs without holding anyone up.
            Err(_) => Lane {
                lanes: None,
                tenant,
                since: Instant::now(),
            },
        }
    }

    /// A lane `tenant` held for `used` is free: charged, then handed to whoever's turn
    /// it is.
    fn give_back(self: &Arc<Self>, tenant: i32, used: Duration) {
        let mut inner = self.lock();
        inner.drr.charge(&tenant, used);
        loop {
            let Inner { drr, waiting, .. } = &mut *inner;
            let next = drr.next(|t| waiting.get(t).is_some_and(|q| !q.is_empty()));
            let Some(next) = next else {
                // A tenant that left may still have had loops waiting: they were dropped
                // with its queue. Nobody waits for this lane.
                inner.free += 1;
                return;
            };
            let tx = waiting
                .get_mut(&next)
                .and_then(VecDeque::pop_front)
                .expect("the round picked a tenant with a loop waiting");
            // A lane refused (its loop stopped waiting) comes back through `Drop` and
            // would lock again: hand it on here instead.
            match tx.send(Lane::new(self, next)) {
                Ok(()) => return,
                Err(mut refused) => refused.lanes = None,
            }
        }
    }
}

/// One step's hold on a lane; freed when dropped.
pub struct Lane {
    /// None: not a lane of the pool (its tenant left, or it was handed on already).
    lanes: Option<Arc<Lanes>>,
    tenant: i32,
    since: Instant,
}

impl Lane {
    fn new(lanes: &Arc<Lanes>, tenant: i32) -> Lane {
        Lane {
            lanes: Some(Arc::clone(lanes)),
            tenant,
            since: Instant::now(),
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        if let Some(lanes) = self.lanes.take() {
            lanes.give_back(self.tenant, self.since.elapsed());
        }
    }
}

/// A step's turn: a fleet tenant's lane (`Some(Some(lane))`), nothing to hold for the
/// default tenant's worker (`Some(None)`); `None` when `shutdown` came first.
pub async fn turn(
    turns: Option<&Turns>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Option<Lane>> {
    match turns {
        Some(turns) => turns.lane(shutdown).await.map(Some),
        None => Some(None),
    }
}

/// Waits before looking for work again, after a look found none: a fleet tenant's loop
/// until the board says it has work of the kind `wait` names, the default tenant's
/// `poll_interval`; `shutdown` ends it.
pub async fn idle(
    turns: Option<&Turns>,
    wait: Wait,
    poll_interval: Duration,
    shutdown: &mut watch::Receiver<bool>,
) {
    match turns {
        Some(turns) => turns.idle(wait, shutdown).await,
        None => nap(poll_interval, shutdown).await,
    }
}

/// Sleeps for `d`, or until `shutdown` changes.
async fn nap(d: Duration, shutdown: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = shutdown.changed() => {}
    }
}

/// A served tenant's turns: the lanes its steps take, and its wake-up.
pub struct Turns {
    lanes: Arc<Lanes>,
    tenant: i32,
    wakes: Wakes,
}

impl Turns {
    /// Waits for a lane (or for `shutdown`: then `None`).
    pub async fn lane(&self, shutdown: &mut watch::Receiver<bool>) -> Option<Lane> {
        if *shutdown.borrow() {
            return None;
        }
        tokio::select! {
            lane = self.lanes.take(self.tenant) => Some(lane),
            _ = shutdown.wait_for(|stop| *stop) => None,
        }
    }

    /// Waits until the board says this tenant has work of the kind `wait` names,
    /// [`LOOK_ANYWAY`] passes, or `shutdown`.
    pub async fn idle(&self, wait: Wait, shutdown: &mut watch::Receiver<bool>) {
        let wake = match wait {
            Wait::Work => &self.wakes.work,
            Wait::Stale => &self.wakes.stale,
        };
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(LOOK_ANYWAY) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Finds the tenants with work and wakes their loops, every `every`, until `shutdown`.
pub async fn board(
    store: Arc<dyn Store>,
    lanes: Arc<Lanes>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut failing = false;
    while !*shutdown.borrow() {
        // A deployment without tenants (or none served yet) pays no statement.
        if lanes.serves_anyone() {
            match store.tenants_with_work(store.now()).await {
                Ok(work) => {
                    if failing {
                        tracing::info!("the fleet's board reads the database again");
                        failing = false;
                    }
                    lanes.wake(&work);
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "the fleet's board cannot read which tenants have work; waking every tenant until it can");
                        failing = true;
                    }
                    lanes.wake_all();
                }
            }
        }
        nap(every, &mut shutdown).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lanes are handed by the round's weights, not first come first served: with one
    /// lane and two tenants always waiting, weight 3 gets three steps to weight 1's one.
    #[tokio::test(start_paused = true)]
    async fn a_freed_lane_goes_by_weight() {
        let lanes = Lanes::new(1);
        let (heavy, light) = (lanes.join(1, 3), lanes.join(2, 1));
        let (_stop, rx) = watch::channel(false);
        let steps = Arc::new(Mutex::new(Vec::new()));
        let mut loops = tokio::task::JoinSet::new();
        for turns in [heavy, light] {
            for _ in 0..2 {
                let (turns, steps, mut rx) = (Arc::clone(&turns), Arc::clone(&steps), rx.clone());
                loops.spawn(async move {
                    for _ in 0..40 {
                        let lane = turns.lane(&mut rx).await.expect("not shut down");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        steps.lock().unwrap().push(turns.tenant);
                        drop(lane);
                    }
                });
            }
        }
        tokio::time::sleep(Duration::from_secs(4)).await;
        let first: Vec<i32> = steps.lock().unwrap().iter().take(60).copied().collect();
        let heavy_steps = first.iter().filter(|t| **t == 1).count();
        assert!(
            (40..=50).contains(&heavy_steps),
            "weight 3 against 1 should take about 45 of 60 steps, took {heavy_steps}: {first:?}"
        );
        loops.abort_all();
    }

    /// A loop that stops waiting (shutdown) does not take a lane with it.
    #[tokio::test]
    async fn a_lane_refused_is_handed_on() {
        let lanes = Lanes::new(1);
        let (a, b) = (lanes.join(1, 1), lanes.join(2, 1));
        let (stop, mut rx) = watch::channel(false);
        let held = a.lane(&mut rx).await.expect("free");
        assert_eq!(lanes.free(), 0);
        let (stop_b, mut rx_b) = watch::channel(false);
        let waiting = tokio::spawn(async move { b.lane(&mut rx_b).await.is_some() });
        tokio::task::yield_now().await;
        stop_b.send(true).expect("b waits");
        assert!(!waiting.await.expect("b's loop"), "b was shut down");
        drop(held);
        assert_eq!(lanes.free(), 1, "the lane came back, not lost to b");
        let again = a.lane(&mut rx).await;
        assert!(again.is_some());
        drop(stop);
    }

    /// A tenant's idle loops wake when the board names it, and only those its work is
    /// for: work due wakes the claim loops, a lease run out the reconciler.
    #[tokio::test]
    async fn the_board_wakes_only_the_tenants_it_names() {
        let lanes = Lanes::new(2);
        let (a, b) = (lanes.join(1, 1), lanes.join(2, 1));
        let (_stop, rx) = watch::channel(false);
        let woke = |t: &Arc<Turns>, wait: Wait| {
            let (t, mut rx) = (Arc::clone(t), rx.clone());
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_millis(500), t.idle(wait, &mut rx))
                    .await
                    .is_ok()
            })
        };
        let waits = [
            woke(&a, Wait::Work),
            woke(&a, Wait::Stale),
            woke(&b, Wait::Work),
            woke(&b, Wait::Stale),
        ];
        tokio::time::sleep(Duration::from_millis(50)).await;
        lanes.wake(&[
            TenantWork {
                tenant: 1,
                due: true,
                stale: false,
            },
            TenantWork {
                tenant: 2,
                due: false,
                stale: true,
            },
        ]);
        let mut woken = vec![];
        for w in waits {
            woken.push(w.await.expect("the loop"));
        }
        assert_eq!(
            woken,
            [true, false, false, true],
            "a's claim loop and b's reconciler, and no other"
        );
        // While the board cannot read, everyone looks.
        let waits = [woke(&a, Wait::Work), woke(&b, Wait::Stale)];
        tokio::time::sleep(Duration::from_millis(50)).await;
        lanes.wake_all();
        for w in waits {
            assert!(w.await.expect("the loop"));
        }
    }
}
