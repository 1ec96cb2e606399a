-- release_key.lua: let an ordering key of an ordered consumer go by hand (an operator's
-- action: its holder was lost outside redisq's settles, e.g. deleted by a hard cap, or
-- an operator gives up on it): the key passes to the first message of its waiting list,
-- which is added to the consumer's direct stream and holds it now, or is freed when the
-- list is empty: what ack_ordered.lua does when the holder is acknowledged.
--
-- KEYS[1]  hash    redisq:{q}:g:<g>:holders    ordering key -> the message holding it
-- KEYS[2]  stream  redisq:{q}:g:<g>:direct     the consumer's private input
-- KEYS[3]  string  redisq:{q}:g:<g>:held_back  how many messages the waiting lists hold
-- ARGV[1]  "redisq/2": the protocol version; any other value is refused (nothing done)
-- ARGV[2]  the prefix of the waiting lists, "redisq:{q}:g:<g>:waiting:"
-- ARGV[3]  the ordering key
--
-- Returns 1 when the key was held (and is now handed on or freed), 0 when nothing held
-- it. What the hand-on reads is checked first (PROTOCOL.md, "What the scripts check"):
-- anything another client wrote there is refused with REDISQ_CORRUPT, nothing written.

--#include protocol

local holders, direct, held_back = KEYS[1], KEYS[2], KEYS[3]
local prefix, key = ARGV[2], ARGV[3]

--#include foreign_state

--#include hand_over

local refused = check_type(holders, 'hash')
if refused then return refused end
local holder = redis.call('HGET', holders, key)
if not holder then return 0 end
refused = check_hand_on(key, holder)
if refused then return refused end
hand_on(key, holder)
return 1
