-- Issue 15. No change on SQLite: this file keeps the version numbers of the two
-- backends aligned. PostgreSQL's 0022 groups its intake (`leadgate_record_deliveries`),
-- as SQLite's `intake_writer` (store/sqlite.rs) has done since 0008.
select 1;
