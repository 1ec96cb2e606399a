-- deliver_now.lua: deliver a delayed message or a retry now, ahead of its due time.
--
-- KEYS[1]  zset    redisq:{q}:delayed (or redisq:{q}:g:<g>:retry)   the member's set
-- KEYS[2]  stream  redisq:{q}:log (or redisq:{q}:g:<g>:direct)      where it goes
-- ARGV[1]  the member, exactly as stored
-- ARGV[2 ..]  the field, value pairs to append: the member's fields as promote.lua
--             writes them (a JSON object of strings; anything else as one field "raw")
--
-- Moves it as promote.lua would once it is due: removed from the set and appended to
-- the stream in one step, so it is delivered exactly once. A delayed message goes to the
-- end of the log (every logical consumer receives it), a retry to its consumer's private
-- input, which its next fetch reads. Returns the new entry id, or false when the member
-- is no longer in the set (promoted or delivered now by someone else meanwhile).

if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return false end
return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 2))
