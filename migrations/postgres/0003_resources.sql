-- Resources: what a task asks for, what its host gave each attempt, and
-- what each host offers. All three are JSON (TEXT); NULL means none asked
-- (a slot only), not yet accepted, or a host recorded before hosts
-- declared their capacity.
ALTER TABLE tasks ADD COLUMN resources TEXT;
ALTER TABLE attempts ADD COLUMN assignment TEXT;
ALTER TABLE hosts ADD COLUMN capacity TEXT;
