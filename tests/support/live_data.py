"""A consumer with every kind of message before it dies, built through the real broker:
waiting (in the log and in its private input), delayed, retrying with an error, in flight
on an instance that reports what it runs, and dead letters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redisq_django.core import Message
from redisq_django.deadletters.sinking import sink
from redisq_django.models import Consumer, Queue

#: The ordering key of :func:`live_consumer`'s first six messages.
CART_KEY = "cart-7"


@dataclass
class Live:
    """What :func:`live_consumer` built (message ids by state)."""

    queue: str
    waiting: list[str] = field(default_factory=list)  # in delivery order
    delayed: list[str] = field(default_factory=list)
    retrying: list[str] = field(default_factory=list)
    in_flight: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    running: Message | None = None
    instance: Any = None  # the Subscription that holds the in-flight ones


def live_consumer(broker: Any, queue: str, *, waiting: int = 6, rows: bool = True) -> Live:
    """Queue ``queue`` with consumers billing (the one to look at) and email; billing has
    2 retries (with errors), 3 messages in flight on instance ``worker-1`` (running the
    first), ``waiting`` messages waiting and one dead letter; the queue has 2 delayed.
    The first six (retrying, dead, in flight) have the ordering key :data:`CART_KEY`, the
    delayed ones ``order-<n>``, the waiting ones none."""
    if rows:
        q = Queue.objects.create(name=queue)
        for name in ("billing", "email"):
            Consumer.objects.create(queue=q, name=name, handler=f"shop.consumers.{name}")
    for name in ("billing", "email"):
        broker.consumers.ensure(queue, name)
    made = Live(queue)
    first = broker.publish_many(queue, [{"order": 100 + n} for n in range(6)], key=CART_KEY)
    sub = broker.subscribe(queue, "billing", "worker-1")
    got = sub.fetch(count=6, block_ms=500)
    assert [m.id for m in got] == first
    sub.fail(got[0], ValueError("card declined for order 100"))
    sub.fail(got[1], TimeoutError("tax service timed out"))
    sub.reject(got[2], KeyError("customer"))
    sink(queue, "billing")
    made.retrying, made.dead, made.in_flight = first[:2], [first[2]], first[3:]
    made.running = got[3]
    sub.heartbeat(60_000, running=got[3])
    broker.client.hset(sub.gkeys.running, sub.instance, f"log:{got[3].entry_id.decode()}")
    made.instance = sub
    made.waiting = broker.publish_many(queue, [{"order": 200 + n} for n in range(waiting)])
    made.delayed = [
        broker.publish(queue, {"later": n}, delay=3600 + n, key=f"order-{n}") for n in range(2)
    ]
    return made


def console_pages(queue: str) -> list[str]:
    """The admin pages that show ``queue`` of :func:`live_consumer` from Redis: the
    overview, the queue list, the queue's and billing's pages, and billing's live page."""
    from django.urls import reverse

    queue_row = Queue.objects.get(name=queue)
    billing = Consumer.objects.get(queue=queue_row, name="billing")
    return [
        reverse("admin:redisq_django_overview_changelist"),
        reverse("admin:redisq_django_queue_changelist"),
        reverse("admin:redisq_django_queue_change", args=[queue_row.pk]),
        reverse("admin:redisq_django_consumer_change", args=[billing.pk]),
        reverse("admin:redisq_django_consumer_live", args=[queue, "billing"]),
    ]
