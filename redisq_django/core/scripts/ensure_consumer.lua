-- ensure_consumer.lua: register a logical consumer (consumer group) on a queue.
--
-- KEYS[1]  stream  redisq:{q}:log            the queue's log (created if missing)
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct   the group's private input (created if missing)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  id the group starts after on the log ("$" latest, "0-0" earliest, or an id)
--
-- Returns 1 when the group was created on the log, 0 when it already existed (its
-- position is left alone: use XGROUP SETID to move it).

-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script ensure_consumer.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end

local function create(key, id)
  local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', key, ARGV[2], id, 'MKSTREAM')
  if ok then return 1 end
  if string.find(tostring(err and (err.err or err)), 'BUSYGROUP') then return 0 end
  return redis.error_reply(tostring(err and (err.err or err)))
end

local created = create(KEYS[1], ARGV[3])
create(KEYS[2], '0-0')
return created
