-- Assembled from source/deliver_now.lua and the fragments/ it includes (redisq_django/core/scripts/):
-- load this text as it is. To change it, edit those, then run python -m redisq_django.core.scripts export
-- deliver_now.lua: deliver a delayed message or a retry now, ahead of its due time.
--
-- KEYS[1]  zset    redisq:{q}:delayed (or redisq:{q}:g:<g>:retry)   the member's set
-- KEYS[2]  stream  redisq:{q}:log (or redisq:{q}:g:<g>:direct)      where it goes
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the member, exactly as stored
--
-- Moves it as promote.lua would once it is due: removed from the set and appended to
-- the stream in one step, so it is delivered exactly once, with the fields promote.lua
-- would write (the same flattening, so a member's fate never depends on which of the two
-- moved it). A delayed message goes to the end of the log (every logical consumer
-- receives it), a retry to its consumer's private input, which its next fetch reads.
-- Returns the new entry id, or false when the member is no longer in the set (promoted
-- or delivered now by someone else meanwhile).

-- >>> fragments/protocol.lua (shared; assembled into this script)
-- The protocol version first (PROTOCOL.md, "Versions and upgrades"): a caller of another
-- version would misread every argument below.
if ARGV[1] ~= 'redisq/2' then
  local sent = string.gsub(string.sub(ARGV[1] or '', 1, 20), '%c', '?')
  return redis.error_reply('REDISQ_PROTOCOL script deliver_now.lua speaks redisq/2, '
    .. "caller sent '" .. sent .. "': load the scripts shipped with the redisq version your "
    .. 'client implements')
end
-- <<< fragments/protocol.lua

-- >>> fragments/flatten.lua (shared; assembled into this script)
-- The stream fields of a member of a delayed or retry set: a JSON object of strings is
-- its fields (`null` values left out), anything else moves whole, byte for byte, as the
-- one field `raw`, which its reader makes an undecodable dead letter (PROTOCOL.md,
-- "Envelope v1"). promote.lua and deliver_now.lua flatten alike: a member's fate never
-- depends on which of them moves it.
local function flatten(member)
  local ok, decoded = pcall(cjson.decode, member)
  -- decoded[1] set: a JSON array (cjson decodes arrays and objects to tables alike).
  if not ok or type(decoded) ~= 'table' or decoded[1] ~= nil then
    return {'raw', member}
  end
  local flat = {}
  for k, v in pairs(decoded) do
    if type(v) == 'string' then
      flat[#flat + 1] = k
      flat[#flat + 1] = v
    elseif v ~= cjson.null then
      return {'raw', member}
    end
  end
  if #flat == 0 then return {'raw', member} end
  return flat
end
-- <<< fragments/flatten.lua

if redis.call('ZREM', KEYS[1], ARGV[2]) == 0 then return false end
return redis.call('XADD', KEYS[2], '*', unpack(flatten(ARGV[2])))
