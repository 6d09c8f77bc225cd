-- Issue 35 (fleet mode): a tenant's own retention window (`[tenant.retention] full`), in
-- seconds; none: the deployment's `[retention]`. The deployment's scrub passes over a
-- tenant with its own window, which gets a pass of its own at its window.
alter table tenants add column retention_full_secs bigint check (retention_full_secs > 0);
