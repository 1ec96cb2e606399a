-- task_ready.lua: a FAILED Django task's dead letter was sent again (the admin's Retry):
-- its result is READY again.
--
-- KEYS[1]  hash  redisq:{q}:result:<id>   the task's result
-- KEYS[2]  zset  redisq:{q}:results       result ids, score = expiry (ms)
-- ARGV[1]  when the result expires, ms since the epoch (PEXPIREAT; its index score)
-- ARGV[2]  result id
--
-- Only a result still FAILED changes (a worker may have started the retry already).
-- Returns 1 when it changed, else 0.

if redis.call('HGET', KEYS[1], 'status') ~= 'FAILED' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'READY')
redis.call('HDEL', KEYS[1], 'finished_at')
redis.call('PEXPIREAT', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return 1
