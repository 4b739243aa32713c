-- Progress points and log lines are the master's most frequent inserts
-- (tens per task). Each paid for a foreign-key trigger on `tasks` and log
-- lines for a second index. Tasks are never deleted, and both recorders
-- store rows only for tasks that exist (log lines through `WHERE EXISTS`,
-- progress points from the scheduler's own tasks), so the constraint
-- guarded nothing the code does not. Reads by attempt use
-- `log_lines_by_task`: an attempt's lines are a bounded part of its task's.
ALTER TABLE progress_points DROP CONSTRAINT IF EXISTS progress_points_task_id_fkey;
ALTER TABLE log_lines DROP CONSTRAINT IF EXISTS log_lines_task_id_fkey;
DROP INDEX IF EXISTS log_lines_by_attempt;
