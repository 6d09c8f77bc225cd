-- People's requests are PostgreSQL's (migrations/postgres/0026_request_limits.sql: their
-- shapes, at most 100 waiting per login, taken in turn per login). A SQLite file has one
-- operator, who writes directly. Nothing changes here; the version is kept in step.
select 1;
