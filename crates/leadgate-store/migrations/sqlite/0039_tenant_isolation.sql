-- Issue 35. No change on SQLite: this file keeps the version numbers of the two backends
-- aligned. PostgreSQL's 0039 keeps each person's login to their tenants with row-level
-- security; SQLite has no logins (its one operator sees every tenant).
select 1;
