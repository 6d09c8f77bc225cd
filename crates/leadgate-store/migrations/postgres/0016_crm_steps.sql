-- Contact and deal (issue 18): CRM entities by kind.
--
-- A create of several steps (Bitrix24 `contact_deal`) commits each step's result as a
-- `crm_step` event ({"step", "entity", "crm_id", "how"}) before the next call, and the
-- final entity's too. They are counted by entity kind and how the entity was had:
-- `created`, `linked` (an existing contact found by phone or e-mail) or `recovered`
-- (found again by its key after an answer was lost).
create function timeline_crm_steps() returns trigger language plpgsql as $$
declare
    d jsonb := new.detail::jsonb;
begin
    perform metric_add('crm_steps', coalesce(d ->> 'entity', ''), coalesce(d ->> 'how', ''), 1);
    return null;
end
$$;
create trigger timeline_crm_steps after insert on timeline
    for each row when (new.kind = 'crm_step')
    execute function timeline_crm_steps();
