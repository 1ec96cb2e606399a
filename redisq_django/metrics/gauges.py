"""Gauges read from Redis itself at scrape time: the state of every queue and consumer.

Redis is the truth for backlog, in-flight, ages and instances: whichever workers run or
not, the figures are those of the queue. They are read with the same pipelined commands
as ``manage.py redisq status`` and the admin (``broker.operator.stats``) plus one
``XINFO STREAM`` per queue for the published count (``broker.operator.entries_added``).
A Redis that does not answer in time makes ``redisq_redis_up`` 0 and the rest missing,
never a failed scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from redisq_django.core.broker import Broker
from redisq_django.core.errors import RedisqError
from redisq_django.core.stats import QueueStats
from redisq_django.metrics import extras, families

logger = logging.getLogger("redisq.metrics")

#: Figures of (queue, consumer) that Redis does not hold (from the database).
PerConsumer = Mapping[tuple[str, str], float]


@dataclass(eq=False)  # registries key collectors by identity
class QueueCollector:
    """A prometheus-client collector of the :data:`~.families` whose source is Redis.

    Args:
        connect: the broker to read through, built at each scrape (its client with
            short timeouts: a scrape must not hang); its failure to connect is an
            outage like any other (``redisq_redis_up`` 0). With history on, the
            archive's lag is exported too.
        queues: more queue names than Redis's registry of queues knows (declared ones).
        dead_letters: dead letters per (queue, consumer) kept elsewhere (database rows),
            added to those still in Redis.
        paused: paused consumers per (queue, consumer) (1.0) from their configuration.
    """

    connect: Callable[[], Broker]
    queues: Callable[[], Iterable[str]] = field(default=lambda: ())
    dead_letters: Callable[[], PerConsumer] = field(default=dict)
    paused: Callable[[], PerConsumer] = field(default=dict)

    def describe(self) -> list[Any]:
        return []  # no describe-time Redis read when the collector is registered

    def collect(self) -> Iterator[Any]:
        extras.prometheus()  # names the extra when it is missing
        up = _family(families.REDIS_UP)
        try:
            stats, added = self._read()
        except (RedisqError, redis.RedisError, OSError) as exc:
            logger.warning("redisq metrics: Redis did not answer: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from self._queue_families(stats, added)
        yield from self._consumer_families(stats)

    # -- reading -------------------------------------------------------------------------

    def _read(self) -> tuple[list[QueueStats], dict[str, int]]:
        broker = self.connect()
        names = sorted({*broker.queues(), *self.queues()})
        return broker.operator.stats(names), broker.operator.entries_added(names)

    # -- families ------------------------------------------------------------------------

    def _queue_families(self, stats: list[QueueStats], added: dict[str, int]) -> Iterator[Any]:
        length = _family(families.QUEUE_LENGTH)
        delayed = _family(families.DELAYED)
        published = _family(families.PUBLISHED)
        dropped = _family(families.DROPPED)
        archive_lag = _family(families.ARCHIVE_LAG)
        for q in stats:
            length.add_metric([q.name], q.length)
            delayed.add_metric([q.name], q.delayed)
            dropped.add_metric([q.name], q.dropped)
            if q.name in added:
                published.add_metric([q.name], added[q.name])
            if q.archive_lag is not None:
                archive_lag.add_metric([q.name], q.archive_lag)
        yield from (length, delayed, published, dropped, archive_lag)

    def _consumer_families(self, stats: list[QueueStats]) -> Iterator[Any]:
        dead_elsewhere = self.dead_letters()
        paused = self.paused()
        out = {
            fam: _family(fam)
            for fam in (
                families.BACKLOG,
                families.PENDING,
                families.OLDEST_PENDING,
                families.OLDEST_UNDELIVERED,
                families.RETRYING,
                families.DEAD,
                families.INSTANCES,
                families.PAUSED,
            )
        }
        seen: set[tuple[str, str]] = set()
        for q in stats:
            for c in q.consumers:
                labels = [q.name, c.name]
                key = (q.name, c.name)
                seen.add(key)
                out[families.BACKLOG].add_metric(labels, c.lag + c.direct)
                out[families.PENDING].add_metric(labels, c.in_flight)
                out[families.OLDEST_PENDING].add_metric(labels, c.oldest_pending_age_s or 0.0)
                out[families.OLDEST_UNDELIVERED].add_metric(
                    labels, c.oldest_undelivered_age_s or 0.0
                )
                out[families.RETRYING].add_metric(labels, c.waiting_retry)
                out[families.DEAD].add_metric(labels, c.dead + dead_elsewhere.get(key, 0))
                out[families.INSTANCES].add_metric(labels, c.instances_alive)
                out[families.PAUSED].add_metric(labels, paused.get(key, 0))
        # Consumers known to the database only (removed from Redis, or never started)
        # still show their dead letters and pause.
        for key in sorted((set(dead_elsewhere) | set(paused)) - seen):
            out[families.DEAD].add_metric(list(key), dead_elsewhere.get(key, 0))
            out[families.PAUSED].add_metric(list(key), paused.get(key, 0))
        yield from out.values()


def _family(fam: families.Family) -> Any:
    from prometheus_client import core

    cls = {
        families.Kind.GAUGE: core.GaugeMetricFamily,
        families.Kind.COUNTER: core.CounterMetricFamily,
    }[fam.kind]
    return cls(fam.client_name, fam.help, labels=fam.labels)
