-- task_settle.lua: settle a delivery of a Django task together with its result: ack it
-- (SUCCESSFUL), schedule a retry (READY) or make it a dead letter (FAILED).
--
-- KEYS[1]  stream  the stream the entry was delivered from (log or the group's direct)
-- KEYS[2]  zset    redisq:{q}:g:<g>:retry   member = envelope as JSON, score = due ms
-- KEYS[3]  stream  redisq:{q}:g:<g>:dead
-- KEYS[4]  hash    redisq:{q}:result:<id>   the task's result
-- KEYS[5]  zset    redisq:{q}:results       result ids, score = expiry (ms)
-- KEYS[6]  zset    redisq:{q}:g:<g>:leases  the delivery's own lease, if any, ends here
-- KEYS[7]  stream  redisq:{q}:events   (only when history is on; see the second layout)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  instance that holds the entry (its Redis consumer); "" skips the ownership check
-- ARGV[4]  entry id
-- ARGV[5]  "1" when KEYS[1] is the direct stream (the entry is deleted after acking),
--          else "0"
-- ARGV[6]  "ack", "retry" or "dead"
-- ARGV[7]  for "retry": when it is due, "+<ms>" (what our code sends), that many ms after
--          now by Redis's clock (TIME), or a due time in ms; for "ack" and "dead": ""
--          (ignored)
-- ARGV[8]  when the result expires: "+<ms>" (what our code sends), that long after now
--          by Redis's own clock (TIME); or a time, ms since the epoch. PEXPIREAT, and its
--          score in KEYS[5]
-- ARGV[9]  result id
-- ARGV[10] an error to append to the result's JSON array `errors` (a JSON object), or ""
-- ARGV[11] k: how many field, value pairs of the result to set
-- ARGV[12 .. 11+2k]  those pairs (status, finished_at, return_value...)
-- Without KEYS[7]:
-- ARGV[12+2k ..]     the envelope's field, value pairs: the retry member or dead entry
-- With KEYS[7] (history on):
-- ARGV[12+2k]        j: how many field, value pairs the event has
-- ARGV[13+2k .. 12+2k+2j]  the event's pairs (`handled`, `retried` or `dead`, as ack.lua
--                    and fail.lua write them), appended to KEYS[7] when settled; a
--                    `retried` event gets `next_due` here, the retry's due time (ms, by
--                    Redis's clock with "+<ms>"); a `next_due` the caller passes is dropped
-- ARGV[13+2k+2j ..]  the envelope's field, value pairs
--
-- Returns 1 when settled, 0 when the entry is no longer pending for this instance (its
-- lease expired and another instance runs it now): then nothing is written, so a result
-- never says SUCCESSFUL or FAILED for a message still to be handled, nor the reverse,
-- and no event is written without its settle.

-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script task_settle.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end

local group, consumer, id = ARGV[2], ARGV[3], ARGV[4]
local pending = redis.call('XPENDING', KEYS[1], group, id, id, 1)
if #pending == 0 then return 0 end
if consumer ~= '' and pending[1][2] ~= consumer then return 0 end

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mode = ARGV[6]
local due = ARGV[7]
if mode == 'retry' and string.sub(due, 1, 1) == '+' then
  due = string.format('%d', now + tonumber(string.sub(due, 2)))
end
local expire_at = ARGV[8]
if string.sub(expire_at, 1, 1) == '+' then
  expire_at = string.format('%d', now + tonumber(string.sub(expire_at, 2)))
end

local k = tonumber(ARGV[11])
local last = 11 + 2 * k
local first = last + 1 -- the envelope's first field
if KEYS[7] then
  local j = tonumber(ARGV[last + 1])
  first = last + 2 + 2 * j
  if j > 0 then
    -- The event as given, but its `next_due`: a `retried` event's is the due time above.
    local event, retried = {}, false
    for i = last + 2, first - 1, 2 do
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
    redis.call('XADD', KEYS[7], '*', unpack(event))
  end
end

redis.call('XACK', KEYS[1], group, id)
if ARGV[5] == '1' then redis.call('XDEL', KEYS[1], id) end
redis.call('ZREM', KEYS[6], (ARGV[5] == '1' and 'direct:' or 'log:') .. id)
if mode == 'retry' then
  local envelope = {}
  for i = first, #ARGV, 2 do envelope[ARGV[i]] = ARGV[i + 1] end
  redis.call('ZADD', KEYS[2], due, cjson.encode(envelope))
elseif mode == 'dead' then
  redis.call('XADD', KEYS[3], '*', unpack(ARGV, first))
end

if ARGV[10] ~= '' then
  local raw = redis.call('HGET', KEYS[4], 'errors')
  local errors = (raw and raw ~= '[]') and cjson.decode(raw) or {}
  errors[#errors + 1] = cjson.decode(ARGV[10])
  redis.call('HSET', KEYS[4], 'errors', cjson.encode(errors))
end
if k > 0 then redis.call('HSET', KEYS[4], unpack(ARGV, 12, last)) end
if mode == 'retry' then redis.call('HDEL', KEYS[4], 'finished_at') end
redis.call('PEXPIREAT', KEYS[4], expire_at)
redis.call('ZADD', KEYS[5], expire_at, ARGV[9])
return 1
