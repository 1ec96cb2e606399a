-- Assembled from source/end_waiting.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- end_waiting.lua: end a message waiting in the log for one logical consumer before it
-- reads it, an operator's action on a poison message: the log is shared, so the entry
-- stays; it is marked in the consumer's `ended` hash, and the consumer's instances make
-- it a dead letter (reason `ended`) or acknowledge it (deleted) when they read it,
-- instead of running it (PROTOCOL.md, "End a message waiting in the log").
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  hash    redisq:{q}:g:<g>:ended   field = log entry id, value = the mark
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the group (logical consumer) <g>
-- ARGV[3]  the log entry id
-- ARGV[4]  the mark: a JSON object of strings, `mode` "dead" (a dead letter) or "delete",
--          and, for "dead", the dead letter's `error_message`
-- ARGV[5]  at most this many marks the consumer may hold (a mark more is refused: -3)
--
-- Returns 1 when marked (or marked already: the mark is replaced); 0 when the entry is not
-- in the log (trimmed, or no such entry); -1 when the group has read it already (in
-- flight, or handled: end its retry, if it fails); -2 when no such group reads the log;
-- -3 when the consumer holds ARGV[5] marks already. KEYS[2] is checked before the first
-- write (PROTOCOL.md, "What the scripts check"): REDISQ_CORRUPT, nothing done.

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script end_waiting.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end
-- <<< fragments/protocol.lua

local log, ended = KEYS[1], KEYS[2]
local group, id, mark, most = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])

-- >>> fragments/foreign_state.lua (shared; assembled into this script)
-- Foreign state (PROTOCOL.md, "What the scripts check"): what a call reads but did not
-- write is checked before its first write. Redis does not undo a script's earlier writes,
-- so a value refused half-way would lose or duplicate a message. A check returns an error
-- reply naming the key, or nil.
local function corrupt(key, found, wanted)
  local function shown(text)
    return (string.gsub(string.sub(text, 1, 300), '%c', '?'))
  end
  return redis.error_reply('REDISQ_CORRUPT key ' .. shown(key) .. ' holds ' .. shown(found)
    .. ', not ' .. wanted .. ": only redisq's scripts write it. Nothing was done: repair "
    .. 'it as PROTOCOL.md says ("What the scripts check"), then call again')
end
local function check_type(key, wanted)
  local found = redis.call('TYPE', key)['ok']
  if found == 'none' or found == wanted then return nil end
  return corrupt(key, 'a ' .. found, 'a ' .. wanted)
end
-- A count of messages (held_back): absent, or a whole number as INCR and DECR take it.
local function check_count(key)
  local refused = check_type(key, 'string')
  if refused then return refused end
  local value = redis.call('GET', key)
  if not value or value == '0' or (#value <= 18 and string.match(value, '^%-?[1-9]%d*$')) then
    return nil
  end
  return corrupt(key, "'" .. value .. "'", 'a whole number of messages')
end
-- <<< fragments/foreign_state.lua

-- >>> fragments/entry_id.lua (shared; assembled into this script)
-- An entry id <ms>-<seq> as {ms, seq} (numbers), or nil for anything else.
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then return nil end
  return {tonumber(ms), tonumber(seq)}
end
-- <<< fragments/entry_id.lua

local refused = check_type(ended, 'hash')
if refused then return refused end
local kind = redis.call('TYPE', log)['ok']
if kind ~= 'stream' then return 0 end
local at = parse(id)
if not at or #redis.call('XRANGE', log, id, id) == 0 then return 0 end
local last = nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', log)) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  if info['name'] == group then last = parse(info['last-delivered-id']) end
end
if not last then return -2 end
if at[1] < last[1] or (at[1] == last[1] and at[2] <= last[2]) then return -1 end
if redis.call('HEXISTS', ended, id) == 0 and redis.call('HLEN', ended) >= most then
  return -3
end
redis.call('HSET', ended, id, mark)
return 1
