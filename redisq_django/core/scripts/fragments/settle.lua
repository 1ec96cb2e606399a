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
