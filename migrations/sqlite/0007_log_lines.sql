-- Trainer and adapter output: the lines hosts capture per attempt (stdout,
-- stderr, the adapter's records), kept after the task ends. Bounded per
-- attempt by the master (`logs::bound`): past a fixed number of lines or
-- bytes the oldest go, and `log_drops` counts them with the lines hosts
-- dropped themselves. Kept equivalent to migrations/postgres/0007_log_lines.sql.

CREATE TABLE log_lines (
    -- Also the `seq` and the `after` cursor of `GET /v1/tasks/{id}/logs`:
    -- increasing within a task; trimming deletes, never renumbers.
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id  INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt  INTEGER NOT NULL,
    -- 'stdout', 'stderr' or 'adapter'.
    stream   TEXT    NOT NULL,
    at_ms    INTEGER NOT NULL,
    text     TEXT    NOT NULL,
    -- The text's length in bytes, for the bound.
    bytes    INTEGER NOT NULL
);

CREATE INDEX log_lines_by_task ON log_lines (task_id, id);
CREATE INDEX log_lines_by_attempt ON log_lines (task_id, attempt, id);

CREATE TABLE log_drops (
    task_id  INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt  INTEGER NOT NULL,
    dropped  INTEGER NOT NULL,
    PRIMARY KEY (task_id, attempt)
);
