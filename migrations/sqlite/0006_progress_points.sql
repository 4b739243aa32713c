-- Progress history: the progress points a task's attempts reported, kept
-- after the task ends so its curves survive master restarts. Bounded per
-- task by the master (`history::bound`): past a fixed number of points the
-- oldest are thinned, keeping each window's lowest and highest return.
-- Kept equivalent to migrations/postgres/0006_progress_points.sql.

CREATE TABLE progress_points (
    -- Also the cursor of `GET /v1/tasks/{id}/progress?after=`: thinning
    -- deletes points and never renumbers the rest.
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id        INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt        INTEGER NOT NULL,
    episode        INTEGER,
    episode_return REAL,
    -- The trainer's named figures (JSON object).
    metrics        TEXT    NOT NULL,
    at_ms          INTEGER NOT NULL
);

CREATE INDEX progress_points_by_task ON progress_points (task_id, id);
