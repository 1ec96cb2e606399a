-- ack.lua: acknowledge handled deliveries of one logical consumer.
--
--#include settle_layout
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

--#include protocol

--#include settle

--#include handled_records

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
