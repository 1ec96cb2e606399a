-- Assembled from source/release_key.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- release_key.lua: let an ordering key of an ordered consumer go by hand (an operator's
-- action: its holder was lost outside redisq's settles, e.g. deleted by a hard cap, or
-- an operator gives up on it): the key passes to the first message of its waiting list,
-- which is added to the consumer's direct stream and holds it now, or is freed when the
-- list is empty: what ack_ordered.lua does when the holder is acknowledged.
--
-- KEYS[1]  hash    redisq:{q}:g:<g>:holders    ordering key -> the message holding it
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct     the consumer's private input
-- KEYS[3]  string  redisq:{q}:g:<g>:held_back  how many messages the waiting lists hold
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the prefix of the waiting lists, "redisq:{q}:g:<g>:waiting:"
-- ARGV[3]  the ordering key
--
-- Returns 1 when the key was held (and is now handed on or freed), 0 when nothing held
-- it. What the hand-on reads is checked first (PROTOCOL.md, "What the scripts check"):
-- anything another client wrote there is refused with REDISQ_CORRUPT, nothing written.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script release_key.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end
-- <<< fragments/protocol.lua

local holders, direct, held_back = KEYS[1], KEYS[2], KEYS[3]
local prefix, key = ARGV[2], ARGV[3]

-- >>> fragments/foreign_state.lua (shared; assembled into this script)
-- Foreign state (PROTOCOL.md, "What the scripts check"): what a call reads but did not
-- write is checked before its first write. Redis does not undo a script's earlier writes,
-- so a value refused half-way would lose or duplicate a message. A check returns an error
-- reply naming the key, or nil.
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
-- <<< fragments/foreign_state.lua

-- >>> fragments/hand_over.lua (shared; assembled into this script)
-- The ordered hand-over: an ordering key passes from the message that held it to the next
-- message of its waiting list (ack_ordered.lua, fail.lua's dead letters, release_key.lua).
-- It uses the script's locals `holders`, `direct`, `held_back` (keys) and `prefix` (of the
-- waiting lists: the list of ordering key k is prefix .. k), and foreign_state's checks.

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
-- <<< fragments/hand_over.lua

local refused = check_type(holders, 'hash')
if refused then return refused end
local holder = redis.call('HGET', holders, key)
if not holder then return 0 end
refused = check_hand_on(key, holder)
if refused then return refused end
hand_on(key, holder)
return 1
