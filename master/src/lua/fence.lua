-- Gives up attempts whose lease has lapsed or whose dispatch was never
-- taken, atomically with checking that this is still true.
--
-- KEYS[1] is the leader-term key and ARGV[2] the caller's term: a master
-- whose term is older than the one announced there has been deposed, and
-- fences nothing (0 when masters do not elect a leader); a newer term is
-- announced there as it fences.
-- For each attempt i (keys in threes after the first): KEYS[3i-1] is the
-- task's owner key, KEYS[3i] its fence key, KEYS[3i+1] the report key of
-- the attempt being given up. ARGV[1] is the fence TTL in ms, ARGV[i+2] the
-- lowest attempt that may still take a lease after this (the given-up
-- attempt + 1).
--
-- Returns one integer per attempt: 1 if fenced (no lease, no report: the
-- attempt can never take or renew a lease again), 0 if a lease or a report
-- appeared since the sweep looked, so the attempt must not be given up.
local ttl = ARGV[1]
local announced = tonumber(redis.call('GET', KEYS[1]) or '0')
local mine = tonumber(ARGV[2])
if announced > mine then
  return redis.error_reply('DEPOSED a master of term ' .. announced .. ' leads; this one has term ' .. ARGV[2])
elseif announced < mine then
  redis.call('SET', KEYS[1], ARGV[2])
end
local result = {}
for i = 1, (#KEYS - 1) / 3 do
  local owner, fence, report = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  local next_attempt = tonumber(ARGV[i + 2])
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
