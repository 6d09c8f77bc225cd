-- Fleet mode's scheduler (issue 35, step 7): which tenants have work is one probe per
-- tenant on indexes that lead with the tenant (`Tenants::tenants_with_work`), and each
-- tenant's worker picks its due work on them (`PICK_DUE`, `PICK_STALE`, the CRM updates'
-- pick all bind the tenant). The indexes without the tenant stay: the dashboard's
-- figures and the upkeep read across tenants.
create index operations_tenant_due on operations (tenant_id, next_attempt_at)
    where status = 'received';
create index operations_tenant_leases on operations (tenant_id, lease_expires_at)
    where status = 'in_progress';
create index crm_updates_tenant_pending on crm_updates (tenant_id, due_at)
    where state = 'pending';
