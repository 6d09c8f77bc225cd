-- People's requests are PostgreSQL's (migrations/postgres/0034_request_kinds.sql): one
-- SQLite file is one operator's, who acts directly. Nothing changes here; the version is
-- kept in step.
select 1;
