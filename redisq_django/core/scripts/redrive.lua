-- redrive.lua: send a message again to one logical consumer only.
--
-- KEYS[1]  stream  redisq:{q}:g:<g>:dead     (the dead letter, removed when ARGV[1] is set)
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct  (the group's private input)
-- KEYS[3]  stream  redisq:{q}:events        (only when history is on)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  id of the dead entry to remove, or "" when the dead letter lives elsewhere
--          (e.g. it was already moved to the database)
-- Without KEYS[3]:
-- ARGV[3 ..]  field, value pairs of the envelope to deliver
-- With KEYS[3]:
-- ARGV[3]  k: how many field, value pairs the event has
-- ARGV[4 .. 3+2k]  the event's field, value pairs (the `redriven` event)
-- ARGV[4+2k ..]    field, value pairs of the envelope to deliver
--
-- Returns the new direct entry id, or false when ARGV[2] names an entry that is gone
-- (another operator re-drove or discarded it first).

-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script redrive.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end

if ARGV[2] ~= '' then
  if redis.call('XDEL', KEYS[1], ARGV[2]) == 0 then return false end
end
local first = 3
if #KEYS >= 3 then
  local k = tonumber(ARGV[3])
  first = 4 + 2 * k
  if k > 0 then redis.call('XADD', KEYS[3], '*', unpack(ARGV, 4, first - 1)) end
end
return redis.call('XADD', KEYS[2], '*', unpack(ARGV, first))
