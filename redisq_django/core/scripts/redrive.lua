-- Assembled from source/redrive.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
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

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script redrive.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end
-- <<< fragments/protocol.lua

-- >>> fragments/layout.lua (shared; assembled into this script)
-- What the place records (PROTOCOL.md, "Partitions: the layout every write checks", and
-- "Versions and upgrades"): KEYS[1] is the meta of the place written (the queue, or one
-- partition of it). Data a consumer of another protocol registered may mean something
-- else; a message added where the recorded number of partitions is not the caller's
-- (ARGV[2]: 1 for a queue's own keys, where nothing recorded also matches; K for a
-- partition's, which must record exactly K) would sit where no consumer reads.
local record = redis.call('HMGET', KEYS[1], 'partitions', 'protocol')
local recorded, protocol = record[1], record[2]
local function shown(s) return (string.gsub(string.sub(s, 1, 20), '%c', '?')) end
if protocol and protocol ~= '2' then
  return redis.error_reply('REDISQ_PROTOCOL ' .. KEYS[1] .. " records data of protocol '"
    .. shown(protocol) .. "', this script speaks redisq/2: run clients of one protocol "
    .. 'on these queues')
end
if (ARGV[2] == '1' and recorded and recorded ~= '1') or (ARGV[2] ~= '1' and recorded ~= ARGV[2]) then
  return redis.error_reply('REDISQ_LAYOUT ' .. KEYS[1] .. ' records '
    .. (recorded and ("'" .. shown(recorded) .. "'") or 'no number of')
    .. " partitions, the caller routes by '" .. shown(ARGV[2] or '')
    .. "': read the recorded number again")
end
-- <<< fragments/layout.lua

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
