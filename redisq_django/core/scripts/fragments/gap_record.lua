-- An archive's gap record (PROTOCOL.md, "Named archives"): "<a>:<table>:gap" = "first
-- last count", the entries removed after its position that it has not settled yet. A new
-- loss extends it: its first id stays, the last is the new loss's, the counts add up.
-- Written by a hard cap (trim.lua) and by a purge (purge.lua) alike. Returns the record's
-- first id now.
local function extend_gap(archives, field, first, last, count)
  local old = redis.call('HGET', archives, field)
  if old then
    local f, _, c = string.match(old, '^(%S+) (%S+) (%d+)$')
    if f then first, count = f, count + tonumber(c) end
  end
  redis.call('HSET', archives, field, first .. ' ' .. last .. ' ' .. count)
  return first
end
