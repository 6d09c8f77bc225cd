-- People's requests (0017) the database now bounds: only the shapes a console writes,
-- at most 100 waiting per login, and taken in turn per login (store/sql.rs
-- `lock_waiting_request`), so one login's flood neither fills the table nor delays
-- anybody else's request.

-- What is wrong with a request, or null: its kind, its key columns and its body (the
-- JSON `store::Ask::body` writes), each field typed and bounded.
create function leadgate_request_problem(kind text, case_id bigint, operation_id text,
        connector text, expected_version bigint, body text) returns text
language plpgsql immutable set search_path = pg_catalog, pg_temp as $$
declare
    b jsonb;
    keys text[];
    t text;
    most integer;
begin
    if kind is null or kind not in ('resolve', 'open_review', 'notified', 'resume_connector', 'set_rules') then
        return format('`%s` is not a kind of request Leadgate knows', left(coalesce(kind, 'null'), 40));
    end if;
    begin
        b := body::jsonb;
    exception when others then
        return 'its body is not JSON';
    end;
    if jsonb_typeof(b) is distinct from 'object' then
        return 'its body is not a JSON object';
    end if;
    select coalesce(array_agg(k), '{}') into keys from jsonb_object_keys(b) k;
    if kind = 'resolve' then
        if case_id is null or expected_version is null or operation_id is not null or connector is not null then
            return 'a resolution names a case and the version seen, and nothing else';
        end if;
        if not keys <@ array['resolution', 'crm_id', 'comment', 'bulk'] then
            return 'a resolution has only `resolution`, `crm_id`, `comment` and `bulk`';
        end if;
        if jsonb_typeof(b -> 'resolution') is distinct from 'string'
           or b ->> 'resolution' not in ('confirmed_crm_result', 'linked_existing', 'retry_authorized',
                'kept_original', 'accepted_as_new', 'updated_crm', 'rejected', 'created_new') then
            return 'its resolution is not one a person may choose';
        end if;
        t := jsonb_typeof(b -> 'crm_id');
        if t is not null and t <> 'null' and (t <> 'string' or char_length(b ->> 'crm_id') > 256
                                              or b ->> 'crm_id' ~ '[[:cntrl:]]') then
            return 'a CRM id is at most 256 printable characters';
        end if;
        t := jsonb_typeof(b -> 'comment');
        if t is not null and t <> 'null' and (t <> 'string' or char_length(b ->> 'comment') > 4000) then
            return 'a comment is a text of at most 4000 characters';
        end if;
        t := jsonb_typeof(b -> 'bulk');
        if t is not null and t <> 'null' and (t <> 'object'
                or not array(select jsonb_object_keys(b -> 'bulk')) <@ array['id', 'of']
                or jsonb_typeof(b -> 'bulk' -> 'id') is distinct from 'string'
                or char_length(b -> 'bulk' ->> 'id') > 100
                or jsonb_typeof(b -> 'bulk' -> 'of') is distinct from 'number') then
            return 'a bulk run is its id and its size';
        end if;
    elsif kind in ('open_review', 'notified') then
        if operation_id is null or char_length(operation_id) > 255 or case_id is not null
           or expected_version is not null or connector is not null then
            return 'it names an operation, and nothing else';
        end if;
        if not keys <@ array['detail'] then
            return 'its body has only `detail`';
        end if;
        t := jsonb_typeof(b -> 'detail');
        if t is not null and t not in ('null', 'object') then
            return 'its detail is a JSON object';
        end if;
        most := case kind when 'notified' then 1024 else 12288 end;
        if octet_length((b -> 'detail')::text) > most then
            return format('its detail is longer than %s bytes', most);
        end if;
    elsif kind = 'resume_connector' then
        if connector is null or char_length(connector) > 128 or case_id is not null
           or expected_version is not null or operation_id is not null then
            return 'it names a connector, and nothing else';
        end if;
        if b <> '{}'::jsonb then
            return 'its body is empty';
        end if;
    elsif kind = 'set_rules' then
        if expected_version is null or case_id is not null or operation_id is not null or connector is not null then
            return 'it names the version seen, and nothing else';
        end if;
        if not (keys <@ array['source', 'rule', 'window_secs', 'channel']
                and keys @> array['source', 'rule', 'window_secs', 'channel'])
           or jsonb_typeof(b -> 'source') <> 'string' or char_length(b ->> 'source') > 64
           or jsonb_typeof(b -> 'rule') <> 'string' or char_length(b ->> 'rule') > 64
           or jsonb_typeof(b -> 'window_secs') <> 'number'
           or jsonb_typeof(b -> 'channel') <> 'string' or char_length(b ->> 'channel') > 64 then
            return 'business rules are `source`, `rule`, `window_secs` and `channel`';
        end if;
    end if;
    return null;
end
$$;

-- One row per login that ever asked: its inserts queue on it, so two sessions of one
-- login cannot both count 99 waiting and both insert. Only the trigger below writes it;
-- people may not lock it (a row lock needs UPDATE), and the gateway never touches it, so a
-- person holding it open delays only their own next request.
create table human_request_logins (
    actor text primary key,
    asked bigint not null default 0
);

-- The cap a login's waiting requests may not pass.
create function leadgate_waiting_requests_max() returns integer
language sql immutable as $$ select 100 $$;

create function human_requests_checked() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
    problem text := public.leadgate_request_problem(new.kind, new.case_id, new.operation_id,
                                                    new.connector, new.expected_version, new.body);
    cap integer := public.leadgate_waiting_requests_max();
    waiting bigint;
begin
    if problem is not null then
        raise exception using errcode = 'check_violation',
            message = 'leadgate: this request was refused: ' || problem;
    end if;
    insert into public.human_request_logins as l (actor, asked) values (new.actor, 1)
        on conflict (actor) do update set asked = l.asked + 1;
    select count(*) into waiting from (
        select 1 from public.human_requests r
        where r.actor = new.actor and r.applied_at is null limit cap
    ) w;
    if waiting >= cap then
        raise exception using errcode = 'P0001',
            message = format('leadgate: you have %s requests no gateway has applied yet; wait until they are '
                             'applied (is `leadgate serve` or `leadgate worker` running?) before asking for more', cap);
    end if;
    return new;
end
$$;
revoke all on function human_requests_checked() from public;
create trigger human_requests_checked before insert on human_requests
    for each row execute function human_requests_checked();

-- The applier's turn per login: each login's oldest waiting request, the login served
-- longest ago first.
create index human_requests_waiting_by_actor on human_requests (actor, id) where applied_at is null;
create index human_requests_served on human_requests (actor, applied_at) where applied_at is not null;

-- The people's grants (0021's function) leave out what the gateway keeps for itself: who
-- asked how much (`human_request_logins`) and the rows intake, migrations and grants
-- serialize on (`leadgate_locks`, `intake_contact_slots`, 0024). Applied at the next start
-- (`PgStore::secure_database` runs it at every start).
create or replace function leadgate_install_roles() returns void language plpgsql as $$
declare
    r text;
    t text;
    cols text;
    everyone constant text := 'leadgate_support, leadgate_sales_ops, leadgate_manager, leadgate_admin';
    casework constant text := 'leadgate_sales_ops, leadgate_manager';
    figures constant text := 'leadgate_support, leadgate_admin';
begin
    foreach r in array array['leadgate_support', 'leadgate_sales_ops', 'leadgate_manager', 'leadgate_admin'] loop
        if not exists (select 1 from pg_roles where rolname = r) then
            begin
                execute format('create role %I nologin', r);
            exception when duplicate_object or unique_violation then
                null; -- another database of this cluster created it at the same moment
            end;
        end if;
    end loop;
    execute 'revoke all on all tables in schema public from ' || everyone;
    execute 'revoke all on all sequences in schema public from ' || everyone;
    execute 'grant usage on schema public to ' || everyone;
    -- everyone: the schema version, the counted figures, the connectors, the business rules
    execute 'grant select on _sqlx_migrations, metric_counters, metric_series, connectors, crm_links, '
         || 'business_rules, business_rule_history to ' || everyone;
    -- support and admin: counts by state and reason, nothing a lead said
    execute 'grant select (operation_id, status, source, created_at, updated_at, lease_expires_at) '
         || 'on operations to ' || figures;
    execute 'grant select (id, operation_id, reason, opened_at, resolved_at, resolution, resolved_by) '
         || 'on review_cases to ' || figures;
    -- casework: every table but the CRM credentials and others' requests, and no column
    -- holding a token (a lease's, a grant's hash): whoever reads the database must not be
    -- able to report for a worker or an integration
    for t in select tablename from pg_tables where schemaname = 'public'
             and tablename not in ('crm_tokens', 'human_requests', 'human_request_logins',
                                   'leadgate_locks', 'intake_contact_slots') loop
        select string_agg(quote_ident(column_name), ', ' order by ordinal_position) into cols
        from information_schema.columns
        where table_schema = 'public' and table_name = t and column_name not like '%token%';
        execute format('grant select (%s) on %I to %s', cols, t, casework);
    end loop;
    -- asking: row-level security says who may ask what; only the columns of the ask (the
    -- id, the actor, the times and the answer are the database's and the gateway's)
    execute 'grant select on human_requests to ' || everyone;
    execute 'grant insert (kind, case_id, operation_id, connector, expected_version, body) '
         || 'on human_requests to ' || everyone;
    execute 'grant usage on sequence human_requests_id_seq to ' || everyone;
    execute 'grant execute on function leadgate_withdraw(bigint) to ' || everyone;
end
$$;
revoke all on function leadgate_install_roles() from public;
