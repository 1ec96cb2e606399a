-- Assembled from source/task_settle.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- task_settle.lua: settle a delivery of a Django task together with its result: ack it
-- (SUCCESSFUL), schedule a retry (READY) or make it a dead letter (FAILED).
--
-- >>> fragments/settle_layout.lua (shared; assembled into this script)
-- The settle layout: the KEYS and ARGV of every settling script (ack.lua, ack_ordered.lua,
-- fail.lua, task_settle.lua; PROTOCOL.md, "The settle layout"). Every one of these keys
-- is passed in every call, used or not: one layout, and one slot (they share the tag).
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct     the group's private input
-- KEYS[3]  zset    redisq:{q}:g:<g>:retry      member = envelope as JSON, score = due ms
-- KEYS[4]  stream  redisq:{q}:g:<g>:dead
-- KEYS[5]  hash    redisq:{q}:g:<g>:holders    an ordered consumer's: ordering key -> the
--                  message holding it (see read_ordered.lua)
-- KEYS[6]  string  redisq:{q}:g:<g>:held_back  how many messages its waiting lists hold
-- KEYS[7]  stream  redisq:{q}:events           written only when the call has an event
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  the instance that settles: fail.lua and task_settle.lua settle an entry only
--          while it is pending for this instance ("" skips that check)
-- ARGV[4]  an ordered consumer's prefix of its waiting lists, "redisq:{q}:g:<g>:waiting:"
--          (the list of ordering key k is ARGV[4] .. k, in the same slot); "" for a
--          consumer that is not ordered (nothing is handed on)
-- ARGV[5]  m: how many entries follow
-- ARGV[6 .. 5+4m]  per entry: "log" or "direct" (the stream it was read from), its entry
--          id, its message id (its `id` field as stored, else the entry id) and its
--          ordering key as stored ("": none); only an ordered consumer's settles read
--          those two: any other consumer may pass "" for both
-- ARGV[6+4m]  k: how many field, value pairs the settle's lifecycle event has (0: no
--          event, history off)
-- ARGV[7+4m .. 6+4m+2k]  the event's pairs (PROTOCOL.md, "Lifecycle events"), written to
--          KEYS[7] when the call settles anything, with the fields the script knows
--          better (below) written by the script, last
-- ARGV[7+4m+2k ..]  the script's own arguments, if any:
-- <<< fragments/settle_layout.lua
-- ARGV[a]    "ack", "retry" or "dead" (a = 7+4m+2k; one entry: m = 1)
-- ARGV[a+1]  for "retry": when it is due, "+<ms>" (what our code sends), that many ms
--            after now by Redis's clock (TIME), or a due time in ms; for "ack" and
--            "dead": "" (ignored)
-- ARGV[a+2]  when the result expires: "+<ms>" (what our code sends), that long after
--            now by Redis's own clock (TIME); or a time, ms since the epoch. PEXPIREAT,
--            and its score in KEYS[9]
-- ARGV[a+3]  result id
-- ARGV[a+4]  an error to append to the result's JSON array `errors` (a JSON object), or ""
-- ARGV[a+5]  r: how many field, value pairs of the result to set
-- ARGV[a+6 .. a+5+2r]  those pairs (status, finished_at, return_value...)
-- ARGV[a+6+2r ..]      the envelope's field, value pairs: the retry member or dead entry
-- and three keys of its own after the settle layout's:
-- KEYS[8]  hash    redisq:{q}:result:<id>   the task's result
-- KEYS[9]  zset    redisq:{q}:results       result ids, score = expiry (ms)
-- KEYS[10] zset    redisq:{q}:g:<g>:leases  the delivery's own lease, if any, ends here
-- The event (history on) is `handled`, `retried` or `dead`, as ack.lua and fail.lua
-- write them; a `retried` event gets `next_due` from the script, the retry's due time
-- (ms, by Redis's clock with "+<ms>"); a `next_due` the caller passes is dropped.
--
-- Returns 1 when settled, 0 when the entry is no longer pending for this instance (its
-- lease expired and another instance runs it now): then nothing is written, so a result
-- never says SUCCESSFUL or FAILED for a message still to be handled, nor the reverse,
-- and no event is written without its settle.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script task_settle.lua speaks redisq/2, '
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

-- >>> fragments/settle.lua (shared; assembled into this script)
-- The settle layout, read (see the header): its keys, its head, where the entries, the
-- event and the script's own arguments are; and what every settling script does with
-- them.
local log, direct, events = KEYS[1], KEYS[2], KEYS[7]
local group, instance, prefix = ARGV[2], ARGV[3], ARGV[4]
local m = tonumber(ARGV[5])
local event_at = 6 + 4 * m            -- k, then the event's pairs
local k = tonumber(ARGV[event_at])
local own_at = event_at + 1 + 2 * k   -- the script's own arguments

-- Entry i: the stream it came from (its key), its entry id, message id and ordering key.
local function entry(i)
  local at = 2 + 4 * i
  return (ARGV[at] == 'log' and log or direct), ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
end

-- The value of the event's field `name` as the caller gave it, or nil.
local function event_field(name)
  for i = event_at + 1, own_at - 1, 2 do
    if ARGV[i] == name then return ARGV[i + 1] end
  end
  return nil
end

-- Write the event (none when k = 0): its pairs as given, but `field` (if any), which
-- the script knows better: left out where given and, unless `value` is false, written
-- last with `value` (a retry's `next_due`, the due time it made by Redis's clock; a
-- `handled` event's `m` with the records of the entries it acknowledged).
local function write_event(field, value)
  if k == 0 then return end
  if not field then
    redis.call('XADD', events, '*', unpack(ARGV, event_at + 1, own_at - 1))
    return
  end
  local event = {}
  for i = event_at + 1, own_at - 1, 2 do
    if ARGV[i] ~= field then
      event[#event + 1] = ARGV[i]
      event[#event + 1] = ARGV[i + 1]
    end
  end
  if value then
    event[#event + 1] = field
    event[#event + 1] = value
  end
  redis.call('XADD', events, '*', unpack(event))
end

-- Acknowledge entry `id` of `stream` (and delete it from the direct stream, which only
-- holds work): 1 when it was pending, else 0.
local function acknowledge(stream, id)
  local acked = redis.call('XACK', stream, group, id)
  if acked == 1 and stream == direct then redis.call('XDEL', direct, id) end
  return acked
end
-- <<< fragments/settle.lua

-- >>> fragments/settle_failure.lua (shared; assembled into this script)
-- What fail.lua and task_settle.lua share beyond the settle layout: the ownership check
-- and the failed delivery's next place.
-- Whether entry `id` of `stream` is still pending for the instance of ARGV[3] (any, for
-- ""): one whose lease expired and that another instance took over is settled by that
-- one, and this call writes nothing.
local function held(stream, id)
  local pending = redis.call('XPENDING', stream, group, id, id, 1)
  if #pending == 0 then return false end
  return instance == '' or pending[1][2] == instance
end

-- A failed delivery's next place: with `retry`, the retry member due at `due` (the
-- envelope's pairs from ARGV[first] as one JSON object), else the dead letter (those
-- pairs as its fields).
local function write_failure(retry, due, first)
  if retry then
    local envelope = {}
    for i = first, #ARGV, 2 do envelope[ARGV[i]] = ARGV[i + 1] end
    redis.call('ZADD', KEYS[3], due, cjson.encode(envelope))
  else
    redis.call('XADD', KEYS[4], '*', unpack(ARGV, first))
  end
end
-- <<< fragments/settle_failure.lua

local result, results, leases = KEYS[8], KEYS[9], KEYS[10]
local stream, id = entry(1)
if not held(stream, id) then return 0 end

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local mode = ARGV[own_at]
local due = mode == 'retry' and time_of(ARGV[own_at + 1]) or ARGV[own_at + 1]
local expire_at = time_of(ARGV[own_at + 2])
local result_id, error_json = ARGV[own_at + 3], ARGV[own_at + 4]
local r = tonumber(ARGV[own_at + 5])
local last = own_at + 5 + 2 * r  -- the result's last pair; the envelope's follow

write_event('next_due', mode == 'retry' and event_field('e') == 'retried' and due)
acknowledge(stream, id)
redis.call('ZREM', leases, (stream == direct and 'direct:' or 'log:') .. id)
if mode == 'retry' or mode == 'dead' then write_failure(mode == 'retry', due, last + 1) end

if error_json ~= '' then
  local raw = redis.call('HGET', result, 'errors')
  local errors = (raw and raw ~= '[]') and cjson.decode(raw) or {}
  errors[#errors + 1] = cjson.decode(error_json)
  redis.call('HSET', result, 'errors', cjson.encode(errors))
end
if r > 0 then redis.call('HSET', result, unpack(ARGV, own_at + 6, last)) end
if mode == 'retry' then redis.call('HDEL', result, 'finished_at') end
redis.call('PEXPIREAT', result, expire_at)
redis.call('ZADD', results, expire_at, result_id)
return 1
