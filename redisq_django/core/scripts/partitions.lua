-- partitions.lua: how many partitions a queue has, recorded on its first use.
--
-- KEYS[1]  hash    redisq:{q}:meta      field "partitions": the queue's number of
--                                       partitions K (absent: not recorded)
-- KEYS[2]  stream  redisq:{q}:log       the base log (read: does it exist)
-- KEYS[3]  zset    redisq:{q}:delayed   the base delayed set (read: does it exist)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  K to record when none is recorded and neither base key exists; "0" (or
--          "1"): record nothing
--
-- Returns the recorded K; else 1 when the base log or delayed set exists (the queue has
-- been used unpartitioned); else ARGV[2] when it was recorded now (HSETNX); else 0. A
-- caller whose K differs from a non-zero reply must not use the queue.

-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script partitions.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end

local recorded = redis.call('HGET', KEYS[1], 'partitions')
if recorded then return tonumber(recorded) end
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then return 1 end
local k = tonumber(ARGV[2])
if k and k > 1 then
  redis.call('HSETNX', KEYS[1], 'partitions', k)
  return k
end
return 0
