-- archive_commit.lua: record how far the archive has safely stored a stream.
--
-- KEYS[1]  hash    redisq:{q}:meta
-- ARGV[1]  field: "archive:messages" (the log) or "archive:events" (the events stream)
-- ARGV[2]  the last entry id the archive committed
--
-- The position only moves forward (a late or repeated commit never moves it back).
-- Returns the position now recorded.

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then return nil end
  return {tonumber(ms), tonumber(seq)}
end

local new = parse(ARGV[2])
if not new then return redis.error_reply('ERR invalid entry id ' .. ARGV[2]) end
local current = redis.call('HGET', KEYS[1], ARGV[1])
local old = current and parse(current)
if old and (old[1] > new[1] or (old[1] == new[1] and old[2] >= new[2])) then
  return current
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return ARGV[2]
