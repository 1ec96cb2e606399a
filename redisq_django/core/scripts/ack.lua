-- ack.lua: acknowledge handled messages of one logical consumer.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- KEYS[3]  stream  redisq:{q}:events   (only when history is on; see the second layout)
--
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- Without KEYS[3]:
-- ARGV[2]  group name
-- ARGV[3]  n: how many of the following ids are log entries
-- ARGV[4 .. 3+n]  log entry ids
-- ARGV[4+n ..]    direct entry ids (also deleted: the direct stream only holds work)
--
-- With KEYS[3] (history on):
-- ARGV[2]  group name
-- ARGV[3]  n: how many of the ids are log entries
-- ARGV[4]  instance name (the Redis consumer it reads as)
-- ARGV[5]  m: how many ids in all
-- ARGV[6 .. 5+m]  entry ids, the n log ids first, then the direct ids
-- ARGV[6+m]       the event records of those ids, in the same order, as one JSON array:
--                 [["<message id>",<attempt>,<ms or null>], ...]
-- One `handled` event lists the records of the entries this call acknowledged (ids no
-- longer pending were settled elsewhere and are left out): no event without its ack.
-- Each id is acknowledged on its own, as only that tells which ones were pending.
--
-- Returns the number of entries acknowledged (ids no longer pending are skipped).

-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script ack.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end

local group = ARGV[2]
local n = tonumber(ARGV[3])
local acked = 0

if #KEYS >= 3 then
  local instance, m = ARGV[4], tonumber(ARGV[5])
  local call, log, direct = redis.call, KEYS[1], KEYS[2]
  local skipped = {}
  for i = 1, n do
    if call('XACK', log, group, ARGV[5 + i]) == 1 then
      acked = acked + 1
    else
      skipped[i] = true
    end
  end
  for i = n + 1, m do
    local id = ARGV[5 + i]
    if call('XACK', direct, group, id) == 1 then
      acked = acked + 1
      call('XDEL', direct, id)
    else
      skipped[i] = true
    end
  end
  local records = ARGV[6 + m]
  if acked > 0 and acked < m then
    -- Rare (another instance settled some first): keep the acknowledged ones' records.
    -- cjson turns them back into the same text: strings, and integers below 2^53.
    local kept = {}
    for i, record in ipairs(cjson.decode(records)) do
      if not skipped[i] then kept[#kept + 1] = record end
    end
    records = cjson.encode(kept)
  end
  if acked > 0 then
    redis.call('XADD', KEYS[3], '*', 'e', 'handled', 'g', group, 'c', instance, 'm', records)
  end
  return acked
end

local CHUNK = 500

local function each_chunk(first, last, fn)
  local i = first
  while i <= last do
    local j = math.min(i + CHUNK - 1, last)
    fn(unpack(ARGV, i, j))
    i = j + 1
  end
end

each_chunk(4, 3 + n, function(...)
  acked = acked + redis.call('XACK', KEYS[1], group, ...)
end)
each_chunk(4 + n, #ARGV, function(...)
  acked = acked + redis.call('XACK', KEYS[2], group, ...)
  redis.call('XDEL', KEYS[2], ...)
end)
return acked
