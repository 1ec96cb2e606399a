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
-- ARGV[4]  instance name (the Redis consumer it reads as), for the `handled` event
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
--
-- Before acknowledging anything, what the hand-ons will read is checked (PROTOCOL.md,
-- "What the scripts check"): KEYS[3] a hash, KEYS[2] a stream, and for a key the entry
-- holds, KEYS[4] a whole number and the key's waiting list a list. Anything else is
-- refused with an error reply "REDISQ_CORRUPT key <key> holds ..." and nothing is written.
-- A waiting member that is no JSON object of strings with an `id` is handed on whole, as
-- the single field `raw` (its reader makes it a dead letter, undecodable).

-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script ack_ordered.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end

local call = redis.call
local log, direct, holders, held_back = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, prefix, instance, m = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])

-- >>> foreign state (the same words in every ordered script; PROTOCOL.md, "What the
-- scripts check"). What a call reads but did not write is checked before its first write:
-- Redis does not undo a script's earlier writes, so a value refused half-way would lose
-- or duplicate a message. A check returns an error reply naming the key, or nil.
local function corrupt(key, found, wanted)
  local function shown(text)
    return (string.gsub(string.sub(text, 1, 300), '%c', '?'))
  end
  return redis.error_reply('REDISQ_CORRUPT key ' .. shown(key) .. ' holds ' .. shown(found)
    .. ', not ' .. wanted .. ": only redisq's scripts write it. Nothing was done: repair "
    .. 'it as PROTOCOL.md says ("What the scripts check"), then call again')
end
local function check_type(key, wanted)
  local found = redis.call('TYPE', key)['ok']
  if found == 'none' or found == wanted then return nil end
  return corrupt(key, 'a ' .. found, 'a ' .. wanted)
end
-- A count of messages (held_back): absent, or a whole number as INCR and DECR take it.
local function check_count(key)
  local refused = check_type(key, 'string')
  if refused then return refused end
  local value = redis.call('GET', key)
  if not value or value == '0' or (#value <= 18 and string.match(value, '^%-?[1-9]%d*$')) then
    return nil
  end
  return corrupt(key, "'" .. value .. "'", 'a whole number of messages')
end
-- <<< foreign state

-- >>> ordered hand-over (the same text in ack_ordered.lua and fail.lua). It uses the
-- script's locals `holders`, `direct`, `held_back` (keys) and `prefix` (of the waiting
-- lists: the list of ordering key k is prefix .. k).

-- The fields of a waiting list's member (a JSON object of at most 1000 string values, as
-- read_ordered.lua writes it) and its message id; nil for anything else, which is handed
-- on whole as `raw` (its reader makes it a dead letter, undecodable): never re-encoded.
local function fields_of(member)
  local ok, decoded = pcall(cjson.decode, member)
  if not ok or type(decoded) ~= 'table' or type(decoded.id) ~= 'string' then return nil end
  local flat = {}
  for k, v in pairs(decoded) do
    if type(v) ~= 'string' or #flat >= 2000 then return nil end
    flat[#flat + 1] = k
    flat[#flat + 1] = v
  end
  return flat, decoded.id
end

-- Before the first write: what handing on key `key` (held by message `mid`) reads.
local function check_hand_on(key, mid)
  local refused = check_type(holders, 'hash') or check_type(direct, 'stream')
  if refused or key == '' or redis.call('HGET', holders, key) ~= mid then return refused end
  return check_count(held_back) or check_type(prefix .. key, 'list')
end

-- Key `key`, held by message `mid`, passes to the next message of its list (or is freed).
local function hand_on(key, mid)
  if redis.call('HGET', holders, key) ~= mid then return end
  local list = prefix .. key
  for _ = 1, 100 do
    local member = redis.call('LPOP', list)
    if not member then break end
    redis.call('DECR', held_back)
    local fields, id = fields_of(member)
    if fields then
      redis.call('XADD', direct, '*', unpack(fields))
      redis.call('HSET', holders, key, id)
      return
    end
    -- Not ours (another client's): delivered as is, dead-lettered as undecodable.
    redis.call('XADD', direct, '*', 'raw', member)
  end
  redis.call('HDEL', holders, key)
end
-- <<< ordered hand-over

-- Every entry's hand-on (and the events stream) is checked before the first
-- acknowledgement.
if KEYS[5] then
  local refused = check_type(KEYS[5], 'stream')
  if refused then return refused end
end
for i = 1, m do
  local at = 2 + 4 * i
  local refused = check_hand_on(ARGV[at + 3], ARGV[at + 2])
  if refused then return refused end
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
