-- Issue 35 (fleet mode), step 10: the console shows one tenant at a time, and its lists
-- read the tenant shown. The open cases of one tenant are an index range.
create index review_cases_tenant_open on review_cases (tenant_id, id) where resolved_at is null;
