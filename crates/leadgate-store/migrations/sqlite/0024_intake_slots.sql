-- Issue 32. No change on SQLite: this file keeps the version numbers of the two backends
-- aligned. PostgreSQL's 0024 serializes intake on rows of `intake_contact_slots` instead
-- of advisory locks any login could take; SQLite has one writer and no logins. The shared
-- phone rule of the same issue lives in the store's steps (store/ops/intake.rs), which
-- SQLite's intake runs.
select 1;
