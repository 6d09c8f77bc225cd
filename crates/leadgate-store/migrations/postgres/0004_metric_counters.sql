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

-- The dashboard's figures over time, per 5-minute slot (unix seconds / 300): a month is
-- 8,640 slots, read in one index range whatever the traffic was. Sharded like the
-- counters; `Store::compact_metrics` folds the shards of past slots into one row.
create table metric_series (
    slot    bigint not null,
    metric  text not null,
    label   text not null default '',
    shard   integer not null default 0,
    value   bigint not null,
    primary key (slot, metric, label, shard)
);

create function series_add(at timestamptz, m text, l text) returns void language sql as $$
    insert into metric_series (slot, metric, label, shard, value)
    values (floor(extract(epoch from at) / 300)::bigint, m, l, pg_backend_pid() % 16, 1)
    on conflict (slot, metric, label, shard) do update set value = metric_series.value + 1;
$$;

create function deliveries_counted() returns trigger language plpgsql as $$
begin
    perform metric_add('deliveries', new.source, new.outcome, 1);
    if new.outcome <> 'rejected' then
        perform series_add(new.received_at, 'deliveries', '');
    end if;
    if new.outcome = 'new' then
        perform series_add(new.received_at, 'new_operations', '');
    elsif new.outcome = 'duplicate' then
        perform series_add(new.received_at, 'duplicates', '');
    end if;
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

create function timeline_counted() returns trigger language plpgsql as $$
begin
    if new.kind = 'retry_scheduled' then
        perform metric_add('retries', new.error_class, '', 1);
        perform series_add(new.at, 'retries', new.error_class);
    else
        perform series_add(new.at, 'crm_entities', '');
    end if;
    return null;
end
$$;
create trigger timeline_counted after insert on timeline
    for each row when ((new.kind = 'retry_scheduled' and new.error_class is not null)
                       or new.kind in ('crm_created', 'recovered'))
    execute function timeline_counted();

create function review_cases_counted() returns trigger language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        perform series_add(new.opened_at, 'cases_opened', '');
    elsif old.resolved_at is null and new.resolved_at is not null then
        perform series_add(new.resolved_at, 'cases_resolved', '');
    end if;
    return null;
end
$$;
create trigger review_cases_counted after insert or update of resolved_at on review_cases
    for each row execute function review_cases_counted();

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
    select floor(extract(epoch from received_at) / 300)::bigint, 'deliveries', count(*) from deliveries
    where outcome <> 'rejected' group by 1;
insert into metric_series (slot, metric, value)
    select floor(extract(epoch from received_at) / 300)::bigint,
           case outcome when 'new' then 'new_operations' else 'duplicates' end, count(*)
    from deliveries where outcome in ('new', 'duplicate') group by 1, 2;
insert into metric_series (slot, metric, label, value)
    select floor(extract(epoch from at) / 300)::bigint, 'retries', error_class, count(*) from timeline
    where kind = 'retry_scheduled' and error_class is not null group by 1, 3;
insert into metric_series (slot, metric, value)
    select floor(extract(epoch from at) / 300)::bigint, 'crm_entities', count(*) from timeline
    where kind in ('crm_created', 'recovered') group by 1;
insert into metric_series (slot, metric, value)
    select floor(extract(epoch from opened_at) / 300)::bigint, 'cases_opened', count(*) from review_cases group by 1;
insert into metric_series (slot, metric, value)
    select floor(extract(epoch from resolved_at) / 300)::bigint, 'cases_resolved', count(*) from review_cases
    where resolved_at is not null group by 1;
