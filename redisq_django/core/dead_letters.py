"""Dead letters in Redis on every partition of a queue: reading them (one partition, or
all merged oldest first) and where one is delivered again."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import cast

from redisq_django.core import envelope as env
from redisq_django.core.dead_entry import DeadEntry
from redisq_django.core.keys import QueueKeys
from redisq_django.core.partitions import Partitions
from redisq_django.core.types import RedisClient, StreamEntries


def _order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return (int(ms), int(seq or 0)) if ms.isdigit() and (seq or "0").isdigit() else (0, 0)


def read(
    client: RedisClient, keys: QueueKeys, consumer: str, count: int, after: str | None
) -> list[DeadEntry]:
    """The dead letters of ``consumer`` in ``keys``' dead stream (a queue's or one
    partition's), oldest first, at most ``count``, after entry id ``after``."""
    after_id = f"({after}" if after else "-"
    dead = keys.group(consumer).dead
    entries = cast("StreamEntries", client.xrange(dead, after_id, "+", count=count))
    return [DeadEntry.from_entry(keys.queue, eid, dict(f), keys.part) for eid, f in entries]


def read_all(
    client: RedisClient,
    layout: Sequence[QueueKeys],
    consumer: str,
    count: int,
    after: str | None,
) -> list[DeadEntry]:
    """The dead letters of ``consumer`` on every partition of ``layout`` (one pipelined
    round trip; one call per partition's node on a Cluster), merged oldest first by entry
    id, then partition, at most ``count``; ``after`` applies to each partition."""
    after_id = f"({after}" if after else "-"
    with client.pipeline(transaction=False) as pipe:
        for keys in layout:
            pipe.xrange(keys.group(consumer).dead, after_id, "+", count=count)
        replies = cast("list[StreamEntries]", pipe.execute())
    merged = [
        DeadEntry.from_entry(keys.queue, eid, dict(f), keys.part)
        for keys, entries in zip(layout, replies, strict=True)
        for eid, f in entries
    ]
    merged.sort(key=lambda d: (_order(d.entry_id), d.partition or 0))
    return merged[:count]


def redrive_target(
    base: QueueKeys,
    parts: Partitions | None,
    envelope: Mapping[bytes, bytes],
    partition: int | None,
) -> QueueKeys:
    """Where a dead letter kept elsewhere (e.g. a database row) is delivered again.

    An unpartitioned queue: its keys, whatever partition the letter died in (the queue
    may have had partitions then). A partitioned one: a keyed message goes to its key's
    partition (PROTOCOL.md, "Partitions: the key hash") — the one it died in, unless the
    queue was repartitioned since, and in any case the one its key's next messages go
    to, so that an ordered consumer keeps the key's order; another goes back to
    ``partition``, the one it died in, while the queue has it, else to its id's.
    """
    if parts is None:
        return base
    key = envelope.get(env.F_KEY)
    if key is not None:
        # The CRC-32 of the key's UTF-8 bytes: the bytes on the wire, as routing hashes.
        return parts.keys[zlib.crc32(key) % parts.count]
    if isinstance(partition, int) and 0 <= partition < parts.count:
        return parts.keys[partition]
    message_id = envelope.get(env.F_ID)
    if message_id:
        return parts.keys[zlib.crc32(message_id) % parts.count]
    return parts.next()
