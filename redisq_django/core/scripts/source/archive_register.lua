-- archive_register.lua: register a named archive of one stream of a queue, so that
-- retention keeps everything it has not stored yet.
--
-- KEYS[1]  hash    redisq:{q}:archives  "<a>:<table>" = position (the last entry id the
--                  archive has, or that it starts after), "<a>:<table>:since" = when it
--                  registered (ms, Redis's clock)
-- KEYS[2]  hash    redisq:{q}:meta      read: "last_trimmed" / "events_last_trimmed";
--                  "archive:<table>", the position an earlier version's unnamed archive
--                  recorded, is moved to the archive named "default" when it registers
-- KEYS[3]  stream  the table's stream: redisq:{q}:log (messages) or redisq:{q}:events
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the archive's name (1-100 of A-Z a-z 0-9 _ . -)
-- ARGV[3]  the table: "messages" (the log) or "events"
-- ARGV[4]  where it starts when it registers now: "earliest" (everything still in
--          Redis), "latest" (only what comes next), or an entry id (it has everything up
--          to that id)
-- ARGV[5]  the owner: a token its reader keeps in its checkpoint ("" or absent: none)
-- ARGV[6]  "1": take the name over from another owner (absent: no)
--
-- An archive registered already keeps its position: registering is idempotent.
-- A name is owned by one reader (one checkpoint), fenced like Kafka's transactional.id:
-- "<a>:<table>:owner" = its token, ":owner_since" = when it claimed the name (ms),
-- ":owner_committed" = its last commit (ms), ":owner_displaced" = the token it took the
-- name from. A reader claims the name with its first commit (archive_commit.lua), from an
-- offset its checkpoint holds; registering claims nothing, but is refused while another
-- token owns the name (error "OWNED <since> <committed> <owner's first 8 characters>",
-- nothing written; "FENCED <since> <first 8 characters>" to the token it displaced),
-- unless ARGV[6] takes the name over: with a token, it is the owner from now on (a
-- take-over counts as a commit); without one, its first commit takes it.
-- Returns {status, position, taken}: status 0 registered already, 1 registered now, 2
-- registered now at the position an earlier version's unnamed archive recorded; taken:
-- the displaced owner's last commit (ms) when this call took the name over, else "".
-- The mark and the unnamed archive's position it reads in KEYS[2] must be entry ids
-- (PROTOCOL.md, "What the scripts check"); else an error reply "REDISQ_CORRUPT key <key>
-- field <field> holds ...", nothing written.

--#include protocol

--#include clock

local name, table_name, start = ARGV[2], ARGV[3], ARGV[4]
local owner, take_over = ARGV[5] or '', ARGV[6] == '1'
if #name > 100 or not string.match(name, '^[%w_%.%-]+$') then
  return redis.error_reply('ERR invalid archive name ' .. name)
end
local mark = ({messages = 'last_trimmed', events = 'events_last_trimmed'})[table_name]
if not mark then return redis.error_reply('ERR invalid archive table ' .. table_name) end

local field = name .. ':' .. table_name
local owner_field = field .. ':owner'
local held, held_since, held_committed, displaced = unpack(redis.call('HMGET', KEYS[1],
  owner_field, owner_field .. '_since', owner_field .. '_committed', owner_field .. '_displaced'))
if held and held ~= owner and not take_over then
  if owner ~= '' and displaced == owner then
    return redis.error_reply('FENCED ' .. (held_since or '0') .. ' ' .. string.sub(held, 1, 8))
  end
  return redis.error_reply('OWNED ' .. (held_since or '0') .. ' ' .. (held_committed or '0')
    .. ' ' .. string.sub(held, 1, 8))
end

-- A take-over with a token makes it the owner now (as if it had committed).
local function claim(status, position)
  local taken = ''
  if take_over and owner ~= '' and held ~= owner then
    local now = redis_now()
    redis.call('HSET', KEYS[1], owner_field, owner, owner_field .. '_since', now,
      owner_field .. '_committed', now)
    if held then
      taken = held_committed or held_since or '0'
      redis.call('HSET', KEYS[1], owner_field .. '_displaced', held)
    end
  end
  return {status, position, taken}
end

local current = redis.call('HGET', KEYS[1], field)
if current then return claim(0, current) end

--#include entry_id
local function later(a, b) -- of two ids (text), the later
  local pa, pb = parse(a), parse(b)
  if pa[1] > pb[1] or (pa[1] == pb[1] and pa[2] >= pb[2]) then return a end
  return b
end

--#include positions

local status, position = 1, nil
local legacy = redis.call('HGET', KEYS[2], 'archive:' .. table_name)
if legacy and not is_id(legacy) then
  return not_an_id(KEYS[2], 'archive:' .. table_name, legacy)
end
if name == 'default' and legacy then
  status, position = 2, legacy
  redis.call('HDEL', KEYS[2], 'archive:' .. table_name)
else
  local trimmed = redis.call('HGET', KEYS[2], mark) or '0-0'
  if not is_id(trimmed) then return not_an_id(KEYS[2], mark, trimmed) end
  if start == 'earliest' then
    position = trimmed
  elseif start == 'latest' then
    local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
    position = last[1] and later(last[1][1], trimmed) or trimmed
  elseif parse(start) then
    position = start
  else
    return redis.error_reply('ERR invalid start ' .. start .. ': earliest, latest or an entry id')
  end
end
redis.call('HSET', KEYS[1], field, position, field .. ':since', redis_now())
return claim(status, position)
