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

--#include protocol

local log, ended = KEYS[1], KEYS[2]
local group, id, mark, most = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])

--#include foreign_state

--#include entry_id

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
