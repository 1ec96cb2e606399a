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
