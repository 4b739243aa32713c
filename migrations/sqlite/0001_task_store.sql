-- The master's task store (SQLite). Kept equivalent to
-- migrations/postgres/0001_task_store.sql: same tables, columns, constraints
-- and indexes. Integers are 64-bit, booleans 0/1, JSON is TEXT, timestamps
-- are milliseconds since the Unix epoch.

-- One row per submitted task. Every transition is a compare-and-set on
-- (status, attempt); `attempt` only grows, and is the fencing token.
CREATE TABLE tasks (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    name                 TEXT,
    adapter              TEXT    NOT NULL,
    kind                 TEXT    NOT NULL,
    params               TEXT    NOT NULL,
    priority             INTEGER NOT NULL,
    max_attempts         INTEGER NOT NULL,
    timeout_secs         INTEGER,
    status               TEXT    NOT NULL CHECK (status IN
                             ('PENDING', 'DISPATCHED', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED')),
    attempt              INTEGER NOT NULL DEFAULT 0,
    runs                 INTEGER NOT NULL DEFAULT 0,
    host_id              TEXT,
    slot                 INTEGER,
    cancel_requested     INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    dispatch_deadline_ms INTEGER,
    progress             TEXT,
    checkpoint_attempt   INTEGER,
    checkpoint_kind      TEXT CHECK (checkpoint_kind IN ('file', 'external')),
    checkpoint_name      TEXT,
    checkpoint_data      BLOB,
    result               TEXT,
    error                TEXT,
    created_at_ms        INTEGER NOT NULL,
    updated_at_ms        INTEGER NOT NULL,
    started_at_ms        INTEGER,
    finished_at_ms       INTEGER
);

-- The queue in dispatch order; also serves the DISPATCHED/RUNNING scan.
CREATE INDEX tasks_queue ON tasks (status, priority DESC, id);
-- Listing, newest first, by status or by adapter.
CREATE INDEX tasks_by_status ON tasks (status, id);
CREATE INDEX tasks_by_adapter ON tasks (adapter, id);

-- One row per dispatch of a task; closed when the attempt ends.
CREATE TABLE attempts (
    task_id          INTEGER NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt          INTEGER NOT NULL,
    host_id          TEXT    NOT NULL,
    slot             INTEGER,
    dispatched_at_ms INTEGER NOT NULL,
    started_at_ms    INTEGER,
    finished_at_ms   INTEGER,
    outcome          TEXT,
    error            TEXT,
    metrics          TEXT,
    PRIMARY KEY (task_id, attempt)
);

-- Every host the master has seen, for the API once it is gone.
CREATE TABLE hosts (
    id            TEXT    PRIMARY KEY,
    slots         INTEGER NOT NULL,
    adapters      TEXT    NOT NULL,
    agent         TEXT    NOT NULL,
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms  INTEGER NOT NULL
);
