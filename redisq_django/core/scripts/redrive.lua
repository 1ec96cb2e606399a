-- redrive.lua: send a message again to one logical consumer only.
--
-- KEYS[1]  stream  redisq:{q}:g:<g>:dead     (the dead letter, removed when ARGV[1] is set)
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct  (the group's private input)
-- KEYS[3]  stream  redisq:{q}:events        (only when history is on)
-- ARGV[1]  id of the dead entry to remove, or "" when the dead letter lives elsewhere
--          (e.g. it was already moved to the database)
-- Without KEYS[3]:
-- ARGV[2 ..]  field, value pairs of the envelope to deliver
-- With KEYS[3]:
-- ARGV[2]  k: how many field, value pairs the event has
-- ARGV[3 .. 2+2k]  the event's field, value pairs (the `redriven` event)
-- ARGV[3+2k ..]    field, value pairs of the envelope to deliver
--
-- Returns the new direct entry id, or false when ARGV[1] names an entry that is gone
-- (another operator re-drove or discarded it first).

if ARGV[1] ~= '' then
  if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return false end
end
local first = 2
if #KEYS >= 3 then
  local k = tonumber(ARGV[2])
  first = 3 + 2 * k
  if k > 0 then redis.call('XADD', KEYS[3], '*', unpack(ARGV, 3, first - 1)) end
end
return redis.call('XADD', KEYS[2], '*', unpack(ARGV, first))
