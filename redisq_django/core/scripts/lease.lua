-- Assembled from source/lease.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- lease.lua: start or renew the leases of started deliveries that have a visibility
-- timeout of their own (a Django task's), by Redis's clock.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- KEYS[3]  zset    redisq:{q}:g:<g>:leases   member = "log:<entry id>" or
--                  "direct:<entry id>", score = when that delivery's lease ends (ms)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  instance name (the Redis consumer it reads as)
-- ARGV[4 ..]  triples: "log" or "direct", entry id, the lease's length in ms
--
-- For each entry this instance still holds, its lease now ends that many ms after Redis's
-- now (TIME), and its idle time restarts (XCLAIM ... JUSTID, which counts no delivery).
-- reclaim.lua takes a delivery with a lease over only once its lease has ended, whatever
-- the instance's heartbeat and the consumer's visibility timeout. An entry no longer
-- pending loses its lease (it was settled). Returns the ids another instance holds now.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script lease.lua speaks redisq/2, '
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

local group, consumer, leases = ARGV[2], ARGV[3], KEYS[3]
-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local now = redis_now()
local lost = {}

for i = 4, #ARGV, 3 do
  local log = ARGV[i] == 'log'
  local key = log and KEYS[1] or KEYS[2]
  local id = ARGV[i + 1]
  local tag = (log and 'log:' or 'direct:') .. id
  local p = redis.call('XPENDING', key, group, id, id, 1)
  if #p == 0 then
    redis.call('ZREM', leases, tag)
  elseif p[1][2] == consumer then
    redis.call('XCLAIM', key, group, consumer, 0, id, 'JUSTID')
    redis.call('ZADD', leases, now + tonumber(ARGV[i + 2]), tag)
  else
    lost[#lost + 1] = id
  end
end
return lost
