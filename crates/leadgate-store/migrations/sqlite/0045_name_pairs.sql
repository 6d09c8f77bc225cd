-- Issue 35 (fleet mode), step 12: two words of one name at once. Each ordered pair of an
-- operation's name words is one row, so a search for two common words is one index range
-- (PostgreSQL's twin says why). Kept by triggers on `operation_names`.
create table operation_name_pairs (
    tenant_id     integer not null,
    word          text not null,
    created_at    text not null,
    operation_id  text not null,
    other         text not null,
    primary key (tenant_id, word, created_at, operation_id, other)
) without rowid;
insert into operation_name_pairs (tenant_id, word, created_at, operation_id, other)
    select a.tenant_id, a.word, a.created_at, a.operation_id, b.word
    from operation_names a join operation_names b
        on b.operation_id = a.operation_id and b.word <> a.word;

-- A row's trigger sees the words written before it: the new word is paired with each of
-- them both ways round. A deleted word's pairs go both ways too.
create trigger operation_names_paired after insert on operation_names begin
    insert or ignore into operation_name_pairs (tenant_id, word, created_at, operation_id, other)
        select new.tenant_id, new.word, new.created_at, new.operation_id, n.word
        from operation_names n where n.operation_id = new.operation_id and n.word <> new.word
        union all
        select n.tenant_id, n.word, n.created_at, n.operation_id, new.word
        from operation_names n where n.operation_id = new.operation_id and n.word <> new.word;
end;
create trigger operation_names_unpaired after delete on operation_names begin
    delete from operation_name_pairs where tenant_id = old.tenant_id and word = old.word
        and created_at = old.created_at and operation_id = old.operation_id;
    delete from operation_name_pairs
        where (tenant_id, word, created_at, operation_id, other) in (
            select n.tenant_id, n.word, n.created_at, n.operation_id, old.word
            from operation_names n where n.operation_id = old.operation_id);
end;
