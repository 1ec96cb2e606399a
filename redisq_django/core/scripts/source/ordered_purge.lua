-- ordered_purge.lua: after a purge of an ordered consumer's waiting work, drop the
-- messages waiting behind its ordering keys and free every key no message in flight holds.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- KEYS[3]  hash    redisq:{q}:g:<g>:holders   (see read_ordered.lua)
-- KEYS[4]  string  redisq:{q}:g:<g>:held_back  how many messages the waiting lists hold
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  the prefix of the waiting lists, "redisq:{q}:g:<g>:waiting:"
-- ARGV[4]  at most this many in-flight entries are looked at per stream (bounds the call)
--
-- A purge removes retries and undelivered private input (purge_consumer.lua), or every
-- message (a queue's purge): a key held by such a message would hold back its key's later
-- messages for ever. A key held by a message still in flight (pending for the group: its
-- instance settles it, or another takes it over) stays held, so nothing of that key runs
-- beside it; its waiting list is dropped like the others (purged work).
-- Returns {keys freed, waiting messages dropped}.
--
-- Before anything is deleted, KEYS[3] must be a hash and each waiting list a list
-- (PROTOCOL.md, "What the scripts check"); else an error reply "REDISQ_CORRUPT key <key>
-- holds ..." and nothing is done. KEYS[4] is deleted, never read.

--#include protocol

local call = redis.call
local group, prefix, limit = ARGV[2], ARGV[3], tonumber(ARGV[4]) or 0
local holders = KEYS[3]

--#include foreign_state

-- The holders, and the waiting list of each, before anything is deleted.
local refused = check_type(holders, 'hash')
if refused then return refused end
local held = call('HGETALL', holders)
for i = 1, #held, 2 do
  refused = check_type(prefix .. held[i], 'list')
  if refused then return refused end
end

-- The message ids in flight: the `id` field of each pending entry, else its entry id.
local in_flight = {}
for s = 1, 2 do
  local ok, pending = pcall(call, 'XPENDING', KEYS[s], group, '-', '+', limit)
  if ok then  -- no stream or no group: nothing in flight there
    for _, p in ipairs(pending) do
      local mid = p[1]
      local found = call('XRANGE', KEYS[s], p[1], p[1])
      if found[1] then
        local fields = found[1][2]
        for i = 1, #fields, 2 do
          if fields[i] == 'id' then mid = fields[i + 1] end
        end
      end
      in_flight[mid] = true
    end
  end
end

local freed, dropped = 0, 0
for i = 1, #held, 2 do
  local key, holder = held[i], held[i + 1]
  dropped = dropped + call('LLEN', prefix .. key)
  call('DEL', prefix .. key)
  if not in_flight[holder] then
    call('HDEL', KEYS[3], key)
    freed = freed + 1
  end
end
call('DEL', KEYS[4])  -- every waiting list is gone
return {freed, dropped}
