-- Issue 37, point 8: "Fix and resend". Nothing changes on SQLite: the edited payload
-- replaces `operations.payload` (its fingerprint stays the original's), and people's
-- requests, whose shapes PostgreSQL's 0029 extends, are PostgreSQL's. The version is kept
-- in step.
select 1;
