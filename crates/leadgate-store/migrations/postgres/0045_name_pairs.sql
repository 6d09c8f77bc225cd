-- Issue 35 (fleet mode), step 12: two words of one name at once. A name search of two
-- common words (a first name and a surname's first letters; two first names no lead has
-- together) read both words' ranges whole to intersect them: 0.2-0.5 s at 5,000,000
-- operations of one tenant. Here each ordered pair of an operation's name words is one
-- row, so the two words are one index range (`SearchPlan::Pairs`): the first word's
-- range, the second tested in the same index entry. Kept by triggers on
-- `operation_names`, whatever writes it (intake's functions, the steps, retention's
-- scrub); ordered by word then time, so an operation's pairs are deleted by their key.
-- A two-word name writes two more rows at intake.
create table operation_name_pairs (
    tenant_id     integer not null,
    word          text collate "C" not null,
    created_at    timestamptz not null,
    operation_id  text not null,
    other         text collate "C" not null,
    primary key (tenant_id, word, created_at, operation_id, other)
);
insert into operation_name_pairs (tenant_id, word, created_at, operation_id, other)
    select a.tenant_id, a.word, a.created_at, a.operation_id, b.word
    from operation_names a join operation_names b
        on b.operation_id = a.operation_id and b.word <> a.word;

-- A statement's new words, each paired both ways with every other word of its operation
-- (intake writes all of an operation's words in one statement; a word written later is
-- paired with those before it all the same).
create function leadgate_pair_names() returns trigger language plpgsql as $$
begin
    insert into operation_name_pairs (tenant_id, word, created_at, operation_id, other)
        select a.tenant_id, a.word, a.created_at, a.operation_id, b.word
        from added a join operation_names b on b.operation_id = a.operation_id and b.word <> a.word
        union all
        select b.tenant_id, b.word, b.created_at, b.operation_id, a.word
        from added a join operation_names b on b.operation_id = a.operation_id and b.word <> a.word
        where not exists (select 1 from added c where c.operation_id = b.operation_id and c.word = b.word)
        on conflict do nothing;
    return null;
end
$$;
create trigger operation_names_paired after insert on operation_names
    referencing new table as added for each statement execute function leadgate_pair_names();

-- A deleted word's pairs go both ways: those it leads (by their key) and those the
-- operation's other words lead to it (by theirs; when they go in the same statement, by
-- the first).
create function leadgate_unpair_names() returns trigger language plpgsql as $$
begin
    delete from operation_name_pairs p using removed r
        where p.tenant_id = r.tenant_id and p.word = r.word and p.created_at = r.created_at
          and p.operation_id = r.operation_id;
    delete from operation_name_pairs p using removed r
        join operation_names n on n.operation_id = r.operation_id
        where p.tenant_id = n.tenant_id and p.word = n.word and p.created_at = n.created_at
          and p.operation_id = n.operation_id and p.other = r.word;
    return null;
end
$$;
create trigger operation_names_unpaired after delete on operation_names
    referencing old table as removed for each statement execute function leadgate_unpair_names();

-- People read a tenant's pairs as they read its words (0039's policy; the grants are
-- `leadgate_install_roles`', given to every table at each start).
alter table operation_name_pairs enable row level security;
create policy tenant_rows on operation_name_pairs for select
    using (tenant_id = any ((select public.leadgate_my_tenants())::integer[]));
