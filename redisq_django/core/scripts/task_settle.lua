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
-- ARGV[1]  group name
-- ARGV[2]  consumer (instance) that holds the entry; "" skips the ownership check
-- ARGV[3]  entry id
-- ARGV[4]  "1" when KEYS[1] is the direct stream (the entry is deleted after acking),
--          else "0"
-- ARGV[5]  "ack", "retry" or "dead"
-- ARGV[6]  for "retry": "+<ms>", due that many ms after now by Redis's clock (TIME)
-- ARGV[7]  when the result expires, ms since the epoch (PEXPIREAT; its index score)
-- ARGV[8]  result id
-- ARGV[9]  an error to append to the result's JSON array `errors` (a JSON object), or ""
-- ARGV[10] k: how many field, value pairs of the result to set
-- ARGV[11 .. 10+2k]  those pairs (status, finished_at, return_value...)
-- Without KEYS[7]:
-- ARGV[11+2k ..]     the envelope's field, value pairs: the retry member or dead entry
-- With KEYS[7] (history on):
-- ARGV[11+2k]        j: how many field, value pairs the event has
-- ARGV[12+2k .. 11+2k+2j]  the event's pairs (`handled`, `retried` or `dead`, as ack.lua
--                    and fail.lua write them), appended to KEYS[7] when settled; a
--                    `next_due` field gets the retry's due time by Redis's clock
-- ARGV[12+2k+2j ..]  the envelope's field, value pairs
--
-- Returns 1 when settled, 0 when the entry is no longer pending for this consumer (its
-- lease expired and another instance runs it now): then nothing is written, so a result
-- never says SUCCESSFUL or FAILED for a message still to be handled, nor the reverse,
-- and no event is written without its settle.

local group, consumer, id = ARGV[1], ARGV[2], ARGV[3]
local pending = redis.call('XPENDING', KEYS[1], group, id, id, 1)
if #pending == 0 then return 0 end
if consumer ~= '' and pending[1][2] ~= consumer then return 0 end

local mode = ARGV[5]
local due = ARGV[6]
if mode == 'retry' then
  -- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
  redis.replicate_commands()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  due = tostring(now + tonumber(string.sub(due, 2)))
end

local k = tonumber(ARGV[10])
local last = 10 + 2 * k
local first = last + 1 -- the envelope's first field
if KEYS[7] then
  local j = tonumber(ARGV[last + 1])
  first = last + 2 + 2 * j
  if j > 0 then
    local event = {unpack(ARGV, last + 2, first - 1)}
    for i = 1, #event, 2 do
      if event[i] == 'next_due' and mode == 'retry' then event[i + 1] = due end
    end
    redis.call('XADD', KEYS[7], '*', unpack(event))
  end
end

redis.call('XACK', KEYS[1], group, id)
if ARGV[4] == '1' then redis.call('XDEL', KEYS[1], id) end
redis.call('ZREM', KEYS[6], (ARGV[4] == '1' and 'direct:' or 'log:') .. id)
if mode == 'retry' then
  local envelope = {}
  for i = first, #ARGV, 2 do envelope[ARGV[i]] = ARGV[i + 1] end
  redis.call('ZADD', KEYS[2], due, cjson.encode(envelope))
elseif mode == 'dead' then
  redis.call('XADD', KEYS[3], '*', unpack(ARGV, first))
end

if ARGV[9] ~= '' then
  local raw = redis.call('HGET', KEYS[4], 'errors')
  local errors = (raw and raw ~= '[]') and cjson.decode(raw) or {}
  errors[#errors + 1] = cjson.decode(ARGV[9])
  redis.call('HSET', KEYS[4], 'errors', cjson.encode(errors))
end
if k > 0 then redis.call('HSET', KEYS[4], unpack(ARGV, 11, last)) end
if mode == 'retry' then redis.call('HDEL', KEYS[4], 'finished_at') end
redis.call('PEXPIREAT', KEYS[4], ARGV[7])
redis.call('ZADD', KEYS[5], ARGV[7], ARGV[8])
return 1
