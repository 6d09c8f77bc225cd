-- Issue 35 (fleet mode): a tenant's redelivery (`[tenant.claim_api] redeliver_url`) picks
-- its due claim-API operations (`PICK_REDELIVERY` binds the tenant) on an index that leads
-- with the tenant, with the predicate of `operations_external_due`: without it each
-- tenant's pick would walk every other tenant's external backlog.
create index operations_tenant_external_due on operations (tenant_id, next_attempt_at)
    where status = 'received' and executor = 'external';
