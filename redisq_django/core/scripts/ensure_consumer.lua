-- Assembled from source/ensure_consumer.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
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

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script ensure_consumer.lua speaks redisq/2, '
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
