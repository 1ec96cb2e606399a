-- Assembled from source/partitions.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- partitions.lua: how many partitions a queue has, recorded on its first use.
--
-- KEYS[1]  hash    redisq:{q}:meta      field "partitions": the queue's number of
--                                       partitions K (absent: not recorded)
-- KEYS[2]  stream  redisq:{q}:log       the base log (read: is it a stream); a string,
--                                       the fence, once the queue is partitioned
-- KEYS[3]  zset    redisq:{q}:delayed   the base delayed set (read: is it a zset); a
--                                       string, the fence, once the queue is partitioned
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  K to record when none is recorded and the base keys hold no stream or zset;
--          "0" (or "1"): record nothing
--
-- Returns the recorded K; else 1 when the base log is a stream or the delayed set a zset
-- (the queue has been used unpartitioned); else ARGV[2] when it was recorded now; else 0.
-- A caller whose K differs from a non-zero reply must not use the queue. A recorded
-- value that is not a whole number from 1 to 64 is an error reply (REDISQ_LAYOUT).
--
-- When K > 1 is recorded (now or before), the base log and delayed set, unless they hold
-- data, are made fences: strings, so that a plain XADD or ZADD of a process that still
-- thinks the queue unpartitioned fails (WRONGTYPE) instead of writing where no consumer
-- reads (PROTOCOL.md, "Partitions: the layout every write checks").

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script partitions.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end
-- <<< fragments/protocol.lua

-- >>> fragments/fence.lua (shared; assembled into this script)
-- What a partitioned queue's own log and delayed keys hold instead (a string): a plain
-- publish to them (XADD, ZADD) fails with WRONGTYPE instead of writing where no consumer
-- reads. repartition.lua recognises a fence by this text.
local FENCE = 'redisq fence: this queue is partitioned, see the field partitions of '
-- <<< fragments/fence.lua

local function fence()
  for i = 2, 3 do
    if redis.call('TYPE', KEYS[i])['ok'] == 'none' then redis.call('SET', KEYS[i], FENCE .. KEYS[1]) end
  end
end

local recorded = redis.call('HGET', KEYS[1], 'partitions')
if recorded then
  -- Written by anyone with access: read strictly, never leniently ("4.5" is no 4).
  local k = string.match(recorded, '^[1-9][0-9]?$') and tonumber(recorded)
  if not k or k > 64 then
    return redis.error_reply('REDISQ_LAYOUT ' .. KEYS[1] .. " records '"
      .. string.gsub(string.sub(recorded, 1, 20), '%c', '?')
      .. "' partitions, which is not a whole number from 1 to 64: record the right "
      .. 'one with manage.py redisq partitions')
  end
  if k > 1 then fence() end
  return k
end
if redis.call('TYPE', KEYS[2])['ok'] == 'stream' or redis.call('TYPE', KEYS[3])['ok'] == 'zset' then
  return 1
end
local k = tonumber(ARGV[2])
if k and k > 1 then
  redis.call('HSET', KEYS[1], 'partitions', k)
  fence()
  return k
end
return 0
