-- task_lost.lua: a Django task's message became a dead letter without its worker
-- settling it (its workers kept dying: reason lease_expired): its result is FAILED.
--
-- KEYS[1]  hash  redisq:{q}:result:<id>   the task's result
-- KEYS[2]  zset  redisq:{q}:results       result ids, score = expiry (ms)
-- ARGV[1]  when the result expires, ms since the epoch (PEXPIREAT; its index score)
-- ARGV[2]  result id
-- ARGV[3]  the error to append to the JSON array `errors` (a JSON object)
-- ARGV[4]  finished_at, ms since the epoch
--
-- Only a result that is not finished changes (READY or RUNNING). Returns 1 when it
-- changed, else 0.

local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'READY' and status ~= 'RUNNING' then return 0 end
local raw = redis.call('HGET', KEYS[1], 'errors')
local errors = (raw and raw ~= '[]') and cjson.decode(raw) or {}
errors[#errors + 1] = cjson.decode(ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'FAILED', 'errors', cjson.encode(errors),
  'finished_at', ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return 1
