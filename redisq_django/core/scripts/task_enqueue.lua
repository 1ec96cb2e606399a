-- Assembled from source/task_enqueue.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- task_enqueue.lua: enqueue a Django task: its READY result and its message, together.
--
-- KEYS[1]  hash    redisq:{q}:result:<id>   the task's result
-- KEYS[2]  zset    redisq:{q}:results       result ids, score = expiry (ms)
-- KEYS[3]  stream  redisq:{q}:log
-- KEYS[4]  zset    redisq:{q}:delayed
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  when the result expires: "+<ms>" (what our code sends), that long after now
--          by Redis's own clock (TIME); or a time, ms since the epoch. PEXPIREAT, and its
--          score in KEYS[2]
-- ARGV[3]  result id (the message id)
-- ARGV[4]  mode: "publish" writes the result and publishes the message; "once" writes
--          the result only if there is none yet and publishes nothing (the caller
--          publishes at most once itself, publish_once.lua)
-- ARGV[5]  when it is due: 0 appends the message to the log now; a due time (ms since
--          the epoch, a task's run_after) adds ARGV[6] to the delayed zset
-- ARGV[6]  the delayed member (envelope as JSON), or ""
-- ARGV[7]  "" (what our code sends): index entries scored before Redis's now (TIME) have
--          expired; a number (ms) fixes "now" instead (tests)
-- ARGV[8]  k: how many field, value pairs the result has
-- ARGV[9 .. 8+2k]  the result's field, value pairs
-- ARGV[9+2k ..]    the envelope's field, value pairs (XADD), for mode "publish" and due 0
--
-- Returns, mode "publish": the log entry id, or "" when delayed. Mode "once": {} when
-- the result was written, else the existing result as a flat field, value list.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script task_enqueue.lua speaks redisq/2, '
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
local expiry = time_of(ARGV[2])
local cutoff = ARGV[7] ~= '' and ARGV[7] or string.format('%d', redis_now())

local k = tonumber(ARGV[8])
local last = 8 + 2 * k
-- Expired results leave the index (their hashes expired by TTL): at most 100 per call.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. cutoff, 'LIMIT', 0, 100)
if #expired > 0 then redis.call('ZREM', KEYS[2], unpack(expired)) end

if ARGV[4] == 'once' and redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HGETALL', KEYS[1])
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 9, last))
redis.call('PEXPIREAT', KEYS[1], expiry)
redis.call('ZADD', KEYS[2], expiry, ARGV[3])
if ARGV[4] == 'once' then return {} end
if tonumber(ARGV[5]) > 0 then
  redis.call('ZADD', KEYS[4], ARGV[5], ARGV[6])
  return ''
end
return redis.call('XADD', KEYS[3], '*', unpack(ARGV, last + 1))
