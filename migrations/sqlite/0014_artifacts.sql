-- What training produced: the checkpoints and outputs hosts uploaded to the
-- cluster's artifact store (`artifacts.store`), one row per complete object.
-- A row is written only after its object is complete in the store (and
-- only while the attempt that made it is the task's live one), so every
-- row names bytes that can be read back whole; the bytes themselves never
-- enter the database. Kept equivalent to migrations/postgres/0014_artifacts.sql.

CREATE TABLE artifacts (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id       INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    -- 'checkpoint' (announced while the trainer ran, or its final one) or
    -- 'output' (a file the trainer left under outputs/).
    kind          TEXT    NOT NULL CHECK (kind IN ('checkpoint', 'output')),
    -- The file's path relative to the workspace (outputs: outputs/...).
    name          TEXT    NOT NULL,
    size          INTEGER NOT NULL,
    -- Lower-case hex SHA-256 of the bytes.
    sha256        TEXT    NOT NULL,
    -- The object's key in the store.
    location      TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL
);

CREATE INDEX artifacts_by_task ON artifacts (task_id, id);
