-- Kept equivalent to migrations/postgres/0013_host_standing.sql. Whether a
-- host takes new work, kept here so that it outlives the master that
-- decided it: drained by an operator (`drained_at_ms`, NULL when not), and
-- quarantined after failing for its own reasons (`quarantined_at_ms`, NULL
-- when not, with why, its last such error, how many probes failed since
-- and when the next may start). Where each unfinished task failed for its
-- host's reasons is not here: it is the task's attempts whose outcome is
-- HOST_FAULT.
ALTER TABLE hosts ADD COLUMN drained_at_ms INTEGER;
ALTER TABLE hosts ADD COLUMN quarantined_at_ms INTEGER;
ALTER TABLE hosts ADD COLUMN quarantine_reason TEXT;
ALTER TABLE hosts ADD COLUMN last_error TEXT;
ALTER TABLE hosts ADD COLUMN failed_probes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE hosts ADD COLUMN next_probe_at_ms INTEGER;
