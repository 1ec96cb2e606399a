-- Assembled from source/end_message.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- end_message.lua: end one message before its time, an operator's action on a poison
-- message: take it from where it waits and make it a dead letter of each consumer given
-- (or of none: deleted). An ordered consumer's key it holds passes to the key's next
-- message, as when the message dies by its retries (fail.lua).
--
-- KEYS[1]  zset or stream  where it waits: redisq:{q}:delayed, redisq:{q}:g:<g>:retry,
--                          or redisq:{q}:g:<g>:direct (the private input, not yet read)
-- KEYS[2]  hash    redisq:{q}:g:<g>:holders    (an ordered consumer's; any key otherwise)
-- KEYS[3]  stream  redisq:{q}:g:<g>:direct
-- KEYS[4]  string  redisq:{q}:g:<g>:held_back
-- KEYS[5 ..]  stream  the dead streams (redisq:{q}:g:<g>:dead) its dead letter goes to;
--             none: the message is deleted
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the member, exactly as stored (a set), or the entry id (the private input)
-- ARGV[3]  the group whose private input KEYS[1] is ("" for a set)
-- ARGV[4]  the prefix of the waiting lists, "redisq:{q}:g:<g>:waiting:" ("": not ordered)
-- ARGV[5]  its ordering key ("": none)
-- ARGV[6]  its message id (what holders records)
-- ARGV[7 ..]  the consumer (group) of each dead stream of KEYS[5 ..], in their order;
--             then field, value pairs of its dead letter, whose `group` field each dead
--             stream's copy gets the name of its own consumer in
--
-- Returns 1 when ended; 0 when it no longer waits there (it came due, was delivered now,
-- or ended by someone else); -1 when the private input's entry was read already (it is
-- in flight: its instance settles it). What it reads is checked before the first write
-- (PROTOCOL.md, "What the scripts check"): REDISQ_CORRUPT, nothing done.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script end_message.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end
-- <<< fragments/protocol.lua

local place, holders, direct, held_back = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local what, group, prefix, key, mid = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

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

local kind = redis.call('TYPE', place)['ok']
if kind == 'none' then return 0 end
if kind ~= 'zset' and kind ~= 'stream' then return corrupt(place, 'a ' .. kind, 'a zset or a stream') end
for i = 5, #KEYS do
  local refused = check_type(KEYS[i], 'stream')
  if refused then return refused end
end
local ordered = prefix ~= '' and key ~= ''
if ordered then
  local refused = check_hand_on(key, mid)
  if refused then return refused end
end

if kind == 'zset' then
  if redis.call('ZREM', place, what) == 0 then return 0 end
else
  if #redis.call('XRANGE', place, what, what) == 0 then return 0 end
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', place)) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    if info['name'] == group then
      local last = info['last-delivered-id']
      local lms, lseq = string.match(last, '^(%d+)-(%d+)$')
      local ems, eseq = string.match(what, '^(%d+)-(%d+)$')
      lms, lseq, ems, eseq = tonumber(lms), tonumber(lseq), tonumber(ems), tonumber(eseq)
      if ems < lms or (ems == lms and eseq <= lseq) then return -1 end
    end
  end
  redis.call('XDEL', place, what)
end
local streams = #KEYS - 4
local fields = {}
for i = 7 + streams, #ARGV do fields[#fields + 1] = ARGV[i] end
for i = 1, streams do
  for f = 1, #fields, 2 do
    if fields[f] == 'group' then fields[f + 1] = ARGV[6 + i] end
  end
  redis.call('XADD', KEYS[4 + i], '*', unpack(fields))
end
if ordered then hand_on(key, mid) end
return 1
