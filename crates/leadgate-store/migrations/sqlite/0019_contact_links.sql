-- Contact and deal (0016): a console opens the contact a stepped create found or made, as
-- well as the deal. The CRM's contact page, published by the gateway beside its entity
-- page ({id} is replaced by the contact's id); null when the CRM has none Leadgate knows.
alter table crm_links add column contact_url text;
