-- Issue 11. The PostgreSQL twin has the same version number (it also re-keys the metric
-- shards by session, which SQLite's one shard does not need).

-- At most one open review case per operation that is not a payload conflict (the store
-- adds a new reason to the open case instead of opening another, and supersedes the open
-- cases of an operation it settles). Earlier versions could leave several: the ones
-- nothing can decide any more are closed as `superseded`, with a timeline event — every
-- open non-conflict case of a completed or failed operation, and every one but the
-- oldest of an operation still waiting.
insert into timeline (operation_id, at, kind, actor, detail)
select c.operation_id, strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'), 'review_superseded', 'migration',
       json_object('case_id', c.id, 'by_case', null, 'status', o.status)
from review_cases c join operations o on o.operation_id = c.operation_id
where c.resolved_at is null and c.reason <> 'payload_conflict'
  and (o.status in ('completed', 'failed_terminal')
       or c.id > (select min(c2.id) from review_cases c2 where c2.operation_id = c.operation_id
                  and c2.resolved_at is null and c2.reason <> 'payload_conflict'))
order by c.id;

update review_cases set resolved_at = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'),
       resolution = 'superseded', resolved_by = 'migration',
       comment = 'superseded: more than one open case (migration 0006)'
where resolved_at is null and reason <> 'payload_conflict'
  and ((select status from operations o where o.operation_id = review_cases.operation_id)
         in ('completed', 'failed_terminal')
       or id > (select min(c2.id) from review_cases c2 where c2.operation_id = review_cases.operation_id
                and c2.resolved_at is null and c2.reason <> 'payload_conflict'));

create unique index review_cases_one_open on review_cases (operation_id)
    where resolved_at is null and reason <> 'payload_conflict';

-- Retention also scrubs deliveries that arrived after their operation was purged (a late
-- repeat or conflict): it finds them by age among the deliveries not yet scrubbed.
create index deliveries_unscrubbed on deliveries (received_at)
    where raw_body is not null or payload is not null;
