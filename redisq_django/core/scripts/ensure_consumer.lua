-- ensure_consumer.lua: register a logical consumer (consumer group) on a queue.
--
-- KEYS[1]  stream  redisq:{q}:log            the queue's log (created if missing)
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct   the group's private input (created if missing)
-- ARGV[1]  group name
-- ARGV[2]  id the group starts after on the log ("$" latest, "0-0" earliest, or an id)
--
-- Returns 1 when the group was created on the log, 0 when it already existed (its
-- position is left alone: use XGROUP SETID to move it).

local function create(key, id)
  local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', key, ARGV[1], id, 'MKSTREAM')
  if ok then return 1 end
  if string.find(tostring(err and (err.err or err)), 'BUSYGROUP') then return 0 end
  return redis.error_reply(tostring(err and (err.err or err)))
end

local created = create(KEYS[1], ARGV[2])
create(KEYS[2], '0-0')
return created
