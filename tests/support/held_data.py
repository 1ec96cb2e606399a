"""An ordered consumer with ordering keys held back in every state, built through the
real broker on a real Redis: a holder running on an instance, one retrying after an
error, one queued in the consumer's input, and one found nowhere."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from redisq_django.models import Consumer, Queue

#: A key as hostile as keys may be (any UTF-8 text): markup, quotes, a bar, a line
#: break, an emoji.
ODD_KEY = '<script>alert("x")</script> | \'q\' "dq"\nline 2 🎉'
#: The consumer :func:`held_consumer` builds.
CONSUMER = "ledger"
#: The instance that holds its deliveries.
INSTANCE = "i1"


@dataclass
class Held:
    """What :func:`held_consumer` built.

    Attributes:
        queue: the queue.
        holders: ordering key -> the id of the message holding it.
        waiting: ordering key -> how many of its messages wait behind the holder.
        later: ordering key -> the ids of its waiting messages, in order.
        sub: the instance's subscription (``i1``; its retry backoff is an hour).
    """

    queue: str
    holders: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    later: dict[str, list[str]] = field(default_factory=dict)
    sub: Any = None


def held_consumer(broker: Any, queue: str, *, rows: bool = True) -> Held:
    """Ordered consumer :data:`CONSUMER` of ``queue`` with four keys held back, most
    waiting first: :data:`ODD_KEY` (3 waiting) held by a message running on
    :data:`INSTANCE`; ``retry-me`` (2) by a message retrying in an hour after
    ``ValueError: card declined``; ``lost`` (1) by a message found nowhere (acknowledged
    behind redisq's back); ``queued`` (1) by a message queued in the consumer's input
    (its predecessor acknowledged). ``rows``: with its Queue and Consumer rows."""
    if rows:
        q = Queue.objects.get_or_create(name=queue)[0]
        Consumer.objects.create(queue=q, name=CONSUMER, handler="shop.consumers.ledger")
    broker.consumers.ensure(queue, CONSUMER)
    made = Held(queue)
    published: dict[str, list[str]] = {}
    for key, n in ((ODD_KEY, 4), ("retry-me", 3), ("queued", 3), ("lost", 2)):
        published[key] = broker.publish_many(
            queue, [{"key": key, "n": i} for i in range(n)], key=key
        )
    sub = broker.subscribe(
        queue, CONSUMER, INSTANCE, ordered=True, backoff_s=3600, max_backoff_s=3600
    )
    made.sub = sub
    got = {d.key: d for d in sub.fetch(count=100, block_ms=200)}
    assert sorted(got) == sorted(published), got
    sub.fail(got["retry-me"], ValueError("card declined"))
    sub.ack([got["queued"]])  # hands the key on to its second message, into the input
    gkeys = sub.gkeys
    broker.client.xack(gkeys.queue_keys.log, gkeys.group, got["lost"].entry_id)
    made.holders = {
        ODD_KEY: published[ODD_KEY][0],
        "retry-me": published["retry-me"][0],
        "queued": published["queued"][1],
        "lost": published["lost"][0],
    }
    made.later = {
        ODD_KEY: published[ODD_KEY][1:],
        "retry-me": published["retry-me"][1:],
        "queued": published["queued"][2:],
        "lost": published["lost"][1:],
    }
    made.waiting = {k: len(v) for k, v in made.later.items()}
    return made


@contextmanager
def declared(queue: str, *, ordered: bool = True) -> Iterator[None]:
    """:data:`CONSUMER` of ``queue`` declared in this process's code (``@consumer``),
    ordered or not, for the time of the block."""
    from redisq_django import consumer
    from redisq_django.consuming.declarations import registry

    registry.autodiscover()  # the apps' own declarations first, as a process has them
    saved = dict(registry._declarations)
    try:

        @consumer(queue, name=CONSUMER, ordered=ordered)
        def ledger(message: Any) -> None:
            pass

        yield
    finally:
        registry._declarations.clear()
        registry._declarations.update(saved)
