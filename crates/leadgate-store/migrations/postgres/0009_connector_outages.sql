-- A connector's health (domain::outage): failures in a row across leads, and while it is
-- unreachable, since when and when the next probe may go out.
alter table connectors add column failures integer not null default 0;
alter table connectors add column unreachable_since timestamptz;
alter table connectors add column probe_at timestamptz;
alter table connectors add column probes integer not null default 0;
