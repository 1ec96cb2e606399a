-- Assembled from source/purge.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- purge.lua: delete every message of one place (a queue, or one partition of a
-- partitioned queue), keep its logical consumers registered at the end of the empty log,
-- and record what the registered archives lose, as a hard cap's trim does.
--
-- KEYS[1]  stream  redisq:{q}:log        emptied (XTRIM MAXLEN 0); its groups re-created
--                  at its end ("$"), forgetting their pending entries
-- KEYS[2]  zset    redisq:{q}:delayed    deleted
-- KEYS[3]  hash    redisq:{q}:meta       "last_trimmed" raised to the last entry id purged
-- KEYS[4]  hash    redisq:{q}:archives   per archive <a> of the log whose position is
--                  before the last entry purged: "<a>:messages:gap" = "first last count"
--                  extended exactly as trim.lua does, and "<a>:messages:purged" =
--                  "first last count at_ms" (the part of the gap a purge removed; at_ms the
--                  last purge's time, ms by Redis's clock)
-- KEYS[5 + 3i], KEYS[6 + 3i], KEYS[7 + 3i] (i = 0, 1, ...): the keys of the i-th
--                  consumer named in ARGV: stream redisq:{q}:g:<g>:direct (emptied, its
--                  group re-created at 0), zset redisq:{q}:g:<g>:retry and stream
--                  redisq:{q}:g:<g>:dead (deleted)
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2 + i]  the name of the i-th consumer: every group of the log, in any order
--
-- The events stream (history on) is not touched: the events of purged messages stay, and
-- so do the archives' positions in it.
--
-- Work: O(N) in the entries of the log, the direct streams and the delayed set, like the
-- XTRIM MAXLEN 0 and DEL it replaces; it cannot be bounded (half a purge is no purge):
-- Redis is blocked for about a second per million entries (PROTOCOL.md, "Purge").
--
-- Returns {log entries removed, delayed messages removed, archives given a gap}.
-- Errors (nothing done): "REDISQ_GROUPS ..." when the log's groups are not the consumers
-- named (one registered or left in between: list them again and call again); "REDISQ_CORRUPT
-- ..." when an archive's position or "last_trimmed" is not an entry id; "WRONGTYPE" when
-- the log is not a stream (a partitioned queue's own keys: purge its partitions).

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script purge.lua speaks redisq/2, '
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

local LOG, DELAYED, META, ARCHIVES = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local names = {}
for i = 2, #ARGV do names[#names + 1] = ARGV[i] end
if #KEYS ~= 4 + 3 * #names then
  return redis.error_reply('ERR purge.lua takes the keys log, delayed, meta, archives and '
    .. 'three per consumer named (direct, retry, dead)')
end
local kind = redis.call('TYPE', LOG)['ok']
if kind ~= 'stream' and kind ~= 'none' then
  return redis.error_reply('WRONGTYPE ' .. LOG .. ' is a ' .. kind .. ', not a stream: '
    .. 'purge the partitions of a partitioned queue')
end

-- The consumers named must be exactly the log's groups: one left out would keep pending
-- entries pointing at purged ones.
if kind == 'none' and #names > 0 then
  return redis.error_reply('REDISQ_GROUPS ' .. LOG .. ' has no consumers, ' .. #names
    .. ' were named: list the groups again and call again')
end
if kind == 'stream' then
  local named = {}
  for _, n in ipairs(names) do named[n] = true end
  local groups = redis.call('XINFO', 'GROUPS', LOG)
  local found = 0
  for _, g in ipairs(groups) do
    local name
    for i = 1, #g, 2 do if g[i] == 'name' then name = g[i + 1] end end
    if not named[name] then
      return redis.error_reply('REDISQ_GROUPS consumer ' .. name .. ' of ' .. LOG
        .. ' was not named: list the groups again and call again')
    end
    found = found + 1
  end
  if found ~= #names then
    return redis.error_reply('REDISQ_GROUPS ' .. LOG .. ' has ' .. found
      .. ' consumers, ' .. #names .. ' were named: list the groups again and call again')
  end
end

-- Ids as {ms, seq}; positions may be "<ms>" (read as <ms>-0).
local function parse_pos(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then ms, seq = id, '0' end
  return {tonumber(ms), tonumber(seq)}
end
local function less(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end

-- Everything checked before the first write (PROTOCOL.md, "What the scripts check").
local registry = redis.call('HGETALL', ARCHIVES)
local archived = {} -- {name, position}, of the archives of the log
for i = 1, #registry, 2 do
  local name = string.match(registry[i], '^([^:]+):messages$')
  if name then
    if not is_id(registry[i + 1]) then return not_an_id(ARCHIVES, registry[i], registry[i + 1]) end
    archived[#archived + 1] = {name, registry[i + 1]}
  end
end
local mark = redis.call('HGET', META, 'last_trimmed')
if mark and not is_id(mark) then return not_an_id(META, 'last_trimmed', mark) end

-- Redis 6.2 must be told before writing after TIME.
redis.replicate_commands()

local removed, gaps = 0, 0
local newest = redis.call('XREVRANGE', LOG, '+', '-', 'COUNT', 1)[1]
if newest then
  local last = newest[1]
  local last_id = parse_pos(last)
  -- Entries after each archive's position: counted in segments between the positions,
  -- newest first, so the log is read once whatever the number of archives.
  local lagging = {}
  for _, a in ipairs(archived) do
    if less(parse_pos(a[2]), last_id) then lagging[#lagging + 1] = a end
  end
  table.sort(lagging, function(x, y) return less(parse_pos(y[2]), parse_pos(x[2])) end)
  local function count_between(lo, hi) -- entries with lo < id <= hi
    local n, from = 0, '(' .. lo
    while true do
      local got = redis.call('XRANGE', LOG, from, hi, 'COUNT', 1000)
      n = n + #got
      if #got < 1000 then return n end
      from = '(' .. got[#got][1]
    end
  end
  local upto, counted = last, 0
  for _, a in ipairs(lagging) do
    counted = counted + count_between(a[2], upto)
    upto = a[2]
    a[3] = counted
    local first = redis.call('XRANGE', LOG, '(' .. a[2], '+', 'COUNT', 1)[1]
    a[4] = first and first[1]
  end

  removed = redis.call('XTRIM', LOG, 'MAXLEN', 0)
  if not mark or less(parse_pos(mark), last_id) then redis.call('HSET', META, 'last_trimmed', last) end

  local at = string.format('%d', redis_now())
  for _, a in ipairs(lagging) do
    local count, first = a[3], a[4]
    if count > 0 and first then
      gaps = gaps + 1
      -- The gap record, extended as trim.lua extends it (readers of earlier versions
      -- read it as a hard cap's).
      local gap_first = extend_gap(ARCHIVES, a[1] .. ':messages:gap', first, last, count)
      -- Beside it, the part a purge removed (a purge record older than the gap record
      -- is stale: archive_gap.lua of an earlier version does not delete it).
      local field = a[1] .. ':messages:purged'
      local old = redis.call('HGET', ARCHIVES, field)
      local p_first, p_count = first, count
      if old then
        local f, l, c = string.match(old, '^(%S+) (%S+) (%d+) %d+$')
        if f and is_id(l) and not less(parse_pos(l), parse_pos(gap_first)) then
          p_first, p_count = f, count + tonumber(c)
        end
      end
      redis.call('HSET', ARCHIVES, field, p_first .. ' ' .. last .. ' ' .. p_count .. ' ' .. at)
    end
  end
end

local delayed = redis.call('ZCARD', DELAYED)
redis.call('DEL', DELAYED)
for i, name in ipairs(names) do
  local direct, retry, dead = KEYS[2 + 3 * i], KEYS[3 + 3 * i], KEYS[4 + 3 * i]
  redis.call('DEL', retry, dead)
  if redis.call('EXISTS', direct) == 1 then
    redis.call('XTRIM', direct, 'MAXLEN', 0)
    redis.call('XGROUP', 'DESTROY', direct, name)
  end
  redis.call('XGROUP', 'CREATE', direct, name, '0', 'MKSTREAM')
  redis.call('XGROUP', 'DESTROY', LOG, name)
  redis.call('XGROUP', 'CREATE', LOG, name, '$', 'MKSTREAM')
end
return {removed, delayed, gaps}
