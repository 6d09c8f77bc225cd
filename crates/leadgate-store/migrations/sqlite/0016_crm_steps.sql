-- Contact and deal (issue 18): CRM entities by kind. Twin of the PostgreSQL file.
--
-- A create of several steps (Bitrix24 `contact_deal`) commits each step's result as a
-- `crm_step` event ({"step", "entity", "crm_id", "how"}) before the next call, and the
-- final entity's too. They are counted by entity kind and how the entity was had:
-- `created`, `linked` (an existing contact found by phone or e-mail) or `recovered`
-- (found again by its key after an answer was lost).
create trigger timeline_crm_steps after insert on timeline
when new.kind = 'crm_step'
begin
    insert into metric_counters (metric, label, label2, value)
        values ('crm_steps', coalesce(json_extract(new.detail, '$.entity'), ''),
                coalesce(json_extract(new.detail, '$.how'), ''), 1)
        on conflict (metric, label, label2, shard) do update set value = value + 1;
end;
