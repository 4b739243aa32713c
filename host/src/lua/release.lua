-- Ends an attempt's lease and stores its report, in one atomic step, so a
-- host that dies right after this still has its result recorded: the master
-- picks the report up from Redis.
--
-- KEYS[1] task:{task}:workerId   KEYS[2] worker:{worker}:task
-- KEYS[3] task:{task}:report:{attempt}   KEYS[4] reports:pending
-- ARGV[1] "{worker}@{attempt}"   ARGV[2] "{task}@{attempt}"   ARGV[3] report   ARGV[4] retention ms
--
-- The lease keys are deleted only if they still name this attempt (compare
-- and delete): a newer attempt's lease is never touched.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
if redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('DEL', KEYS[2])
end
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
redis.call('SADD', KEYS[4], ARGV[2])
return 1
