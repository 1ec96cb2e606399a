"""Where a queue's streams are: its base keys, or each partition's (without PySpark).

The pipeline reads the number of partitions Redis records for a queue (``{q}:meta`` field
``partitions``, PROTOCOL.md "Partitions"), never a setting: executors and jobs know only a
Redis URL. A partitioned queue is read as one queue whose streams are its partitions',
each named in streaming offsets and archive records by its *place*: ``"orders"`` for an
unpartitioned queue (as before partitions), ``"orders#2"`` for partition 2 of one (``#``
is in no queue name, as in the partition's hash tag ``{orders#2}``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from redisq_django.core.archives import Archives
from redisq_django.core.keys import QueueKeys, queue_keys
from redisq_django.core.partitions import META_FIELD, parse_recorded
from redisq_django.core.repartition import layout_of
from redisq_django.core.scripts import Scripts
from redisq_django.core.types import RedisClient


def place(queue: str, part: int | None) -> str:
    """The name of a queue's place: ``queue``, or ``queue#part`` for a partition."""
    return queue if part is None else f"{queue}#{part}"


def split_place(name: str) -> tuple[str, int | None]:
    """``"orders#2"`` as ``("orders", 2)``; ``"orders"`` as ``("orders", None)``."""
    queue, hashed, part = name.partition("#")
    return (queue, int(part)) if hashed else (queue, None)


def keys_of(prefix: str, name: str) -> QueueKeys:
    """The keys of place ``name`` (a queue, or ``queue#i``: its partition ``i``)."""
    queue, part = split_place(name)
    keys = queue_keys(prefix, queue)
    return keys if part is None else keys.partition(part)


def counts(conn: RedisClient, prefix: str, queues: Iterable[str]) -> dict[str, int]:
    """The number of partitions Redis records for each of ``queues`` (1 when none is).
    One round trip.

    Raises:
        ConfigurationError: a record is not a whole number from 1 to 64 (read strictly,
            as every process reads it: a job never guesses a layout).
    """
    names = list(queues)
    if not names:
        return {}
    with conn.pipeline(transaction=False) as pipe:
        for queue in names:
            pipe.hget(queue_keys(prefix, queue).meta, META_FIELD)
        replies: list[Any] = pipe.execute()
    return {
        queue: parse_recorded(raw, queue_keys(prefix, queue).meta) or 1
        for queue, raw in zip(names, replies, strict=True)
    }


def layouts(prefix: str, queues: Mapping[str, int]) -> list[tuple[str, QueueKeys]]:
    """Each queue's places in order, as ``(place name, keys)``, from ``{queue: K}``."""
    return [
        (place(queue, keys.part), keys)
        for queue, k in queues.items()
        for keys in layout_of(queue_keys(prefix, queue), k)
    ]


def archives(conn: RedisClient, prefix: str) -> Archives:
    """Named archives addressed by place: each partition keeps its own archive records
    (``{q#i}:archives``), which retention of that partition's log reads."""
    return Archives(conn, Scripts(conn), lambda name: keys_of(prefix, name))
