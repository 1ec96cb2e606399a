-- lease.lua: start or renew the leases of started deliveries that have a visibility
-- timeout of their own (a Django task's), by Redis's clock.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- KEYS[3]  zset    redisq:{q}:g:<g>:leases   member = "log:<entry id>" or
--                  "direct:<entry id>", score = when that delivery's lease ends (ms)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  instance name (the Redis consumer it reads as)
-- ARGV[4 ..]  triples: "log" or "direct", entry id, the lease's length in ms
--
-- For each entry this instance still holds, its lease now ends that many ms after Redis's
-- now (TIME), and its idle time restarts (XCLAIM ... JUSTID, which counts no delivery).
-- reclaim.lua takes a delivery with a lease over only once its lease has ended, whatever
-- the instance's heartbeat and the consumer's visibility timeout. An entry no longer
-- pending loses its lease (it was settled). Returns the ids another instance holds now.

--#include protocol

--#include clock

local group, consumer, leases = ARGV[2], ARGV[3], KEYS[3]
-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local now = redis_now()
local lost = {}

for i = 4, #ARGV, 3 do
  local log = ARGV[i] == 'log'
  local key = log and KEYS[1] or KEYS[2]
  local id = ARGV[i + 1]
  local tag = (log and 'log:' or 'direct:') .. id
  local p = redis.call('XPENDING', key, group, id, id, 1)
  if #p == 0 then
    redis.call('ZREM', leases, tag)
  elseif p[1][2] == consumer then
    redis.call('XCLAIM', key, group, consumer, 0, id, 'JUSTID')
    redis.call('ZADD', leases, now + tonumber(ARGV[i + 2]), tag)
  else
    lost[#lost + 1] = id
  end
end
return lost
