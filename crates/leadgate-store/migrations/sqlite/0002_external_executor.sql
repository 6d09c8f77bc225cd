-- Who makes the CRM call of an operation: Leadgate's own worker, or an external
-- integration (an n8n workflow) that claimed it through the claim API and reports back.
-- The worker and the reconciler only ever take their own operations.
alter table operations add column executor text not null default 'worker'
    check (executor in ('worker', 'external'));

drop index operations_due;
-- The worker's queue: its own due work, oldest first.
create index operations_due on operations (next_attempt_at)
    where status = 'received' and executor = 'worker';
