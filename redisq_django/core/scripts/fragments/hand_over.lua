-- The ordered hand-over: an ordering key passes from the message that held it to the next
-- message of its waiting list (ack_ordered.lua, fail.lua's dead letters, release_key.lua).
-- It uses the script's locals `holders`, `direct`, `held_back` (keys) and `prefix` (of the
-- waiting lists: the list of ordering key k is prefix .. k), and foreign_state's checks.

-- The fields of a waiting list's member (a JSON object of at most 1000 string values, as
-- read_ordered.lua writes it) and its message id; nil for anything else, which is handed
-- on whole as `raw` (its reader makes it a dead letter, undecodable): never re-encoded.
local function fields_of(member)
  local ok, decoded = pcall(cjson.decode, member)
  if not ok or type(decoded) ~= 'table' or type(decoded.id) ~= 'string' then return nil end
  local flat = {}
  for k, v in pairs(decoded) do
    if type(v) ~= 'string' or #flat >= 2000 then return nil end
    flat[#flat + 1] = k
    flat[#flat + 1] = v
  end
  return flat, decoded.id
end

-- Before the first write: what handing on key `key` (held by message `mid`) reads.
local function check_hand_on(key, mid)
  local refused = check_type(holders, 'hash') or check_type(direct, 'stream')
  if refused or key == '' or redis.call('HGET', holders, key) ~= mid then return refused end
  return check_count(held_back) or check_type(prefix .. key, 'list')
end

-- Key `key`, held by message `mid`, passes to the next message of its list (or is freed).
local function hand_on(key, mid)
  if redis.call('HGET', holders, key) ~= mid then return end
  local list = prefix .. key
  for _ = 1, 100 do
    local member = redis.call('LPOP', list)
    if not member then break end
    redis.call('DECR', held_back)
    local fields, id = fields_of(member)
    if fields then
      redis.call('XADD', direct, '*', unpack(fields))
      redis.call('HSET', holders, key, id)
      return
    end
    -- Not ours (another client's): delivered as is, dead-lettered as undecodable.
    redis.call('XADD', direct, '*', 'raw', member)
  end
  redis.call('HDEL', holders, key)
end
