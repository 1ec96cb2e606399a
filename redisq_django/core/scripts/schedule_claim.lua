-- Assembled from source/schedule_claim.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- schedule_claim.lua: claim one tick of a periodic schedule, once it is due by Redis's clock.
--
-- KEYS[1]  zset  redisq:schedules:claimed   member = schedule name, score = the latest
--                tick claimed (ms since the epoch)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the schedule's name
-- ARGV[3]  the tick, ms since the epoch
--
-- The worker that gets 1 publishes the tick (publish_once.lua, id "<name>@<tick>"),
-- then records it in redisq:schedules:sent. Exactly one caller gets 1 for a tick: the
-- one whose ZADD ... GT CH raised the claimed score. A tick after Redis's own clock
-- (TIME) is refused and nothing is written, whatever the caller's clock says: a worker
-- whose clock runs ahead (stepped, skewed) can neither fire a tick early nor, by
-- claiming a later tick first, make the ticks in between unclaimable.
--
-- Returns {1, now}: claimed, publish it; {0, now}: this tick or a later one is claimed
-- already; {-1, now}: not due yet, ask again at the tick (now is Redis's clock, ms).

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script schedule_claim.lua speaks redisq/2, '
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
local now = redis_now()
local tick = tonumber(ARGV[3])
if tick > now then return {-1, now} end
return {redis.call('ZADD', KEYS[1], 'GT', 'CH', tick, ARGV[2]), now}
