-- Issue 35 (fleet mode), step 8: the metrics are each tenant's. `metric_counters` and
-- `metric_series` are keyed by tenant first, and the counting triggers add to the row of
-- the tenant whose row they count (SQLite's intake runs the store's steps, so the
-- triggers count every delivery). The tables are built again with the new keys (SQLite
-- cannot change a primary key), their rows kept; the triggers are made again around them.

drop trigger deliveries_counted;
drop trigger deliveries_lost;
drop trigger operations_counted;
drop trigger operations_status_counted;
drop trigger operations_crm_counted;
drop trigger operations_unreconstructable;
drop trigger timeline_retries_counted;
drop trigger timeline_crm_series;
drop trigger review_cases_opened_series;
drop trigger review_cases_resolved_series;
drop trigger timeline_extra_entity;
drop trigger timeline_crm_steps;
drop trigger feed_attempts_counted;

create table metric_counters_new (
    tenant_id integer not null default 0,
    metric  text not null,
    label   text not null default '',
    label2  text not null default '',
    shard   integer not null default 0,
    value   integer not null,
    primary key (tenant_id, metric, label, label2, shard)
) without rowid;
insert into metric_counters_new (tenant_id, metric, label, label2, shard, value)
    select tenant_id, metric, label, label2, shard, value from metric_counters;
drop table metric_counters;
alter table metric_counters_new rename to metric_counters;

create table metric_series_new (
    tenant_id integer not null default 0,
    slot    integer not null,
    metric  text not null,
    label   text not null default '',
    shard   integer not null default 0,
    value   integer not null,
    primary key (tenant_id, slot, metric, label, shard)
) without rowid;
insert into metric_series_new (tenant_id, slot, metric, label, shard, value)
    select tenant_id, slot, metric, label, shard, value from metric_series;
drop table metric_series;
alter table metric_series_new rename to metric_series;

create trigger deliveries_counted after insert on deliveries begin
    insert into metric_counters (tenant_id, metric, label, label2, value) values (new.tenant_id, 'deliveries', new.source, new.outcome, 1)
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value + 1;
    insert into metric_series (tenant_id, slot, metric, value)
        select new.tenant_id, unixepoch(new.received_at) / 300, 'deliveries', 1 where new.outcome <> 'rejected'
        on conflict (tenant_id, slot, metric, label, shard) do update set value = value + 1;
    insert into metric_series (tenant_id, slot, metric, value)
        select new.tenant_id, unixepoch(new.received_at) / 300,
               case new.outcome when 'new' then 'new_operations' else 'duplicates' end, 1
        where new.outcome in ('new', 'duplicate')
        on conflict (tenant_id, slot, metric, label, shard) do update set value = value + 1;
end;

create trigger deliveries_lost after insert on deliveries
when new.outcome <> 'rejected' and not exists (select 1 from operations where operation_id = new.operation_id)
begin
    insert into metric_counters (tenant_id, metric, value) values (new.tenant_id, 'lost', 1)
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value + 1;
end;

create trigger operations_counted after insert on operations begin
    insert into metric_counters (tenant_id, metric, label, value) values (new.tenant_id, 'operations', new.status, 1)
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value + 1;
    insert into metric_counters (tenant_id, metric, value)
        select new.tenant_id, 'crm_entities', 1 where new.crm_link in ('created', 'recovered')
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value + 1;
end;

create trigger operations_status_counted after update of status on operations
when old.status <> new.status
begin
    insert into metric_counters (tenant_id, metric, label, value) values (new.tenant_id, 'operations', old.status, -1)
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value - 1;
    insert into metric_counters (tenant_id, metric, label, value) values (new.tenant_id, 'operations', new.status, 1)
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value + 1;
end;

create trigger operations_crm_counted after update of crm_link on operations
when coalesce(old.crm_link in ('created', 'recovered'), 0) <> coalesce(new.crm_link in ('created', 'recovered'), 0)
begin
    insert into metric_counters (tenant_id, metric, value)
        values (new.tenant_id, 'crm_entities', case when new.crm_link in ('created', 'recovered') then 1 else -1 end)
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value + excluded.value;
end;

create trigger operations_unreconstructable after update of status on operations
when new.status = 'completed' and old.status <> 'completed' and not exists (
    select 1 from timeline where operation_id = new.operation_id
    and kind in ('crm_created', 'recovered', 'linked', 'human_action'))
begin
    insert into metric_counters (tenant_id, metric, value) values (new.tenant_id, 'unreconstructable', 1)
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value + 1;
end;

create trigger timeline_retries_counted after insert on timeline
when new.kind = 'retry_scheduled' and new.error_class is not null
begin
    insert into metric_counters (tenant_id, metric, label, value) values (new.tenant_id, 'retries', new.error_class, 1)
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value + 1;
    insert into metric_series (tenant_id, slot, metric, label, value) values (new.tenant_id, unixepoch(new.at) / 300, 'retries', new.error_class, 1)
        on conflict (tenant_id, slot, metric, label, shard) do update set value = value + 1;
end;

create trigger timeline_crm_series after insert on timeline
when new.kind in ('crm_created', 'recovered')
begin
    insert into metric_series (tenant_id, slot, metric, value) values (new.tenant_id, unixepoch(new.at) / 300, 'crm_entities', 1)
        on conflict (tenant_id, slot, metric, label, shard) do update set value = value + 1;
end;

create trigger review_cases_opened_series after insert on review_cases begin
    insert into metric_series (tenant_id, slot, metric, value) values (new.tenant_id, unixepoch(new.opened_at) / 300, 'cases_opened', 1)
        on conflict (tenant_id, slot, metric, label, shard) do update set value = value + 1;
end;

create trigger review_cases_resolved_series after update of resolved_at on review_cases
when old.resolved_at is null and new.resolved_at is not null
begin
    insert into metric_series (tenant_id, slot, metric, value) values (new.tenant_id, unixepoch(new.resolved_at) / 300, 'cases_resolved', 1)
        on conflict (tenant_id, slot, metric, label, shard) do update set value = value + 1;
end;

create trigger timeline_extra_entity after insert on timeline
when new.kind = 'extra_crm_entity'
begin
    insert into metric_counters (tenant_id, metric, value) values (new.tenant_id, 'crm_entities', 1)
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value + 1;
    insert into metric_series (tenant_id, slot, metric, value) values (new.tenant_id, unixepoch(new.at) / 300, 'crm_entities', 1)
        on conflict (tenant_id, slot, metric, label, shard) do update set value = value + 1;
end;

create trigger timeline_crm_steps after insert on timeline
when new.kind = 'crm_step'
begin
    insert into metric_counters (tenant_id, metric, label, label2, value)
        values (new.tenant_id, 'crm_steps', coalesce(json_extract(new.detail, '$.entity'), ''),
                coalesce(json_extract(new.detail, '$.how'), ''), 1)
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value + 1;
end;

create trigger feed_attempts_counted after insert on feed_attempts begin
    insert into metric_counters (tenant_id, metric, label, value)
        values (new.tenant_id, 'feed_deliveries', case when new.ok then 'delivered' else 'failed' end, 1)
        on conflict (tenant_id, metric, label, label2, shard) do update set value = value + 1;
end;
