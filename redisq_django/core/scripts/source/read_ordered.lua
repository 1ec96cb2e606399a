-- read_ordered.lua: receive new entries for an instance of an ordered consumer, letting
-- out at most one message of each ordering key at a time.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- KEYS[3]  hash    redisq:{q}:g:<g>:holders   field = ordering key, value = the id of the
--                  message that holds it (delivered, retrying, or handed on to KEYS[2])
-- KEYS[4]  string  redisq:{q}:g:<g>:held_back  how many messages the waiting lists hold
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  instance name (the Redis consumer it reads as)
-- ARGV[4]  at most this many entries are read from each stream
-- KEYS[5]  hash    redisq:{q}:g:<g>:ended  (optional) log entries an operator ended
--                  before the group read them (end_waiting.lua)
-- ARGV[5]  the prefix of the waiting lists, "redisq:{q}:g:<g>:waiting:": the list of
--          ordering key k is ARGV[5] .. k (same hash tag: same slot as KEYS)
--
-- Reads new entries (XREADGROUP ... STREAMS log direct > >, never blocking). An entry
-- without a `key` field (or with an empty one: undecodable) is delivered. An entry whose key no message holds, or which holds
-- its key itself (a retry, a re-delivery), is delivered and holds its key. Any other
-- entry waits: its envelope (a JSON object of its fields, with `id` = the entry id when
-- it has none) goes to the end of its key's list, and it is acknowledged (and deleted,
-- from the direct stream) in the same call. ack_ordered.lua and fail.lua hand a key on
-- to the first message of its list when its holder is settled.
--
-- With KEYS[5], a log entry marked there is delivered as if it had no key (it neither
-- takes nor waits for one): its instance makes it a dead letter or acknowledges it
-- without running it (ended_marks.lua), and the key's other messages keep their order.
--
-- Returns {log entries, direct entries, entries read, log last id, direct last id}: the
-- entries delivered, each {id, {field, value, ...}}; how many were read in all (delivered
-- or set waiting); and for a stream read to its end, the id of its last entry ("0-0":
-- empty), from which XREAD BLOCK waits for new ones (else "": read again at once). With
-- KEYS[5], a sixth element: 1 when KEYS[5] exists (some entry is marked), else 0.
--
-- What it reads but did not write is checked (PROTOCOL.md, "What the scripts check"):
-- KEYS[3] a hash and KEYS[4] a whole number, before reading; the waiting list an entry
-- goes to a list, before any write but the read itself. Anything else is refused with an
-- error reply "REDISQ_CORRUPT key <key> holds ...": nothing is read, or (a waiting list)
-- the entries read stay pending for the instance and come back after the visibility
-- timeout, as a crashed instance's do; none is set waiting or lost.

--#include protocol

-- Redis 6.2 counts XREADGROUP as non-deterministic: writes after it need this (7+: no-op).
redis.replicate_commands()
local group, consumer, count, prefix = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local holders, held_back = KEYS[3], KEYS[4]
local call = redis.call

--#include foreign_state

local refused = check_type(holders, 'hash') or check_count(held_back)
if refused then return refused end
local ended = KEYS[5]
local marked = false
if ended then
  refused = check_type(ended, 'hash')
  if refused then return refused end
  marked = call('EXISTS', ended) == 1
end

local reply = call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count,
  'STREAMS', KEYS[1], KEYS[2], '>', '>')
local by_stream = {}
if reply then
  for _, s in ipairs(reply) do by_stream[s[1]] = s[2] end
end

-- First what each entry does, and a check of each waiting list it goes to (XREADGROUP
-- is the only write so far); then the writes.
local plans, taken, checked = {{}, {}}, {}, {}
for s = 1, 2 do
  for _, e in ipairs(by_stream[KEYS[s]] or {}) do
    local fields, key, mid = e[2], nil, e[1]
    if type(fields) == 'table' then
      for i = 1, #fields, 2 do
        if fields[i] == 'key' and fields[i + 1] ~= '' then key = fields[i + 1] end
        if fields[i] == 'id' then mid = fields[i + 1] end
      end
    end
    if marked and s == 1 and call('HEXISTS', ended, e[1]) == 1 then key = nil end
    local holder = key and (taken[key] or call('HGET', holders, key))
    local waits = key and holder and holder ~= mid
    if waits and not checked[key] then
      refused = check_type(prefix .. key, 'list')
      if refused then return refused end
      checked[key] = true
    end
    if key and not holder then taken[key] = mid end
    plans[s][#plans[s] + 1] = {e, key, mid, waits, key and not holder}
  end
end

local out, read, last = {{}, {}}, 0, {'', ''}
for s = 1, 2 do
  for _, plan in ipairs(plans[s]) do
    read = read + 1
    local e, key, mid, waits, takes = plan[1], plan[2], plan[3], plan[4], plan[5]
    local entry_id, fields = e[1], e[2]
    if not waits then
      if takes then call('HSET', holders, key, mid) end
      out[s][#out[s] + 1] = e
    else
      local envelope = {id = mid}
      for i = 1, #fields, 2 do envelope[fields[i]] = fields[i + 1] end
      call('RPUSH', prefix .. key, cjson.encode(envelope))
      call('INCR', held_back)
      call('XACK', KEYS[s], group, entry_id)
      if s == 2 then call('XDEL', KEYS[s], entry_id) end
    end
  end
  if #plans[s] < count then
    local tail = call('XREVRANGE', KEYS[s], '+', '-', 'COUNT', 1)
    last[s] = tail[1] and tail[1][1] or '0-0'
  end
end
if ended then return {out[1], out[2], read, last[1], last[2], marked and 1 or 0} end
return {out[1], out[2], read, last[1], last[2]}
