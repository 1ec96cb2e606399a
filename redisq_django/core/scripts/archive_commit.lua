-- Assembled from source/archive_commit.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
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

-- >>> fragments/clock.lua (shared; assembled into this script)
-- Redis's clock, ms since the epoch (TIME): every "now" that decides a delivery, a lease,
-- an expiry or a tick is Redis's, never a caller's (PROTOCOL.md, "Clocks"). Read once per
-- call, and only when needed. A script calls redis.replicate_commands() before it reads
-- the clock and writes: Redis 6.2 must be told, 7 and later replicate effects anyway.
local redis_ms
local function redis_now()
  if not redis_ms then
    local t = redis.call('TIME')
    redis_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return redis_ms
end

-- A time given as "+<ms>" (that long after Redis's now: what our code sends) or as ms
-- since the epoch, as the text of a whole number of ms.
local function time_of(given)
  if string.sub(given, 1, 1) ~= '+' then return given end
  return string.format('%d', redis_now() + tonumber(string.sub(given, 2)))
end
-- <<< fragments/clock.lua

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
