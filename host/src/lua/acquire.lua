-- Takes the lease of one attempt: both keys, in one atomic step, before the
-- adapter runs.
--
-- KEYS[1] task:{task}:workerId   KEYS[2] worker:{worker}:task   KEYS[3] task:{task}:fence
-- ARGV[1] "{worker}@{attempt}"   ARGV[2] "{task}@{attempt}"     ARGV[3] attempt   ARGV[4] TTL ms
--
-- Refused when the master has fenced this attempt off (it gave it up), or
-- when an attempt at least as recent holds the task. A lease of an older
-- attempt is taken over: the master gave that attempt up before dispatching
-- this one.
local attempt = tonumber(ARGV[3])
local fence = tonumber(redis.call('GET', KEYS[3]) or '0')
if attempt < fence then
  return {'fenced', tostring(fence)}
end
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then
  local held_attempt = tonumber(string.match(held, '@(%d+)$') or '0')
  if held_attempt >= attempt then
    return {'held', held}
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[4])
return {'ok', ''}
