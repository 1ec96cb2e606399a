-- trim.lua: retention of a queue's log, never dropping what a consumer still needs.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  hash    redisq:{q}:meta   field "dropped" counts hard-cap drops; with history,
--                  "archive:messages" / "archive:events" hold the archive's positions
-- KEYS[3]  stream  redisq:{q}:events   (only when history is on)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  "" (what our code sends): the age limits count from Redis's own clock
--          (TIME), the clock of the entry ids; a number (ms) fixes "now" instead (tests)
-- ARGV[3]  replay window by age, ms (0: none)
-- ARGV[4]  replay window by length, entries (0: none)
-- ARGV[5]  hard cap by length, entries (0: none)
-- ARGV[6]  hard cap by age, ms (0: none)
-- ARGV[7]  at most this many entries are removed per call
--
-- Safe floor: for each consumer group, the oldest entry it still needs is the oldest
-- pending one or the first one after its last-delivered id; the floor is the minimum
-- over groups. With no group, nothing is trimmed safely (a consumer may yet start at
-- "earliest"). Entries below the floor and outside both replay windows are removed.
-- The hard caps then remove entries whatever their state; those at or above the safe
-- floor are counted in "dropped".
--
-- With history on (KEYS[3] given) the archive counts as one more consumer: nothing after
-- its position ("archive:messages"; none yet: nothing at all) is trimmed safely, and the
-- events stream is trimmed up to "archive:events" (bounded; the age cap also applies to
-- it, its drops counted in "events_dropped").
--
-- Returns {removed_safely, dropped}.

-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script trim.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end

-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local window_ms, window_len = tonumber(ARGV[3]), tonumber(ARGV[4])
local max_len, max_age = tonumber(ARGV[5]), tonumber(ARGV[6])
local batch = tonumber(ARGV[7])


-- Ids as {ms, seq} pairs; seq may exceed a double's precision only at its maximum.
local MAX_SEQ = '18446744073709551615'
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then ms, seq = id, '0' end
  return {tonumber(ms), seq == MAX_SEQ and math.huge or tonumber(seq)}
end
local function less(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end
local function min(a, b)
  if a == nil then return b end
  if b == nil then return a end
  if less(a, b) then return a end
  return b
end
local function after(id) -- the smallest id greater than id
  local p = parse(id)
  if p[2] == math.huge then return {p[1] + 1, 0} end
  return {p[1], p[2] + 1}
end
local function fmt(p) return string.format('%d-%d', p[1], p[2]) end

-- The events stream (history on): trimmed behind the archive (approximately, bounded), and
-- by the age cap, whose drops of unarchived events are counted.
local history = #KEYS >= 3
local function trim_events()
  if not history then return end
  local archived = after(redis.call('HGET', KEYS[2], 'archive:events') or '0-0')
  redis.call('XTRIM', KEYS[3], 'MINID', '~', fmt(archived), 'LIMIT', batch)
  if max_age > 0 then
    local aged = {now - max_age, 0}
    if less(archived, aged) then
      redis.call('XTRIM', KEYS[3], 'MINID', fmt(archived))
      local lost = redis.call('XTRIM', KEYS[3], 'MINID', fmt(aged))
      if lost > 0 then redis.call('HINCRBY', KEYS[2], 'events_dropped', lost) end
    else
      redis.call('XTRIM', KEYS[3], 'MINID', fmt(aged))
    end
  end
end

local len = redis.call('XLEN', KEYS[1])
if len == 0 then
  trim_events()
  return {0, 0}
end

-- Safe floor over all groups.
local safe = nil
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  local need = after(info['last-delivered-id'])
  if tonumber(info['pending']) > 0 then
    local summary = redis.call('XPENDING', KEYS[1], info['name'])
    need = min(need, parse(summary[2]))
  end
  safe = min(safe, need)
end
if history and safe then
  safe = min(safe, after(redis.call('HGET', KEYS[2], 'archive:messages') or '0-0'))
end

-- The ids at the head of the log bound this call's work and locate length limits.
local head = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', math.min(len, batch + 1))
local function id_at(index) -- 0-based from the oldest; nil beyond the head we read
  local e = head[index + 1]
  if e then return parse(e[1]) end
  return nil
end
local cap = nil
if len > batch then cap = id_at(batch) end

-- 1. Safe trimming: below the floor and outside the replay windows.
local removed = 0
if safe then
  local limit = min(safe, cap)
  if window_ms > 0 then limit = min(limit, {now - window_ms, 0}) end
  if window_len > 0 then
    if len <= window_len then
      limit = nil
    else
      limit = min(limit, id_at(len - window_len) or cap)
    end
  end
  if limit then
    removed = redis.call('XTRIM', KEYS[1], 'MINID', fmt(limit))
    len = len - removed
  end
end

-- 2. Hard caps: may drop what consumers still need; such drops are counted.
local function max(a, b)
  if a == nil then return b end
  if b == nil then return a end
  if less(a, b) then return b end
  return a
end
local hard = nil
if max_age > 0 then hard = {now - max_age, 0} end
if max_len > 0 and len > max_len then
  -- The head was read before step 1 removed `removed` entries from the front.
  hard = max(hard, id_at(len - max_len + removed) or cap)
end
local dropped = 0
if hard then
  hard = min(hard, cap)
  if safe and less(safe, hard) then
    removed = removed + redis.call('XTRIM', KEYS[1], 'MINID', fmt(safe))
    dropped = redis.call('XTRIM', KEYS[1], 'MINID', fmt(hard))
  elseif safe then
    removed = removed + redis.call('XTRIM', KEYS[1], 'MINID', fmt(hard))
  else
    dropped = redis.call('XTRIM', KEYS[1], 'MINID', fmt(hard))
  end
  if dropped > 0 then redis.call('HINCRBY', KEYS[2], 'dropped', dropped) end
end

trim_events()
return {removed, dropped}
