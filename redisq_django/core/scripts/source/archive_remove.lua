-- archive_remove.lua: remove a named archive of a queue; retention stops waiting for it.
--
-- KEYS[1]  hash    redisq:{q}:archives             its fields "<a>:..." are deleted
-- KEYS[2]  hash    redisq:{q}:meta                 for the archive named "default", the
--                  positions an earlier version's unnamed archive recorded
--                  ("archive:messages", "archive:events") are deleted too
-- KEYS[3]  list    redisq:{q}:archive:<a>:gaps     its unreported gaps, deleted
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the archive's name
--
-- Returns how many tables (messages, events) it was registered for.

--#include protocol

local name = ARGV[2]
local prefix = name .. ':'
local registry = redis.call('HGETALL', KEYS[1])
local fields, tables = {}, 0
for i = 1, #registry, 2 do
  local f = registry[i]
  if string.sub(f, 1, #prefix) == prefix then
    fields[#fields + 1] = f
    local rest = string.sub(f, #prefix + 1)
    if rest == 'messages' or rest == 'events' then tables = tables + 1 end
  end
end
if #fields > 0 then redis.call('HDEL', KEYS[1], unpack(fields)) end
if name == 'default' then
  tables = tables + redis.call('HDEL', KEYS[2], 'archive:messages', 'archive:events')
end
redis.call('DEL', KEYS[3])
return tables
