-- Issue 15. No change on SQLite: this file keeps the version numbers of the two
-- backends aligned. PostgreSQL's 0008 adds `leadgate_record_delivery`, its intake of one
-- delivery in one statement; SQLite's intake is grouped instead (store/sqlite.rs,
-- `intake_writer`) and needs no function.
select 1;
