"""Celery: the job and what the driver calls (``python common.py peer_celery enqueue``).

Worker: ``celery -A peer_celery worker --pool solo --concurrency 1`` (or
``--pool prefork``); no result backend, as for a fire-and-forget job.
"""

from __future__ import annotations

import common
from celery import Celery

app = Celery("peer_celery", broker=common.url())
# Silences the start-up deprecation warning; the behaviour is Celery's default.
app.conf.broker_connection_retry_on_startup = True


@app.task(name="peer_celery.incr")
def incr(t0: float) -> None:
    common.record(t0)


def one(t0: float) -> None:
    """Enqueue one job (Celery has no bulk publish: a group() sends one message per
    task)."""
    incr.delay(t0)
