-- ack_ordered.lua: acknowledge handled messages of an ordered consumer, handing each
-- one's ordering key on to the next message of that key.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- KEYS[3]  hash    redisq:{q}:g:<g>:holders   (see read_ordered.lua)
-- KEYS[4]  string  redisq:{q}:g:<g>:held_back  how many messages the waiting lists hold
-- KEYS[5]  stream  redisq:{q}:events   (only when history is on)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  the prefix of the waiting lists, "redisq:{q}:g:<g>:waiting:"
-- ARGV[4]  instance (consumer) name, for the `handled` event
-- ARGV[5]  m: how many entries follow
-- ARGV[6 .. 5+4m]  per entry: "log" or "direct", entry id, message id, ordering key ("":
--                  none)
-- ARGV[6+4m]       with KEYS[5]: the event records of the entries, in the same order, as
--                  one JSON array (see ack.lua)
--
-- Each entry is acknowledged (a direct one also deleted). When it was still pending and
-- holds its ordering key, the key passes to the first message of its waiting list, which
-- is added to the direct stream (the consumer's private input), or is freed when the list
-- is empty. An entry no longer pending was settled elsewhere: skipped, key untouched.
-- Returns the number of entries acknowledged.
--
-- Before acknowledging anything, what the hand-ons will read is checked (PROTOCOL.md,
-- "What the scripts check"): KEYS[3] a hash, KEYS[2] a stream, and for a key the entry
-- holds, KEYS[4] a whole number and the key's waiting list a list. Anything else is
-- refused with an error reply "REDISQ_CORRUPT key <key> holds ..." and nothing is written.
-- A waiting member that is no JSON object of strings with an `id` is handed on whole, as
-- the single field `raw` (its reader makes it a dead letter, undecodable).

--#include protocol

local call = redis.call
local log, direct, holders, held_back = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, prefix, instance, m = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])

--#include foreign_state

--#include hand_over

-- Every entry's hand-on (and the events stream) is checked before the first
-- acknowledgement.
if KEYS[5] then
  local refused = check_type(KEYS[5], 'stream')
  if refused then return refused end
end
for i = 1, m do
  local at = 2 + 4 * i
  local refused = check_hand_on(ARGV[at + 3], ARGV[at + 2])
  if refused then return refused end
end

local acked, skipped = 0, {}
for i = 1, m do
  local at = 2 + 4 * i
  local kind, entry_id, mid, key = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  local stream = kind == 'log' and log or direct
  if call('XACK', stream, group, entry_id) == 1 then
    acked = acked + 1
    if stream == direct then call('XDEL', direct, entry_id) end
    if key ~= '' then hand_on(key, mid) end
  else
    skipped[i] = true
  end
end

if KEYS[5] and acked > 0 then
  local records = ARGV[6 + 4 * m]
  if acked < m then
    local kept = {}
    for i, record in ipairs(cjson.decode(records)) do
      if not skipped[i] then kept[#kept + 1] = record end
    end
    records = cjson.encode(kept)
  end
  call('XADD', KEYS[5], '*', 'e', 'handled', 'g', group, 'c', instance, 'm', records)
end
return acked
