-- The figures of SPEC.md "Metrics" as counters kept by the database itself, so the
-- dashboard, `/metrics` and `leadgate metrics` read a handful of rows instead of counting
-- millions (operations, deliveries and the timeline only grow). Triggers keep them in the
-- writing transaction: a figure can never disagree with the rows it counts, whichever
-- process or tool wrote them. Each counter is spread over 16 shards picked by the
-- session's backend pid, so concurrent writers do not queue on one hot row until they
-- commit; a figure is the sum of its shards.
create table metric_counters (
    metric  text not null,
    label   text not null default '',
    label2  text not null default '',
    shard   integer not null default 0,
    value   bigint not null,
    primary key (metric, label, label2, shard)
);

create function metric_add(m text, l text, l2 text, delta bigint) returns void language sql as $$
    insert into metric_counters (metric, label, label2, shard, value)
    values (m, l, l2, pg_backend_pid() % 16, delta)
    on conflict (metric, label, label2, shard) do update set value = metric_counters.value + excluded.value;
$$;

create function deliveries_counted() returns trigger language plpgsql as $$
begin
    perform metric_add('deliveries', new.source, new.outcome, 1);
    -- A lost lead: an accepted delivery without an operation (never, by construction:
    -- the operation is written first, in the same transaction; this checks it).
    if new.outcome <> 'rejected' and not exists (select 1 from operations where operation_id = new.operation_id) then
        perform metric_add('lost', '', '', 1);
    end if;
    return null;
end
$$;
create trigger deliveries_counted after insert on deliveries
    for each row execute function deliveries_counted();

create function operations_counted() returns trigger language plpgsql as $$
declare
    old_crm boolean := false;
    new_crm boolean := coalesce(new.crm_link in ('created', 'recovered'), false);
begin
    if tg_op = 'UPDATE' then
        old_crm := coalesce(old.crm_link in ('created', 'recovered'), false);
    end if;
    if tg_op = 'INSERT' then
        perform metric_add('operations', new.status, '', 1);
    elsif old.status <> new.status then
        perform metric_add('operations', old.status, '', -1);
        perform metric_add('operations', new.status, '', 1);
        -- A completion the journal cannot explain: no CRM answer, recovery, link or
        -- human decision on the timeline when the operation became `completed`.
        if new.status = 'completed' and not exists (
            select 1 from timeline where operation_id = new.operation_id
            and kind in ('crm_created', 'recovered', 'linked', 'human_action')) then
            perform metric_add('unreconstructable', '', '', 1);
        end if;
    end if;
    -- CRM entities Leadgate created (or found again by its key) for its operations.
    if old_crm <> new_crm then
        perform metric_add('crm_entities', '', '', case when new_crm then 1 else -1 end);
    end if;
    return null;
end
$$;
create trigger operations_counted_insert after insert on operations
    for each row execute function operations_counted();
create trigger operations_counted_update after update of status, crm_link on operations
    for each row when (old.status is distinct from new.status or old.crm_link is distinct from new.crm_link)
    execute function operations_counted();

create function timeline_retries_counted() returns trigger language plpgsql as $$
begin
    perform metric_add('retries', new.error_class, '', 1);
    return null;
end
$$;
create trigger timeline_retries_counted after insert on timeline
    for each row when (new.kind = 'retry_scheduled' and new.error_class is not null)
    execute function timeline_retries_counted();

-- The console listens instead of polling: a review case opened or resolved, a connector
-- paused or resumed. Only these rare writes notify (NOTIFY serialises commits).
create function console_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('leadgate_console', tg_table_name);
    return null;
end
$$;
create trigger review_cases_notify after insert or update on review_cases
    for each row execute function console_notify();
create trigger connectors_notify after insert or update on connectors
    for each row execute function console_notify();

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
