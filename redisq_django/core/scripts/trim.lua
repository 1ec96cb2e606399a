-- Assembled from source/trim.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- trim.lua: retention of a queue's log, never dropping what a consumer or a registered
-- archive still needs.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  hash    redisq:{q}:meta      counters "dropped", "events_dropped"; written here:
--                  "last_trimmed" / "events_last_trimmed", the greatest entry id ever
--                  removed from the log / the events (readers compare their position with
--                  it to detect data loss); read: "archive:messages" / "archive:events",
--                  positions an earlier version's unnamed archive recorded
-- KEYS[3]  hash    redisq:{q}:archives  the registered archives: "<a>:messages" and
--                  "<a>:events" hold archive <a>'s positions; "<a>:<table>:gap" is
--                  written here ("first last count": what a hard cap removed after it)
-- KEYS[4]  stream  redisq:{q}:events    (only when history is on)
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
-- pending one or the first one after its last-delivered id; for each archive registered
-- for the log (and an earlier version's unnamed one), the first entry after its
-- position. The floor is the minimum of them all. With no group, nothing is trimmed
-- safely (a consumer may yet start at "earliest"); with history on and no archive of
-- the log registered yet, nothing either. Entries below the floor and outside both
-- replay windows are removed. The hard caps then remove entries whatever their state;
-- those at or above the floor are counted in "dropped", and each registered archive
-- whose position they passed gets them added to its gap record.
--
-- With history on (KEYS[4] given) the events stream is trimmed behind every archive
-- registered for events (none: nothing; bounded per call); the age cap also applies to
-- it, its drops of events some archive still needs counted in "events_dropped" and in
-- those archives' gap records.
--
-- Returns {removed_safely, dropped}.
--
-- Before anything is removed, every archive position (KEYS[3] "<a>:messages",
-- "<a>:events") and every mark and unnamed archive's position in KEYS[2] must be an entry
-- id (PROTOCOL.md, "What the scripts check"); else an error reply "REDISQ_CORRUPT key
-- <key> field <field> holds ..." and nothing is done.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script trim.lua speaks redisq/2, '
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

if #KEYS < 3 then
  return redis.error_reply('ERR trim.lua takes the keys log, meta, archives [, events]')
end
-- Redis >= 7 replicates a script's effects; 6.2 must be told before writing after TIME.
redis.replicate_commands()
local now = tonumber(ARGV[2]) or redis_now()
local window_ms, window_len = tonumber(ARGV[3]), tonumber(ARGV[4])
local max_len, max_age = tonumber(ARGV[5]), tonumber(ARGV[6])
local batch = tonumber(ARGV[7])
local LOG, META, ARCHIVES, EVENTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local history = EVENTS ~= nil

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
local function max(a, b)
  if a == nil then return b end
  if b == nil then return a end
  if less(a, b) then return b end
  return a
end
local function after(id) -- the smallest id greater than id
  local p = parse(id)
  if p[2] == math.huge then return {p[1] + 1, 0} end
  return {p[1], p[2] + 1}
end
local function fmt(p)
  if p[2] == math.huge then return string.format('%d-', p[1]) .. MAX_SEQ end
  return string.format('%d-%d', p[1], p[2])
end

-- Removes every entry of `key` below `limit` and raises the mark `mark` (the greatest
-- id ever removed) to the last of them. Returns how many went.
local function cut(key, mark, limit)
  if limit == nil or (limit[1] == 0 and limit[2] == 0) then return 0 end
  local below = redis.call('XREVRANGE', key, '(' .. fmt(limit), '-', 'COUNT', 1)
  if #below == 0 then return 0 end
  local n = redis.call('XTRIM', key, 'MINID', fmt(limit))
  if n > 0 then
    local current = redis.call('HGET', META, mark)
    if not current or less(parse(current), parse(below[1][1])) then
      redis.call('HSET', META, mark, below[1][1])
    end
  end
  return n
end

-- The registered archives of one table: {name, first id it needs}; an earlier version's
-- unnamed archive ("archive:<table>" in meta) holds retention too, with name false.
local registry = redis.call('HGETALL', ARCHIVES)

-- >>> fragments/positions.lua (shared; assembled into this script)
-- Positions (PROTOCOL.md, "What the scripts check"): an archive's position and a mark of
-- what retention removed are entry ids (<ms>-<seq> or <ms>, digits only) that only the
-- scripts write; another client's text there is refused before the first write, naming
-- the key and field: read as an id it would stop retention half-way or move its floor
-- past what an archive still needs.
local function is_id(text)
  return #text <= 41 and (string.match(text, '^%d+%-%d+$') or string.match(text, '^%d+$')) ~= nil
end
local function not_an_id(key, field, value)
  local function shown(text)
    return (string.gsub(string.sub(text, 1, 300), '%c', '?'))
  end
  return redis.error_reply('REDISQ_CORRUPT key ' .. shown(key) .. ' field ' .. shown(field)
    .. " holds '" .. shown(value) .. "', not an entry id: only redisq's scripts write it. "
    .. 'Nothing was done: repair it as PROTOCOL.md says ("What the scripts check"), then '
    .. 'call again')
end
-- <<< fragments/positions.lua

-- >>> fragments/gap_record.lua (shared; assembled into this script)
-- An archive's gap record (PROTOCOL.md, "Named archives"): "<a>:<table>:gap" = "first
-- last count", the entries removed after its position that it has not settled yet. A new
-- loss extends it: its first id stays, the last is the new loss's, the counts add up.
-- Written by a hard cap (trim.lua) and by a purge (purge.lua) alike. Returns the record's
-- first id now.
local function extend_gap(archives, field, first, last, count)
  local old = redis.call('HGET', archives, field)
  if old then
    local f, _, c = string.match(old, '^(%S+) (%S+) (%d+)$')
    if f then first, count = f, count + tonumber(c) end
  end
  redis.call('HSET', archives, field, first .. ' ' .. last .. ' ' .. count)
  return first
end
-- <<< fragments/gap_record.lua
for i = 1, #registry, 2 do
  local f = registry[i]
  local position = string.match(f, '^[^:]+:messages$') or string.match(f, '^[^:]+:events$')
  if position and not is_id(registry[i + 1]) then
    return not_an_id(ARCHIVES, f, registry[i + 1])
  end
end
for _, f in ipairs({'last_trimmed', 'events_last_trimmed', 'archive:messages',
    'archive:events'}) do
  local value = redis.call('HGET', META, f)
  if value and not is_id(value) then return not_an_id(META, f, value) end
end

local function archive_needs(table_name)
  local out = {}
  for i = 1, #registry, 2 do
    local name = string.match(registry[i], '^([^:]+):' .. table_name .. '$')
    if name then out[#out + 1] = {name, after(registry[i + 1])} end
  end
  local legacy = redis.call('HGET', META, 'archive:' .. table_name)
  if legacy then out[#out + 1] = {false, after(legacy)} end
  return out
end
local function lowest(needs)
  local floor = nil
  for _, n in ipairs(needs) do floor = min(floor, n[2]) end
  return floor
end

-- Removes the entries of `key` below `hard` that someone still needs (everything below
-- the safe floor is gone already), in steps at each registered archive's need, so that
-- each archive whose need lies below `hard` gets what it misses added to its gap record
-- "<a>:<table>:gap" = "first last count". Returns how many went.
local function drop(key, mark, hard, needs, table_name)
  local points = {}
  for _, n in ipairs(needs) do
    if n[1] and less(n[2], hard) then points[#points + 1] = n end
  end
  table.sort(points, function(a, b) return less(a[2], b[2]) end)
  local total, before, firsts = 0, {}, {}
  for i, p in ipairs(points) do
    total = total + cut(key, mark, p[2])
    before[i] = total
    local head = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)
    firsts[i] = head[1] and head[1][1]
  end
  total = total + cut(key, mark, hard)
  local last = redis.call('HGET', META, mark)
  for i, p in ipairs(points) do
    local lost = total - before[i]
    if lost > 0 and firsts[i] then
      extend_gap(ARCHIVES, p[1] .. ':' .. table_name .. ':gap', firsts[i], last, lost)
    end
  end
  return total
end

-- The events stream (history on): trimmed behind every archive of events (exactly, at
-- most `batch` entries per call), and by the age cap, whose drops are counted.
local function trim_events()
  if not history then return end
  local needs = archive_needs('events')
  local floor = lowest(needs) or {0, 1}
  local mark = 'events_last_trimmed'
  local below = redis.call('XRANGE', EVENTS, '-', '(' .. fmt(floor), 'COUNT', batch + 1)
  if #below > batch then
    cut(EVENTS, mark, parse(below[batch + 1][1]))
  elseif #below > 0 then
    cut(EVENTS, mark, floor)
  end
  if max_age > 0 then
    local aged = {now - max_age, 0}
    if less(floor, aged) then
      cut(EVENTS, mark, floor)
      local lost = drop(EVENTS, mark, aged, needs, 'events')
      if lost > 0 then redis.call('HINCRBY', META, 'events_dropped', lost) end
    else
      cut(EVENTS, mark, aged)
    end
  end
end

local len = redis.call('XLEN', LOG)
if len == 0 then
  trim_events()
  return {0, 0}
end

-- Safe floor over all groups, then the archives of the log.
local safe = nil
local groups = redis.call('XINFO', 'GROUPS', LOG)
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  local need = after(info['last-delivered-id'])
  if tonumber(info['pending']) > 0 then
    local summary = redis.call('XPENDING', LOG, info['name'])
    need = min(need, parse(summary[2]))
  end
  safe = min(safe, need)
end
local log_needs = archive_needs('messages')
local archived = lowest(log_needs)
if history and archived == nil then archived = {0, 1} end -- none registered yet: keep all
if safe then safe = min(safe, archived) end

-- The ids at the head of the log bound this call's work and locate length limits.
local head = redis.call('XRANGE', LOG, '-', '+', 'COUNT', math.min(len, batch + 1))
local function id_at(index) -- 0-based from the oldest; nil beyond the head we read
  local e = head[index + 1]
  if e then return parse(e[1]) end
  return nil
end
local cap = nil
if len > batch then cap = id_at(batch) end

-- 1. Safe trimming: below the floor and outside the replay windows.
local mark = 'last_trimmed'
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
    removed = cut(LOG, mark, limit)
    len = len - removed
  end
end

-- 2. Hard caps: may drop what consumers and archives still need; such drops are counted.
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
    removed = removed + cut(LOG, mark, safe)
    dropped = drop(LOG, mark, hard, log_needs, 'messages')
  elseif safe then
    removed = removed + cut(LOG, mark, hard)
  else
    dropped = drop(LOG, mark, hard, log_needs, 'messages')
  end
  if dropped > 0 then redis.call('HINCRBY', META, 'dropped', dropped) end
end

trim_events()
return {removed, dropped}
