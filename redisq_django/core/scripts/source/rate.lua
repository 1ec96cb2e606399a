-- rate.lua: a logical consumer's rate limit, shared by every instance on every host
-- (GCRA, the "generic cell rate algorithm": a token bucket kept as one number), by
-- Redis's clock.
--
-- KEYS[1]  string  redisq:{q}:g:<g>:rate (or redisq:{q}:g:<g>:rate:<key>, a limit per
--                  ordering key): the limit's theoretical arrival time, µs since the
--                  epoch; absent when the bucket is full
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  emission interval, µs: the period over the count ("100/s": 10000)
-- ARGV[3]  burst: how many messages may start at once after a pause (>= 1)
-- ARGV[4]  "take" (start up to ARGV[5] messages now), "reserve" (the next message's
--          turn, which may be up to ARGV[5] µs away), "give" (ARGV[5] messages taken
--          were not started after all) or "peek" (read only: {0, µs ahead, 0})
-- ARGV[5]  take: how many the caller would start (>= 1); reserve: how far ahead a turn
--          may be, µs; give: how many it gives back
-- ARGV[6]  give: the mark its take or reserve replied
--
-- Every message started moves the arrival time one interval on; a message may start
-- while the arrival time is at most (burst - 1) intervals ahead of now. So over any
-- span of time at most burst + span / interval messages start, whoever starts them.
-- A reservation moves it on too: the turn is the caller's however late it asks, so
-- reserving ahead loses no turn to a caller's lateness.
-- Returns {granted, wait, mark}: take: how many may start now (0: none) and, when none
-- may, µs until one may; reserve: 1 and the µs until the reserved turn, or 0 and the µs
-- after which to ask again. The mark is the arrival time the call left (0: unchanged).
-- Give moves the arrival time back only while it is still that mark (no one took a
-- token since: giving back a turn another caller holds would let two callers start at
-- once); it replies {1, 0, 0} when it did, {0, 0, 0} when the tokens are lost instead.

--#include protocol

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, burst, op, n = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local stored = redis.call('GET', KEYS[1])
local tat = tonumber(stored or '0')
if tat < now then tat = now end

local function store(at)
  if at <= now then
    redis.call('DEL', KEYS[1]) -- a full bucket needs no key
    return 0
  end
  local text = string.format('%d', at)
  redis.call('SET', KEYS[1], text, 'PX', math.ceil((at - now) / 1000) + 1)
  return tonumber(text)
end

if op == 'peek' then -- what a dashboard shows: how far ahead tokens were given out
  return {0, math.max(0, tonumber(stored or '0') - now), 0}
end

if op == 'give' then
  if stored and stored == ARGV[6] then
    store(tat - n * interval)
    return {1, 0, 0}
  end
  return {0, 0, 0}
end

local earliest = tat - (burst - 1) * interval -- when the next message may start
if op == 'take' then
  if earliest > now then
    return {0, math.ceil(earliest - now), 0}
  end
  local granted = math.min(n, math.floor((now - earliest) / interval) + 1)
  return {granted, 0, store(tat + granted * interval)}
end

-- reserve
local wait = math.max(0, earliest - now)
if wait > n then
  return {0, math.ceil(wait - n), 0}
end
return {1, math.ceil(wait), store(tat + interval)}
