-- Assembled from source/promote.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- promote.lua: move due delayed messages into the log and due retries into a group's
-- direct stream.
--
-- KEYS[1]  zset    redisq:{q}:delayed          member = envelope as a JSON object, score = due ms
-- KEYS[2]  stream  redisq:{q}:log
-- KEYS[3]  zset    redisq:{q}:g:<g>:retry      (same member layout)
-- KEYS[4]  stream  redisq:{q}:g:<g>:direct
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  "" (what our code sends): "now" is Redis's own clock (TIME), never the
--          caller's; a number (ms since the epoch) fixes "now" instead (tests)
-- ARGV[3]  at most this many entries are moved from each zset (bounds the call)
--
-- Returns {moved_from_delayed, moved_from_retry, next_due_ms or -1, now_ms}: now_ms is
-- the "now" the call used (Redis's clock), so a caller times its next call by the wait
-- next_due_ms - now_ms on its own clock, whatever that clock says.
-- A member that is not a JSON object whose values are all strings (null: no such field)
-- is still moved, unchanged, as a single field "raw", so the consumer dead-letters it as
-- undecodable instead of it blocking the zset forever. Values are never re-encoded: Lua's
-- cjson would change them (12345678901234567 -> 1.2345678901235e+16, [] -> {}).

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script promote.lua speaks redisq/2, '
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

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local now = tonumber(ARGV[2]) or redis_now()
local limit = tonumber(ARGV[3])

-- >>> fragments/flatten.lua (shared; assembled into this script)
-- The stream fields of a member of a delayed or retry set: a JSON object of strings is
-- its fields (`null` values left out), anything else moves whole, byte for byte, as the
-- one field `raw`, which its reader makes an undecodable dead letter (PROTOCOL.md,
-- "Envelope v1"). promote.lua and deliver_now.lua flatten alike: a member's fate never
-- depends on which of them moves it.
local function flatten(member)
  local ok, decoded = pcall(cjson.decode, member)
  -- decoded[1] set: a JSON array (cjson decodes arrays and objects to tables alike).
  if not ok or type(decoded) ~= 'table' or decoded[1] ~= nil then
    return {'raw', member}
  end
  local flat = {}
  for k, v in pairs(decoded) do
    if type(v) == 'string' then
      flat[#flat + 1] = k
      flat[#flat + 1] = v
    elseif v ~= cjson.null then
      return {'raw', member}
    end
  end
  if #flat == 0 then return {'raw', member} end
  return flat
end
-- <<< fragments/flatten.lua

local function move(zkey, stream)
  local due = redis.call('ZRANGEBYSCORE', zkey, '-inf', now, 'LIMIT', 0, limit)
  for _, member in ipairs(due) do
    redis.call('XADD', stream, '*', unpack(flatten(member)))
    redis.call('ZREM', zkey, member)
  end
  return #due
end

local function next_due(zkey)
  local first = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  if #first == 0 then return nil end
  return tonumber(first[2])
end

local moved_delayed = move(KEYS[1], KEYS[2])
local moved_retry = 0
if #KEYS >= 4 then
  moved_retry = move(KEYS[3], KEYS[4])
end

local nd = next_due(KEYS[1])
if #KEYS >= 4 then
  local nr = next_due(KEYS[3])
  if nr and (not nd or nr < nd) then nd = nr end
end
return {moved_delayed, moved_retry, nd and math.floor(nd) or -1, now}
