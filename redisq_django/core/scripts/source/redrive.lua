-- redrive.lua: send a message again to one logical consumer only.
--
-- KEYS[1]  hash    redisq:{q}:meta      (or redisq:{q#i}:meta): fields `partitions` (the
--                                       layout) and `protocol` (of its data), checked first
-- KEYS[2]  stream  redisq:{q}:g:<g>:dead     (the dead letter, removed when ARGV[3] is set)
-- KEYS[3]  stream  redisq:{q}:g:<g>:direct  (the group's private input)
-- KEYS[4]  stream  redisq:{q}:events        (only when history is on)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the number of partitions the caller routes by: "1" for a queue's own keys,
--          K for partition i's ({q#i}); the write is refused unless meta records it
-- ARGV[3]  id of the dead entry to remove, or "" when the dead letter lives elsewhere
--          (e.g. it was already moved to the database)
-- Without KEYS[4]:
-- ARGV[4 ..]  field, value pairs of the envelope to deliver
-- With KEYS[4]:
-- ARGV[4]  k: how many field, value pairs the event has
-- ARGV[5 .. 4+2k]  the event's field, value pairs (the `redriven` event)
-- ARGV[5+2k ..]    field, value pairs of the envelope to deliver
--
-- Returns the new direct entry id, or false when ARGV[3] names an entry that is gone
-- (another operator re-drove or discarded it first).

--#include protocol

--#include layout

if ARGV[3] ~= '' then
  if redis.call('XDEL', KEYS[2], ARGV[3]) == 0 then return false end
end
local first = 4
if #KEYS >= 4 then
  local k = tonumber(ARGV[4])
  first = 5 + 2 * k
  if k > 0 then redis.call('XADD', KEYS[4], '*', unpack(ARGV, 5, first - 1)) end
end
return redis.call('XADD', KEYS[3], '*', unpack(ARGV, first))
