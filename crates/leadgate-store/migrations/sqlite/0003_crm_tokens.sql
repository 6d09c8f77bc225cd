-- The current OAuth tokens of a CRM connector (amoCRM without a long-lived token).
-- amoCRM ROTATES refresh tokens: every refresh answers a new refresh_token and the old
-- one stops working. Several `leadgate serve` / `worker` processes on several machines
-- share one account, so the current pair must live here, in the shared operations
-- database, and not in each process: whoever refreshes writes the new pair with a
-- compare-and-set on `version` (only the one who saw the current version wins), and the
-- others read it instead of refreshing with a token that is already dead. The
-- configured refresh_token only seeds the row on the first run (access_token null).
-- The tokens are credentials: whoever can read this database can use the account.
create table crm_tokens (
    connector      text primary key,
    access_token   text,
    refresh_token  text not null,
    -- when access_token stops working (null: no access token yet)
    expires_at     text,
    -- bumped by every save; the compare-and-set guard
    version        integer not null,
    updated_at     text not null
);
