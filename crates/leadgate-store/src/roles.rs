//! The store's roles: one trait per kind of caller, [`Store`] their sum. A caller takes
//! the narrowest role it needs (the CRM adapters take [`CrmAccess`], nothing more);
//! `Arc<dyn Store>` becomes `Arc<dyn Role>` by upcasting.

use super::*;

/// The engine and the clock every role shares: leases, due times and takeovers are judged by `now`.
pub trait Clock: Send + Sync + 'static {
    /// The database's engine.
    fn backend(&self) -> Backend;

    /// The clock leases, due times and takeovers are judged by. PostgreSQL: the
    /// database server's clock (read periodically, carried forward by this process's
    /// monotonic clock), so machines whose clocks disagree agree on when a lease ends.
    /// SQLite: this machine's clock, which every process on the file shares.
    fn now(&self) -> DateTime<Utc>;

    /// The tenant whose rows this store's roles read and write (fleet mode): the default
    /// tenant unless [`Tenants::for_tenant`] made it. So far the business rules, pull marks,
    /// the connectors (pause, breaker, CRM tokens) and the worker's picks follow it; intake,
    /// cases, reads, alerts, the feed and upkeep read and write the default tenant's rows.
    fn tenant(&self) -> leadgate_domain::TenantId;
}

/// The operations store: every role. Both backends pass the same conformance suite
/// (tests/it/store.rs).
pub trait Store:
    Journal
    + WorkQueue
    + CrmAccess
    + Review
    + ClaimApi
    + Updates
    + Alerts
    + Rules
    + Reads
    + Dashboard
    + Upkeep
    + SignIns
    + Feed
    + Tenants
{
}

impl<
        T: Journal
            + WorkQueue
            + CrmAccess
            + Review
            + ClaimApi
            + Updates
            + Alerts
            + Rules
            + Reads
            + Dashboard
            + Upkeep
            + SignIns
            + Feed
            + Tenants
            + ?Sized,
    > Store for T
{
}
