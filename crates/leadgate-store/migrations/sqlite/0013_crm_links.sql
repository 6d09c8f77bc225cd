-- Where a person opens the CRM: each connector's web pages, published by the gateway when
-- it starts (the portal's public address only, never a webhook secret or a token), so every
-- console can open an entity or a search in the CRM without a hand-edited template.
create table crm_links (
    connector   text primary key,
    -- {id} is replaced by the entity's CRM id
    entity_url  text not null,
    -- {q} is replaced by a phone, an e-mail or a name; null when the CRM has no search page
    search_url  text,
    updated_at  text not null
);
