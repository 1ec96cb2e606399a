-- task_lost.lua: a Django task's message became a dead letter without its worker
-- settling it (its workers kept dying: reason lease_expired): its result is FAILED.
--
-- KEYS[1]  hash  redisq:{q}:result:<id>   the task's result
-- KEYS[2]  zset  redisq:{q}:results       result ids, score = expiry (ms)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  when the result expires: "+<ms>" (what our code sends), that long after now
--          by Redis's own clock (TIME); or a time, ms since the epoch. PEXPIREAT, and its
--          score in KEYS[2]
-- ARGV[3]  result id
-- ARGV[4]  the error to append to the JSON array `errors` (a JSON object)
-- ARGV[5]  finished_at, ms since the epoch
--
-- Only a result that is not finished changes (READY or RUNNING). Returns 1 when it
-- changed, else 0.

--#include protocol

--#include clock

-- The result's expiry, by Redis's clock unless the caller fixed a time.
-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
if string.sub(ARGV[2], 1, 1) == '+' then redis.replicate_commands() end
local expire_at = time_of(ARGV[2])

local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'READY' and status ~= 'RUNNING' then return 0 end
local raw = redis.call('HGET', KEYS[1], 'errors')
local errors = (raw and raw ~= '[]') and cjson.decode(raw) or {}
errors[#errors + 1] = cjson.decode(ARGV[4])
redis.call('HSET', KEYS[1], 'status', 'FAILED', 'errors', cjson.encode(errors),
  'finished_at', ARGV[5])
redis.call('PEXPIREAT', KEYS[1], expire_at)
redis.call('ZADD', KEYS[2], expire_at, ARGV[3])
return 1
