-- Assembled from source/archive_commit.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- archive_commit.lua: record how far a named archive has safely stored a stream.
--
-- KEYS[1]  hash    redisq:{q}:archives  "<a>:<table>" = the archive's position
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the archive's name
-- ARGV[3]  the table: "messages" (the log) or "events"
-- ARGV[4]  the last entry id the archive committed
--
-- The position only moves forward (a late or repeated commit never moves it back). An
-- archive that is not registered (never, or removed since) is refused with an error
-- starting NOARCHIVE: a removed archive never comes back by committing.
-- Returns the position now recorded.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script archive_commit.lua speaks redisq/2, '
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

local new = parse(ARGV[4])
if not new then return redis.error_reply('ERR invalid entry id ' .. ARGV[4]) end
local field = ARGV[2] .. ':' .. ARGV[3]
local current = redis.call('HGET', KEYS[1], field)
if not current then
  return redis.error_reply('NOARCHIVE archive ' .. ARGV[2] .. ' is not registered for '
    .. ARGV[3])
end
local old = parse(current)
if old and (old[1] > new[1] or (old[1] == new[1] and old[2] >= new[2])) then
  return current
end
redis.call('HSET', KEYS[1], field, ARGV[4])
return ARGV[4]
