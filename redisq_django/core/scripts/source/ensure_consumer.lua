-- ensure_consumer.lua: register a logical consumer (consumer group) on a queue.
--
-- KEYS[1]  hash    redisq:{q}:meta      (or redisq:{q#i}:meta): fields `partitions` (the
--                                       layout) and `protocol` (of its data), checked first
-- KEYS[2]  stream  redisq:{q}:log            the queue's log (created if missing)
-- KEYS[3]  stream  redisq:{q}:g:<g>:direct   the group's private input (created if missing)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the number of partitions the caller routes by: "1" for a queue's own keys,
--          K for partition i's ({q#i}); the write is refused unless meta records it
-- ARGV[3]  group name
-- ARGV[4]  id the group starts after on the log ("$" latest, "0-0" earliest, or an id)
--
-- Records the protocol (field `protocol` of KEYS[1], "2") unless recorded.
--
-- Returns 1 when the group was created on the log, 0 when it already existed (its
-- position is left alone: use XGROUP SETID to move it).

--#include protocol

--#include layout

local function create(key, id)
  local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', key, ARGV[3], id, 'MKSTREAM')
  if ok then return 1 end
  if string.find(tostring(err and (err.err or err)), 'BUSYGROUP') then return 0 end
  return redis.error_reply(tostring(err and (err.err or err)))
end

-- The protocol its data is written in, for clients of another one to see (read above).
redis.call('HSETNX', KEYS[1], 'protocol', '2')
local created = create(KEYS[2], ARGV[4])
create(KEYS[3], '0-0')
return created
