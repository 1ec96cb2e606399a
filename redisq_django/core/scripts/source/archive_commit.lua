-- archive_commit.lua: record how far a named archive has safely stored a stream.
--
-- KEYS[1]  hash    redisq:{q}:archives  "<a>:<table>" = the archive's position
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the archive's name
-- ARGV[3]  the table: "messages" (the log) or "events"
-- ARGV[4]  the last entry id the archive committed
-- ARGV[5]  the owner's token ("" or absent: none; archive_register.lua says what a name's
--          owner is)
-- ARGV[6]  "1": take the name over from another owner (absent: no)
--
-- The position only moves forward (a late or repeated commit never moves it back). An
-- archive that is not registered (never, or removed since) is refused with an error
-- starting NOARCHIVE: a removed archive never comes back by committing. A commit by
-- another than the name's owner is refused with an error "FENCED <owner since (ms)>
-- <owner's token, first 8 characters>", nothing written (its reader lost the name),
-- unless ARGV[6] takes the name over (the token displaced is kept in
-- "<a>:<table>:owner_displaced"). A commit with a token claims a name nobody owns, and
-- records the owner's last commit ("<a>:<table>:owner_committed").
-- Returns the position now recorded.

--#include protocol

--#include clock

--#include entry_id

local new = parse(ARGV[4])
if not new then return redis.error_reply('ERR invalid entry id ' .. ARGV[4]) end
local field = ARGV[2] .. ':' .. ARGV[3]
local current = redis.call('HGET', KEYS[1], field)
if not current then
  return redis.error_reply('NOARCHIVE archive ' .. ARGV[2] .. ' is not registered for '
    .. ARGV[3])
end
local owner, owner_field = ARGV[5] or '', field .. ':owner'
local held, held_since = unpack(redis.call('HMGET', KEYS[1], owner_field, owner_field .. '_since'))
if held and held ~= owner and not (ARGV[6] == '1' and owner ~= '') then
  return redis.error_reply('FENCED ' .. (held_since or '0') .. ' ' .. string.sub(held, 1, 8))
end
if owner ~= '' then
  local now = redis_now()
  if held ~= owner then
    redis.call('HSET', KEYS[1], owner_field, owner, owner_field .. '_since', now)
    if held then redis.call('HSET', KEYS[1], owner_field .. '_displaced', held) end
  end
  redis.call('HSET', KEYS[1], owner_field .. '_committed', now)
end
local old = parse(current)
if old and (old[1] > new[1] or (old[1] == new[1] and old[2] >= new[2])) then
  return current
end
redis.call('HSET', KEYS[1], field, ARGV[4])
return ARGV[4]
