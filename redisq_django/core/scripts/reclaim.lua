-- reclaim.lua: take over the in-flight entries of crashed instances.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- KEYS[3]  zset    redisq:{q}:g:<g>:instances   member = instance, score = heartbeat expiry ms
-- KEYS[4]  stream  redisq:{q}:events   (only when history is on: one `reclaimed` event per
--                  call, listing every entry taken over)
-- ARGV[1]  group name
-- ARGV[2]  consumer (instance) taking the entries over
-- ARGV[3]  visibility timeout, ms: entries idle this long are claimed
-- ARGV[4]  at most this many entries are claimed per stream
-- ARGV[5]  "" (what our code sends): heartbeat expiries are compared with Redis's own
--          clock (TIME), never the caller's; a number (ms) fixes "now" instead (tests)
-- ARGV[6]  XAUTOCLAIM cursor for the log ("0-0" to start)
-- ARGV[7]  XAUTOCLAIM cursor for the direct stream
--
-- First, instances whose heartbeat expired lose their entries at once (no need to wait
-- for the visibility timeout); once they hold nothing they are removed from the group.
-- Then entries idle longer than the visibility timeout are claimed (XAUTOCLAIM).
-- Each claim counts as a delivery (XPENDING's delivery count), which the caller adds to
-- the attempt count.
--
-- Returns {log_cursor, direct_cursor, log_entries, direct_entries} where each entry is
-- {id, {field, value, ...}, delivery_count}. Entries deleted from the stream while
-- pending (hard cap) are acknowledged and not returned.

local group, me = ARGV[1], ARGV[2]
local min_idle = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local streams = {KEYS[1], KEYS[2]}
local out = {{}, {}}
local records = {} -- event records of what was taken over (history on)

-- ["<message id>",<attempt>,null] of a claimed entry: the message id is the `id` field or
-- the entry id; the attempt adds the deliveries already failed (`attempts`).
local function record(entry_id, fields, deliveries)
  local mid, done = entry_id, 0
  for i = 1, #fields, 2 do
    if fields[i] == 'id' then mid = fields[i + 1] end
    if fields[i] == 'attempts' then done = tonumber(fields[i + 1]) or 0 end
  end
  return '[' .. cjson.encode(mid) .. ',' .. (done + deliveries) .. ',null]'
end

local function delivery_count(key, id)
  local p = redis.call('XPENDING', key, group, id, id, 1)
  if #p == 1 then return p[1][4] end
  return 1
end

-- ids: what was claimed; entries: the XCLAIM reply for them.
local function take(s, ids, entries)
  local found = {}
  for _, e in ipairs(entries) do
    if type(e) == 'table' and type(e[2]) == 'table' then
      found[e[1]] = true
      local list = out[s]
      local deliveries = delivery_count(streams[s], e[1])
      list[#list + 1] = {e[1], e[2], deliveries}
      if #KEYS >= 4 then records[#records + 1] = record(e[1], e[2], deliveries) end
    end
  end
  -- An entry deleted while pending (hard cap) is missing from the reply: Redis 7 drops
  -- it from the PEL, Redis 6.2 replies nil without its id and keeps it pending. Ack it.
  for _, id in ipairs(ids) do
    if not found[id] then redis.call('XACK', streams[s], group, id) end
  end
end

-- 1. Instances known dead: claim everything they hold, then forget them.
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. now, 'LIMIT', 0, 10)
for _, name in ipairs(dead) do
  if name ~= me then
    local holds = 0
    for s = 1, 2 do
      -- Bounded: never more than `limit` entries per stream in one call.
      local room = limit - #out[s]
      if room > 0 then
        local p = redis.call('XPENDING', streams[s], group, '-', '+', room, name)
        if #p > 0 then
          local ids = {}
          for i, row in ipairs(p) do ids[i] = row[1] end
          take(s, ids, redis.call('XCLAIM', streams[s], group, me, 0, unpack(ids)))
        end
      end
      holds = holds + #redis.call('XPENDING', streams[s], group, '-', '+', 1, name)
    end
    if holds == 0 then
      for s = 1, 2 do redis.call('XGROUP', 'DELCONSUMER', streams[s], group, name) end
      redis.call('ZREM', KEYS[3], name)
    end
  end
end

-- 2. Entries idle past the visibility timeout, whoever holds them.
local cursors = {ARGV[6], ARGV[7]}
for s = 1, 2 do
  local room = limit - #out[s]
  if room > 0 then
    -- JUSTID: the ids even of deleted entries (6.2 replies nil for those otherwise);
    -- it leaves the delivery count alone, the XCLAIM that fetches the fields counts it.
    -- (Redis >= 7 lists deleted entries in a third element, already out of the PEL.)
    local r = redis.call('XAUTOCLAIM', streams[s], group, me, min_idle, cursors[s],
      'COUNT', room, 'JUSTID')
    cursors[s] = r[1]
    if #r[2] > 0 then
      take(s, r[2], redis.call('XCLAIM', streams[s], group, me, 0, unpack(r[2])))
    end
  end
end
if #records > 0 then
  redis.call('XADD', KEYS[4], '*', 'e', 'reclaimed', 'g', group, 'c', me,
    'm', '[' .. table.concat(records, ',') .. ']')
end
return {cursors[1], cursors[2], out[1], out[2]}
