-- Assembled from source/repartition.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- repartition.lua: record a drained queue's new number of partitions (manage.py redisq
-- partitions QUEUE K), the last step of core/repartition.py, on the queue's base keys.
--
-- KEYS[1]  hash    redisq:{q}:meta      field "partitions": the number recorded
-- KEYS[2]  stream  redisq:{q}:log       the base log; a string (the fence) while K > 1
-- KEYS[3]  zset    redisq:{q}:delayed   the base delayed set; a string while K > 1
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the number of partitions the caller found recorded (1 when none was)
-- ARGV[3]  the new number of partitions, 1 to 64
-- ARGV[4]  from 1 to K > 1 only: the id of the base log's last entry when the caller
--          found the queue drained ("" when it had none)
--
-- Returns the new number. Error replies (REDISQ_LAYOUT), nothing changed: the recorded
-- number is no longer ARGV[2] (someone else changed it), or, from 1 partition to more,
-- the base log has an entry after ARGV[4] or the delayed set a member (a message
-- arrived after the caller found the queue drained: it would be lost with the log).
--
-- From 1 to K > 1 the base log and delayed set are deleted (drained; an archive has
-- stored the log, which the caller checked) and become fences: strings, so that a
-- plain XADD or ZADD of a process that still thinks the queue unpartitioned fails
-- (WRONGTYPE). From K > 1 to 1 the fences go. Each partition's own record (field
-- "partitions" of redisq:{q#i}:meta) is the caller's to write, before and after.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script repartition.lua speaks redisq/2, '
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
local before, after = tonumber(ARGV[2]), tonumber(ARGV[3])

local recorded = redis.call('HGET', KEYS[1], 'partitions') or '1'
if recorded ~= ARGV[2] then
  return redis.error_reply('REDISQ_LAYOUT ' .. KEYS[1] .. " records '"
    .. string.gsub(string.sub(recorded, 1, 20), '%c', '?') .. "' partitions, not "
    .. ARGV[2] .. ': the number changed meanwhile; look again before changing it')
end

local function typed(key) return redis.call('TYPE', key)['ok'] end

if after > 1 then
  for i = 2, 3 do
    local t = typed(KEYS[i])
    if before > 1 and t ~= 'none' and t ~= 'string' then
      -- Written unpartitioned while the queue was partitioned (its fence gone): never
      -- deleted unread.
      return redis.error_reply('REDISQ_LAYOUT ' .. KEYS[i] .. ' holds messages written '
        .. 'as if the queue had 1 partition while it has ' .. ARGV[2] .. ': nothing '
        .. 'changed; consume them first (with 1 partition) or delete the key')
    end
  end
end

if before == 1 and after > 1 then
  if typed(KEYS[2]) == 'stream' then
    local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
    if (last and last[1] or '') ~= ARGV[4] then
      return redis.error_reply('REDISQ_LAYOUT ' .. KEYS[2]
        .. ' has a message that arrived after the queue was found drained: nothing '
        .. 'changed; stop its publishers and try again')
    end
  end
  if typed(KEYS[3]) == 'zset' and redis.call('ZCARD', KEYS[3]) > 0 then
    return redis.error_reply('REDISQ_LAYOUT ' .. KEYS[3]
      .. ' has a delayed message that arrived after the queue was found drained: nothing '
      .. 'changed; stop its publishers and try again')
  end
end

for i = 2, 3 do
  local t = typed(KEYS[i])
  if after > 1 and t ~= 'string' then
    redis.call('DEL', KEYS[i])
    redis.call('SET', KEYS[i], FENCE .. KEYS[1])
  elseif after == 1 and t == 'string'
      and string.sub(redis.call('GET', KEYS[i]), 1, #FENCE) == FENCE then
    redis.call('DEL', KEYS[i])
  end
end
redis.call('HSET', KEYS[1], 'partitions', after)
return after
