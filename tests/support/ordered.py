"""What the tests of ordered consumers share: an ordered instance of consumer ``ledger``,
a fetch, and the (key, n) sequence of what was received."""

from __future__ import annotations

import time

from redisq_django.core import Broker
from redisq_django.core.delivery import Delivery
from redisq_django.core.subscription import Subscription

CONSUMER = "ledger"


def ordered(broker: Broker, queue: str, instance: str, **policy: object) -> Subscription:
    """An ordered instance of ``ledger`` on ``queue`` (``policy``: RetryPolicy fields)."""
    return broker.subscribe(queue, CONSUMER, instance, ordered=True, **policy)  # type: ignore[arg-type]


def fetch(sub: Subscription, count: int = 100, block_ms: int = 50) -> list[Delivery]:
    return sub.fetch(count=count, block_ms=block_ms)


def seq(deliveries: list[Delivery]) -> list[tuple[str | None, int]]:
    """``(key, payload["n"])`` of each delivery, in order."""
    return [(d.key, d.payload["n"]) for d in deliveries]


def handle_all(sub: Subscription, expected: int, timeout_s: float = 10) -> list[Delivery]:
    """Fetch and ack one message at a time until ``expected`` were handled (bounded)."""
    handled: list[Delivery] = []
    deadline = time.monotonic() + timeout_s
    for _ in range(1000):
        if len(handled) >= expected or time.monotonic() > deadline:
            break
        for d in fetch(sub):
            handled.append(d)
            sub.ack([d])
    return handled
