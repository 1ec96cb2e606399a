-- deliver_now.lua: deliver a delayed message or a retry now, ahead of its due time.
--
-- KEYS[1]  zset    redisq:{q}:delayed (or redisq:{q}:g:<g>:retry)   the member's set
-- KEYS[2]  stream  redisq:{q}:log (or redisq:{q}:g:<g>:direct)      where it goes
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the member, exactly as stored
--
-- Moves it as promote.lua would once it is due: removed from the set and appended to
-- the stream in one step, so it is delivered exactly once, with the fields promote.lua
-- would write (the same flattening, so a member's fate never depends on which of the two
-- moved it). A delayed message goes to the end of the log (every logical consumer
-- receives it), a retry to its consumer's private input, which its next fetch reads.
-- Returns the new entry id, or false when the member is no longer in the set (promoted
-- or delivered now by someone else meanwhile).

--#include protocol

--#include flatten

if redis.call('ZREM', KEYS[1], ARGV[2]) == 0 then return false end
return redis.call('XADD', KEYS[2], '*', unpack(flatten(ARGV[2])))
