-- What each gateway's durable intake spool holds, said in its heartbeat (src/spool.rs):
-- the deliveries waiting for the database and when the oldest arrived. The console's
-- dashboard and the team alerts sum them up (`Upkeep::beats`). Earlier gateways keep
-- beating without them (0 and null).
alter table gateway_heartbeats add column spool_records bigint not null default 0;
alter table gateway_heartbeats add column spool_oldest timestamptz;
