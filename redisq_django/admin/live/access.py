"""The admin's access to Redis: short timeouts, no retries, few round trips, and an
outage remembered for a few seconds, so that no admin page waits on a sick Redis.

Every admin page that shows figures from Redis, and every page added later (live
consumer and queue pages, trends), reads Redis through this module:

- :func:`admin_broker` is a :class:`~redisq_django.core.Broker` on a client of its own
  (:func:`~redisq_django.connection.quick_broker`), built from the same settings as the
  workers' but with ``REDISQ['ADMIN_REDIS_TIMEOUT']`` (default 0.5 s) as socket and
  connect timeout and no retries: a stopped Redis fails at
  once, a hung one (accepts, never answers) after one timeout, never after redis-py's
  default three retries.
- :func:`guarded` runs one read (a function of that broker, ideally one pipeline) and
  returns a :class:`Reading`: its value, or ``None`` and the reason Redis could not
  answer. A failure marks Redis *down* for :data:`DOWN_S` seconds; meanwhile every
  guarded read returns at once with the same reason, so a page with many reads, or many
  pages at once, wait at most one timeout between them.
- :func:`live_stats` reads the stats of many queues through :func:`guarded` in two round
  trips (``broker.operator.stats``), cached for :data:`STATS_TTL_S`.

A page shows :attr:`Reading.error` in a banner ("Redis is unreachable …") and the
figures it could not read as unknown ("?"), never a 500. Mutations from the admin
(retry, discard) use :func:`admin_broker` too and report a failure through ``messages``.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import redis
from redis.exceptions import RedisClusterException, SlotNotCoveredError

from redisq_django.conf import get_settings
from redisq_django.connection import quick_broker
from redisq_django.core import Broker
from redisq_django.core.errors import ConfigurationError, RedisqError, RedisUnavailable
from redisq_django.core.stats import ConsumerStats, QueueStats
from redisq_django.core.trends import SAMPLE_INTERVAL_S

logger = logging.getLogger("redisq.admin")

T = TypeVar("T")

#: Figures older than this are read again, seconds.
STATS_TTL_S = 1.0
#: After a failed read, further reads give up at once for this long, seconds.
DOWN_S = 5.0

_lock = threading.Lock()
_stats: dict[str, tuple[float, QueueStats]] = {}
_down: dict[str, Any] = {"until": 0.0, "reason": ""}
# When Redis last answered a read of this process (monotonic s; None: never), so that a page
# opened during an outage can say how old the last good figures are, not "updated now".
_answered: dict[str, float | None] = {"at": None}
_sampled: dict[str, float] = {}  # queue -> when this process last recorded its samples


@functools.cache
def admin_broker() -> Broker:
    """The broker of admin pages: the configured Redis, short timeouts, no retries.

    Raises:
        SettingsError: ``REDISQ`` names no usable connection.
    """
    return quick_broker(float(get_settings()["ADMIN_REDIS_TIMEOUT"]))


@dataclass(frozen=True)
class Reading(Generic[T]):
    """What a guarded read returned: ``value``, or ``None`` and ``error`` (why Redis
    could not answer, in words for a banner)."""

    value: T | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def _unreachable(exc: BaseException, broker: Broker | None) -> str:
    text = str(exc).rstrip(".")
    where = broker.where if broker is not None else _configured()
    return (
        f"Redis at {where} is unreachable ({text}). Figures from Redis "
        "are shown as “?”; retrying dead letters waits until it is back."
    )


def _configured() -> str:
    """Where ``REDISQ`` points, never with its password (no client could be built)."""
    settings = get_settings()
    if not settings["URL"]:
        return f"CACHES[{settings['CONNECTION']!r}]"
    url = urlsplit(settings["URL"])
    where = f"{url.hostname}:{url.port or 6379}"
    return f"cluster {where}" if settings["CLUSTER"] else where


#: Errors that say Redis cannot serve us now (as opposed to one command's error reply).
_OUTAGES = (redis.ConnectionError, redis.TimeoutError, RedisUnavailable, OSError)


def guarded(read: Callable[[Broker], T]) -> Reading[T]:
    """``read(admin_broker())``, or the reason it failed; while Redis is known to be
    down (see :data:`DOWN_S`), the reason at once, without trying.

    An outage (connection refused, timeout, a refusal such as OOM or LOADING) marks Redis
    down; an error reply to one command (or a settings error) fails this read only.
    """
    now = time.monotonic()
    with _lock:
        if now < _down["until"]:
            return Reading(None, _down["reason"])
    broker = None
    try:
        broker = admin_broker()
        value = read(broker)
        with _lock:
            _answered["at"] = time.monotonic()
        return Reading(value)
    except (*_OUTAGES, RedisClusterException) as exc:
        if isinstance(exc, RedisClusterException) and not _cluster_outage(exc, broker):
            logger.warning("Admin: a read from Redis failed: %s", exc)
            return Reading(None, f"Redis could not answer ({str(exc).rstrip('.')}).")
        reason = _unreachable(exc, broker)
        logger.warning("Admin: %s", reason)
        with _lock:
            _down.update(until=time.monotonic() + DOWN_S, reason=reason)
        return Reading(None, reason)
    except ConfigurationError as exc:  # REDISQ names no usable Redis (E005): its words
        logger.warning("Admin: %s", exc)
        return Reading(None, str(exc))
    except (redis.RedisError, RedisqError) as exc:
        logger.warning("Admin: a read from Redis failed: %s", exc)
        return Reading(None, f"Redis could not answer ({str(exc).rstrip('.')}).")


def _cluster_outage(exc: RedisClusterException, broker: Broker | None) -> bool:
    # Not a RedisError: building the client found no node (None), or a slot's is gone.
    return broker is None or isinstance(exc, SlotNotCoveredError)


@dataclass(frozen=True)
class Live:
    """The live stats of the queues a page shows, or why they are unknown."""

    queues: Mapping[str, QueueStats] = field(default_factory=dict)
    error: str = ""

    def queue(self, name: str) -> QueueStats | None:
        """The stats of queue ``name`` (None: unknown, Redis unreachable)."""
        return self.queues.get(name)

    def consumer(self, queue: str, name: str) -> ConsumerStats | None:
        """The stats of one logical consumer (None: unknown, or not in Redis yet)."""
        stats = self.queues.get(queue)
        if stats is None:
            return None
        return next((c for c in stats.consumers if c.name == name), None)


def live_stats(queues: Iterable[str]) -> Live:
    """The stats of ``queues``: fresh ones (read within :data:`STATS_TTL_S`) from the
    cache, the others in one :func:`guarded` read of two round trips."""
    names = sorted(set(queues))
    now = time.monotonic()
    with _lock:
        fresh = {n: hit[1] for n in names if (hit := _stats.get(n)) and now - hit[0] < STATS_TTL_S}
    missing = [n for n in names if n not in fresh]
    if not missing:
        return Live(fresh)

    reading = guarded(lambda broker: broker.operator.stats(missing))
    if reading.value is None:
        return Live(fresh, reading.error)
    read_at = time.monotonic()
    with _lock:
        for stats in reading.value:
            _stats[stats.name] = (read_at, stats)
    _record_samples(reading.value, read_at)
    return Live({**fresh, **{s.name: s for s in reading.value}})


def _record_samples(read: list[QueueStats], read_at: float) -> None:
    """Keep the trends' backlog samples going while no worker runs: the figures just
    read, written once per :data:`~redisq_django.core.trends.SAMPLE_INTERVAL_S` per queue
    (by this process), only right after Redis answered, never while it is known down."""
    with _lock:
        due = [
            s
            for s in read
            if read_at - _sampled.get(s.name, -SAMPLE_INTERVAL_S) >= SAMPLE_INTERVAL_S
        ]
        for stats in due:
            _sampled[stats.name] = read_at
    if due:
        guarded(lambda b: b.config.trends and b.operator.record_trend_samples(due))


def queue_names() -> Reading[list[str]]:
    """Every queue name Redis knows (published to or consumed from), sorted."""

    return guarded(lambda broker: broker.queues())


def status() -> Reading[bool]:
    """Whether Redis answers (a PING), for pages that read nothing else from it."""
    return guarded(lambda broker: broker.operator.ping())


def answered_ago_ms() -> int | None:
    """Milliseconds since Redis last answered a read of this process (None: never, since
    it started or since :func:`clear`): how old the last good figures are."""
    with _lock:
        at = _answered["at"]
    return None if at is None else int((time.monotonic() - at) * 1000)


def forget_figures() -> None:
    """Forget the cached figures (an action changed them), keeping the client and any
    outage remembered."""
    with _lock:
        _stats.clear()


def clear() -> None:
    """Forget cached figures, the outage and the client (the settings, hence maybe the
    Redis, changed)."""
    with _lock:
        _stats.clear()
        _sampled.clear()
        _down.update(until=0.0, reason="")
        _answered["at"] = None
    admin_broker.cache_clear()
