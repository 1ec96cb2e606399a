"""The redis-py client types the core accepts, and the reply shapes it reads, named once."""

from __future__ import annotations

from typing import Any, TypeAlias

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

#: A synchronous redis-py client: a standalone ``Redis`` or a ``RedisCluster``, with
#: bytes responses (``decode_responses=False``, the default).
RedisClient: TypeAlias = redis.Redis | redis.cluster.RedisCluster

#: The same for ``redis.asyncio`` (a Django task enqueued from async code).
AsyncRedisClient: TypeAlias = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster

# redis-py types replies for every ``decode_responses`` setting at once (bytes or str,
# maybe None); ours are always bytes. These say what the core reads.
#: ``XRANGE`` / ``XREVRANGE``: ``(entry id, fields)`` pairs.
StreamEntries: TypeAlias = list[tuple[bytes, dict[bytes, bytes]]]
#: ``ZRANGE…WITHSCORES``: ``(member, score)`` pairs.
ScoredMembers: TypeAlias = list[tuple[bytes, float]]


def execute(client: RedisClient, *args: Any) -> Any:
    """``client.execute_command(*args)``: one raw command (redis-py leaves it untyped)."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]
