-- An attempt row is inserted by the statement after the dispatch that
-- made it, in the same transaction, and only for the tasks whose dispatch
-- applied (`store::statements::DISPATCH_ATTEMPTS`); tasks are never
-- deleted. The foreign key to `tasks` guarded nothing the code does not,
-- as for progress points and log lines (0008), and cost each insert a
-- trigger that looks its task up and locks it (`FOR KEY SHARE`): a change
-- of the task row just updated in place, written to the WAL. SQLite keeps
-- its foreign keys, which cost it little.
ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_task_id_fkey;
