-- A task may set `progress_timeout_secs`: an attempt whose trainer reports
-- no progress for that long is ended as STALLED by its host (see
-- host/src/attempt/stall.rs). NULL: no such limit (unless the adapter's
-- entry on the host sets a default). A STALLED attempt needs no column of
-- its own: it is an attempt whose `outcome` is 'STALLED'.
-- Kept equivalent to migrations/sqlite/0016_progress_timeout.sql.

ALTER TABLE tasks ADD COLUMN progress_timeout_secs BIGINT;
