-- Adapter versions: the requirement a task was submitted with
-- (`name@requirement`; NULL when any version will do), and the exact
-- version each attempt's host ran (NULL for attempts dispatched before
-- versions were recorded).
ALTER TABLE tasks ADD COLUMN adapter_version TEXT;
ALTER TABLE attempts ADD COLUMN adapter_version TEXT;
