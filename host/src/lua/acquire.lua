-- Takes the leases of attempts, each with both its keys, in one atomic step,
-- before their adapters run. The attempts a host starts together (a turn's
-- dispatches arrive together) share one call; each gets its own verdict.
--
-- ARGV[1] TTL ms; then for lease i = 0, 1, ...:
--   KEYS[3i+1] task:{task}:workerId   KEYS[3i+2] worker:{worker}:task   KEYS[3i+3] task:{task}:fence
--   ARGV[3i+2] "{worker}@{attempt}"   ARGV[3i+3] "{task}@{attempt}"     ARGV[3i+4] attempt
-- Returns a verdict and its detail for each lease, in order.
--
-- Refused when the master has fenced the attempt off (it gave it up), or
-- when an attempt at least as recent holds the task. A lease of an older
-- attempt is taken over: the master gave that attempt up before dispatching
-- this one.
local ttl = ARGV[1]
local answers = {}
for i = 0, #KEYS / 3 - 1 do
  local owner_key, worker_key, fence_key = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  local owner, worker_task = ARGV[3 * i + 2], ARGV[3 * i + 3]
  local attempt = tonumber(ARGV[3 * i + 4])
  local fence = tonumber(redis.call('GET', fence_key) or '0')
  local held = redis.call('GET', owner_key)
  local held_attempt = nil
  if held and held ~= owner then
    held_attempt = tonumber(string.match(held, '@(%d+)$') or '0')
  end
  if attempt < fence then
    answers[#answers + 1] = 'fenced'
    answers[#answers + 1] = tostring(fence)
  elseif held_attempt and held_attempt >= attempt then
    answers[#answers + 1] = 'held'
    answers[#answers + 1] = held
  else
    redis.call('SET', owner_key, owner, 'PX', ttl)
    redis.call('SET', worker_key, worker_task, 'PX', ttl)
    answers[#answers + 1] = 'ok'
    answers[#answers + 1] = ''
  end
end
return answers
