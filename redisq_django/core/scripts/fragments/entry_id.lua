-- An entry id <ms>-<seq> as {ms, seq} (numbers), or nil for anything else.
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then return nil end
  return {tonumber(ms), tonumber(seq)}
end
