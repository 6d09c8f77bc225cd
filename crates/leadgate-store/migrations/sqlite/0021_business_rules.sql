-- Business rules in the database (issue 17, "two owners"): per source, what a contact
-- match means (`create`, `link`, `review`), how far back it looks, and which channel the
-- source belongs to. Edited in the console (local mode: directly, the OS user as the
-- actor), read live by every running gateway (it polls the history's row count about
-- once a second). The TOML's `on_contact_match` and `[matching] window` only seed a
-- source that has no row yet; from then on these rows decide.

create table business_rules (
    source      text primary key,
    rule        text not null check (rule in ('create', 'link', 'review')),
    -- from 1 s to 365 days
    window_secs integer not null check (window_secs between 1 and 31536000),
    -- letters, digits, `-` and `_`, as a source name (domain::is_valid_source_name)
    channel     text not null check (length(channel) between 1 and 64
                                     and channel not glob '*[^A-Za-z0-9_-]*'),
    -- each edit names the version it was made from (compare-and-set)
    version     integer not null,
    changed_at  text not null,
    changed_by  text not null
);

-- Who changed what, when, from what to what: one row per version of a source's rules.
create table business_rule_history (
    id          integer primary key autoincrement,
    source      text not null,
    version     integer not null,
    actor       text not null,
    changed_at  text not null,
    -- the rules before (JSON text, domain::business::SourceRules; null when seeded) and after
    before      text,
    after       text not null,
    unique (source, version)
);

create trigger business_rule_history_no_update before update on business_rule_history
begin
    select raise(abort, 'the rules'' history is append-only (UPDATE refused)');
end;
create trigger business_rule_history_no_delete before delete on business_rule_history
begin
    select raise(abort, 'the rules'' history is append-only (DELETE refused)');
end;
