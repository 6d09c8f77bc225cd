-- Keys stored before Leadgate read `Idempotency-Key` as
-- draft-ietf-httpapi-idempotency-key-header-06 defines it: the field's text was the key,
-- quotes and all, so `Idempotency-Key: "lead-1"` made the operation `n8n:"lead-1"`; now
-- it is the string `lead-1`. A field whose value as sent names one of these operations
-- claims it (`intake::idempotency::earlier_operation`), so a request retried across the
-- upgrade is not a second lead. Only operations that exist now: one made later under a
-- key that begins with a quote (the string `"\"x\""` is the key `"x"`) is never taken
-- for another request's value as sent.
create table quoted_keys_before_the_draft (
    operation_id text primary key
);
insert into quoted_keys_before_the_draft (operation_id)
    select operation_id from operations
    where substr(operation_id, instr(operation_id, ':') + 1, 1) = '"';
