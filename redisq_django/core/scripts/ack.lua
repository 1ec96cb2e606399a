-- ack.lua: acknowledge handled messages of one logical consumer.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- ARGV[1]  group name
-- ARGV[2]  n: how many of the following ids are log entries
-- ARGV[3 .. 2+n]  log entry ids
-- ARGV[3+n ..]    direct entry ids (also deleted: the direct stream only holds work)
--
-- Returns the number of entries acknowledged (ids no longer pending are skipped).

local group = ARGV[1]
local n = tonumber(ARGV[2])
local acked = 0
local CHUNK = 500

local function each_chunk(first, last, fn)
  local i = first
  while i <= last do
    local j = math.min(i + CHUNK - 1, last)
    fn(unpack(ARGV, i, j))
    i = j + 1
  end
end

each_chunk(3, 2 + n, function(...)
  acked = acked + redis.call('XACK', KEYS[1], group, ...)
end)
each_chunk(3 + n, #ARGV, function(...)
  acked = acked + redis.call('XACK', KEYS[2], group, ...)
  redis.call('XDEL', KEYS[2], ...)
end)
return acked
