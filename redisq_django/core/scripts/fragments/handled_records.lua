-- A `handled` event's records (a JSON array, one per entry, in order) of the entries
-- acknowledged when some were not: rewritten without the `skipped` ones (another instance
-- settled those first). cjson turns the others back into the same text: strings, and
-- integers below 2^53. No records given: none.
local function acknowledged(records, skipped)
  if not records then return records end
  local kept = {}
  for i, record in ipairs(cjson.decode(records)) do
    if not skipped[i] then kept[#kept + 1] = record end
  end
  return cjson.encode(kept)
end
