-- extend.lua: renew the lease of entries a consumer is still working on.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- ARGV[1]  group name
-- ARGV[2]  consumer (instance) name
-- ARGV[3]  n: how many of the following ids are log entries
-- ARGV[4 .. 3+n]  log entry ids; ARGV[4+n ..] direct entry ids
--
-- Resets the idle time of each entry this consumer still owns (XCLAIM ... JUSTID, which
-- leaves the delivery count alone). Returns the ids another consumer owns now (ids no
-- longer pending at all were settled meanwhile and are not reported).

local group, consumer = ARGV[1], ARGV[2]
local n = tonumber(ARGV[3])
local lost = {}

for i = 4, #ARGV do
  local key = (i <= 3 + n) and KEYS[1] or KEYS[2]
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
