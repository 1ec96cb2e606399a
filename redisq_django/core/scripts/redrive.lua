-- redrive.lua: send a message again to one logical consumer only.
--
-- KEYS[1]  stream  redisq:{q}:g:<g>:dead     (the dead letter, removed when ARGV[1] is set)
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct  (the group's private input)
-- ARGV[1]  id of the dead entry to remove, or "" when the dead letter lives elsewhere
--          (e.g. it was already moved to the database)
-- ARGV[2 ..]  field, value pairs of the envelope to deliver
--
-- Returns the new direct entry id, or false when ARGV[1] names an entry that is gone
-- (another operator re-drove or discarded it first).

if ARGV[1] ~= '' then
  if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return false end
end
return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 2))
