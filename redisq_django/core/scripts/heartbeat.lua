-- Assembled from source/heartbeat.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- heartbeat.lua: announce an instance alive, by Redis's clock.
--
-- KEYS[1]  zset    redisq:{q}:g:<g>:instances   member = instance, score = heartbeat expiry ms
-- KEYS[2]  string  redisq:{q}:g:<g>:instance:<instance>   (optional) its report to the
--                  operators: JSON text (host, pid, start, counts, what it runs)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  instance name (the Redis consumer it reads as)
-- ARGV[3]  how long the heartbeat lives, ms (negative: it has expired, the instance is
--          dead and others take over its messages at once)
-- ARGV[4]  with KEYS[2]: the report (stored as given)
-- ARGV[5]  with KEYS[2]: how long the report is kept, ms
--
-- The expiry is TIME + ARGV[3] by Redis's own clock, the clock reclaim.lua compares it
-- with, so hosts whose clocks disagree never see each other as dead (or alive) wrongly.
-- Returns the expiry, ms since the epoch.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script heartbeat.lua speaks redisq/2, '
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

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local expiry = redis_now() + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], expiry, ARGV[2])
if KEYS[2] then
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
end
return expiry
