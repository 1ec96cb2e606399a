-- archive_gap.lua: a named archive settles its gap record: forget what it has passed,
-- and record a data loss it goes on past (failOnDataLoss false) for its job to report.
--
-- KEYS[1]  hash    redisq:{q}:archives          "<a>:<table>:gap" = "first last count",
--                  what a hard cap removed after the archive's position (trim.lua)
-- KEYS[2]  list    redisq:{q}:archive:<a>:gaps  data losses it went past, oldest first
--                  (at most 1000 kept)
-- ARGV[1]  the archive's name
-- ARGV[2]  the table: "messages" or "events"
-- ARGV[3]  an entry id: the archive has read, or has recorded as lost, everything up to it
-- ARGV[4]  a data loss to record (text, we send JSON), or "" for none
--
-- The gap record is deleted when its last id is at or before ARGV[3].
-- Returns 1 when it was deleted, else 0.

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then return nil end
  return {tonumber(ms), tonumber(seq)}
end
local upto = parse(ARGV[3])
if not upto then return redis.error_reply('ERR invalid entry id ' .. ARGV[3]) end
if ARGV[4] ~= '' then
  redis.call('RPUSH', KEYS[2], ARGV[4])
  redis.call('LTRIM', KEYS[2], -1000, -1)
end
local field = ARGV[1] .. ':' .. ARGV[2] .. ':gap'
local gap = redis.call('HGET', KEYS[1], field)
if not gap then return 0 end
local last = parse(string.match(gap, '^%S+ (%S+) %d+$') or '')
if last and (last[1] < upto[1] or (last[1] == upto[1] and last[2] <= upto[2])) then
  redis.call('HDEL', KEYS[1], field)
  return 1
end
return 0
