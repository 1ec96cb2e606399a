-- archive_commit.lua: record how far a named archive has safely stored a stream.
--
-- KEYS[1]  hash    redisq:{q}:archives  "<a>:<table>" = the archive's position
-- ARGV[1]  the archive's name
-- ARGV[2]  the table: "messages" (the log) or "events"
-- ARGV[3]  the last entry id the archive committed
--
-- The position only moves forward (a late or repeated commit never moves it back). An
-- archive that is not registered (never, or removed since) is refused with an error
-- starting NOARCHIVE: a removed archive never comes back by committing.
-- Returns the position now recorded.

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then return nil end
  return {tonumber(ms), tonumber(seq)}
end

local new = parse(ARGV[3])
if not new then return redis.error_reply('ERR invalid entry id ' .. ARGV[3]) end
local field = ARGV[1] .. ':' .. ARGV[2]
local current = redis.call('HGET', KEYS[1], field)
if not current then
  return redis.error_reply('NOARCHIVE archive ' .. ARGV[1] .. ' is not registered for '
    .. ARGV[2])
end
local old = parse(current)
if old and (old[1] > new[1] or (old[1] == new[1] and old[2] >= new[2])) then
  return current
end
redis.call('HSET', KEYS[1], field, ARGV[3])
return ARGV[3]
