-- Fleet mode's scheduler (issue 35, step 7): which tenants have work is one probe per
-- tenant on indexes that lead with the tenant (`Tenants::tenants_with_work`), and each
-- tenant's worker picks its due work on them (`PICK_DUE`, `PICK_STALE`, the CRM updates'
-- pick all bind the tenant). The due index has the predicate of `operations_due`, or the
-- planner prefers that one and walks every other tenant's backlog to find none of this
-- tenant's (90 ms a pick behind a dead portal's 50,000 leads: `make fleet`). The indexes
-- without the tenant stay: the dashboard's figures and the upkeep read across tenants.
create index operations_tenant_due on operations (tenant_id, next_attempt_at)
    where status = 'received' and executor = 'worker';
create index operations_tenant_leases on operations (tenant_id, lease_expires_at)
    where status = 'in_progress';
create index crm_updates_tenant_pending on crm_updates (tenant_id, due_at)
    where state = 'pending';
