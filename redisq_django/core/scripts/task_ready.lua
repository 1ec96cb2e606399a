-- Assembled from source/task_ready.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- task_ready.lua: a FAILED Django task's dead letter was sent again (the admin's Retry):
-- its result is READY again.
--
-- KEYS[1]  hash  redisq:{q}:result:<id>   the task's result
-- KEYS[2]  zset  redisq:{q}:results       result ids, score = expiry (ms)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  when the result expires: "+<ms>" (what our code sends), that long after now
--          by Redis's own clock (TIME); or a time, ms since the epoch. PEXPIREAT, and its
--          score in KEYS[2]
-- ARGV[3]  result id
--
-- Only a result still FAILED changes (a worker may have started the retry already).
-- Returns 1 when it changed, else 0.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script task_ready.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end
-- <<< fragments/protocol.lua

-- >>> fragments/clock.lua (shared; assembled into this script)
-- Redis's clock, ms since the epoch (TIME): every "now" that decides a delivery, a lease,
-- an expiry or a tick is Redis's, never a caller's (PROTOCOL.md, "Clocks"). Read once per
-- call, and only when needed. A script calls redis.replicate_commands() before it reads
-- the clock and writes: Redis 6.2 must be told, 7 and later replicate effects anyway.
local redis_ms
local function redis_now()
  if not redis_ms then
    local t = redis.call('TIME')
    redis_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return redis_ms
end

-- A time given as "+<ms>" (that long after Redis's now: what our code sends) or as ms
-- since the epoch, as the text of a whole number of ms.
local function time_of(given)
  if string.sub(given, 1, 1) ~= '+' then return given end
  return string.format('%d', redis_now() + tonumber(string.sub(given, 2)))
end
-- <<< fragments/clock.lua

-- The result's expiry, by Redis's clock unless the caller fixed a time.
-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
if string.sub(ARGV[2], 1, 1) == '+' then redis.replicate_commands() end
local expire_at = time_of(ARGV[2])

if redis.call('HGET', KEYS[1], 'status') ~= 'FAILED' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'READY')
redis.call('HDEL', KEYS[1], 'finished_at')
redis.call('PEXPIREAT', KEYS[1], expire_at)
redis.call('ZADD', KEYS[2], expire_at, ARGV[3])
return 1
