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
