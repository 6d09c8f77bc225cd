-- Slow CRMs (issue: one create even when the CRM is slow).
--
-- verify_first: the last attempt's outcome is unknown and a lookup by key found nothing
-- yet. The operation is due again only after the connector's settle window (its
-- next_attempt_at), and then the worker looks the key up once more before it may create:
-- a create the CRM was still executing has landed by then.
alter table operations add column verify_first boolean not null default false;
-- The lease token of the last attempt whose outcome was recorded: a report repeated with
-- it (the first commit's answer was lost) is recognised and changes nothing.
alter table operations add column finished_token text;
-- Until when a create sent under the last lease may still land: its expiry plus the
-- connector's settle window. A retry a person grants is not due before then.
alter table operations add column quiet_after timestamptz;

-- A second entity under one operation's key (the original holder's create answered
-- after another attempt had created one too): counted, so the CRM never holds more
-- entities than the metrics show.
create function timeline_extra_entity() returns trigger language plpgsql as $$
begin
    perform metric_add('crm_entities', '', '', 1);
    perform series_add(new.at, 'crm_entities', '');
    return null;
end
$$;
create trigger timeline_extra_entity after insert on timeline
    for each row when (new.kind = 'extra_crm_entity')
    execute function timeline_extra_entity();

-- Every lease granted on an operation, by the SHA-256 of its token (never the token
-- itself: whoever reads this database must not be able to report for an integration).
-- A report that comes after its lease was lost is believed only from a token that once
-- held the operation; any other token changes nothing and writes nothing.
create table lease_grants (
    operation_id  text not null references operations (operation_id),
    token_sha256  text not null,
    granted_at    timestamptz not null,
    primary key (operation_id, token_sha256)
);
