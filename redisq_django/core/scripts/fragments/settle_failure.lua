-- What fail.lua and task_settle.lua share beyond the settle layout: the ownership check
-- and the failed delivery's next place.
-- Whether entry `id` of `stream` is still pending for the instance of ARGV[3] (any, for
-- ""): one whose lease expired and that another instance took over is settled by that
-- one, and this call writes nothing.
local function held(stream, id)
  local pending = redis.call('XPENDING', stream, group, id, id, 1)
  if #pending == 0 then return false end
  return instance == '' or pending[1][2] == instance
end

-- A failed delivery's next place: with `retry`, the retry member due at `due` (the
-- envelope's pairs from ARGV[first] as one JSON object), else the dead letter (those
-- pairs as its fields).
local function write_failure(retry, due, first)
  if retry then
    local envelope = {}
    for i = first, #ARGV, 2 do envelope[ARGV[i]] = ARGV[i + 1] end
    redis.call('ZADD', KEYS[3], due, cjson.encode(envelope))
  else
    redis.call('XADD', KEYS[4], '*', unpack(ARGV, first))
  end
end
