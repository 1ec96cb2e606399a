"""Live Redis stats for admin pages, cached for a second so one page costs one read
per queue however many columns show them."""

from __future__ import annotations

import logging
import threading
import time

from redisq_django.connection import get_broker
from redisq_django.core.errors import RedisqError
from redisq_django.core.stats import ConsumerStats, QueueStats

logger = logging.getLogger("redisq.admin")

#: Stats older than this are read again (seconds).
STATS_TTL_S = 1.0

_cache: dict[str, tuple[float, QueueStats | None]] = {}
_lock = threading.Lock()


def queue_stats(queue: str) -> QueueStats | None:
    """Stats of ``queue``, or None when Redis cannot be reached."""
    now = time.monotonic()
    with _lock:
        hit = _cache.get(queue)
    if hit and now - hit[0] < STATS_TTL_S:
        return hit[1]
    try:
        stats: QueueStats | None = get_broker().stats(queue)
    except RedisqError as exc:
        logger.warning("Admin stats unavailable: %s", exc)
        stats = None
    with _lock:
        _cache[queue] = (now, stats)
    return stats


def clear() -> None:
    """Forget every cached figure (the settings, hence maybe the Redis, changed)."""
    with _lock:
        _cache.clear()


def consumer_stats(queue: str, consumer: str) -> ConsumerStats | None:
    stats = queue_stats(queue)
    if stats is None:
        return None
    return next((c for c in stats.consumers if c.name == consumer), None)


def age(seconds: float | None) -> str:
    """A short human age: ``4.2s``, ``12m``, ``3.1h``; ``-`` for none."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
