-- Issue 16: search across all operations (`Store::search`). PostgreSQL's twin has the
-- same version. (0011 is left to a change made in parallel; sqlx applies a missing
-- lower version when it appears.)
--
-- The lead's name, as the source's field map reads it (`domain::Lead::name`), kept for
-- display (`contact_name`) and for search, like contact_phone and contact_email;
-- retention scrubs all three. `name_words` is the name's words as `domain::search::words`
-- makes them (lower case, `ё` as `е`), in the form ' иван петров ', to filter rows;
-- `operation_names` holds one row per word, the index a word-prefix search ranges over.
--
-- No backfill: which payload field is the name is each source's field map in
-- leadgate.toml, which the database does not know, and SQLite cannot lower-case Cyrillic
-- in SQL. Operations recorded before this version are found by key, crm_id, phone and
-- e-mail, not by name.
alter table operations add column contact_name text;
alter table operations add column name_words text;

create table operation_names (
    word          text not null,
    created_at    text not null,
    operation_id  text not null,
    primary key (word, created_at, operation_id)
) without rowid;

-- Newest first: results are ordered by (created_at, operation_id), and a query that
-- matches many operations walks this index from the newest end.
create index operations_created on operations (created_at, operation_id);
-- Search by the CRM's id (set by the worker, never at intake: intake pays nothing).
create index operations_crm_id on operations (crm_id) where crm_id is not null;
-- Key prefixes range over the primary key (BINARY collation: byte order).
