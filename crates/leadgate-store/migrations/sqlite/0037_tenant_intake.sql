-- Issue 35. No change on SQLite: this file keeps the version numbers of the two backends
-- aligned. PostgreSQL's 0037 makes its grouped intake record each delivery as its
-- tenant's; SQLite's intake runs the store's steps (store/journal/ops.rs), which write
-- through a transaction that knows its tenant.
select 1;
