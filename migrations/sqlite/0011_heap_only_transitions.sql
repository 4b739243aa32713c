-- Kept equivalent to migrations/postgres/0011_heap_only_transitions.sql,
-- where `tasks_by_end` lets a task's dispatch and start update its row in
-- place. `ended` is the status once it is final and NULL before; the live
-- tasks are `ended IS NULL`, the final ones `ended = ...`. SQLite computes
-- it when read (it cannot add a stored generated column to a table) and
-- has no in-place updates to gain, so here the index only replaces
-- `tasks_by_status`.
ALTER TABLE tasks ADD COLUMN ended TEXT GENERATED ALWAYS AS
    (CASE WHEN status IN ('COMPLETED', 'FAILED', 'CANCELLED') THEN status END) VIRTUAL;
CREATE INDEX tasks_by_end ON tasks (ended, id);
DROP INDEX IF EXISTS tasks_by_status;
