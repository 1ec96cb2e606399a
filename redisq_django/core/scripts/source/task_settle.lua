-- task_settle.lua: settle a delivery of a Django task together with its result: ack it
-- (SUCCESSFUL), schedule a retry (READY) or make it a dead letter (FAILED).
--
--#include settle_layout
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

--#include protocol

--#include clock

--#include settle

--#include settle_failure

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
