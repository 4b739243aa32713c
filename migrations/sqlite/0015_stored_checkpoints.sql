-- A task's last checkpoint may live in the artifact store: then
-- `checkpoint_kind` is 'file', `checkpoint_data` is NULL and this column
-- holds the object (JSON: its artifact id, key, size and SHA-256), which
-- the next attempt's host fetches and checks. NULL for an external
-- reference or a checkpoint kept inline (`checkpoint_data`).
-- Kept equivalent to migrations/postgres/0015_stored_checkpoints.sql.

ALTER TABLE tasks ADD COLUMN checkpoint_object TEXT;
