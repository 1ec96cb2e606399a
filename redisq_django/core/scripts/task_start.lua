-- task_start.lua: record that a worker starts an attempt of a Django task.
--
-- KEYS[1]  hash  redisq:{q}:result:<id>   the task's result
-- KEYS[2]  zset  redisq:{q}:results       result ids, score = expiry (ms)
-- ARGV[1]  when the result expires, ms since the epoch (PEXPIREAT; its index score)
-- ARGV[2]  result id
-- ARGV[3]  the worker id (appended to the JSON array `worker_ids`)
-- ARGV[4]  now, ms since the epoch: `last_attempted_at`, and `started_at` when unset
-- ARGV[5 ..]  field, value pairs written only when the hash is missing (it expired
--             while the task waited): the result as enqueued, rebuilt from the message
--
-- Sets `status` RUNNING and removes `finished_at` (a retried task runs again).
-- Returns {worker_ids as JSON, errors as JSON, started_at}.

if redis.call('EXISTS', KEYS[1]) == 0 and #ARGV >= 6 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 5))
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
