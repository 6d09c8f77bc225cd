-- Issue 11. SQLite's twin has the same version number.

-- 1. Metric shards are sessions. With `pg_backend_pid() % 16` two sessions could share a
-- shard, and a conflict on a `received` operation (series row, then counter row) and a
-- new intake (counter row, then series row) locked the same two rows in opposite orders:
-- PostgreSQL aborted one of them as a deadlock. Keyed by the backend pid itself, no two
-- live sessions ever write the same counter or series row, so writers never wait on one
-- another's metric rows. `Store::compact_metrics` folds the shards of past slots, and the
-- counter shards of sessions that ended, into shard 0 (which no session writes).
create or replace function metric_add(m text, l text, l2 text, delta bigint) returns void language sql as $$
    insert into metric_counters (metric, label, label2, shard, value)
    values (m, l, l2, pg_backend_pid(), delta)
    on conflict (metric, label, label2, shard) do update set value = metric_counters.value + excluded.value;
$$;

create or replace function series_add(at timestamptz, m text, l text) returns void language sql as $$
    insert into metric_series (slot, metric, label, shard, value)
    values (floor(extract(epoch from at) / 300)::bigint, m, l, pg_backend_pid(), 1)
    on conflict (slot, metric, label, shard) do update set value = metric_series.value + 1;
$$;

-- 2. At most one open review case per operation that is not a payload conflict (the
-- store adds a new reason to the open case instead of opening another, and supersedes
-- the open cases of an operation it settles). Earlier versions could leave several: the
-- ones nothing can decide any more are closed as `superseded`, with a timeline event —
-- every open non-conflict case of a completed or failed operation, and every one but
-- the oldest of an operation still waiting.
insert into timeline (operation_id, at, kind, actor, detail)
select c.operation_id, now(), 'review_superseded', 'migration',
       json_build_object('case_id', c.id, 'by_case', null, 'status', o.status)::text
from review_cases c join operations o on o.operation_id = c.operation_id
where c.resolved_at is null and c.reason <> 'payload_conflict'
  and (o.status in ('completed', 'failed_terminal')
       or c.id > (select min(c2.id) from review_cases c2 where c2.operation_id = c.operation_id
                  and c2.resolved_at is null and c2.reason <> 'payload_conflict'))
order by c.id;

update review_cases c set resolved_at = now(), resolution = 'superseded', resolved_by = 'migration',
       comment = 'superseded: more than one open case (migration 0006)'
from operations o
where o.operation_id = c.operation_id and c.resolved_at is null and c.reason <> 'payload_conflict'
  and (o.status in ('completed', 'failed_terminal')
       or c.id > (select min(c2.id) from review_cases c2 where c2.operation_id = c.operation_id
                  and c2.resolved_at is null and c2.reason <> 'payload_conflict'));

create unique index review_cases_one_open on review_cases (operation_id)
    where resolved_at is null and reason <> 'payload_conflict';

-- 3. Retention also scrubs deliveries that arrived after their operation was purged (a
-- late repeat or conflict): it finds them by age among the deliveries not yet scrubbed.
create index deliveries_unscrubbed on deliveries (received_at)
    where raw_body is not null or payload is not null;
