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
