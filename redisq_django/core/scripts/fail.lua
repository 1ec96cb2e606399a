-- fail.lua: settle a failed delivery: schedule a retry or make it a dead letter.
--
-- KEYS[1]  stream  the stream the entry was delivered from (log or the group's direct)
-- KEYS[2]  zset    redisq:{q}:g:<g>:retry   member = envelope as JSON, score = due ms
-- KEYS[3]  stream  redisq:{q}:g:<g>:dead
-- KEYS[4]  stream  redisq:{q}:events   (only when history is on)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  instance that holds the entry (its Redis consumer); "" skips the ownership check
-- ARGV[4]  entry id
-- ARGV[5]  "1" to delete the entry from KEYS[1] after acking (direct stream), else "0"
-- ARGV[6]  "retry" or "dead"
-- ARGV[7]  when the retry is due (ignored for "dead"): "+<ms>" (what our code sends):
--          that many ms after now by Redis's own clock (TIME), never the caller's; or
--          a due time, ms since the epoch ("0": at once, a release)
-- Without KEYS[4]:
-- ARGV[8 ..]  field, value pairs of the envelope to write (retry member or dead entry)
-- With KEYS[4]:
-- ARGV[8]  k: how many field, value pairs the event has
-- ARGV[9 .. 8+2k]  the event's field, value pairs (written to KEYS[4] when settled). A
--                  `retried` event gets `next_due` here: the retry's due time (ms, by
--                  Redis's clock with "+<ms>"); a `next_due` the caller passes is dropped
-- ARGV[9+2k ..]    field, value pairs of the envelope to write
-- With KEYS[5] to KEYS[7] (an ordered consumer; KEYS[4] is then given too, with k = 0 when history
-- is off):
-- KEYS[5]  hash    redisq:{q}:g:<g>:holders   (see read_ordered.lua)
-- KEYS[6]  stream  redisq:{q}:g:<g>:direct    where the key's next message goes
-- KEYS[7]  string  redisq:{q}:g:<g>:held_back how many messages the waiting lists hold
-- ARGV[9+2k]   the prefix of the waiting lists, "redisq:{q}:g:<g>:waiting:"
-- ARGV[10+2k]  the entry's ordering key ("": none)
-- ARGV[11+2k]  its message id
-- ARGV[12+2k ..]  field, value pairs of the envelope to write
-- A dead letter hands its ordering key on, as ack_ordered.lua does; a retry keeps it (the
-- key's later messages wait for the retries).
--
-- Returns 1 when settled, 0 when the entry is no longer pending for this instance (its
-- lease expired and another instance owns it now: that instance settles it instead).
-- A key of the wrong type is refused (WRONGTYPE) before anything is written: Redis does
-- not undo a script's earlier writes, and the entry must stay pending rather than be
-- acknowledged without its retry or dead letter. So is, for an ordered consumer's dead
-- letter, what handing its key on reads (as in ack_ordered.lua: PROTOCOL.md, "What the
-- scripts check"): an error reply "REDISQ_CORRUPT key <key> holds ...", nothing written.

-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script fail.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end

local group, consumer, id, mode = ARGV[2], ARGV[3], ARGV[4], ARGV[6]

local pending = redis.call('XPENDING', KEYS[1], group, id, id, 1)
if #pending == 0 then return 0 end
if consumer ~= '' and pending[1][2] ~= consumer then return 0 end

-- Where the event's and the envelope's arguments are; an ordered consumer's come between.
local first, k, ordered = 8, 0, nil
if #KEYS >= 4 then
  k = tonumber(ARGV[8])
  first = 9 + 2 * k
  if KEYS[5] then
    ordered = {prefix = ARGV[first], key = ARGV[first + 1], mid = ARGV[first + 2]}
    first = first + 3
  end
end
local holders, direct, held_back = KEYS[5], KEYS[6], KEYS[7]
local prefix = ordered and ordered.prefix

-- >>> foreign state (the same words in every ordered script; PROTOCOL.md, "What the
-- scripts check"). What a call reads but did not write is checked before its first write:
-- Redis does not undo a script's earlier writes, so a value refused half-way would lose
-- or duplicate a message. A check returns an error reply naming the key, or nil.
local function corrupt(key, found, wanted)
  local function shown(text)
    return (string.gsub(string.sub(text, 1, 300), '%c', '?'))
  end
  return redis.error_reply('REDISQ_CORRUPT key ' .. shown(key) .. ' holds ' .. shown(found)
    .. ', not ' .. wanted .. ": only redisq's scripts write it. Nothing was done: repair "
    .. 'it as PROTOCOL.md says ("What the scripts check"), then call again')
end
local function check_type(key, wanted)
  local found = redis.call('TYPE', key)['ok']
  if found == 'none' or found == wanted then return nil end
  return corrupt(key, 'a ' .. found, 'a ' .. wanted)
end
-- A count of messages (held_back): absent, or a whole number as INCR and DECR take it.
local function check_count(key)
  local refused = check_type(key, 'string')
  if refused then return refused end
  local value = redis.call('GET', key)
  if not value or value == '0' or (#value <= 18 and string.match(value, '^%-?[1-9]%d*$')) then
    return nil
  end
  return corrupt(key, "'" .. value .. "'", 'a whole number of messages')
end
-- <<< foreign state

local wanted = {{KEYS[2], 'zset'}, {KEYS[3], 'stream'}, {KEYS[4], 'stream'}}
for _, key in ipairs(wanted) do
  if key[1] then
    local found = redis.call('TYPE', key[1])['ok']
    if found ~= 'none' and found ~= key[2] then
      return redis.error_reply('WRONGTYPE ' .. key[1] .. ' holds a ' .. found ..
        ', not a ' .. key[2] .. '; nothing was settled')
    end
  end
end

-- An ordered consumer's dead letter hands its key on to the next message of the key's
-- waiting list (or frees it), as ack_ordered.lua does for a handled message.
-- >>> ordered hand-over (the same text in ack_ordered.lua and fail.lua). It uses the
-- script's locals `holders`, `direct`, `held_back` (keys) and `prefix` (of the waiting
-- lists: the list of ordering key k is prefix .. k).

-- The fields of a waiting list's member (a JSON object of at most 1000 string values, as
-- read_ordered.lua writes it) and its message id; nil for anything else, which is handed
-- on whole as `raw` (its reader makes it a dead letter, undecodable): never re-encoded.
local function fields_of(member)
  local ok, decoded = pcall(cjson.decode, member)
  if not ok or type(decoded) ~= 'table' or type(decoded.id) ~= 'string' then return nil end
  local flat = {}
  for k, v in pairs(decoded) do
    if type(v) ~= 'string' or #flat >= 2000 then return nil end
    flat[#flat + 1] = k
    flat[#flat + 1] = v
  end
  return flat, decoded.id
end

-- Before the first write: what handing on key `key` (held by message `mid`) reads.
local function check_hand_on(key, mid)
  local refused = check_type(holders, 'hash') or check_type(direct, 'stream')
  if refused or key == '' or redis.call('HGET', holders, key) ~= mid then return refused end
  return check_count(held_back) or check_type(prefix .. key, 'list')
end

-- Key `key`, held by message `mid`, passes to the next message of its list (or is freed).
local function hand_on(key, mid)
  if redis.call('HGET', holders, key) ~= mid then return end
  local list = prefix .. key
  for _ = 1, 100 do
    local member = redis.call('LPOP', list)
    if not member then break end
    redis.call('DECR', held_back)
    local fields, id = fields_of(member)
    if fields then
      redis.call('XADD', direct, '*', unpack(fields))
      redis.call('HSET', holders, key, id)
      return
    end
    -- Not ours (another client's): delivered as is, dead-lettered as undecodable.
    redis.call('XADD', direct, '*', 'raw', member)
  end
  redis.call('HDEL', holders, key)
end
-- <<< ordered hand-over

if ordered and mode ~= 'retry' then
  local refused = check_hand_on(ordered.key, ordered.mid)
  if refused then return refused end
end

local due = ARGV[7]
if mode == 'retry' and string.sub(due, 1, 1) == '+' then
  -- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
  redis.replicate_commands()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  due = string.format('%d', now + tonumber(string.sub(due, 2)))
end

if #KEYS >= 4 then
  local event_end = 8 + 2 * k  -- the event's last ARGV (an ordered consumer's args follow)
  if k > 0 then
    -- The event as given, but its `next_due`: a `retried` event's is the due time above.
    local event, retried = {}, false
    for i = 9, event_end, 2 do
      if ARGV[i] ~= 'next_due' then
        event[#event + 1] = ARGV[i]
        event[#event + 1] = ARGV[i + 1]
      end
      if ARGV[i] == 'e' and ARGV[i + 1] == 'retried' then retried = true end
    end
    if retried and mode == 'retry' then
      event[#event + 1] = 'next_due'
      event[#event + 1] = due
    end
    redis.call('XADD', KEYS[4], '*', unpack(event))
  end
end

redis.call('XACK', KEYS[1], group, id)
if ARGV[5] == '1' then redis.call('XDEL', KEYS[1], id) end

if mode == 'retry' then
  local envelope = {}
  for i = first, #ARGV, 2 do envelope[ARGV[i]] = ARGV[i + 1] end
  redis.call('ZADD', KEYS[2], due, cjson.encode(envelope))
else
  redis.call('XADD', KEYS[3], '*', unpack(ARGV, first))
  if ordered and ordered.key ~= '' then hand_on(ordered.key, ordered.mid) end
end
return 1
