-- The delayed member: the envelope as one JSON object, `id` first. Members of one due time
-- are promoted in the order of their bytes, so ids that increase in publish order keep a
-- batch's order (PROTOCOL.md, "Publish delayed").
local function member_of(envelope)
  local id = envelope['id']
  if not id then return cjson.encode(envelope) end
  envelope['id'] = nil
  local rest = cjson.encode(envelope)
  envelope['id'] = id
  if rest == '{}' then return '{"id":' .. cjson.encode(id) .. '}' end
  return '{"id":' .. cjson.encode(id) .. ',' .. string.sub(rest, 2)
end
