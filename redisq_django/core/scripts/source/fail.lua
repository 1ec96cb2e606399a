-- fail.lua: settle a failed delivery: schedule a retry or make it a dead letter.
--
--#include settle_layout
-- ARGV[a]    "retry" or "dead" (a = 7+4m+2k; fail.lua settles one entry: m = 1)
-- ARGV[a+1]  when the retry is due (ignored for "dead"): "+<ms>" (what our code sends):
--            that many ms after now by Redis's own clock (TIME), never the caller's; or
--            a due time, ms since the epoch ("0": at once, a release)
-- ARGV[a+2 ..]  field, value pairs of the envelope to write (retry member or dead entry)
-- A `retried` event (mode "retry") gets `next_due` from the script: the retry's due time
-- (ms, by Redis's clock with "+<ms>"); a `next_due` the caller passes is dropped.
--
-- An ordered consumer's dead letter (ARGV[4] given) hands its ordering key on, as
-- ack_ordered.lua does; a retry keeps it (the key's later messages wait for the retries).
--
-- Returns 1 when settled, 0 when the entry is no longer pending for this instance (its
-- lease expired and another instance owns it now: that instance settles it instead).
-- A key of the wrong type is refused (WRONGTYPE) before anything is written: Redis does
-- not undo a script's earlier writes, and the entry must stay pending rather than be
-- acknowledged without its retry or dead letter. So is, for an ordered consumer's dead
-- letter, what handing its key on reads (as in ack_ordered.lua: PROTOCOL.md, "What the
-- scripts check"): an error reply "REDISQ_CORRUPT key <key> holds ...", nothing written.

--#include protocol

--#include clock

--#include settle

--#include settle_failure

if m ~= 1 then
  return redis.error_reply('ERR fail.lua settles one entry, not ' .. tostring(ARGV[5])
    .. ' (PROTOCOL.md, "The settle layout")')
end
local retry = ARGV[own_at] == 'retry'
local due, first = ARGV[own_at + 1], own_at + 2  -- first: the envelope's first field
local stream, id, mid, key = entry(1)
if not held(stream, id) then return 0 end

local holders, held_back = KEYS[5], KEYS[6]
local ordered = prefix ~= ''

--#include foreign_state

--#include hand_over

local wanted = {{KEYS[3], 'zset'}, {KEYS[4], 'stream'}, {k > 0 and events, 'stream'}}
for _, pair in ipairs(wanted) do
  if pair[1] then
    local found = redis.call('TYPE', pair[1])['ok']
    if found ~= 'none' and found ~= pair[2] then
      return redis.error_reply('WRONGTYPE ' .. pair[1] .. ' holds a ' .. found ..
        ', not a ' .. pair[2] .. '; nothing was settled')
    end
  end
end

-- An ordered consumer's dead letter hands its key on to the next message of the key's
-- waiting list (or frees it), as ack_ordered.lua does for a handled message.
if ordered and not retry then
  local refused = check_hand_on(key, mid)
  if refused then return refused end
end

if retry and string.sub(due, 1, 1) == '+' then
  -- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
  redis.replicate_commands()
  due = time_of(due)
end

write_event('next_due', retry and event_field('e') == 'retried' and due)
acknowledge(stream, id)
write_failure(retry, due, first)
if ordered and not retry and key ~= '' then hand_on(key, mid) end
return 1
