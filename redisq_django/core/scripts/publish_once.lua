-- publish_once.lua: publish a message with a fixed id at most once (outbox relay).
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  zset    redisq:{q}:delayed
-- KEYS[3]  string  redisq:{q}:sent:<message id>   marker that this id was published
-- ARGV[1]  how long the marker is kept, ms
-- ARGV[2]  when it is due: 0 publishes to the log now; "+<ms>" adds it to the delayed
--          zset due that many ms after now by Redis's own clock (TIME), never the
--          publisher's; a due time (ms since the epoch, an eta) adds it due then
-- ARGV[3]  the delayed member (envelope as JSON), used with a due time; with "+<ms>"
--          the member is made here from ARGV[4 ..] and `due_at` (pass "")
-- ARGV[4 ..]  field, value pairs of the envelope, used when ARGV[2] is 0 or "+<ms>"
--
-- Returns {1, entry id or ""} when published now, {0, previous entry id or ""} when the
-- marker shows it was already published (a relay retrying after a crash).

local previous = redis.call('GET', KEYS[3])
if previous then return {0, previous} end
local entry = ''
if string.sub(ARGV[2], 1, 1) == '+' then
  -- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
  redis.replicate_commands()
  local t = redis.call('TIME')
  local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    + tonumber(string.sub(ARGV[2], 2))
  local envelope = {}
  for i = 4, #ARGV, 2 do envelope[ARGV[i]] = ARGV[i + 1] end
  envelope['due_at'] = string.format('%d', due)
  redis.call('ZADD', KEYS[2], due, cjson.encode(envelope))
elseif tonumber(ARGV[2]) > 0 then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
else
  entry = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 4))
end
redis.call('SET', KEYS[3], entry, 'PX', ARGV[1])
return {1, entry}
