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
-- ARGV[3]  consumer (instance) name
-- ARGV[4]  at most this many entries are read from each stream
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
-- Returns {log entries, direct entries, entries read, log last id, direct last id}: the
-- entries delivered, each {id, {field, value, ...}}; how many were read in all (delivered
-- or set waiting); and for a stream read to its end, the id of its last entry ("0-0":
-- empty), from which XREAD BLOCK waits for new ones (else "": read again at once).

-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script read_ordered.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end

-- Redis 6.2 counts XREADGROUP as non-deterministic: writes after it need this (7+: no-op).
redis.replicate_commands()
local group, consumer, count, prefix = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local holders = KEYS[3]
local call = redis.call

local reply = call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count,
  'STREAMS', KEYS[1], KEYS[2], '>', '>')
local by_stream = {}
if reply then
  for _, s in ipairs(reply) do by_stream[s[1]] = s[2] end
end

local out, read, last = {{}, {}}, 0, {'', ''}
for s = 1, 2 do
  local entries = by_stream[KEYS[s]] or {}
  for _, e in ipairs(entries) do
    read = read + 1
    local entry_id, fields = e[1], e[2]
    local key, mid = nil, entry_id
    if type(fields) == 'table' then
      for i = 1, #fields, 2 do
        if fields[i] == 'key' and fields[i + 1] ~= '' then key = fields[i + 1] end
        if fields[i] == 'id' then mid = fields[i + 1] end
      end
    end
    local holder = key and call('HGET', holders, key)
    if not key or not holder or holder == mid then
      if key and not holder then call('HSET', holders, key, mid) end
      out[s][#out[s] + 1] = e
    else
      local envelope = {id = mid}
      for i = 1, #fields, 2 do envelope[fields[i]] = fields[i + 1] end
      call('RPUSH', prefix .. key, cjson.encode(envelope))
      call('INCR', KEYS[4])
      call('XACK', KEYS[s], group, entry_id)
      if s == 2 then call('XDEL', KEYS[s], entry_id) end
    end
  end
  if #entries < count then
    local tail = call('XREVRANGE', KEYS[s], '+', '-', 'COUNT', 1)
    last[s] = tail[1] and tail[1][1] or '0-0'
  end
end
return {out[1], out[2], read, last[1], last[2]}
