-- Assembled from source/ack.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- ack.lua: acknowledge handled deliveries of one logical consumer.
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
-- ack.lua takes none: it reads no entry's message id or ordering key (ack_ordered.lua
-- hands keys on). Direct entries are also deleted (the direct stream only holds work).
--
-- With an event (history on): a `handled` event whose `m` holds the records of the
-- entries, in their order, as one JSON array: [["<message id>",<attempt>,<ms or null>],
-- ...]. It is written when the call acknowledged any entry, its `m` then listing the
-- records of those only (ids no longer pending were settled elsewhere): no event without
-- its ack. Each id is then acknowledged on its own, as only that tells which ones were
-- pending.
--
-- Returns the number of entries acknowledged (ids no longer pending are skipped).

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script ack.lua speaks redisq/2, '
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

if k > 0 then
  local acked, skipped = 0, {}
  for i = 1, m do
    local stream, id = entry(i)
    if acknowledge(stream, id) == 1 then
      acked = acked + 1
    else
      skipped[i] = true
    end
  end
  if acked == m then
    write_event()  -- as given
  elseif acked > 0 then
    write_event('m', acknowledged(event_field('m'), skipped))
  end
  return acked
end

-- No event, one entry (the worker acknowledges each message as its handler returns).
if m == 1 then
  local stream, id = entry(1)
  local acked = redis.call('XACK', stream, group, id)
  if stream == direct then redis.call('XDEL', direct, id) end
  return acked
end

-- No event: the ids of each stream in a few commands (XACK and XDEL take many).
local CHUNK = 500
local ids = {[log] = {}, [direct] = {}}
for i = 1, m do
  local stream, id = entry(i)
  local list = ids[stream]
  list[#list + 1] = id
end

local acked = 0
for _, stream in ipairs({log, direct}) do
  local list = ids[stream]
  local i = 1
  while i <= #list do
    local j = math.min(i + CHUNK - 1, #list)
    acked = acked + redis.call('XACK', stream, group, unpack(list, i, j))
    if stream == direct then redis.call('XDEL', direct, unpack(list, i, j)) end
    i = j + 1
  end
end
return acked
