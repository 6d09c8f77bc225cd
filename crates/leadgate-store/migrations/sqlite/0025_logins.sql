-- Issue 32. No change on SQLite (one operator's file, no logins): this file keeps the
-- version numbers of the two backends aligned. PostgreSQL's 0025 orders
-- `leadgate_role_of` (least privilege wins).
select 1;
