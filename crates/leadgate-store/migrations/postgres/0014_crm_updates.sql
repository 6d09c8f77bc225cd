-- Keep original and update the CRM: a person decided a payload conflict by keeping the
-- original operation and sending the conflicting delivery's changed fields to the CRM
-- entity the operation has. The worker sends each row; the updates of one entity (several
-- operations may share it: a link, a merge) go out one at a time in the order of their
-- deliveries, and nothing more goes to the entity until the settle window after an answer
-- that did not come is over (an older update must never land after a newer one).
create table crm_updates (
    id               bigserial primary key,
    operation_id     text not null references operations (operation_id),
    -- the payload-conflict case it decided, and the delivery whose fields it sends
    case_id          bigint not null references review_cases (id),
    delivery_id      bigint not null references deliveries (id),
    -- the entity it updates
    crm_id           text not null,
    requested_by     text not null,
    state            text not null default 'pending'
                     check (state in ('pending', 'done', 'skipped', 'failed')),
    attempts         integer not null default 0,
    due_at           timestamptz not null,
    lease_owner      text,
    lease_token      text,
    lease_expires_at timestamptz,
    -- until when a call sent under the last lease may still land
    quiet_after      timestamptz,
    last_error       text,
    last_error_class text,
    created_at       timestamptz not null,
    updated_at       timestamptz not null
);
create index crm_updates_pending on crm_updates (due_at) where state = 'pending';
create index crm_updates_operation on crm_updates (operation_id, id);
-- the updates of one entity, in the order of the deliveries they carry
create index crm_updates_entity on crm_updates (crm_id, delivery_id, id);
