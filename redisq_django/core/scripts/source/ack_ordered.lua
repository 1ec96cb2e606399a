-- ack_ordered.lua: acknowledge handled messages of an ordered consumer, handing each
-- one's ordering key on to the next message of that key.
--
--#include settle_layout
-- ack_ordered.lua takes none. ARGV[4] is needed: the consumer is ordered.
--
-- Each entry is acknowledged (a direct one also deleted). When it was still pending and
-- holds its ordering key, the key passes to the first message of its waiting list, which
-- is added to the direct stream (the consumer's private input), or is freed when the list
-- is empty. An entry no longer pending was settled elsewhere: skipped, key untouched.
-- With an event (history on), a `handled` event as ack.lua writes it.
-- Returns the number of entries acknowledged.
--
-- Before acknowledging anything, what the hand-ons will read is checked (PROTOCOL.md,
-- "What the scripts check"): KEYS[5] a hash, KEYS[2] a stream, KEYS[7] a stream (with an
-- event), and for a key the entry holds, KEYS[6] a whole number and the key's waiting
-- list a list. Anything else is refused with an error reply "REDISQ_CORRUPT key <key>
-- holds ..." and nothing is written. A waiting member that is no JSON object of strings
-- with an `id` is handed on whole, as the single field `raw` (its reader makes it a dead
-- letter, undecodable).

--#include protocol

--#include settle

--#include handled_records

local holders, held_back = KEYS[5], KEYS[6]
if prefix == '' then
  return redis.error_reply('ERR ack_ordered.lua settles an ordered consumer: pass the '
    .. 'prefix of its waiting lists as ARGV[4] (PROTOCOL.md, "The settle layout")')
end

--#include foreign_state

--#include hand_over

-- Every entry's hand-on (and the events stream) is checked before the first
-- acknowledgement.
if k > 0 then
  local refused = check_type(events, 'stream')
  if refused then return refused end
end
for i = 1, m do
  local _, _, mid, key = entry(i)
  local refused = check_hand_on(key, mid)
  if refused then return refused end
end

local acked, skipped = 0, {}
for i = 1, m do
  local stream, id, mid, key = entry(i)
  if acknowledge(stream, id) == 1 then
    acked = acked + 1
    if key ~= '' then hand_on(key, mid) end
  else
    skipped[i] = true
  end
end

if acked == m then
  write_event()  -- as given (none without history)
elseif acked > 0 and k > 0 then
  write_event('m', acknowledged(event_field('m'), skipped))
end
return acked
