-- Assembled from source/slots.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- slots.lua: a logical consumer's concurrency limit across every instance on every
-- host (max_in_flight): slots leased to the instances whose handlers run, by Redis's
-- clock.
--
-- KEYS[1]  zset    redisq:{q}:g:<g>:slots   member = "<instance>/<n>" (its n-th slot),
--                  score = when the slot's lease ends (ms)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  instance name (the Redis consumer it reads as)
-- ARGV[3]  how many slots the instance holds now (h: members <instance>/1 .. /h)
-- ARGV[4]  "take" (up to ARGV[5] more slots), "give" (give back ARGV[5] slots),
--          "renew" (the leases of the h slots held) or "count" (read only: the slots in
--          use now, any instance's)
-- ARGV[5]  take, give: how many
-- ARGV[6]  take: the limit (slots in all)
-- ARGV[7]  take, renew: the lease's length, ms (the instance renews it with its
--          heartbeat; a dead instance's slots come back when their leases end)
--
-- Returns take: {granted, ms until the first lease held by another ends (-1: none)};
-- give: {0, 0}; renew: {h, 0}; count: {slots in use, 0}. Leases that ended are freed by every take.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script slots.lua speaks redisq/2, '
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

local key, instance, held, op = KEYS[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()

if op == 'count' then -- what a dashboard shows: the slots whose lease has not ended
  return {redis.call('ZCOUNT', key, redis_now(), '+inf'), 0}
end

if op == 'give' then
  for i = held - tonumber(ARGV[5]) + 1, held do
    redis.call('ZREM', key, instance .. '/' .. i)
  end
  return {0, 0}
end

local now = redis_now()
local ends = now + tonumber(ARGV[7])

-- The key outlives every lease in it (a key no live instance renews goes), never cut
-- short by a caller with a shorter lease than the others'.
local function outlive(lease)
  if redis.call('PTTL', key) < lease + 1000 then
    redis.call('PEXPIRE', key, lease + 1000)
  end
end
if op == 'renew' then
  -- ZADD, not ZADD XX: a slot whose lease ended during a stall is still in use by a
  -- running handler, and counting it again is the truth.
  for i = 1, held do
    redis.call('ZADD', key, ends, instance .. '/' .. i)
  end
  if held > 0 then outlive(tonumber(ARGV[7])) end
  return {held, 0}
end

redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. now)
local free = tonumber(ARGV[6]) - redis.call('ZCARD', key)
local granted = math.max(0, math.min(tonumber(ARGV[5]), free))
for i = held + 1, held + granted do
  redis.call('ZADD', key, ends, instance .. '/' .. i)
end
if granted > 0 then outlive(tonumber(ARGV[7])) end
local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local wait = -1
if granted == 0 and #first > 0 then wait = tonumber(first[2]) - now end
return {granted, wait}
