-- extend.lua: renew the lease of entries an instance is still working on.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  instance name (the Redis consumer it reads as)
-- ARGV[4]  n: how many of the following ids are log entries
-- ARGV[5 .. 4+n]  log entry ids; ARGV[5+n ..] direct entry ids
--
-- Resets the idle time of each entry this instance still owns (XCLAIM ... JUSTID, which
-- leaves the delivery count alone). Returns the ids another instance owns now (ids no
-- longer pending at all were settled meanwhile and are not reported).

--#include protocol

local group, consumer = ARGV[2], ARGV[3]
local n = tonumber(ARGV[4])
local lost = {}

for i = 5, #ARGV do
  local key = (i <= 4 + n) and KEYS[1] or KEYS[2]
  local id = ARGV[i]
  local p = redis.call('XPENDING', key, group, id, id, 1)
  if #p == 1 then
    if p[1][2] == consumer then
      redis.call('XCLAIM', key, group, consumer, 0, id, 'JUSTID')
    else
      lost[#lost + 1] = id
    end
  end
end
return lost
