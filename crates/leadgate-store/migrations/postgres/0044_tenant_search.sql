-- Issue 35 (fleet mode), step 12: the console's search and lists over a fleet's millions
-- of operations, within one tenant. Every such read binds the tenant shown (0041), so
-- their indexes lead with the tenant: a small tenant's newest operations, its key
-- prefixes, its name words and its failed tab are its own index range, not a walk past
-- every other tenant's rows. Each replaces the index that did not lead with the tenant
-- (nothing reads those across tenants: the deployment's stale-work figures read the
-- in-progress operations on `operations_leases`), so intake writes no more entries.
--
-- `operation_names` is also indexed by operation: retention's scrub deletes an
-- operation's words by its key, which read the whole table for each operation.
--
-- Built inside the migration's transaction (sqlx's), so intake waits while they are
-- built: seconds for a million operations. A database with tens of millions may build
-- them first by hand, `create [unique] index concurrently` with the names and definitions
-- below (`operation_names_tenant_key` becomes the primary key without a rebuild); this
-- migration then finds them, and builds again one that a failed concurrent build left
-- invalid. Earlier gateways run beside it; only their `ops find` reads slowly (its
-- counts read the indexes this drops).
do $$
declare
    i text;
begin
    foreach i in array array['operations_tenant_created', 'operations_tenant_status',
                             'operations_tenant_key_c', 'operation_names_tenant_key',
                             'operation_names_operation'] loop
        if exists (select 1 from pg_index x where x.indexrelid = to_regclass(i) and not x.indisvalid) then
            execute format('drop index %I', i);
        end if;
    end loop;
end
$$;
create index if not exists operations_tenant_created on operations (tenant_id, created_at, operation_id);
drop index if exists operations_created;
create index if not exists operations_tenant_status on operations (tenant_id, status, updated_at);
drop index if exists operations_status;
create index if not exists operations_tenant_key_c on operations (tenant_id, (operation_id collate "C"));
drop index if exists operations_key_c;

create unique index if not exists operation_names_tenant_key
    on operation_names (tenant_id, word, created_at, operation_id);
alter table operation_names drop constraint operation_names_pkey,
    add constraint operation_names_pkey primary key using index operation_names_tenant_key;
create index if not exists operation_names_operation on operation_names (operation_id);
