-- Issue 15, point 3 (PostgreSQL's twin has the same version): index entries that intake
-- wrote for nobody.
--
-- Two indexes nothing reads, which every delivery and every timeline event paid for:
-- `timeline_kind` (kind, at) — every timeline query is by operation
-- (`timeline_operation`) — and `deliveries_received` (received_at), whose only reader,
-- retention's scrub of rejected deliveries, also filters on `raw_body is not null or
-- payload is not null` and is served by `deliveries_unscrubbed` (0006) on the same column.
drop index timeline_kind;
drop index deliveries_received;

-- Retention's walk of finished operations by age (`operations_updated`, 0001) indexed
-- every operation while it was not purged, new leads included; its one reader
-- (`purge_candidates`) asks for `completed` and `failed_terminal` ones only. Partial
-- on those, an operation enters it when it finishes (an update that writes new index
-- entries anyway), not at intake. (Building it reads the table once.)
drop index operations_updated;
create index operations_updated on operations (updated_at)
    where purged_at is null and status in ('completed', 'failed_terminal');
