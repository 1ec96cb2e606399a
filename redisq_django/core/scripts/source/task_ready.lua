-- task_ready.lua: a FAILED Django task's dead letter was sent again (the admin's Retry):
-- its result is READY again.
--
-- KEYS[1]  hash  redisq:{q}:result:<id>   the task's result
-- KEYS[2]  zset  redisq:{q}:results       result ids, score = expiry (ms)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  when the result expires: "+<ms>" (what our code sends), that long after now
--          by Redis's own clock (TIME); or a time, ms since the epoch. PEXPIREAT, and its
--          score in KEYS[2]
-- ARGV[3]  result id
--
-- Only a result still FAILED changes (a worker may have started the retry already).
-- Returns 1 when it changed, else 0.

--#include protocol

--#include clock

-- The result's expiry, by Redis's clock unless the caller fixed a time.
-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
if string.sub(ARGV[2], 1, 1) == '+' then redis.replicate_commands() end
local expire_at = time_of(ARGV[2])

if redis.call('HGET', KEYS[1], 'status') ~= 'FAILED' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'READY')
redis.call('HDEL', KEYS[1], 'finished_at')
redis.call('PEXPIREAT', KEYS[1], expire_at)
redis.call('ZADD', KEYS[2], expire_at, ARGV[3])
return 1
