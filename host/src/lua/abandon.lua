-- Takes back a lease an attempt may have written without the host knowing:
-- its acquire timed out or its reply was lost, and the attempt will not run.
-- Without this, the task could not be dispatched again before the lease TTL.
--
-- KEYS[1] task:{task}:workerId   KEYS[2] worker:{worker}:task
-- ARGV[1] "{worker}@{attempt}"   ARGV[2] "{task}@{attempt}"
--
-- Compare and delete: a lease that names anyone else is left alone.
local dropped = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  dropped = 1
end
if redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('DEL', KEYS[2])
end
return dropped
