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
