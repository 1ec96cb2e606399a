-- Assembled from source/ack_ordered.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- ack_ordered.lua: acknowledge handled messages of an ordered consumer, handing each
-- one's ordering key on to the next message of that key.
--
-- >>> fragments/settle_layout.lua (shared; assembled into this script)
-- The settle layout: the KEYS and ARGV of every settling script (ack.lua, ack_ordered.lua,
-- fail.lua, task_settle.lua; PROTOCOL.md, "The settle layout"). Every one of these keys
-- is passed in every call, used or not: one layout, and one slot (they share the tag).
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct     the group's private input
-- KEYS[3]  zset    redisq:{q}:g:<g>:retry      member = envelope as JSON, score = due ms
-- KEYS[4]  stream  redisq:{q}:g:<g>:dead
-- KEYS[5]  hash    redisq:{q}:g:<g>:holders    an ordered consumer's: ordering key -> the
--                  message holding it (see read_ordered.lua)
-- KEYS[6]  string  redisq:{q}:g:<g>:held_back  how many messages its waiting lists hold
-- KEYS[7]  stream  redisq:{q}:events           written only when the call has an event
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  the instance that settles: fail.lua and task_settle.lua settle an entry only
--          while it is pending for this instance ("" skips that check)
-- ARGV[4]  an ordered consumer's prefix of its waiting lists, "redisq:{q}:g:<g>:waiting:"
--          (the list of ordering key k is ARGV[4] .. k, in the same slot); "" for a
--          consumer that is not ordered (nothing is handed on)
-- ARGV[5]  m: how many entries follow
-- ARGV[6 .. 5+4m]  per entry: "log" or "direct" (the stream it was read from), its entry
--          id, its message id (its `id` field as stored, else the entry id) and its
--          ordering key as stored ("": none); only an ordered consumer's settles read
--          those two: any other consumer may pass "" for both
-- ARGV[6+4m]  k: how many field, value pairs the settle's lifecycle event has (0: no
--          event, history off)
-- ARGV[7+4m .. 6+4m+2k]  the event's pairs (PROTOCOL.md, "Lifecycle events"), written to
--          KEYS[7] when the call settles anything, with the fields the script knows
--          better (below) written by the script, last
-- ARGV[7+4m+2k ..]  the script's own arguments, if any:
-- <<< fragments/settle_layout.lua
-- ack_ordered.lua takes none. ARGV[4] is needed: the consumer is ordered.
--
-- Each entry is acknowledged (a direct one also deleted). When it was still pending and
-- holds its ordering key, the key passes to the first message of its waiting list, which
-- is added to the direct stream (the consumer's private input), or is freed when the list
-- is empty. An entry no longer pending was settled elsewhere: skipped, key untouched.
-- With an event (history on), a `handled` event as ack.lua writes it.
-- Returns the number of entries acknowledged.
--
-- Before acknowledging anything, what the hand-ons will read is checked (PROTOCOL.md,
-- "What the scripts check"): KEYS[5] a hash, KEYS[2] a stream, KEYS[7] a stream (with an
-- event), and for a key the entry holds, KEYS[6] a whole number and the key's waiting
-- list a list. Anything else is refused with an error reply "REDISQ_CORRUPT key <key>
-- holds ..." and nothing is written. A waiting member that is no JSON object of strings
-- with an `id` is handed on whole, as the single field `raw` (its reader makes it a dead
-- letter, undecodable).

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script ack_ordered.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end
-- <<< fragments/protocol.lua

-- >>> fragments/settle.lua (shared; assembled into this script)
-- The settle layout, read (see the header): its keys, its head, where the entries, the
-- event and the script's own arguments are; and what every settling script does with
-- them.
local log, direct, events = KEYS[1], KEYS[2], KEYS[7]
local group, instance, prefix = ARGV[2], ARGV[3], ARGV[4]
local m = tonumber(ARGV[5])
local event_at = 6 + 4 * m            -- k, then the event's pairs
local k = tonumber(ARGV[event_at])
local own_at = event_at + 1 + 2 * k   -- the script's own arguments

-- Entry i: the stream it came from (its key), its entry id, message id and ordering key.
local function entry(i)
  local at = 2 + 4 * i
  return (ARGV[at] == 'log' and log or direct), ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
end

-- The value of the event's field `name` as the caller gave it, or nil.
local function event_field(name)
  for i = event_at + 1, own_at - 1, 2 do
    if ARGV[i] == name then return ARGV[i + 1] end
  end
  return nil
end

-- Write the event (none when k = 0): its pairs as given, but `field` (if any), which
-- the script knows better: left out where given and, unless `value` is false, written
-- last with `value` (a retry's `next_due`, the due time it made by Redis's clock; a
-- `handled` event's `m` with the records of the entries it acknowledged).
local function write_event(field, value)
  if k == 0 then return end
  if not field then
    redis.call('XADD', events, '*', unpack(ARGV, event_at + 1, own_at - 1))
    return
  end
  local event = {}
  for i = event_at + 1, own_at - 1, 2 do
    if ARGV[i] ~= field then
      event[#event + 1] = ARGV[i]
      event[#event + 1] = ARGV[i + 1]
    end
  end
  if value then
    event[#event + 1] = field
    event[#event + 1] = value
  end
  redis.call('XADD', events, '*', unpack(event))
end

-- Acknowledge entry `id` of `stream` (and delete it from the direct stream, which only
-- holds work): 1 when it was pending, else 0.
local function acknowledge(stream, id)
  local acked = redis.call('XACK', stream, group, id)
  if acked == 1 and stream == direct then redis.call('XDEL', direct, id) end
  return acked
end
-- <<< fragments/settle.lua

-- >>> fragments/handled_records.lua (shared; assembled into this script)
-- A `handled` event's records (a JSON array, one per entry, in order) of the entries
-- acknowledged when some were not: rewritten without the `skipped` ones (another instance
-- settled those first). cjson turns the others back into the same text: strings, and
-- integers below 2^53. No records given: none.
local function acknowledged(records, skipped)
  if not records then return records end
  local kept = {}
  for i, record in ipairs(cjson.decode(records)) do
    if not skipped[i] then kept[#kept + 1] = record end
  end
  return cjson.encode(kept)
end
-- <<< fragments/handled_records.lua

local holders, held_back = KEYS[5], KEYS[6]
if prefix == '' then
  return redis.error_reply('ERR ack_ordered.lua settles an ordered consumer: pass the '
    .. 'prefix of its waiting lists as ARGV[4] (PROTOCOL.md, "The settle layout")')
end

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

-- Every entry's hand-on (and the events stream) is checked before the first
-- acknowledgement.
if k > 0 then
  local refused = check_type(events, 'stream')
  if refused then return refused end
end
for i = 1, m do
  local _, _, mid, key = entry(i)
  local refused = check_hand_on(key, mid)
  if refused then return refused end
end

local acked, skipped = 0, {}
for i = 1, m do
  local stream, id, mid, key = entry(i)
  if acknowledge(stream, id) == 1 then
    acked = acked + 1
    if key ~= '' then hand_on(key, mid) end
  else
    skipped[i] = true
  end
end

if acked == m then
  write_event()  -- as given (none without history)
elseif acked > 0 and k > 0 then
  write_event('m', acknowledged(event_field('m'), skipped))
end
return acked
