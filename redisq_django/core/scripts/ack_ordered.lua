-- ack_ordered.lua: acknowledge handled messages of an ordered consumer, handing each
-- one's ordering key on to the next message of that key.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- KEYS[3]  hash    redisq:{q}:g:<g>:holders   (see read_ordered.lua)
-- KEYS[4]  string  redisq:{q}:g:<g>:held_back  how many messages the waiting lists hold
-- KEYS[5]  stream  redisq:{q}:events   (only when history is on)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  the prefix of the waiting lists, "redisq:{q}:g:<g>:waiting:"
-- ARGV[4]  instance (consumer) name, for the `handled` event
-- ARGV[5]  m: how many entries follow
-- ARGV[6 .. 5+4m]  per entry: "log" or "direct", entry id, message id, ordering key ("":
--                  none)
-- ARGV[6+4m]       with KEYS[5]: the event records of the entries, in the same order, as
--                  one JSON array (see ack.lua)
--
-- Each entry is acknowledged (a direct one also deleted). When it was still pending and
-- holds its ordering key, the key passes to the first message of its waiting list, which
-- is added to the direct stream (the consumer's private input), or is freed when the list
-- is empty. An entry no longer pending was settled elsewhere: skipped, key untouched.
-- Returns the number of entries acknowledged.

-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script ack_ordered.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end

local call = redis.call
local log, direct, holders = KEYS[1], KEYS[2], KEYS[3]
local group, prefix, instance, m = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])

-- The fields of a waiting list's member (a JSON object of strings, as read_ordered.lua
-- wrote it) and its message id; nil for anything else.
local function fields_of(member)
  local ok, decoded = pcall(cjson.decode, member)
  if not ok or type(decoded) ~= 'table' or type(decoded.id) ~= 'string' then return nil end
  local flat = {}
  for k, v in pairs(decoded) do
    if type(v) ~= 'string' then return nil end
    flat[#flat + 1] = k
    flat[#flat + 1] = v
  end
  return flat, decoded.id
end

-- Key `key`, held by message `mid`, passes to the next message of its list (or is freed).
local function hand_on(key, mid)
  if call('HGET', holders, key) ~= mid then return end
  local list = prefix .. key
  for _ = 1, 100 do
    local member = call('LPOP', list)
    if not member then break end
    call('DECR', KEYS[4])
    local fields, id = fields_of(member)
    if fields then
      call('XADD', direct, '*', unpack(fields))
      call('HSET', holders, key, id)
      return
    end
    -- Not ours (written by hand): delivered as is, dead-lettered as undecodable.
    call('XADD', direct, '*', 'raw', member)
  end
  call('HDEL', holders, key)
end

local acked, skipped = 0, {}
for i = 1, m do
  local at = 2 + 4 * i
  local kind, entry_id, mid, key = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  local stream = kind == 'log' and log or direct
  if call('XACK', stream, group, entry_id) == 1 then
    acked = acked + 1
    if stream == direct then call('XDEL', direct, entry_id) end
    if key ~= '' then hand_on(key, mid) end
  else
    skipped[i] = true
  end
end

if KEYS[5] and acked > 0 then
  local records = ARGV[6 + 4 * m]
  if acked < m then
    local kept = {}
    for i, record in ipairs(cjson.decode(records)) do
      if not skipped[i] then kept[#kept + 1] = record end
    end
    records = cjson.encode(kept)
  end
  call('XADD', KEYS[5], '*', 'e', 'handled', 'g', group, 'c', instance, 'm', records)
end
return acked
