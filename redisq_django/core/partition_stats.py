"""A partitioned queue's figures as one queue's: its partitions' stats and trends added up.

A queue of K > 1 partitions (``core/partitions/``) keeps K full queues; an operator sees
one queue whose figures add up over them. Counts are summed (lengths, backlogs, in
flight, retries, dead letters, drops, instances: each partition runs instances of its
own), the oldest ages are the largest, a position is the furthest (each partition's is
in :attr:`~redisq_django.core.stats.QueueStats.partitions`); the worker processes are
told apart (one process runs instances on every partition: it counts once).

Trends: the counters stay where they are written, in each partition's ``{q#i}:trend``
hashes, because they ride in the same write as what they count (a script's or a
``MULTI``'s keys share one hash tag: on a Cluster, a ``{q}`` key is in another slot). The
samples of the backlog are written once for the whole queue, to ``{q}:trend``, from the
added-up stats. A chart reads the base hash and every partition's and adds them up field
by field (:func:`sum_trends`), so a queue repartitioned within the 48 hours a trend is
kept keeps its earlier minutes too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from redisq_django.core.keys import QueueKeys
from redisq_django.core.stats import ConsumerStats, QueueStats, id_order, read_many
from redisq_django.core.trends import Trend
from redisq_django.core.types import RedisClient


def read_layouts(
    client: RedisClient, layouts: Sequence[Sequence[QueueKeys]], *, history: bool = False
) -> list[QueueStats]:
    """The stats of queues given by their layouts (``PartitionLayouts.layout``: a queue's
    keys, or each of its partitions' keys), in that order, in the two round trips of
    :func:`~redisq_django.core.stats.read_many` whatever their number: a partitioned
    queue's figures added up over its partitions (:func:`merge`).

    Raises:
        redis.ConnectionError, redis.TimeoutError: Redis cannot be reached.
    """
    flat = [keys for layout in layouts for keys in layout]
    read = iter(read_many(client, flat, history=history))
    out = []
    for layout in layouts:
        parts = [next(read) for _ in layout]
        partitioned = layout[0].part is not None
        out.append(merge(layout[0].queue, parts) if partitioned else parts[0])
    return out


def merge(queue: str, parts: Sequence[QueueStats]) -> QueueStats:
    """The stats of ``queue`` from those of its partitions (in partition order), kept in
    the result's ``partitions``."""
    by_name: dict[str, list[ConsumerStats]] = {}
    for part in parts:
        for c in part.consumers:
            by_name.setdefault(c.name, []).append(c)
    oldest = [p.oldest_id for p in parts if p.oldest_id]
    lags = [p.archive_lag for p in parts if p.archive_lag is not None]
    events = [p.events for p in parts if p.events is not None]
    return QueueStats(
        name=queue,
        length=sum(p.length for p in parts),
        delayed=sum(p.delayed for p in parts),
        dropped=sum(p.dropped for p in parts),
        oldest_id=min(oldest, key=id_order) if oldest else None,
        consumers=[_consumer(name, cs) for name, cs in sorted(by_name.items())],
        archive_lag=sum(lags) if lags else None,
        events=sum(events) if events else None,
        partitions=list(parts),
    )


def _consumer(name: str, parts: Sequence[ConsumerStats]) -> ConsumerStats:
    """One logical consumer over the partitions it is registered on."""
    return ConsumerStats(
        name=name,
        lag=sum(c.lag for c in parts),
        in_flight=sum(c.in_flight for c in parts),
        waiting_retry=sum(c.waiting_retry for c in parts),
        direct=sum(c.direct for c in parts),
        dead=sum(c.dead for c in parts),
        oldest_unacked_age_s=_oldest(c.oldest_unacked_age_s for c in parts),
        instances_alive=sum(c.instances_alive for c in parts),
        last_delivered_id=max((c.last_delivered_id for c in parts), key=id_order),
        oldest_pending_age_s=_oldest(c.oldest_pending_age_s for c in parts),
        oldest_undelivered_age_s=_oldest(c.oldest_undelivered_age_s for c in parts),
        held_back=sum(c.held_back for c in parts),
        workers=frozenset().union(*(c.workers for c in parts)),
    )


def _oldest(ages: Iterable[float | None]) -> float | None:
    return max((a for a in ages if a is not None), default=None)


def sum_trends(queue: str, base: Trend, parts: Sequence[Trend]) -> Trend:
    """One trend of ``queue`` from its base hash's and its partitions' (same minutes):
    every field added up minute by minute; each partition's own kept in the result's
    ``partitions`` (a chart by partition, a hot or stuck partition on the queue's page)."""
    minutes: list[dict[str, int]] = []
    for i in range(len(base.minutes)):
        total: dict[str, int] = {}
        for trend in (base, *parts):
            for name, value in trend.minutes[i].items():
                total[name] = total.get(name, 0) + value
        minutes.append(total)
    return Trend(queue, base.first_minute, minutes, partitions=list(parts))
