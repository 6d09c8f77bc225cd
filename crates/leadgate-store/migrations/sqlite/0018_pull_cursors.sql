-- Where each pull source stands in its sender's queue (src/pull): the cursor it must
-- present again after a restart to get back what it took and did not acknowledge yet
-- (Bitrix24's offline-event process_id). Written before any of the batch is recorded,
-- so a process killed between recording and acknowledging re-reads the batch; the
-- operation keys absorb the repeat.
create table pull_cursors (
    source      text primary key,
    mark        text not null,
    updated_at  text not null
);
