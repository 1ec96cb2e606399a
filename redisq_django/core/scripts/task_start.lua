-- task_start.lua: record that a worker starts an attempt of a Django task (and start the
-- attempt's own lease when the task has a visibility timeout of its own).
--
-- KEYS[1]  hash    redisq:{q}:result:<id>   the task's result
-- KEYS[2]  zset    redisq:{q}:results       result ids, score = expiry (ms)
-- KEYS[3]  stream  the stream the entry was delivered from (log or the group's direct)
-- KEYS[4]  zset    redisq:{q}:g:<g>:leases  started deliveries with a lease of their own
--                  (see lease.lua), score = when the lease ends (ms)
-- ARGV[1]  when the result expires, ms since the epoch (PEXPIREAT; its index score)
-- ARGV[2]  result id
-- ARGV[3]  the worker id: the instance that holds the entry (appended to the JSON array
--          `worker_ids`)
-- ARGV[4]  now, ms since the epoch: `last_attempted_at`, and `started_at` when unset
-- ARGV[5]  group name
-- ARGV[6]  entry id
-- ARGV[7]  the delivery's member in KEYS[4]: "log:<entry id>" or "direct:<entry id>"
-- ARGV[8]  the task's own visibility timeout, ms ("0": none, the consumer's applies).
--          When the instance still holds the entry, its lease ends that long after
--          Redis's now (ZADD KEYS[4]) and its idle time restarts (XCLAIM ... JUSTID), so
--          the attempt's lease starts with it, however long it waited in its batch.
-- ARGV[9 ..]  field, value pairs written only when the hash is missing (it expired
--             while the task waited): the result as enqueued, rebuilt from the message
--
-- Sets `status` RUNNING and removes `finished_at` (a retried task runs again).
-- Returns {worker_ids as JSON, errors as JSON, started_at}.

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local lease = tonumber(ARGV[8])
if lease > 0 then
  local p = redis.call('XPENDING', KEYS[3], ARGV[5], ARGV[6], ARGV[6], 1)
  if #p == 1 and p[1][2] == ARGV[3] then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('XCLAIM', KEYS[3], ARGV[5], ARGV[3], 0, ARGV[6], 'JUSTID')
    redis.call('ZADD', KEYS[4], now + lease, ARGV[7])
  end
end

if redis.call('EXISTS', KEYS[1]) == 0 and #ARGV >= 10 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 9))
end
local ids = redis.call('HGET', KEYS[1], 'worker_ids')
local workers = (ids and ids ~= '[]') and cjson.decode(ids) or {}
workers[#workers + 1] = ARGV[3]
local started = redis.call('HGET', KEYS[1], 'started_at')
if not started then
  started = ARGV[4]
end
redis.call('HSET', KEYS[1], 'status', 'RUNNING', 'worker_ids', cjson.encode(workers),
  'started_at', started, 'last_attempted_at', ARGV[4])
redis.call('HDEL', KEYS[1], 'finished_at')
redis.call('PEXPIREAT', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return {cjson.encode(workers), redis.call('HGET', KEYS[1], 'errors') or '[]', started}
