-- A task's dispatch and start rewrote an entry in every index of `tasks`:
-- `tasks_by_status` indexes `status`, which both change, and PostgreSQL
-- updates a row in place (heap-only, no new index entries) only when no
-- indexed column changes and its page has room. `ended` is the status once
-- it is final and NULL before: it changes once in a task's life, at its
-- end, so `tasks_by_end` serves what `tasks_by_status` served (the live
-- tasks are `ended IS NULL`, the final ones `ended = ...`) while the
-- dispatch and the start leave every index alone. Generated from `status`,
-- `ended` cannot disagree with it; adding it rewrites the table once.
--
-- Pages are filled to 40 %, so that the room is there: a turn dispatches
-- the tasks of a page together (the queue is in submission order), every
-- new version must fit beside the old ones until the turn commits, and a
-- dispatched row is longer than the submitted one (its host, its
-- deadline). Filled to 50 %, 468 of 512 dispatches of the store's test
-- found room, to 70 % 192, to 40 % all; in a run of the dispatch benchmark
-- filled to 40 %, 36,203 of 62,210 updates were heap-only, about 98 % of
-- the dispatches and starts (the rest are finishes). The table is hardly
-- larger for it: the versions an update leaves behind took that room
-- anyway until vacuum (65 pages per 1,000 tasks after that benchmark, 63
-- with full pages and `tasks_by_status`).
ALTER TABLE tasks ADD COLUMN ended TEXT GENERATED ALWAYS AS
    (CASE WHEN status IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN status END) STORED;
CREATE INDEX tasks_by_end ON tasks (ended, id);
DROP INDEX IF EXISTS tasks_by_status;
ALTER TABLE tasks SET (fillfactor = 40);
