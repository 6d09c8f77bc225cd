-- Issue 35 (fleet mode), step 12: the console's search and lists within one tenant read
-- index ranges that lead with the tenant (PostgreSQL's twin says why). Key prefixes
-- still range over the primary key: a tenant's keys begin with its slug.
create index operations_tenant_created on operations (tenant_id, created_at, operation_id);
drop index operations_created;
create index operations_tenant_status on operations (tenant_id, status, updated_at);
drop index operations_status;

-- `operation_names` rebuilt with the tenant first in its key, and indexed by operation
-- (retention's scrub deletes an operation's words by its key).
create table operation_names_new (
    tenant_id     integer not null default 0,
    word          text not null,
    created_at    text not null,
    operation_id  text not null,
    primary key (tenant_id, word, created_at, operation_id)
) without rowid;
insert into operation_names_new (tenant_id, word, created_at, operation_id)
    select tenant_id, word, created_at, operation_id from operation_names;
drop table operation_names;
alter table operation_names_new rename to operation_names;
create index operation_names_operation on operation_names (operation_id);
