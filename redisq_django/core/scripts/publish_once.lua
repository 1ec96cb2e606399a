-- publish_once.lua: publish a message with a fixed id at most once (outbox relay).
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  zset    redisq:{q}:delayed
-- KEYS[3]  string  redisq:{q}:sent:<message id>   marker that this id was published
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  how long the marker is kept, ms
-- ARGV[3]  when it is due: 0 publishes to the log now; "+<ms>" adds it to the delayed
--          zset due that many ms after now by Redis's own clock (TIME), never the
--          publisher's; a due time (ms since the epoch, an eta) adds it due then
-- ARGV[4]  the delayed member (envelope as JSON), used with a due time; with "+<ms>"
--          the member is made here from ARGV[5 ..] and `due_at` (pass "")
-- ARGV[5 ..]  field, value pairs of the envelope, used when ARGV[3] is 0 or "+<ms>"
--
-- Returns {1, entry id or ""} when published now, {0, previous entry id or ""} when the
-- marker shows it was already published (a relay retrying after a crash).

-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script publish_once.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end

-- The delayed member: the envelope as one JSON object, `id` first. Members of one due time
-- are promoted in the order of their bytes, so ids that increase in publish order keep a
-- batch's order (PROTOCOL.md, "Publish delayed").
local function member_of(envelope)
  local id = envelope['id']
  if not id then return cjson.encode(envelope) end
  envelope['id'] = nil
  local rest = cjson.encode(envelope)
  envelope['id'] = id
  if rest == '{}' then return '{"id":' .. cjson.encode(id) .. '}' end
  return '{"id":' .. cjson.encode(id) .. ',' .. string.sub(rest, 2)
end

local previous = redis.call('GET', KEYS[3])
if previous then return {0, previous} end
local entry = ''
if string.sub(ARGV[3], 1, 1) == '+' then
  -- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
  redis.replicate_commands()
  local t = redis.call('TIME')
  local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    + tonumber(string.sub(ARGV[3], 2))
  local envelope = {}
  for i = 5, #ARGV, 2 do envelope[ARGV[i]] = ARGV[i + 1] end
  envelope['due_at'] = string.format('%d', due)
  redis.call('ZADD', KEYS[2], due, member_of(envelope))
elseif tonumber(ARGV[3]) > 0 then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
else
  entry = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 5))
end
redis.call('SET', KEYS[3], entry, 'PX', ARGV[2])
return {1, entry}
