-- schedule_claim.lua: claim one tick of a periodic schedule, once it is due by Redis's clock.
--
-- KEYS[1]  zset  redisq:schedules:claimed   member = schedule name, score = the latest
--                tick claimed (ms since the epoch)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the schedule's name
-- ARGV[3]  the tick, ms since the epoch
--
-- The worker that gets 1 publishes the tick (publish_once.lua, id "<name>@<tick>"),
-- then records it in redisq:schedules:sent. Exactly one caller gets 1 for a tick: the
-- one whose ZADD ... GT CH raised the claimed score. A tick after Redis's own clock
-- (TIME) is refused and nothing is written, whatever the caller's clock says: a worker
-- whose clock runs ahead (stepped, skewed) can neither fire a tick early nor, by
-- claiming a later tick first, make the ticks in between unclaimable.
--
-- Returns {1, now}: claimed, publish it; {0, now}: this tick or a later one is claimed
-- already; {-1, now}: not due yet, ask again at the tick (now is Redis's clock, ms).

--#include protocol

--#include clock

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local now = redis_now()
local tick = tonumber(ARGV[3])
if tick > now then return {-1, now} end
return {redis.call('ZADD', KEYS[1], 'GT', 'CH', tick, ARGV[2]), now}
