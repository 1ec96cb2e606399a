"""A partitioned queue whose partitions differ the way an incident makes them: one hot
(far more published and waiting), one that a consumer's instances leave out (stuck), one
worker process running 15 handler threads over its 4 partitions. The admin's HTML and
browser tests of the per-partition view share it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redisq_django.admin import live
from redisq_django.core import Place, default_instance_name, partition_of
from redisq_django.models import Consumer, Queue

#: Partitions of the queue.
K = 4
#: Messages published to each partition (by ordering key): partition 2 is hot.
PUBLISHED = {0: 5, 1: 4, 2: 40, 3: 3}
#: Messages of partition 0 that billing handles (the only ones handled).
HANDLED = 2
#: Handler threads per partition: billing's on every partition, audit's on 0 to 2 only.
BILLING_THREADS, AUDIT_THREADS = 3, 1


def key_of(part: int, n: int) -> str:
    """The ``n``-th ordering key that routes to partition ``part``."""
    keys = (f"order-{i}" for i in range(10_000))
    found = [k for k in keys if partition_of(k, K) == part]
    return found[n]


@dataclass
class Skewed:
    """What :func:`skewed_queue` made: the queue, its worker process's name, and what a
    page must show per partition."""

    queue: str
    worker: str
    backlog: dict[int, int] = field(default_factory=dict)
    threads: dict[int, int] = field(default_factory=dict)


def skewed_queue(broker: Any, queue: str) -> Skewed:
    """Queue ``queue`` of :data:`K` partitions (``REDISQ["PARTITIONS"]`` must say so),
    consumers billing and audit, :data:`PUBLISHED` messages, :data:`HANDLED` of partition
    0 handled by billing; one worker process with billing's threads on every partition
    and audit's on all but partition 3 (which audit's messages then wait on)."""
    live.clear()
    row = Queue.objects.create(name=queue)
    for name in ("audit", "billing"):
        Consumer.objects.create(queue=row, name=name, handler=f"shop.{name}")
        broker.consumers.ensure(queue, name)
    for part, n in PUBLISHED.items():
        for i in range(n):
            broker.publish(queue, {"part": part, "i": i}, key=key_of(part, i % 3))
    worker = default_instance_name()
    subs = {}
    for part in range(K):
        for n in range(BILLING_THREADS):
            name = f"{worker}-billing-p{part}-{n}"
            subs[name] = broker.subscribe(Place(queue, part), "billing", name)
        if part != 3:
            name = f"{worker}-audit-p{part}-0"
            subs[name] = broker.subscribe(Place(queue, part), "audit", name)
    for sub in subs.values():
        sub.heartbeat(120_000)
    first = subs[f"{worker}-billing-p0-0"]
    first.ack(first.fetch(count=HANDLED, block_ms=200))
    live.clear()
    made = Skewed(queue, worker)
    for part, n in PUBLISHED.items():
        made.backlog[part] = 2 * n - (HANDLED if part == 0 else 0)
        made.threads[part] = BILLING_THREADS + (AUDIT_THREADS if part != 3 else 0)
    return made
