-- publish_batch_once.lua: publish a batch of one queue's messages at most once per batch id
-- (a transaction's messages after its commit), so a sender unsure whether a batch went
-- through (a timeout, a lost connection) can always send it again with the same batch id.
--
-- KEYS[1]  hash    redisq:{q}:meta      (or redisq:{q#i}:meta): fields `partitions` (the
--                                       layout) and `protocol` (of its data), checked first
-- KEYS[2]  stream  redisq:{q}:log
-- KEYS[3]  zset    redisq:{q}:delayed   member = envelope as JSON, score = due ms
-- KEYS[4]  string  redisq:{q}:batch:<batch id>   marker that this batch was published
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the number of partitions the caller routes by: "1" for a queue's own keys,
--          K for partition i's ({q#i}); the write is refused unless meta records it
-- ARGV[3]  how long the marker is kept, ms
-- ARGV[4]  n: how many messages follow; each is, as in publish_delayed.lua,
--            due   "0": append to the log now (XADD); "+<ms>": delayed, due that many ms
--                  after now by Redis's own clock (TIME), never the publisher's; "<ms>":
--                  delayed until that due time, ms since the epoch (an eta)
--            k     how many field, value pairs follow
--            the envelope's k field, value pairs (each message needs its own `id`, the
--            only way to know it afterwards; a delayed one's `due_at` is set here)
--
-- All of them or none for well-formed arguments (one script). The marker is written
-- last, so a batch refused part-way (a wrong key type) leaves none; like EXEC, Redis
-- does not undo the writes before a failing command. Returns {1, then in order the log
-- entry id of each message published now and the due time (ms) of each delayed one} when
-- published now, or {0} when the marker shows the batch was already published (nothing
-- is written).

--#include protocol

--#include clock

--#include layout

--#include member_of

if redis.call('EXISTS', KEYS[4]) == 1 then return {0} end

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()

local out = {1}
local i = 5
for m = 1, tonumber(ARGV[4]) do
  local due, k = ARGV[i], tonumber(ARGV[i + 1])
  local first, last = i + 2, i + 1 + 2 * k
  if due == '0' then
    out[m + 1] = redis.call('XADD', KEYS[2], '*', unpack(ARGV, first, last))
  else
    local at = tonumber(due)
    if string.sub(due, 1, 1) == '+' then at = redis_now() + tonumber(string.sub(due, 2)) end
    -- The member: the envelope's fields as one JSON object of strings, due_at included.
    local envelope = {}
    for j = first, last, 2 do envelope[ARGV[j]] = ARGV[j + 1] end
    envelope['due_at'] = string.format('%d', at)
    redis.call('ZADD', KEYS[3], at, member_of(envelope))
    out[m + 1] = at
  end
  i = last + 1
end
redis.call('SET', KEYS[4], '1', 'PX', ARGV[3])
return out
