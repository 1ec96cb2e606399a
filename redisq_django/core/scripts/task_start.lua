-- Assembled from source/task_start.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- task_start.lua: record that a worker starts an attempt of a Django task (and start the
-- attempt's own lease when the task has a visibility timeout of its own).
--
-- KEYS[1]  hash    redisq:{q}:result:<id>   the task's result
-- KEYS[2]  zset    redisq:{q}:results       result ids, score = expiry (ms)
-- KEYS[3]  stream  the stream the entry was delivered from (log or the group's direct)
-- KEYS[4]  zset    redisq:{q}:g:<g>:leases  started deliveries with a lease of their own
--                  (see lease.lua), score = when the lease ends (ms)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  when the result expires: "+<ms>" (what our code sends), that long after now
--          by Redis's own clock (TIME); or a time, ms since the epoch. PEXPIREAT, and its
--          score in KEYS[2]
-- ARGV[3]  result id
-- ARGV[4]  the worker id: the instance that holds the entry (appended to the JSON array
--          `worker_ids`)
-- ARGV[5]  now, ms since the epoch, by the worker's clock (shown only):
--          `last_attempted_at`, and `started_at` when unset
-- ARGV[6]  group name
-- ARGV[7]  entry id
-- ARGV[8]  the delivery's member in KEYS[4]: "log:<entry id>" or "direct:<entry id>"
-- ARGV[9]  the task's own visibility timeout, ms ("0": none, the consumer's applies).
--          When the instance still holds the entry, its lease ends that long after
--          Redis's now (ZADD KEYS[4]) and its idle time restarts (XCLAIM ... JUSTID), so
--          the attempt's lease starts with it, however long it waited in its batch.
-- ARGV[10 ..] field, value pairs written only when the hash is missing (it expired
--             while the task waited): the result as enqueued, rebuilt from the message
--
-- Sets `status` RUNNING and removes `finished_at` (a retried task runs again).
-- Returns {worker_ids as JSON, errors as JSON, started_at}.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script task_start.lua speaks redisq/2, '
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
local expire_at = time_of(ARGV[2])

local lease = tonumber(ARGV[9])
if lease > 0 then
  local p = redis.call('XPENDING', KEYS[3], ARGV[6], ARGV[7], ARGV[7], 1)
  if #p == 1 and p[1][2] == ARGV[4] then
    redis.call('XCLAIM', KEYS[3], ARGV[6], ARGV[4], 0, ARGV[7], 'JUSTID')
    redis.call('ZADD', KEYS[4], now + lease, ARGV[8])
  end
end

if redis.call('EXISTS', KEYS[1]) == 0 and #ARGV >= 11 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 10))
end
local ids = redis.call('HGET', KEYS[1], 'worker_ids')
local workers = (ids and ids ~= '[]') and cjson.decode(ids) or {}
workers[#workers + 1] = ARGV[4]
local started = redis.call('HGET', KEYS[1], 'started_at')
if not started then
  started = ARGV[5]
end
redis.call('HSET', KEYS[1], 'status', 'RUNNING', 'worker_ids', cjson.encode(workers),
  'started_at', started, 'last_attempted_at', ARGV[5])
redis.call('HDEL', KEYS[1], 'finished_at')
redis.call('PEXPIREAT', KEYS[1], expire_at)
redis.call('ZADD', KEYS[2], expire_at, ARGV[3])
return {cjson.encode(workers), redis.call('HGET', KEYS[1], 'errors') or '[]', started}
