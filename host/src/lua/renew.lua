-- Renews every lease of a host and its heartbeat key, in one atomic step.
--
-- KEYS[1] worker:{host}:hb, then four keys per lease:
--   task:{task}:workerId, worker:{worker}:task, task:{task}:fence, task:{task}:report:{attempt}
-- ARGV[1] lease TTL ms, ARGV[2] heartbeat TTL ms, ARGV[3] host id, then three per lease:
--   "{worker}@{attempt}", "{task}@{attempt}", attempt
--
-- Per lease, returns:
--   renewed    - the keys named this attempt (or an older one) and were renewed
--   rebuilt    - the keys were missing (Redis lost its data) and were written again
--   finished   - the keys are gone because this attempt already reported
--   superseded - a newer attempt of the task holds it
--   fenced     - the master gave this attempt up
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
local ttl = ARGV[1]
local out = {}
local n = (#KEYS - 1) / 4
for i = 1, n do
  local owner, worker, fence, report = KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i], KEYS[4 * i + 1]
  local mine, attempt_value, attempt = ARGV[3 * i + 1], ARGV[3 * i + 2], tonumber(ARGV[3 * i + 3])
  local fenced_from = tonumber(redis.call('GET', fence) or '0')
  local held = redis.call('GET', owner)
  local verdict
  if attempt < fenced_from then
    verdict = 'fenced'
  elseif held == mine then
    verdict = 'renewed'
  elseif not held then
    if redis.call('EXISTS', report) == 1 then
      verdict = 'finished'
    else
      verdict = 'rebuilt'
    end
  else
    local held_attempt = tonumber(string.match(held, '@(%d+)$') or '0')
    if held_attempt > attempt then
      verdict = 'superseded'
    else
      verdict = 'renewed'
    end
  end
  if verdict == 'renewed' or verdict == 'rebuilt' then
    redis.call('SET', owner, mine, 'PX', ttl)
    redis.call('SET', worker, attempt_value, 'PX', ttl)
  end
  out[i] = verdict
end
return out
