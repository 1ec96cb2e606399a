-- Assembled from source/publish_once.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
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

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script publish_once.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end
-- <<< fragments/protocol.lua

-- >>> fragments/clock.lua (shared; assembled into this script)
-- Redis's clock, ms since the epoch (TIME): every "now" that decides a delivery, a lease,
-- an expiry or a tick is Redis's, never a caller's (PROTOCOL.md, "Clocks"). Read once per
-- call, and only when needed. A script calls redis.replicate_commands() before it reads
-- the clock and writes: Redis 6.2 must be told, 7 and later replicate effects anyway.
local redis_ms
local function redis_now()
  if not redis_ms then
    local t = redis.call('TIME')
    redis_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return redis_ms
end

-- A time given as "+<ms>" (that long after Redis's now: what our code sends) or as ms
-- since the epoch, as the text of a whole number of ms.
local function time_of(given)
  if string.sub(given, 1, 1) ~= '+' then return given end
  return string.format('%d', redis_now() + tonumber(string.sub(given, 2)))
end
-- <<< fragments/clock.lua

-- >>> fragments/layout.lua (shared; assembled into this script)
-- What the place records (PROTOCOL.md, "Partitions: the layout every write checks", and
-- "Versions and upgrades"): KEYS[1] is the meta of the place written (the queue, or one
-- partition of it). Data a consumer of another protocol registered may mean something
-- else; a message added where the recorded number of partitions is not the caller's
-- (ARGV[2]: 1 for a queue's own keys, where nothing recorded also matches; K for a
-- partition's, which must record exactly K) would sit where no consumer reads.
local record = redis.call('HMGET', KEYS[1], 'partitions', 'protocol')
local recorded, protocol = record[1], record[2]
local function shown(s) return (string.gsub(string.sub(s, 1, 20), '%c', '?')) end
if protocol and protocol ~= '2' then
  return redis.error_reply('REDISQ_PROTOCOL ' .. KEYS[1] .. " records data of protocol '"
    .. shown(protocol) .. "', this script speaks redisq/2: run clients of one protocol "
    .. 'on these queues')
end
if (ARGV[2] == '1' and recorded and recorded ~= '1') or (ARGV[2] ~= '1' and recorded ~= ARGV[2]) then
  return redis.error_reply('REDISQ_LAYOUT ' .. KEYS[1] .. ' records '
    .. (recorded and ("'" .. shown(recorded) .. "'") or 'no number of')
    .. " partitions, the caller routes by '" .. shown(ARGV[2] or '')
    .. "': read the recorded number again")
end
-- <<< fragments/layout.lua

-- >>> fragments/member_of.lua (shared; assembled into this script)
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
-- <<< fragments/member_of.lua

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
