"""Partitioned queues: K full queues under hash tags ``{q#0}``…``{q#K-1}``, and the key
hash that routes a message to one.

A queue of ``CoreConfig.partitions`` K > 1 spreads over a Redis Cluster's masters while
every script stays single-slot: each partition is today's layout under a hash tag of
its own (``QueueKeys.partition``). Its base keys (``{q}``) keep what belongs to the
whole queue; ``record.py`` keeps K in Redis and checks it where each write happens.

Routing (:func:`route`): a message with an ordering key goes to ``partition_of(key, K)``,
so one key's messages keep their order within one partition; without a key, a message
whose id is known before sending (publish-once, a batch sent once, a delayed one) goes
to ``crc32(id) mod K`` (sent again, it meets its marker), and the rest take turns.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Sequence

from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import (
    PartitionedQueueError,
)
from redisq_django.core.keys import QueueKeys

#: The most partitions a queue may have.
MAX_PARTITIONS = 64


def partition_of(key: str, k: int) -> int:
    """The partition of ordering key (or message id) ``key`` among ``k``: the IEEE 802.3
    CRC-32 of its UTF-8 bytes (``zlib.crc32``, unsigned), modulo ``k`` (PROTOCOL.md,
    "Partitions: the key hash")."""
    return zlib.crc32(key.encode()) % k


class Partitions:
    """The partitions of one queue with K > 1: their keys and whose turn it is.

    Thread-safe: ``next()`` of an ``itertools.count`` is one step under the GIL.
    """

    __slots__ = ("_turn", "count", "keys")

    def __init__(self, base: QueueKeys, count: int) -> None:
        self.count = count
        self.keys = tuple(base.partition(i, of=count) for i in range(count))
        self._turn = itertools.count()

    def next(self) -> QueueKeys:
        """The next partition in turn (messages without a key or an id of their own)."""
        return self.keys[next(self._turn) % self.count]

    def of(self, key: str) -> QueueKeys:
        """The partition of ordering key (or message id) ``key``."""
        return self.keys[partition_of(key, self.count)]


def route(
    parts: Partitions,
    envelopes: Sequence[Envelope],
    *,
    once: bool = False,
    batch: str | None = None,
) -> list[tuple[QueueKeys, list[int]]]:
    """Which partition each of one queue's envelopes goes to, as ``(partition keys,
    indexes into envelopes)`` in the order first met.

    Keyed envelopes go to their key's partition. The others: with ``once``, each to its
    id's (every envelope has one then); with ``batch``, together to the batch id's (it
    stays one all-or-none write, at most once); else together to the first one's id's
    when it has one (a delayed message), else to the next partition in turn.
    """
    loose: QueueKeys | None = None
    out: dict[QueueKeys, list[int]] = {}
    for index, e in enumerate(envelopes):
        if e.key is not None:
            target = parts.of(e.key)
        elif once and e.id is not None:
            target = parts.of(e.id)
        else:
            if loose is None:
                chosen = batch if batch is not None else e.id
                loose = parts.of(chosen) if chosen is not None else parts.next()
            target = loose
        out.setdefault(target, []).append(index)
    return list(out.items())


def pick(layout: Sequence[QueueKeys], partition: int | None, what: str) -> QueueKeys:
    """The keys of partition ``partition`` of a queue laid out as ``layout`` (its keys,
    or each of its partitions' keys), or its only keys when ``partition`` is None.

    Args:
        what: what is asked, for the error (e.g. "a dead letter").

    Raises:
        PartitionedQueueError: ``partition`` missing on a partitioned queue, given on
            another, or out of range.
    """
    queue, count = layout[0].queue, len(layout)
    if partition is None and count == 1:
        return layout[0]
    if count == 1:
        raise PartitionedQueueError(
            f"Queue {queue!r} is not partitioned (REDISQ['PARTITIONS'] gives it none): ask "
            f"for {what} by the queue alone, not Place({queue!r}, {partition!r})."
        )
    if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < count:
        raise PartitionedQueueError(
            f"Queue {queue!r} has {count} partitions: say which one holds {what}, "
            f"Place({queue!r}, 0) to Place({queue!r}, {count - 1}) (got {partition!r})."
        )
    return layout[partition]
