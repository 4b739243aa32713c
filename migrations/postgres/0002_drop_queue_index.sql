-- The queue index (status, priority DESC, id) duplicated tasks_by_status
-- (status, id) for every query the master makes: the queue is read in
-- dispatch order once, at start-up, and sorting the PENDING rows then is
-- cheap. Every status change of a task rewrote an entry in it; without it
-- a task's life costs the database one index update less per transition.
DROP INDEX IF EXISTS tasks_queue;
