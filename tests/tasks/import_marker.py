"""A module no project declares, with a side effect at import time: it records its own
import in Redis (the list ``IMPORTED_KEY`` at ``REDISQ_TEST_RUNS_URL``, when set) and
in ``sys.modules``. A worker must never import it because a message names it."""

from __future__ import annotations

import os

import redis
from django.tasks import task

IMPORTED_KEY = "redisqtest:import_marker:imported"

if os.environ.get("REDISQ_TEST_RUNS_URL"):
    _client = redis.Redis.from_url(os.environ["REDISQ_TEST_RUNS_URL"])
    try:
        _client.rpush(IMPORTED_KEY, str(os.getpid()))
    finally:
        _client.close()


@task()
def anything() -> str:
    """A real task, so that only the lookup, not the import, can refuse it."""
    return "ran"
