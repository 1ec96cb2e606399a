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

--#include protocol

--#include clock

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local now = tonumber(ARGV[2]) or redis_now()
local limit = tonumber(ARGV[3])

--#include flatten

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
