-- Gives up attempts whose lease has lapsed or whose dispatch was never
-- taken, atomically with checking that this is still true.
--
-- For each attempt i (keys in threes): KEYS[3i-2] is the task's owner key,
-- KEYS[3i-1] its fence key, KEYS[3i] the report key of the attempt being
-- given up. ARGV[1] is the fence TTL in ms, ARGV[i+1] the lowest attempt
-- that may still take a lease after this (the given-up attempt + 1).
--
-- Returns one integer per attempt: 1 if fenced (no lease, no report: the
-- attempt can never take or renew a lease again), 0 if a lease or a report
-- appeared since the sweep looked, so the attempt must not be given up.
local ttl = ARGV[1]
local result = {}
for i = 1, #KEYS / 3 do
  local owner, fence, report = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local next_attempt = tonumber(ARGV[i + 1])
  if redis.call('EXISTS', owner) == 1 or redis.call('EXISTS', report) == 1 then
    result[i] = 0
  else
    local current = tonumber(redis.call('GET', fence) or '0')
    if current < next_attempt then
      redis.call('SET', fence, next_attempt, 'PX', ttl)
    else
      redis.call('PEXPIRE', fence, ttl)
    end
    result[i] = 1
  end
end
return result
