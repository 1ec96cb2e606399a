"""redisq_django: what the driver calls (``python common.py peer_ours enqueue``), in the
project's virtualenv with ``peersproject`` as the settings.

Worker: ``python -m django runconsumer peers`` in its modes (``--concurrency``,
``--processes``, ``--batch-ack``). The consumer is ``peersapp.consumers.incr``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import common

_QUEUE = "peers"
#: ``redisq_django.publish`` and ``publish_many``, bound by :func:`setup` (Django first).
_publish: Callable[..., Any]
_publish_many: Callable[..., Any]


def setup() -> None:
    """Django with ``peersproject``, and the consumer declared before anything is
    published: a new consumer starts at the next message, as one deployed before the
    site publishes does."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "peersproject")
    import django

    django.setup()
    from peersapp.consumers import NAME, QUEUE

    from redisq_django import publish, publish_many
    from redisq_django.connection import get_broker

    global _publish, _publish_many
    _publish, _publish_many = publish, publish_many
    get_broker().consumers.ensure(QUEUE, NAME)


def one(t0: float) -> None:
    """Publish one job: ``redisq_django.publish``."""
    _publish(_QUEUE, {"t0": t0})


def bulk(n: int) -> None:
    """Publish ``n`` drain jobs, ``publish_many`` (one round trip) per chunk."""
    for start in range(0, n, common.BULK_CHUNK):
        size = min(common.BULK_CHUNK, n - start)
        _publish_many(_QUEUE, [{"t0": 0.0}] * size)
