-- heartbeat.lua: announce an instance alive, by Redis's clock.
--
-- KEYS[1]  zset    redisq:{q}:g:<g>:instances   member = instance, score = heartbeat expiry ms
-- KEYS[2]  string  redisq:{q}:g:<g>:instance:<instance>   (optional) its report to the
--                  operators: JSON text (host, pid, start, counts, what it runs)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  instance name (the Redis consumer it reads as)
-- ARGV[3]  how long the heartbeat lives, ms (negative: it has expired, the instance is
--          dead and others take over its messages at once)
-- ARGV[4]  with KEYS[2]: the report (stored as given)
-- ARGV[5]  with KEYS[2]: how long the report is kept, ms
--
-- The expiry is TIME + ARGV[3] by Redis's own clock, the clock reclaim.lua compares it
-- with, so hosts whose clocks disagree never see each other as dead (or alive) wrongly.
-- Returns the expiry, ms since the epoch.

--#include protocol

--#include clock

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local expiry = redis_now() + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], expiry, ARGV[2])
if KEYS[2] then
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
end
return expiry
