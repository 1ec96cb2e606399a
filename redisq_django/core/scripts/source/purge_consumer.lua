-- purge_consumer.lua: discard what waits for one logical consumer in its own keys.
--
-- KEYS[1]  zset    redisq:{q}:g:<g>:retry    retries waiting for their backoff
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct   the consumer's private input
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  at most this many entries removed from each key per call (bounds the call)
--
-- Removes retries waiting for their backoff and the entries of the private input not yet
-- delivered to the group (after its last-delivered id). Entries delivered and not yet
-- acknowledged (in flight) stay: their instances settle them as usual. The log is not
-- touched: move the group to the end of it (XGROUP SETID … $) to skip its backlog there.
-- Returns {retries removed, direct entries removed, 1 when more remain (call again) or 0}.

--#include protocol

local limit = tonumber(ARGV[3])
local retries = redis.call('ZREMRANGEBYRANK', KEYS[1], 0, limit - 1)

local last = nil
if redis.call('EXISTS', KEYS[2]) == 1 then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2])) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    if info['name'] == ARGV[2] then last = info['last-delivered-id'] end
  end
end
local removed = 0
if last then
  local waiting = redis.call('XRANGE', KEYS[2], '(' .. last, '+', 'COUNT', limit)
  for _, e in ipairs(waiting) do removed = removed + redis.call('XDEL', KEYS[2], e[1]) end
end
local more = 0
if redis.call('ZCARD', KEYS[1]) > 0 or removed == limit then more = 1 end
return {retries, removed, more}
