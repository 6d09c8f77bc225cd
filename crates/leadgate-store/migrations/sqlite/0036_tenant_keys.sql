-- Fleet mode (issue 35): the keys of the small tenant-owned tables lead with the tenant,
-- so two tenants may each have a connector `bitrix24`, a source `site`, a channel `team`
-- and the same content or signature, and a contact lock never lends one tenant's CRM
-- contact to another's lead. Every row so far is the default tenant's (0), so no key
-- collides. The big tables (operations and what hangs off them) keep their keys: an
-- operation's key carries its tenant (`<tenant>/<source>:<key>`).
--
-- SQLite changes a key by building the table again: each table's rows are kept aside,
-- the table dropped (its indexes and triggers with it) and made again with the new key,
-- the rows put back, its indexes and triggers made again as they were. Conditions go
-- first and come back last: they refer to their channel.

create table rebuild_content_keys as select * from content_keys;
create table rebuild_signature_uses as select * from signature_uses;
create table rebuild_connectors as select * from connectors;
create table rebuild_crm_tokens as select * from crm_tokens;
create table rebuild_crm_links as select * from crm_links;
create table rebuild_business_rules as select * from business_rules;
create table rebuild_business_rule_history as select * from business_rule_history;
create table rebuild_pull_cursors as select * from pull_cursors;
create table rebuild_contact_locks as select * from contact_locks;
create table rebuild_alert_channels as select * from alert_channels;
create table rebuild_alert_conditions as select * from alert_conditions;
drop table alert_conditions;
drop table content_keys;
drop table signature_uses;
drop table connectors;
drop table crm_tokens;
drop table crm_links;
drop table business_rules;
drop table business_rule_history;
drop table pull_cursors;
drop table contact_locks;
drop table alert_channels;

create table content_keys (
    source          text not null,
    content_sha256  text not null,
    operation_id    text not null,
    expires_at      text not null, tenant_id integer not null default 0,
    primary key (tenant_id, source, content_sha256)
);
insert into content_keys (source, content_sha256, operation_id, expires_at, tenant_id) select source, content_sha256, operation_id, expires_at, tenant_id from rebuild_content_keys;
drop table rebuild_content_keys;
create index content_keys_expires_at on content_keys (expires_at);

create table signature_uses (
    source            text not null,
    signature_sha256  text not null,
    operation_id      text not null,
    expires_at        text not null, tenant_id integer not null default 0,
    primary key (tenant_id, source, signature_sha256)
);
insert into signature_uses (source, signature_sha256, operation_id, expires_at, tenant_id) select source, signature_sha256, operation_id, expires_at, tenant_id from rebuild_signature_uses;
drop table rebuild_signature_uses;
create index signature_uses_expires_at on signature_uses (expires_at);

create table connectors (
    name        text not null,
    state       text not null check (state in ('active', 'paused')),
    reason      text,
    since       text not null,
    changed_by  text not null
, failures integer not null default 0, unreachable_since text, probe_at text, probes integer not null default 0, by_hand integer not null default 0, tenant_id integer not null default 0,
    primary key (tenant_id, name)
);
insert into connectors (name, state, reason, since, changed_by, failures, unreachable_since, probe_at, probes, by_hand, tenant_id) select name, state, reason, since, changed_by, failures, unreachable_since, probe_at, probes, by_hand, tenant_id from rebuild_connectors;
drop table rebuild_connectors;
create trigger feed_connector_added after insert on connectors begin
    insert into feed_emit (type, occurred_at, data)
        select 'connector.paused', new.since,
               json_object('connector', new.name, 'reason', new.reason)
        where new.state = 'paused';
    insert into feed_emit (type, occurred_at, data)
        select 'connector.unreachable', new.unreachable_since,
               json_object('connector', new.name, 'since', new.unreachable_since)
        where new.unreachable_since is not null;
end;
create trigger feed_connector_paused after update of state on connectors
when old.state = 'active' and new.state = 'paused'
begin
    insert into feed_emit (type, occurred_at, data) values ('connector.paused', new.since,
        json_object('connector', new.name, 'reason', new.reason));
end;
create trigger feed_connector_reachable after update of unreachable_since on connectors
when old.unreachable_since is not null and new.unreachable_since is null
begin
    insert into feed_emit (type, occurred_at, data) values ('connector.resumed',
        strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
        json_object('connector', new.name, 'after', 'outage', 'unreachable_since', old.unreachable_since));
end;
create trigger feed_connector_unpaused after update of state on connectors
when old.state = 'paused' and new.state = 'active'
begin
    insert into feed_emit (type, occurred_at, data) values ('connector.resumed', new.since,
        json_object('connector', new.name, 'after', 'pause'));
end;
create trigger feed_connector_unreachable after update of unreachable_since on connectors
when old.unreachable_since is null and new.unreachable_since is not null
begin
    insert into feed_emit (type, occurred_at, data) values ('connector.unreachable',
        new.unreachable_since, json_object('connector', new.name, 'since', new.unreachable_since));
end;

create table crm_tokens (
    connector      text not null,
    access_token   text,
    refresh_token  text not null,
    -- when access_token stops working (null: no access token yet)
    expires_at     text,
    -- bumped by every save; the compare-and-set guard
    version        integer not null,
    updated_at     text not null
, tenant_id integer not null default 0,
    primary key (tenant_id, connector)
);
insert into crm_tokens (connector, access_token, refresh_token, expires_at, version, updated_at, tenant_id) select connector, access_token, refresh_token, expires_at, version, updated_at, tenant_id from rebuild_crm_tokens;
drop table rebuild_crm_tokens;

create table crm_links (
    connector   text not null,
    -- {id} is replaced by the entity's CRM id
    entity_url  text not null,
    -- {q} is replaced by a phone, an e-mail or a name; null when the CRM has no search page
    search_url  text,
    updated_at  text not null
, contact_url text, tenant_id integer not null default 0,
    primary key (tenant_id, connector)
);
insert into crm_links (connector, entity_url, search_url, updated_at, contact_url, tenant_id) select connector, entity_url, search_url, updated_at, contact_url, tenant_id from rebuild_crm_links;
drop table rebuild_crm_links;

create table business_rules (
    source      text not null,
    rule        text not null check (rule in ('create', 'link', 'review')),
    -- from 1 s to 365 days
    window_secs integer not null check (window_secs between 1 and 31536000),
    -- letters, digits, `-` and `_`, as a source name (domain::is_valid_source_name)
    channel     text not null check (length(channel) between 1 and 64
                                     and channel not glob '*[^A-Za-z0-9_-]*'),
    -- each edit names the version it was made from (compare-and-set)
    version     integer not null,
    changed_at  text not null,
    changed_by  text not null
, tenant_id integer not null default 0,
    primary key (tenant_id, source)
);
insert into business_rules (source, rule, window_secs, channel, version, changed_at, changed_by, tenant_id) select source, rule, window_secs, channel, version, changed_at, changed_by, tenant_id from rebuild_business_rules;
drop table rebuild_business_rules;

create table business_rule_history (
    id          integer primary key autoincrement,
    source      text not null,
    version     integer not null,
    actor       text not null,
    changed_at  text not null,
    -- the rules before (JSON text, domain::business::SourceRules; null when seeded) and after
    before      text,
    after       text not null, tenant_id integer not null default 0,
    unique (tenant_id, source, version)
);
insert into business_rule_history (id, source, version, actor, changed_at, before, after, tenant_id) select id, source, version, actor, changed_at, before, after, tenant_id from rebuild_business_rule_history;
drop table rebuild_business_rule_history;
create trigger business_rule_history_no_delete before delete on business_rule_history
begin
    select raise(abort, 'the rules'' history is append-only (DELETE refused)');
end;
create trigger business_rule_history_no_update before update on business_rule_history
begin
    select raise(abort, 'the rules'' history is append-only (UPDATE refused)');
end;

create table pull_cursors (
    source      text not null,
    mark        text not null,
    updated_at  text not null
, tenant_id integer not null default 0,
    primary key (tenant_id, source)
);
insert into pull_cursors (source, mark, updated_at, tenant_id) select source, mark, updated_at, tenant_id from rebuild_pull_cursors;
drop table rebuild_pull_cursors;

create table contact_locks (
    key                 integer not null,
    operation_id        text not null,
    lease_token_sha256  text not null,
    expires_at          text not null,
    crm_contact_id      text,
    contact_at          text
, tenant_id integer not null default 0,
    primary key (tenant_id, key)
);
insert into contact_locks (key, operation_id, lease_token_sha256, expires_at, crm_contact_id, contact_at, tenant_id) select key, operation_id, lease_token_sha256, expires_at, crm_contact_id, contact_at, tenant_id from rebuild_contact_locks;
drop table rebuild_contact_locks;
create index contact_locks_expires_at on contact_locks (expires_at);

create table alert_channels (
    channel         text not null,
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
, tenant_id integer not null default 0,
    primary key (tenant_id, channel)
);
insert into alert_channels (channel, case_cursor, last_group_at, recent_sends, pending, pending_cursor, pending_conditions, failures, next_try_at, lease_owner, lease_token, lease_until, tenant_id) select channel, case_cursor, last_group_at, recent_sends, pending, pending_cursor, pending_conditions, failures, next_try_at, lease_owner, lease_token, lease_until, tenant_id from rebuild_alert_channels;
drop table rebuild_alert_channels;

create table alert_conditions (
    channel      text not null,
    key          text not null,
    firing       integer not null,
    since        text not null,
    notified_at  text not null, tenant_id integer not null default 0,
    primary key (tenant_id, channel, key),
    foreign key (tenant_id, channel) references alert_channels (tenant_id, channel)
);
insert into alert_conditions (channel, key, firing, since, notified_at, tenant_id) select channel, key, firing, since, notified_at, tenant_id from rebuild_alert_conditions;
drop table rebuild_alert_conditions;
