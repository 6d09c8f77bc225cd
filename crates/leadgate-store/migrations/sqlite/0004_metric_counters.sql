-- The figures of SPEC.md "Metrics" as counters kept by the database itself, so the
-- dashboard, `/metrics` and `leadgate metrics` read a handful of rows instead of counting
-- millions (operations, deliveries and the timeline only grow). Triggers keep them in the
-- writing transaction: a figure can never disagree with the rows it counts, whichever
-- process or tool wrote them. SQLite has one writer, so there is one shard (0); the
-- PostgreSQL twin spreads each counter over shards to keep concurrent writers apart.
create table metric_counters (
    metric  text not null,
    label   text not null default '',
    label2  text not null default '',
    shard   integer not null default 0,
    value   integer not null,
    primary key (metric, label, label2, shard)
) without rowid;

-- The dashboard's figures over time, per 5-minute slot (unix seconds / 300): a month is
-- 8,640 slots, read in one index range whatever the traffic was.
create table metric_series (
    slot    integer not null,
    metric  text not null,
    label   text not null default '',
    shard   integer not null default 0,
    value   integer not null,
    primary key (slot, metric, label, shard)
) without rowid;

-- Deliveries by source and outcome (duplicates absorbed are the `duplicate` ones).
create trigger deliveries_counted after insert on deliveries begin
    insert into metric_counters (metric, label, label2, value) values ('deliveries', new.source, new.outcome, 1)
        on conflict (metric, label, label2, shard) do update set value = value + 1;
    insert into metric_series (slot, metric, value)
        select unixepoch(new.received_at) / 300, 'deliveries', 1 where new.outcome <> 'rejected'
        on conflict (slot, metric, label, shard) do update set value = value + 1;
    insert into metric_series (slot, metric, value)
        select unixepoch(new.received_at) / 300,
               case new.outcome when 'new' then 'new_operations' else 'duplicates' end, 1
        where new.outcome in ('new', 'duplicate')
        on conflict (slot, metric, label, shard) do update set value = value + 1;
end;

-- A lost lead: an accepted delivery without an operation (never, by construction: the
-- operation is written first, in the same transaction; this checks it).
create trigger deliveries_lost after insert on deliveries
when new.outcome <> 'rejected' and not exists (select 1 from operations where operation_id = new.operation_id)
begin
    insert into metric_counters (metric, value) values ('lost', 1)
        on conflict (metric, label, label2, shard) do update set value = value + 1;
end;

create trigger operations_counted after insert on operations begin
    insert into metric_counters (metric, label, value) values ('operations', new.status, 1)
        on conflict (metric, label, label2, shard) do update set value = value + 1;
    insert into metric_counters (metric, value)
        select 'crm_entities', 1 where new.crm_link in ('created', 'recovered')
        on conflict (metric, label, label2, shard) do update set value = value + 1;
end;

create trigger operations_status_counted after update of status on operations
when old.status <> new.status
begin
    insert into metric_counters (metric, label, value) values ('operations', old.status, -1)
        on conflict (metric, label, label2, shard) do update set value = value - 1;
    insert into metric_counters (metric, label, value) values ('operations', new.status, 1)
        on conflict (metric, label, label2, shard) do update set value = value + 1;
end;

-- CRM entities Leadgate created (or found again by its key) for its operations.
create trigger operations_crm_counted after update of crm_link on operations
when coalesce(old.crm_link in ('created', 'recovered'), 0) <> coalesce(new.crm_link in ('created', 'recovered'), 0)
begin
    insert into metric_counters (metric, value)
        values ('crm_entities', case when new.crm_link in ('created', 'recovered') then 1 else -1 end)
        on conflict (metric, label, label2, shard) do update set value = value + excluded.value;
end;

-- A completion the journal cannot explain: no CRM answer, recovery, link or human
-- decision on the timeline when the operation became `completed`.
create trigger operations_unreconstructable after update of status on operations
when new.status = 'completed' and old.status <> 'completed' and not exists (
    select 1 from timeline where operation_id = new.operation_id
    and kind in ('crm_created', 'recovered', 'linked', 'human_action'))
begin
    insert into metric_counters (metric, value) values ('unreconstructable', 1)
        on conflict (metric, label, label2, shard) do update set value = value + 1;
end;

create trigger timeline_retries_counted after insert on timeline
when new.kind = 'retry_scheduled' and new.error_class is not null
begin
    insert into metric_counters (metric, label, value) values ('retries', new.error_class, 1)
        on conflict (metric, label, label2, shard) do update set value = value + 1;
    insert into metric_series (slot, metric, label, value) values (unixepoch(new.at) / 300, 'retries', new.error_class, 1)
        on conflict (slot, metric, label, shard) do update set value = value + 1;
end;

create trigger timeline_crm_series after insert on timeline
when new.kind in ('crm_created', 'recovered')
begin
    insert into metric_series (slot, metric, value) values (unixepoch(new.at) / 300, 'crm_entities', 1)
        on conflict (slot, metric, label, shard) do update set value = value + 1;
end;

create trigger review_cases_opened_series after insert on review_cases begin
    insert into metric_series (slot, metric, value) values (unixepoch(new.opened_at) / 300, 'cases_opened', 1)
        on conflict (slot, metric, label, shard) do update set value = value + 1;
end;

create trigger review_cases_resolved_series after update of resolved_at on review_cases
when old.resolved_at is null and new.resolved_at is not null
begin
    insert into metric_series (slot, metric, value) values (unixepoch(new.resolved_at) / 300, 'cases_resolved', 1)
        on conflict (slot, metric, label, shard) do update set value = value + 1;
end;

-- Contact matching and link candidates read the newest few operations per phone or e-mail:
-- (contact, created_at) keeps that bounded when thousands of leads share one number.
drop index operations_phone;
drop index operations_email;
create index operations_phone on operations (contact_phone, created_at) where contact_phone is not null;
create index operations_email on operations (contact_email, created_at) where contact_email is not null;

-- What a database migrated from an earlier version already holds.
insert into metric_counters (metric, label, label2, value)
    select 'deliveries', source, outcome, count(*) from deliveries group by source, outcome;
insert into metric_counters (metric, value)
    select 'lost', count(*) from deliveries d where d.outcome <> 'rejected'
    and not exists (select 1 from operations o where o.operation_id = d.operation_id);
insert into metric_counters (metric, label, value)
    select 'operations', status, count(*) from operations group by status;
insert into metric_counters (metric, value)
    select 'crm_entities', count(*) from operations where crm_link in ('created', 'recovered');
insert into metric_counters (metric, value)
    select 'unreconstructable', count(*) from operations o where o.status = 'completed' and not exists (
        select 1 from timeline t where t.operation_id = o.operation_id
        and t.kind in ('crm_created', 'recovered', 'linked', 'human_action'));
insert into metric_counters (metric, label, value)
    select 'retries', error_class, count(*) from timeline
    where kind = 'retry_scheduled' and error_class is not null group by error_class;

insert into metric_series (slot, metric, value)
    select unixepoch(received_at) / 300, 'deliveries', count(*) from deliveries
    where outcome <> 'rejected' group by 1;
insert into metric_series (slot, metric, value)
    select unixepoch(received_at) / 300, case outcome when 'new' then 'new_operations' else 'duplicates' end, count(*)
    from deliveries where outcome in ('new', 'duplicate') group by 1, 2;
insert into metric_series (slot, metric, label, value)
    select unixepoch(at) / 300, 'retries', error_class, count(*) from timeline
    where kind = 'retry_scheduled' and error_class is not null group by 1, 3;
insert into metric_series (slot, metric, value)
    select unixepoch(at) / 300, 'crm_entities', count(*) from timeline
    where kind in ('crm_created', 'recovered') group by 1;
insert into metric_series (slot, metric, value)
    select unixepoch(opened_at) / 300, 'cases_opened', count(*) from review_cases group by 1;
insert into metric_series (slot, metric, value)
    select unixepoch(resolved_at) / 300, 'cases_resolved', count(*) from review_cases
    where resolved_at is not null group by 1;
