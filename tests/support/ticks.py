"""What the schedule tests read back: the messages a schedule's ticks published to a
queue (their ids are ``<schedule>@<tick ms>``, PROTOCOL.md)."""

from __future__ import annotations

import redis

from redisq_django.core.clock import ms_from_entry_id
from redisq_django.core.keys import queue_keys


def published_ids(client: redis.Redis, queue: str) -> list[str]:
    """The message ids in ``queue``'s log, in order."""
    return [f[b"id"].decode() for _, f in client.xrange(queue_keys("redisq", queue).log)]


def published_ticks(client: redis.Redis, queue: str) -> list[tuple[int, int]]:
    """(tick ms, ms of its log entry id: when Redis appended it) of each tick message."""
    log = client.xrange(queue_keys("redisq", queue).log)
    return [(int(f[b"id"].decode().rsplit("@", 1)[1]), ms_from_entry_id(e)) for e, f in log]
