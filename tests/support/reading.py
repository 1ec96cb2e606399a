"""Reading a queue as one of its consumers, in a test: everything waiting, acknowledged."""

from __future__ import annotations

from typing import Any

from redisq_django.core import Broker

#: At most this many fetches of :data:`BATCH` (100,000 messages): every loop is bounded.
MAX_FETCHES = 100
BATCH = 1000


def read_all(broker: Broker, queue: str, consumer: str) -> list[Any]:
    """Every message waiting for ``consumer`` of ``queue`` (each acknowledged once read),
    until a fetch that waited 50 ms returns none."""
    got: list[Any] = []
    with broker.subscribe(queue, consumer) as sub:
        for _ in range(MAX_FETCHES):
            batch = sub.fetch(count=BATCH, block_ms=50)
            if not batch:
                break
            sub.ack(batch)
            got += batch
    return got
