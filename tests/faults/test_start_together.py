"""Several ``runconsumer`` processes started at the same moment on one SQLite file (issue
8, point 3): none dies at start ("database is locked"), and every logical consumer
receives every message published once they all say they run.

The database keeps Django's default SQLite options (deferred transactions), as in a
project that did not set ``transaction_mode`` as docs/howto/workers.md advises.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker
from tests.support.workers import Workers, wait_ids

pytestmark = [
    pytest.mark.slow,
    # The workers consume queue "together", a name fixed in tests/faultapp/consumers.py.
    pytest.mark.usefixtures("empty_redis"),
]

QUEUE = "together"
MESSAGES = 20


@pytest.fixture
def workers(redis_url: str, db_file: Path, tmp_path: Path) -> Iterator[Workers]:
    """Workers on a fresh copy of the database, with Django's default SQLite options."""
    pool = Workers(redis_url, db_file, tmp_path / "logs")
    pool.extra_env["REDISQ_TEST_SQLITE_DEFAULTS"] = "1"
    try:
        yield pool
    finally:
        pool.close()


@pytest.mark.parametrize("run", [1, 2, 3])
def test_workers_started_at_once_all_run_and_every_consumer_gets_every_message(
    workers: Workers, redis_client: redis.Redis, run: int
) -> None:
    # Given no consumer group yet and an empty database (every start syncs its rows)
    # When four workers start at the same moment: three of "first", one of "second"
    started = [workers.start(QUEUE, "--consumer", "first") for _ in range(3)]
    started.append(workers.start(QUEUE, "--consumer", "second"))
    for worker in started:
        worker.wait_ready(timeout=60)  # fails at once if one exited

    # And messages are published as soon as they all say they run
    ids = Broker(redis_client).publish_many(QUEUE, [{"n": n} for n in range(MESSAGES)])

    # Then each logical consumer handles every message, and no worker died
    for name in ("first", "second"):
        done = wait_ids(redis_client, QUEUE, name, ids, timeout=30)
        assert {d.id for d in done} == set(ids), name
    assert [w for w in started if not w.alive] == [], workers.report()
