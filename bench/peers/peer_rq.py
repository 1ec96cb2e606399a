"""RQ: the job and what the driver calls (``python common.py peer_rq enqueue``).

Workers: ``rq worker`` (forks a work horse per job, RQ's default and what its docs
deploy) and ``rq worker --worker-class rq.SimpleWorker`` (runs jobs in the worker
process itself: the one-process row comparable with the others).
"""

from __future__ import annotations

import common
from redis import Redis
from rq import Queue

QUEUE = "peers"


def incr(t0: float) -> None:
    common.record(t0)


_queue: Queue | None = None


def queue() -> Queue:
    """The queue, connected on first use (the worker never needs it)."""
    global _queue
    if _queue is None:
        _queue = Queue(QUEUE, connection=Redis.from_url(common.url()))
    return _queue


def one(t0: float) -> None:
    """Enqueue one job."""
    queue().enqueue(incr, t0)


def bulk(n: int) -> None:
    """Enqueue ``n`` drain jobs, ``enqueue_many`` (one pipeline) per chunk."""
    for start in range(0, n, common.BULK_CHUNK):
        size = min(common.BULK_CHUNK, n - start)
        queue().enqueue_many([Queue.prepare_data(incr, (0.0,)) for _ in range(size)])
