-- end_message.lua: end one message before its time, an operator's action on a poison
-- message: take it from where it waits and make it a dead letter of each consumer given
-- (or of none: deleted). An ordered consumer's key it holds passes to the key's next
-- message, as when the message dies by its retries (fail.lua).
--
-- KEYS[1]  zset or stream  where it waits: redisq:{q}:delayed, redisq:{q}:g:<g>:retry,
--                          or redisq:{q}:g:<g>:direct (the private input, not yet read)
-- KEYS[2]  hash    redisq:{q}:g:<g>:holders    (an ordered consumer's; any key otherwise)
-- KEYS[3]  stream  redisq:{q}:g:<g>:direct
-- KEYS[4]  string  redisq:{q}:g:<g>:held_back
-- KEYS[5 ..]  stream  the dead streams (redisq:{q}:g:<g>:dead) its dead letter goes to;
--             none: the message is deleted
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the member, exactly as stored (a set), or the entry id (the private input)
-- ARGV[3]  the group whose private input KEYS[1] is ("" for a set)
-- ARGV[4]  the prefix of the waiting lists, "redisq:{q}:g:<g>:waiting:" ("": not ordered)
-- ARGV[5]  its ordering key ("": none)
-- ARGV[6]  its message id (what holders records)
-- ARGV[7 ..]  the consumer (group) of each dead stream of KEYS[5 ..], in their order;
--             then field, value pairs of its dead letter, whose `group` field each dead
--             stream's copy gets the name of its own consumer in
--
-- Returns 1 when ended; 0 when it no longer waits there (it came due, was delivered now,
-- or ended by someone else); -1 when the private input's entry was read already (it is
-- in flight: its instance settles it). What it reads is checked before the first write
-- (PROTOCOL.md, "What the scripts check"): REDISQ_CORRUPT, nothing done.

--#include protocol

local place, holders, direct, held_back = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local what, group, prefix, key, mid = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

--#include foreign_state

--#include hand_over

local kind = redis.call('TYPE', place)['ok']
if kind == 'none' then return 0 end
if kind ~= 'zset' and kind ~= 'stream' then return corrupt(place, 'a ' .. kind, 'a zset or a stream') end
for i = 5, #KEYS do
  local refused = check_type(KEYS[i], 'stream')
  if refused then return refused end
end
local ordered = prefix ~= '' and key ~= ''
if ordered then
  local refused = check_hand_on(key, mid)
  if refused then return refused end
end

if kind == 'zset' then
  if redis.call('ZREM', place, what) == 0 then return 0 end
else
  if #redis.call('XRANGE', place, what, what) == 0 then return 0 end
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', place)) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    if info['name'] == group then
      local last = info['last-delivered-id']
      local lms, lseq = string.match(last, '^(%d+)-(%d+)$')
      local ems, eseq = string.match(what, '^(%d+)-(%d+)$')
      lms, lseq, ems, eseq = tonumber(lms), tonumber(lseq), tonumber(ems), tonumber(eseq)
      if ems < lms or (ems == lms and eseq <= lseq) then return -1 end
    end
  end
  redis.call('XDEL', place, what)
end
local streams = #KEYS - 4
local fields = {}
for i = 7 + streams, #ARGV do fields[#fields + 1] = ARGV[i] end
for i = 1, streams do
  for f = 1, #fields, 2 do
    if fields[f] == 'group' then fields[f + 1] = ARGV[6 + i] end
  end
  redis.call('XADD', KEYS[4 + i], '*', unpack(fields))
end
if ordered then hand_on(key, mid) end
return 1
