-- Team alerts (src/alerts.rs): per configured channel, what was already announced and
-- who holds the sending turn. A row is the channel's whole state; the alert loops of every
-- gateway on this database take turns on it with a lease, so each alert goes out once.
create table alert_channels (
    channel         text primary key,
    -- the newest review case announced to this channel (cases with a higher id are new)
    case_cursor     integer not null,
    -- when the last message announcing new cases was accepted (one group per interval)
    last_group_at   text,
    -- when the channel accepted its recent messages: a JSON array of epoch milliseconds
    -- within the last minute (the per-minute cap and the spacing)
    recent_sends    text not null default '[]',
    -- the message waiting to be accepted (JSON, without personal data), what announcing
    -- it advances the cursor to, and the condition states it announces (JSON)
    pending         text,
    pending_cursor  integer,
    pending_conditions text,
    -- failed tries of the pending message, and when the next may go
    failures        integer not null default 0,
    next_try_at     text,
    -- the sending turn
    lease_owner     text,
    lease_token     text,
    lease_until     text
);

-- A threshold or a connector's pause, as last announced to a channel: it is announced
-- again when it clears (or after the repeat interval), not on every check.
create table alert_conditions (
    channel      text not null references alert_channels (channel),
    key          text not null,
    firing       integer not null,
    since        text not null,
    notified_at  text not null,
    primary key (channel, key)
);
