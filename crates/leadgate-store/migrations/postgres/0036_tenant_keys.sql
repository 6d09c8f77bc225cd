-- Fleet mode (issue 35): the keys of the small tenant-owned tables lead with the tenant,
-- so two tenants may each have a connector `bitrix24`, a source `site`, a channel `team`
-- and the same content or signature, and a contact lock never lends one tenant's CRM
-- contact to another's lead. Every row so far is the default tenant's (0), so no key
-- collides. The big tables (operations and what hangs off them) keep their keys: an
-- operation's key carries its tenant (`<tenant>/<source>:<key>`).
alter table content_keys drop constraint content_keys_pkey,
    add primary key (tenant_id, source, content_sha256);
alter table signature_uses drop constraint signature_uses_pkey,
    add primary key (tenant_id, source, signature_sha256);
alter table connectors drop constraint connectors_pkey, add primary key (tenant_id, name);
alter table crm_tokens drop constraint crm_tokens_pkey, add primary key (tenant_id, connector);
alter table crm_links drop constraint crm_links_pkey, add primary key (tenant_id, connector);
alter table business_rules drop constraint business_rules_pkey, add primary key (tenant_id, source);
alter table business_rule_history drop constraint business_rule_history_source_version_key,
    add unique (tenant_id, source, version);
alter table pull_cursors drop constraint pull_cursors_pkey, add primary key (tenant_id, source);
alter table contact_locks drop constraint contact_locks_pkey, add primary key (tenant_id, key);
alter table alert_conditions drop constraint alert_conditions_channel_fkey;
alter table alert_channels drop constraint alert_channels_pkey, add primary key (tenant_id, channel);
alter table alert_conditions drop constraint alert_conditions_pkey,
    add primary key (tenant_id, channel, key),
    add foreign key (tenant_id, channel) references alert_channels (tenant_id, channel);
