-- publish_once.lua: publish a message with a fixed id at most once (outbox relay).
--
-- KEYS[1]  hash    redisq:{q}:meta      (or redisq:{q#i}:meta): fields `partitions` (the
--                                       layout) and `protocol` (of its data), checked first
-- KEYS[2]  stream  redisq:{q}:log
-- KEYS[3]  zset    redisq:{q}:delayed
-- KEYS[4]  string  redisq:{q}:sent:<message id>   marker that this id was published
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the number of partitions the caller routes by: "1" for a queue's own keys,
--          K for partition i's ({q#i}); the write is refused unless meta records it
-- ARGV[3]  how long the marker is kept, ms
-- ARGV[4]  when it is due: 0 publishes to the log now; "+<ms>" adds it to the delayed
--          zset due that many ms after now by Redis's own clock (TIME), never the
--          publisher's; a due time (ms since the epoch, an eta) adds it due then
-- ARGV[5]  the delayed member (envelope as JSON), used with a due time; with "+<ms>"
--          the member is made here from ARGV[6 ..] and `due_at` (pass "")
-- ARGV[6 ..]  field, value pairs of the envelope, used when ARGV[4] is 0 or "+<ms>"
--
-- Returns {1, entry id or ""} when published now, {0, previous entry id or ""} when the
-- marker shows it was already published (a relay retrying after a crash).

--#include protocol

--#include clock

--#include layout

--#include member_of

local previous = redis.call('GET', KEYS[4])
if previous then return {0, previous} end
local entry = ''
if string.sub(ARGV[4], 1, 1) == '+' then
  -- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
  redis.replicate_commands()
  local due = redis_now() + tonumber(string.sub(ARGV[4], 2))
  local envelope = {}
  for i = 6, #ARGV, 2 do envelope[ARGV[i]] = ARGV[i + 1] end
  envelope['due_at'] = string.format('%d', due)
  redis.call('ZADD', KEYS[3], due, member_of(envelope))
elseif tonumber(ARGV[4]) > 0 then
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
else
  entry = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 6))
end
redis.call('SET', KEYS[4], entry, 'PX', ARGV[3])
return {1, entry}
