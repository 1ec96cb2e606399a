-- task_enqueue.lua: enqueue a Django task: its READY result and its message, together.
--
-- KEYS[1]  hash    redisq:{q}:result:<id>   the task's result
-- KEYS[2]  zset    redisq:{q}:results       result ids, score = expiry (ms)
-- KEYS[3]  stream  redisq:{q}:log
-- KEYS[4]  zset    redisq:{q}:delayed
-- ARGV[1]  when the result expires, ms since the epoch (PEXPIREAT; also its index score)
-- ARGV[2]  result id (the message id)
-- ARGV[3]  mode: "publish" writes the result and publishes the message; "once" writes
--          the result only if there is none yet and publishes nothing (the caller
--          publishes at most once itself, publish_once.lua)
-- ARGV[4]  when it is due: 0 appends the message to the log now; a due time (ms since
--          the epoch, a task's run_after) adds ARGV[5] to the delayed zset
-- ARGV[5]  the delayed member (envelope as JSON), or ""
-- ARGV[6]  now, ms since the epoch: index entries scored below it have expired
-- ARGV[7]  k: how many field, value pairs the result has
-- ARGV[8 .. 7+2k]  the result's field, value pairs
-- ARGV[8+2k ..]    the envelope's field, value pairs (XADD), for mode "publish" and due 0
--
-- Returns, mode "publish": the log entry id, or "" when delayed. Mode "once": {} when
-- the result was written, else the existing result as a flat field, value list.

local k = tonumber(ARGV[7])
local last = 7 + 2 * k
-- Expired results leave the index (their hashes expired by TTL): at most 100 per call.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[6], 'LIMIT', 0, 100)
if #expired > 0 then redis.call('ZREM', KEYS[2], unpack(expired)) end

if ARGV[3] == 'once' and redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HGETALL', KEYS[1])
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 8, last))
redis.call('PEXPIREAT', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
if ARGV[3] == 'once' then return {} end
if tonumber(ARGV[4]) > 0 then
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[5])
  return ''
end
return redis.call('XADD', KEYS[3], '*', unpack(ARGV, last + 1))
