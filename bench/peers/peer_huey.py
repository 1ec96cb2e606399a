"""Huey: the task and what the driver calls (``python common.py peer_huey enqueue``).

Worker: ``huey_consumer peer_huey.huey -w 1 -k thread``; ``RedisHuey`` with its
defaults (blocking reads, results kept only for tasks that return something).
"""

from __future__ import annotations

import common
from huey import RedisHuey

huey = RedisHuey("peers", url=common.url())


@huey.task()
def incr(t0: float) -> None:
    common.record(t0)


def one(t0: float) -> None:
    """Enqueue one job (Huey's API has no bulk enqueue)."""
    incr(t0)
