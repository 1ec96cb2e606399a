"""Dramatiq: the actor and what the driver calls (``python common.py peer_dramatiq enqueue``).

Worker: ``dramatiq peer_dramatiq --processes 1 --threads 1`` (and its default 8
threads); the Redis broker with its default middleware.
"""

from __future__ import annotations

import common
import dramatiq
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=common.url()))


@dramatiq.actor(queue_name="peers")
def incr(t0: float) -> None:
    common.record(t0)


def one(t0: float) -> None:
    """Enqueue one job (no bulk enqueue: group() sends one message per call)."""
    incr.send(t0)
