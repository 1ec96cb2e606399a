"""Gauges read from Redis itself at scrape time: the state of every queue and consumer.

Redis is the truth for backlog, in-flight, ages and instances: whichever workers run or
not, the figures are those of the queue. They are read with the same pipelined commands
as ``manage.py redisq status`` and the admin (``broker.operator.stats``) plus one
``XINFO STREAM`` per queue for the published count (``broker.operator.entries_added``).
A Redis that does not answer in time makes ``redisq_redis_up`` 0 and the rest missing,
never a failed scrape. One queue that cannot be read (a registry member that is no queue
name, which any Redis client may write, or records that refuse to be read) costs only
its own series: it is counted in ``redisq_unreadable_queues`` and logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from redisq_django.core.broker import Broker
from redisq_django.core.errors import RedisqError, RedisUnavailable
from redisq_django.core.keys import readable_names
from redisq_django.core.limits import FlowFigures
from redisq_django.core.stats import QueueStats
from redisq_django.metrics import extras, families

logger = logging.getLogger("redisq.metrics")

#: The unreadable queues already logged by this process (at most this many are kept).
_LOGGED_MAX = 1000
_logged: set[str] = set()

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
            stats, added, unreadable, flows = self._read()
        except (RedisqError, redis.RedisError, OSError) as exc:
            logger.warning("redisq metrics: Redis did not answer: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        left_out = _family(families.UNREADABLE)
        left_out.add_metric([], unreadable)
        yield left_out
        yield from self._queue_families(stats, added)
        yield from self._consumer_families(stats, flows)

    # -- reading -------------------------------------------------------------------------

    def _read(self) -> tuple[list[QueueStats], dict[str, int], int, list[FlowFigures]]:
        """The stats and published counts of every readable queue, how many were not, and
        what the limits of each consumer read (in the stats' order) are doing."""
        broker = self.connect()
        names, invalid = readable_names(sorted({*broker.queues(), *self.queues()}))
        for name in invalid:
            _log_once(name, "is in the queue registry but is no queue name")
        try:
            stats = broker.operator.stats(names)
        except (RedisUnavailable, redis.ConnectionError, redis.TimeoutError, OSError):
            raise
        except (RedisqError, redis.RedisError):  # one queue's records: read one by one
            stats = []
            for name in names:
                try:
                    stats += broker.operator.stats([name])
                except (RedisUnavailable, redis.ConnectionError, redis.TimeoutError, OSError):
                    raise
                except (RedisqError, redis.RedisError) as exc:
                    _log_once(name, f"could not be read: {exc}")
                    invalid.append(name)
        read = [q.name for q in stats]
        flows = broker.operator.flows([(q.name, c.name) for q in stats for c in q.consumers])
        return stats, broker.operator.entries_added(read), len(invalid), flows

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

    def _consumer_families(
        self, stats: list[QueueStats], flows: list[FlowFigures]
    ) -> Iterator[Any]:
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
                families.SLOTS_IN_USE,
                families.RATE_AHEAD,
            )
        }
        seen: set[tuple[str, str]] = set()
        flow = iter(flows)
        for q in stats:
            for c in q.consumers:
                figures = next(flow)
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
                out[families.SLOTS_IN_USE].add_metric(labels, figures.slots_in_use)
                out[families.RATE_AHEAD].add_metric(labels, figures.rate_ahead_s)
        # Consumers known to the database only (removed from Redis, or never started)
        # still show their dead letters and pause.
        for key in sorted((set(dead_elsewhere) | set(paused)) - seen):
            out[families.DEAD].add_metric(list(key), dead_elsewhere.get(key, 0))
            out[families.PAUSED].add_metric(list(key), paused.get(key, 0))
        yield from out.values()


def _log_once(queue: str, why: str) -> None:
    """Log an unreadable queue at its first scrape in this process (not at every one)."""
    if queue in _logged:
        return
    if len(_logged) < _LOGGED_MAX:
        _logged.add(queue)
    logger.warning("redisq metrics: queue %r %s; its series are left out.", queue, why)


def _family(fam: families.Family) -> Any:
    from prometheus_client import core

    cls = {
        families.Kind.GAUGE: core.GaugeMetricFamily,
        families.Kind.COUNTER: core.CounterMetricFamily,
    }[fam.kind]
    return cls(fam.client_name, fam.help, labels=fam.labels)
