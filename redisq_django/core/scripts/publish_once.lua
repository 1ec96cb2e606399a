-- publish_once.lua: publish a message with a fixed id at most once (outbox relay).
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  zset    redisq:{q}:delayed
-- KEYS[3]  string  redisq:{q}:sent:<message id>   marker that this id was published
-- ARGV[1]  how long the marker is kept, ms
-- ARGV[2]  due time, ms (0: publish to the log now; else add to the delayed zset)
-- ARGV[3]  the delayed member (envelope as JSON), used when ARGV[2] > 0
-- ARGV[4 ..]  field, value pairs of the envelope, used when ARGV[2] is 0
--
-- Returns {1, entry id or ""} when published now, {0, previous entry id or ""} when the
-- marker shows it was already published (a relay retrying after a crash).

local previous = redis.call('GET', KEYS[3])
if previous then return {0, previous} end
local entry = ''
if tonumber(ARGV[2]) > 0 then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
else
  entry = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 4))
end
redis.call('SET', KEYS[3], entry, 'PX', ARGV[1])
return {1, entry}
