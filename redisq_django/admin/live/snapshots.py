"""What a live page reads from Redis, through the admin's guarded access
(:mod:`~redisq_django.admin.live.access`: short timeouts, no retries, an outage remembered):
the figures, one page of one list, the instances, an ordered consumer's held-back keys,
and the trends.

A :class:`Snapshot` holds what was read, or why it could not be: a page shows the
reason in its banner and the figures it lacks as unknown, never a 500 or a hang.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redisq_django.admin.live.access import guarded, live_stats
from redisq_django.admin.live.charts import range_of
from redisq_django.admin.live.partition_rows import RATE_MINUTES
from redisq_django.core import Broker
from redisq_django.core.clock import now_ms
from redisq_django.core.instances import Instance
from redisq_django.core.operator import DELAYED, IN_FLIGHT, LOG, RETRYING, WAITING, Page
from redisq_django.core.ordered import HELD_LIMIT, HeldKey
from redisq_django.core.stats import ConsumerStats, QueueStats
from redisq_django.core.trends import Trend

#: The lists of a consumer's page, in the order of its tabs.
CONSUMER_LISTS = (
    WAITING,
    DELAYED,
    RETRYING,
    IN_FLIGHT,
    "instances",
    "dead",
)
#: The lists of a queue's page.
QUEUE_LISTS = ("consumers", DELAYED, LOG)
#: The overview's charts show at most this many queues (summed).
MAX_CHARTED_QUEUES = 100


@dataclass(frozen=True)
class Snapshot:
    """One live page's reading of Redis.

    Attributes:
        stats: the queue's figures (None: unknown).
        consumer: the consumer's figures (None: unknown, or not registered in Redis).
        page: the page of the list shown (None: unknown, or a list that is no page).
        instances: the consumer's instances (the instances list only).
        trends: the trends read for the charts (None: not asked for, or unknown).
        recent: a partitioned queue's trend of the last few minutes, each partition's
            in its ``partitions`` (its rates on the queue's page); None: another
            page, trends off, or unknown.
        held: a consumer's held-back ordering keys, at most ``HELD_LIMIT + 1`` (more than
            ``HELD_LIMIT``: the list is cut); None: unknown, or a queue's page.
        error: why something is unknown ("" when Redis answered).
        read_at_ms: when it was read (this host's clock).
    """

    stats: QueueStats | None = None
    consumer: ConsumerStats | None = None
    page: Page | None = None
    instances: list[Instance] | None = None
    trends: list[Trend] | None = None
    recent: Trend | None = None
    held: list[HeldKey] | None = None
    error: str = ""
    read_at_ms: int = field(default_factory=now_ms)


def chosen(name: str | None, lists: tuple[str, ...]) -> str:
    """The list ``name`` when the page has it, else its first list."""
    return name if name in lists else lists[0]


def consumer_snapshot(
    queue: str,
    name: str,
    list_name: str,
    cursor: str | None,
    n: int | None,
    range_name: str | None,
) -> Snapshot:
    """What the live page of consumer ``queue``/``name`` shows. ``range_name`` None:
    no trends (a refresh between two chart updates)."""
    live = live_stats([queue])

    def read(broker: Broker) -> tuple[Any, Any, Any]:
        operator = broker.operator
        page: Page | None = None
        instances = None
        if list_name == WAITING:
            page = operator.waiting(queue, name, cursor, n)
        elif list_name == DELAYED:
            page = operator.delayed(queue, cursor, n)
        elif list_name == RETRYING:
            page = operator.retrying(queue, name, cursor, n)
        elif list_name == IN_FLIGHT:
            page = operator.in_flight(queue, name, cursor, n)
        elif list_name == "instances":
            instances = operator.instances(queue, name)
        return page, instances, _trends(broker, [queue], range_name)

    reading = guarded(read)
    page, instances, trends = reading.value or (None, None, None)
    # Apart, so that a failing read of the keys leaves the list shown (and the reverse);
    # while Redis is known down it returns at once.
    held = guarded(lambda broker: broker.operator.held_keys(queue, name, HELD_LIMIT + 1))
    return Snapshot(
        stats=live.queue(queue),
        consumer=live.consumer(queue, name),
        page=page,
        instances=instances,
        trends=trends,
        held=held.value,
        error=live.error or reading.error or held.error,
    )


def queue_snapshot(
    queue: str, list_name: str, cursor: str | None, n: int | None, range_name: str | None
) -> Snapshot:
    """What the live page of queue ``queue`` shows (a partitioned queue's: also each
    partition's recent trend, for its rates)."""
    live = live_stats([queue])

    def read(broker: Broker) -> tuple[Any, Any, Any]:
        page: Page | None = None
        if list_name == DELAYED:
            page = broker.operator.delayed(queue, cursor, n)
        elif list_name == LOG:
            page = broker.operator.log(queue, cursor, n)
        trends = _trends(broker, [queue], range_name)
        recent = None
        if broker.partitions.count(queue) > 1 and broker.config.trends:
            # The charts' trend holds the last minutes too (every range is that long);
            # a refresh between two chart updates reads those minutes alone.
            recent = trends[0] if trends else broker.operator.trends([queue], RATE_MINUTES)[0]
        return page, trends, recent

    reading = guarded(read)
    page, trends, recent = reading.value or (None, None, None)
    return Snapshot(
        stats=live.queue(queue),
        page=page,
        trends=trends,
        recent=recent,
        error=live.error or reading.error,
    )


def overview_trends(queues: list[str], range_name: str | None) -> tuple[list[Trend] | None, str]:
    """The trends of ``queues`` (at most :data:`MAX_CHARTED_QUEUES`), or why unknown."""
    reading = guarded(lambda broker: _trends(broker, queues[:MAX_CHARTED_QUEUES], range_name))
    return reading.value, reading.error


def _trends(broker: Broker, queues: list[str], range_name: str | None) -> list[Trend] | None:
    if range_name is None or not broker.config.trends:
        return None
    _name, minutes, _size = range_of(range_name)
    return broker.operator.trends(queues, minutes)
