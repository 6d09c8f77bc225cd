-- Issue 34, point 4: every sign-in to the web console is journaled — when, the login as
-- typed (none when it was not a plausible login: it may be a password typed into the
-- wrong field), the client's address and how it ended. Never the password.
create table console_sign_ins (
    id       integer primary key autoincrement,
    at       text not null,
    login    text,
    client   text not null,
    outcome  text not null
);
create index console_sign_ins_at on console_sign_ins (at);
create index console_sign_ins_login on console_sign_ins (login, id);

-- Issue 37, point 1 (support's lookup) needs no schema here: one operator, no roles; the
-- store runs the same select PostgreSQL's `leadgate_lookup` does.

-- Issue 37, point 5: every running gateway and worker beats here every few seconds.
create table gateway_heartbeats (
    owner       text primary key,
    kind        text not null,
    started_at  text not null,
    beat_at     text not null
);
