-- The settle layout, read (see the header): its keys, its head, where the entries, the
-- event and the script's own arguments are.
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

-- Whether entry `id` of `stream` is still pending for the instance of ARGV[3] (any, for
-- ""): one whose lease expired and that another instance took over is settled by that
-- one, and this call writes nothing.
local function held(stream, id)
  local pending = redis.call('XPENDING', stream, group, id, id, 1)
  if #pending == 0 then return false end
  return instance == '' or pending[1][2] == instance
end

-- The value of the event's field `name` as the caller gave it, or nil.
local function event_field(name)
  for i = event_at + 1, own_at - 1, 2 do
    if ARGV[i] == name then return ARGV[i + 1] end
  end
  return nil
end

-- Write the event (none when k = 0): its pairs as given, but `field`, which the script
-- knows better: left out where given and, unless `value` is false, written last with
-- `value` (a retry's `next_due`, the due time it made by Redis's clock; a `handled`
-- event's `m` with the records of the entries it acknowledged).
local function write_event(field, value)
  if k == 0 then return end
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

-- A `handled` event's records (a JSON array, one per entry, in order) of the entries
-- acknowledged: all as given, else rewritten without the `skipped` ones (another instance
-- settled those first). cjson turns the others back into the same text: strings, and
-- integers below 2^53. No records given: none.
local function acknowledged(records, skipped, acked)
  if acked == m or not records then return records end
  local kept = {}
  for i, record in ipairs(cjson.decode(records)) do
    if not skipped[i] then kept[#kept + 1] = record end
  end
  return cjson.encode(kept)
end

-- Acknowledge entry `id` of `stream` (and delete it from the direct stream, which only
-- holds work): 1 when it was pending, else 0.
local function acknowledge(stream, id)
  local acked = redis.call('XACK', stream, group, id)
  if acked == 1 and stream == direct then redis.call('XDEL', direct, id) end
  return acked
end

-- A failed delivery's next place: with `retry`, the retry member due at `due` (the
-- envelope's pairs from ARGV[first] as one JSON object), else the dead letter (those
-- pairs as its fields).
local function write_failure(retry, due, first)
  if retry then
    local envelope = {}
    for i = first, #ARGV, 2 do envelope[ARGV[i]] = ARGV[i + 1] end
    redis.call('ZADD', KEYS[3], due, cjson.encode(envelope))
  else
    redis.call('XADD', KEYS[4], '*', unpack(ARGV, first))
  end
end
