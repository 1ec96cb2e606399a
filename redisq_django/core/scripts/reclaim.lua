-- Assembled from source/reclaim.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- reclaim.lua: take over the in-flight entries of crashed instances.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct
-- KEYS[3]  zset    redisq:{q}:g:<g>:instances   member = instance, score = heartbeat expiry ms
-- KEYS[4]  hash    redisq:{q}:g:<g>:running     field = instance, value = the entry whose
--                  handler it started last: "log:<entry id>" or "direct:<entry id>" ("":
--                  none). Optional: without it every entry taken over counts a delivery.
-- KEYS[5]  zset    redisq:{q}:g:<g>:leases      member = "log:<entry id>" or
--                  "direct:<entry id>" of a started delivery with a lease of its own (a
--                  Django task's visibility timeout, lease.lua), score = when it ends, ms.
--                  Optional (after KEYS[4]): without it no delivery has a lease of its own.
-- KEYS[6]  stream  redisq:{q}:events   (only when history is on, after KEYS[5]: one
--                  `reclaimed` event per call, listing every entry taken over)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  group name
-- ARGV[3]  instance taking the entries over (the Redis consumer it reads as)
-- ARGV[4]  visibility timeout, ms: entries idle this long are claimed
-- ARGV[5]  at most this many entries are claimed per stream
-- ARGV[6]  "" (what our code sends): heartbeat expiries are compared with Redis's own
--          clock (TIME), never the caller's; a number (ms) fixes "now" instead (tests)
-- ARGV[7]  cursor for the log: the entry id the scan of idle entries goes on from
--          ("0-0" to start; pass back what the last call replied)
-- ARGV[8]  cursor for the direct stream
--
-- First, deliveries with a lease of their own (KEYS[5]) whose lease has ended are taken
-- over, whoever holds them; each counts a delivery (it was started). Such a delivery is
-- taken over then and only then: neither an expired heartbeat of its instance nor the
-- visibility timeout of ARGV[4] applies to it.
-- Then, instances whose heartbeat expired lose their entries at once (no need to wait
-- for the visibility timeout); once they hold nothing they are removed from the group
-- (and from KEYS[3] and KEYS[4]); once they hold nothing but deliveries with a running
-- lease they are removed from KEYS[3] only, and from the group when the last of those
-- is taken over. Then entries idle longer than the visibility timeout are claimed
-- (XPENDING ... IDLE, then XCLAIM ... RETRYCOUNT).
--
-- Only started deliveries count (with KEYS[4]). An instance writes `HSET running
-- <instance> <stream>:<entry id>` before each handler starts (in the same write as its
-- previous ack, without waiting). A claimed entry counts a delivery (its delivery count
-- + 1, which the caller adds to the attempt count) only when it is the one some instance
-- recorded as started: that handler ran, and may have killed its process. Every other
-- entry was fetched and never started (or handled, its ack not yet written) and keeps
-- its count (RETRYCOUNT): a message that kills its process dies alone after
-- max_retries + 1 crashes; the rest of its batch is not touched. A used record is
-- emptied (""). Entries of a dead instance that never recorded anything (a client that
-- does not write KEYS[4]) all count, as any of them may have run.
--
-- Returns {log_cursor, direct_cursor, log_entries, direct_entries} where each entry is
-- {id, {field, value, ...}, delivery_count}. Entries deleted from the stream while
-- pending (hard cap) are acknowledged and not returned.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script reclaim.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end
-- <<< fragments/protocol.lua

-- >>> fragments/clock.lua (shared; assembled into this script)
-- Redis's clock, ms since the epoch (TIME): every "now" that decides a delivery, a lease,
-- an expiry or a tick is Redis's, never a caller's (PROTOCOL.md, "Clocks"). Read once per
-- call, and only when needed. A script calls redis.replicate_commands() before it reads
-- the clock and writes: Redis 6.2 must be told, 7 and later replicate effects anyway.
local redis_ms
local function redis_now()
  if not redis_ms then
    local t = redis.call('TIME')
    redis_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return redis_ms
end

-- A time given as "+<ms>" (that long after Redis's now: what our code sends) or as ms
-- since the epoch, as the text of a whole number of ms.
local function time_of(given)
  if string.sub(given, 1, 1) ~= '+' then return given end
  return string.format('%d', redis_now() + tonumber(string.sub(given, 2)))
end
-- <<< fragments/clock.lua

local group, me = ARGV[2], ARGV[3]
local min_idle = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local now = tonumber(ARGV[6]) or redis_now()
local streams = {KEYS[1], KEYS[2]}
local out = {{}, {}}
local records = {} -- event records of what was taken over (history on)
local history_key = KEYS[6]
local leases = KEYS[5]

-- ["<message id>",<attempt>,null] of a claimed entry: the message id is the `id` field or
-- the entry id; the attempt adds the deliveries already failed (`attempts`). An integer of
-- the envelope is 1 to 15 digits 0-9 and nothing else (PROTOCOL.md, "Envelope v1"; Lua's
-- tonumber would take " 5", "0x5" or "5e0"): any other `attempts` makes the entry
-- undecodable for its reader, and counts 0 here.
local function record(entry_id, fields, deliveries)
  local mid, done = entry_id, 0
  for i = 1, #fields, 2 do
    if fields[i] == 'id' then mid = fields[i + 1] end
    if fields[i] == 'attempts' then
      local text = fields[i + 1]
      done = (#text <= 15 and string.match(text, '^%d+$')) and tonumber(text) or 0
    end
  end
  return '[' .. cjson.encode(mid) .. ',' .. string.format('%d', done + deliveries) .. ',null]'
end

-- Who started which entry: "log:<id>" / "direct:<id>" -> instance (read once, if needed).
local running = KEYS[4]
local tags = {'log:', 'direct:'}
local started_by, writers = nil, nil
local function starter(tag)
  if not started_by then
    started_by, writers = {}, {}
    local all = redis.call('HGETALL', running)
    for i = 1, #all, 2 do
      writers[all[i]] = true
      if all[i + 1] ~= '' then started_by[all[i + 1]] = all[i] end
    end
  end
  return started_by[tag]
end

-- Claims entry `id` of stream s (delivery count so far: `count`) from `owner`; it counts
-- a delivery when started (recorded, or `leased`: it had a lease of its own), or when
-- `owner` records nothing (any of its entries may have run).
local function take(s, id, count, owner, leased)
  local counted = true
  if running then
    local tag = tags[s] .. id
    local by = starter(tag)
    if by then
      redis.call('HSET', running, by, '')
      started_by[tag] = nil
    elseif writers[owner] and not leased then
      counted = false
    end
  end
  if counted then count = count + 1 end
  local e = redis.call('XCLAIM', streams[s], group, me, 0, id, 'RETRYCOUNT', count)[1]
  if type(e) == 'table' and type(e[2]) == 'table' then
    local list = out[s]
    list[#list + 1] = {e[1], e[2], count}
    if history_key then records[#records + 1] = record(e[1], e[2], count) end
  else
    -- Deleted while pending (hard cap): Redis 7 drops it from the PEL, Redis 6.2 replies
    -- nil and keeps it pending. Ack it.
    redis.call('XACK', streams[s], group, id)
  end
end

-- A delivery with a lease of its own is left to step 0 until that lease ends.
local function has_lease(s, id)
  return leases and redis.call('ZSCORE', leases, tags[s] .. id)
end

-- Removes instance `name` from the group and from `running` if it holds nothing.
local function forget_if_empty(name)
  for s = 1, 2 do
    if #redis.call('XPENDING', streams[s], group, '-', '+', 1, name) > 0 then return end
  end
  for s = 1, 2 do redis.call('XGROUP', 'DELCONSUMER', streams[s], group, name) end
  if running then redis.call('HDEL', running, name) end
end

-- 0. Deliveries whose own lease ended, whoever holds them (bounded: `limit` per call).
if leases then
  local ended = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, limit)
  for _, tag in ipairs(ended) do
    local s = (string.sub(tag, 1, 4) == 'log:') and 1 or 2
    local id = string.sub(tag, #tags[s] + 1)
    if #out[s] < limit then
      redis.call('ZREM', leases, tag)
      local p = redis.call('XPENDING', streams[s], group, id, id, 1)
      if #p == 1 then
        local owner = p[1][2]
        take(s, id, p[1][4], owner, true)
        -- An instance step 1 found dead is forgotten with its last leased delivery.
        if owner ~= me and not redis.call('ZSCORE', KEYS[3], owner) then
          forget_if_empty(owner)
        end
      end
    end
  end
end

-- 1. Instances known dead: claim everything they hold, then forget them.
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. now, 'LIMIT', 0, 10)
for _, name in ipairs(dead) do
  if name ~= me then
    local holds, kept = 0, 0
    for s = 1, 2 do
      -- Bounded: never more than `limit` entries per stream in one call.
      local room = limit - #out[s]
      local leased = 0
      if room > 0 then
        local p = redis.call('XPENDING', streams[s], group, '-', '+', room, name)
        for _, row in ipairs(p) do
          if has_lease(s, row[1]) then
            leased = leased + 1
          else
            take(s, row[1], row[4], name)
          end
        end
      end
      holds = holds + #redis.call('XPENDING', streams[s], group, '-', '+', leased + 1, name)
      kept = kept + leased
    end
    if holds == 0 then
      for s = 1, 2 do redis.call('XGROUP', 'DELCONSUMER', streams[s], group, name) end
      redis.call('ZREM', KEYS[3], name)
      if running then redis.call('HDEL', running, name) end
    elseif holds == kept then
      -- Only deliveries within their own lease are left: step 0 takes them when it
      -- ends (and then forgets the instance); other dead instances come first meanwhile.
      redis.call('ZREM', KEYS[3], name)
    end
  end
end

-- 2. Entries idle past the visibility timeout, whoever holds them. XPENDING ... IDLE
-- (not XAUTOCLAIM, which forgets the holder) tells who held each: whether it counts
-- depends on that instance's record. One row more than there is room for gives the
-- cursor of the next call ("0-0": the scan is complete), as XAUTOCLAIM's would.
local cursors = {ARGV[7], ARGV[8]}
for s = 1, 2 do
  local room = limit - #out[s]
  if room > 0 then
    local p = redis.call('XPENDING', streams[s], group, 'IDLE', min_idle, cursors[s], '+',
      room + 1)
    cursors[s] = '0-0'
    if #p > room then cursors[s] = p[room + 1][1] end
    for i = 1, math.min(room, #p) do
      if not has_lease(s, p[i][1]) then take(s, p[i][1], p[i][4], p[i][2]) end
    end
  end
end
if #records > 0 then
  redis.call('XADD', history_key, '*', 'e', 'reclaimed', 'g', group, 'c', me,
    'm', '[' .. table.concat(records, ',') .. ']')
end
return {cursors[1], cursors[2], out[1], out[2]}
