-- publish_delayed.lua: publish messages of one queue, the delayed ones due by Redis's clock.
--
-- KEYS[1]  hash    redisq:{q}:meta      (or redisq:{q#i}:meta): fields `partitions` (the
--                                       layout) and `protocol` (of its data), checked first
-- KEYS[2]  zset    redisq:{q}:delayed   member = envelope as JSON, score = due ms
-- KEYS[3]  stream  redisq:{q}:log
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the number of partitions the caller routes by: "1" for a queue's own keys,
--          K for partition i's ({q#i}); the write is refused unless meta records it
-- ARGV[3]  n: how many messages follow; each is
--            due   "0": append to the log now (XADD); "+<ms>": delayed, due that many ms
--                  after now by Redis's own clock (TIME), never the publisher's; "<ms>":
--                  delayed until that due time, ms since the epoch (an eta)
--            k     how many field, value pairs follow
--            the envelope's k field, value pairs (a delayed one needs `id`; its `due_at`
--            is set here to the due time)
--
-- All of them or none (one script). Returns, in order, the log entry id of each message
-- published now and the due time (ms) of each delayed one.

--#include protocol

--#include clock

--#include layout

--#include member_of

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()

local out = {}
local i = 4
for m = 1, tonumber(ARGV[3]) do
  local due, k = ARGV[i], tonumber(ARGV[i + 1])
  local first, last = i + 2, i + 1 + 2 * k
  if due == '0' then
    out[m] = redis.call('XADD', KEYS[3], '*', unpack(ARGV, first, last))
  else
    local at = tonumber(due)
    if string.sub(due, 1, 1) == '+' then at = redis_now() + tonumber(string.sub(due, 2)) end
    -- The member: the envelope's fields as one JSON object of strings, due_at included.
    local envelope = {}
    for j = first, last, 2 do envelope[ARGV[j]] = ARGV[j + 1] end
    envelope['due_at'] = string.format('%d', at)
    redis.call('ZADD', KEYS[2], at, member_of(envelope))
    out[m] = at
  end
  i = last + 1
end
return out
