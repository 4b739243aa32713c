-- Ends attempts' leases and stores their reports, each in one atomic step,
-- so a host that dies right after this still has its results recorded: the
-- master picks the reports up from Redis. The attempts a host ends together
-- share one call.
--
-- KEYS[1] reports:pending   ARGV[1] retention ms; then for attempt i = 0, 1, ...:
--   KEYS[3i+2] task:{task}:workerId   KEYS[3i+3] worker:{worker}:task   KEYS[3i+4] task:{task}:report:{attempt}
--   ARGV[3i+2] "{worker}@{attempt}"   ARGV[3i+3] "{task}@{attempt}"     ARGV[3i+4] report
-- Returns how many attempts it released.
--
-- The lease keys are deleted only if they still name this attempt (compare
-- and delete): a newer attempt's lease is never touched.
local retention = ARGV[1]
local released = 0
for i = 0, (#KEYS - 1) / 3 - 1 do
  local owner_key, worker_key, report_key = KEYS[3 * i + 2], KEYS[3 * i + 3], KEYS[3 * i + 4]
  local owner, worker_task = ARGV[3 * i + 2], ARGV[3 * i + 3]
  if redis.call('GET', owner_key) == owner then
    redis.call('DEL', owner_key)
  end
  if redis.call('GET', worker_key) == worker_task then
    redis.call('DEL', worker_key)
  end
  redis.call('SET', report_key, ARGV[3 * i + 4], 'PX', retention)
  redis.call('SADD', KEYS[1], worker_task)
  released = released + 1
end
return released
