-- Sweeps: a hyperparameter search recorded with its trials. Kept
-- equivalent to migrations/postgres/0005_sweeps.sql. A sweep and its trial
-- tasks are inserted in one transaction; a trial is an ordinary task, and
-- the sweep's state is read from its trials' tasks.

CREATE TABLE sweeps (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    name            TEXT,
    adapter         TEXT    NOT NULL,
    kind            TEXT    NOT NULL,
    -- The spec as accepted, with its sweep seed filled in (JSON).
    spec            TEXT    NOT NULL,
    -- The expanded configurations: one JSON object of swept values each.
    configs         TEXT    NOT NULL,
    metric          TEXT    NOT NULL,
    direction       TEXT    NOT NULL CHECK (direction IN ('max', 'min')),
    created_at_ms   INTEGER NOT NULL,
    -- Set when an operator cancelled the sweep; its unfinished trials are
    -- cancelled after (and again at start-up, should the master die between).
    cancelled_at_ms INTEGER
);

-- One row per trial: which configuration and seed the task runs.
CREATE TABLE sweep_trials (
    sweep_id   INTEGER NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,
    task_id    INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    config     INTEGER NOT NULL,
    seed       INTEGER NOT NULL,
    -- The milestone at which early stopping cancelled it; the trial shows
    -- as stopped early when its task ended CANCELLED.
    stopped_at INTEGER,
    PRIMARY KEY (sweep_id, task_id)
);
CREATE UNIQUE INDEX sweep_trials_by_task ON sweep_trials (task_id);

-- The early-stopping signal of a trial when it first reached a milestone.
CREATE TABLE sweep_milestones (
    task_id   INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    milestone INTEGER NOT NULL,
    value     DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (task_id, milestone)
);
