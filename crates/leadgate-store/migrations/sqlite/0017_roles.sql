-- Roles are PostgreSQL's (migrations/postgres/0017_roles.sql): one SQLite file is one
-- machine's, opened by one operator, and the console says so (local single-operator
-- mode, the OS user as the actor). Nothing changes here; the version is kept in step.
select 1;
