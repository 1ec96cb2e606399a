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

--#include protocol

--#include clock

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
