-- What a partitioned queue's own log and delayed keys hold instead (a string): a plain
-- publish to them (XADD, ZADD) fails with WRONGTYPE instead of writing where no consumer
-- reads. repartition.lua recognises a fence by this text.
local FENCE = 'redisq fence: this queue is partitioned, see the field partitions of '
