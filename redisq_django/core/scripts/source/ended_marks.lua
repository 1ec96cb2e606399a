-- ended_marks.lua: which log entries an instance just read an operator ended
-- (end_waiting.lua), and a bounded sweep of marks that can no longer apply. Called by an
-- instance only when its consumer's `ended` hash exists (the fetch learns that in its
-- read's round trip), with the log entries it read (or took over) before it runs any.
--
-- KEYS[1]  stream  redisq:{q}:log
-- KEYS[2]  hash    redisq:{q}:g:<g>:ended   field = log entry id, value = the mark
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the group (logical consumer) <g>
-- ARGV[3]  sweep: look at up to this many other marks (0: none)
-- ARGV[4 ..]  the log entry ids the instance holds and has not started
--
-- Returns {marks, left}: marks[i] is the mark of ARGV[3 + i] (its JSON text), or false
-- when it is not marked; left is how many marks remain after the sweep. The sweep removes
-- a mark the group can no longer read: its entry is neither pending in the group nor
-- after its last-delivered id (handled by a client that does not honour marks, skipped by
-- a replay or a purge), or gone from the log (trimmed) and not pending; all of them when
-- the group is gone. A mark the instance settles is removed by the instance (HDEL) after
-- its settle, so a crash in between leaves it to the next reader: never a run.
-- KEYS[2] is checked first (PROTOCOL.md, "What the scripts check"): REDISQ_CORRUPT.

--#include protocol

-- Redis 6.2 counts HRANDFIELD as non-deterministic: writes after it need this (7+: no-op).
redis.replicate_commands()
local log, ended, group, sweep = KEYS[1], KEYS[2], ARGV[2], tonumber(ARGV[3])
local call = redis.call

--#include foreign_state

--#include entry_id

local refused = check_type(ended, 'hash')
if refused then return refused end
local marks, asked = {}, {}
for i = 4, #ARGV do
  marks[#marks + 1] = call('HGET', ended, ARGV[i])
  asked[ARGV[i]] = true
end
if sweep > 0 and call('EXISTS', ended) == 1 then
  local last = nil
  if call('TYPE', log)['ok'] == 'stream' then
    for _, g in ipairs(call('XINFO', 'GROUPS', log)) do
      local info = {}
      for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
      if info['name'] == group then last = parse(info['last-delivered-id']) end
    end
  end
  if not last then
    call('DEL', ended)
  else
    for _, id in ipairs(call('HRANDFIELD', ended, sweep)) do
      if not asked[id] and #call('XPENDING', log, group, id, id, 1) == 0 then
        local at = parse(id)
        local read = not at or at[1] < last[1] or (at[1] == last[1] and at[2] <= last[2])
        if read or #call('XRANGE', log, id, id) == 0 then call('HDEL', ended, id) end
      end
    end
  end
end
return {marks, call('HLEN', ended)}
