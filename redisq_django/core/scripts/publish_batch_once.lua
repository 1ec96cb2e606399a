-- Assembled from source/publish_batch_once.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
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

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script publish_batch_once.lua speaks redisq/2, '
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
