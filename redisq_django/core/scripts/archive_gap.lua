-- Assembled from source/archive_gap.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- archive_gap.lua: a named archive settles its gap record: forget what it has passed,
-- and record a data loss it goes on past (failOnDataLoss false) for its job to report.
--
-- KEYS[1]  hash    redisq:{q}:archives          "<a>:<table>:gap" = "first last count",
--                  what a hard cap (trim.lua) or a purge (purge.lua) removed after the
--                  archive's position; "<a>:<table>:purged" = "first last count at_ms",
--                  the part of it a purge removed
-- KEYS[2]  list    redisq:{q}:archive:<a>:gaps  data losses it went past, oldest first
--                  (at most 1000 kept)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the archive's name
-- ARGV[3]  the table: "messages" or "events"
-- ARGV[4]  an entry id: the archive has read, or has recorded as lost, everything up to it
-- ARGV[5]  a data loss to record (text, we send JSON), or "" for none
--
-- The gap record is deleted when its last id is at or before ARGV[4]; so is the purge
-- record.
-- Returns 1 when it was deleted, else 0.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script archive_gap.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end
-- <<< fragments/protocol.lua

-- >>> fragments/entry_id.lua (shared; assembled into this script)
-- An entry id <ms>-<seq> as {ms, seq} (numbers), or nil for anything else.
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then return nil end
  return {tonumber(ms), tonumber(seq)}
end
-- <<< fragments/entry_id.lua
local upto = parse(ARGV[4])
if not upto then return redis.error_reply('ERR invalid entry id ' .. ARGV[4]) end
if ARGV[5] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[5])
  redis.call('LTRIM', KEYS[2], -1000, -1)
end
local function passed(last)
  return last and (last[1] < upto[1] or (last[1] == upto[1] and last[2] <= upto[2]))
end
local field = ARGV[2] .. ':' .. ARGV[3]
local purged = redis.call('HGET', KEYS[1], field .. ':purged')
if purged and passed(parse(string.match(purged, '^%S+ (%S+) ') or '')) then
  redis.call('HDEL', KEYS[1], field .. ':purged')
end
local gap = redis.call('HGET', KEYS[1], field .. ':gap')
if not gap then return 0 end
if passed(parse(string.match(gap, '^%S+ (%S+) %d+$') or '')) then
  redis.call('HDEL', KEYS[1], field .. ':gap')
  return 1
end
return 0
