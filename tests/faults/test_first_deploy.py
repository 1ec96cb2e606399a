"""A consumer declared in code receives every message published after the deploy that
declared it, also when none of its workers ever ran (issue 32, point 10): ``migrate``
registers it in Redis, and so does the first publish to its queue of a process that
loads the declarations; ``migrate`` with Redis away succeeds and says what then happens.
Real processes: ``migrate``, a plain publishing process, ``runconsumer --burst``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker, CoreConfig
from tests.support.redis_server import free_port
from tests.support.workers import REPO_ROOT, Workers, read_done

pytestmark = [
    pytest.mark.slow,
    pytest.mark.servers,  # XGROUP CREATE at "$" on a missing stream, per partition
    # The consumers of queue "firsthour" are fixed in tests/faultapp/consumers.py.
    pytest.mark.usefixtures("empty_redis"),
]

QUEUE = "firsthour"
CONSUMERS = ("payments", "receipts")  # both with the default start, "latest"
MESSAGES = 20
#: What a process of the project runs to publish (Django set up, no worker, no migrate).
PUBLISH = (
    "import django; django.setup()\n"
    "from redisq_django import publish\n"
    f"print(' '.join(publish({QUEUE!r}, {{'n': n}}) for n in range({MESSAGES})))\n"
)


@pytest.fixture
def workers(redis_url: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(redis_url, tmp_path / "db.sqlite3", tmp_path / "logs")
    try:
        yield pool
    finally:
        pool.close()


def _first_run_handles(workers: Workers, client: redis.Redis, ids: list[str]) -> None:
    """The first worker of the queue ever, run until the queue is drained, handles every
    message of ``ids`` once for each consumer."""
    worker = workers.start(QUEUE, "--burst", "--stats-interval", "0")
    assert worker.wait_exit(timeout=90) == 0, workers.report()
    for name in CONSUMERS:
        done = read_done(client, QUEUE, name)
        assert sorted(d.id for d in done) == sorted(ids), name
        assert {d.attempts for d in done} == {1}, name


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_message_published_before_any_worker_ran_reaches_every_declared_consumer(
    workers: Workers, redis_client: redis.Redis, partitions: int
) -> None:
    if partitions > 1:
        workers.extra_env["REDISQ_TEST_PARTITIONS"] = f"{QUEUE}={partitions}"
    broker = Broker(redis_client, CoreConfig(partitions={QUEUE: partitions}))
    # Given a deploy whose migrate ran while Redis was away: it succeeds, and says so
    away = f"redis://127.0.0.1:{free_port()}/0"
    migrated = workers.run("migrate", "-v", "0", env=workers.env(REDISQ_TEST_URL=away))
    assert migrated.returncode == 0, migrated.stderr
    assert "declared consumer(s) are not registered in Redis yet" in migrated.stderr
    assert broker.consumers.names(QUEUE) == []

    # When a process of the project publishes (no worker of the queue ever ran)
    done = subprocess.run(
        [sys.executable, "-c", PUBLISH],
        cwd=REPO_ROOT,
        env=workers.env(DJANGO_SETTINGS_MODULE="tests.settings"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ids = done.stdout.split()
    assert len(set(ids)) == MESSAGES

    # Then its first publish registered the declared consumers (on every partition)...
    assert broker.consumers.names(QUEUE) == sorted(CONSUMERS)
    for keys in broker.partitions.layout(QUEUE):
        groups = {g["name"].decode() for g in redis_client.xinfo_groups(keys.log)}
        assert groups == set(CONSUMERS), keys.log
    # ...and the first run of the worker handles every message, for each consumer
    _first_run_handles(workers, redis_client, ids)


def test_after_migrate_alone_a_declared_consumer_gets_what_any_client_publishes(
    workers: Workers, redis_client: redis.Redis
) -> None:
    # Given a deploy's migrate, Redis up
    workers.migrate()
    broker = Broker(redis_client)  # the core alone: it loads no declarations
    assert broker.consumers.names(QUEUE) == sorted(CONSUMERS)
    # When a client that knows nothing of the consumers publishes (another service)
    ids = broker.publish_many(QUEUE, [{"n": n} for n in range(MESSAGES)])
    ids.append(broker.publish(QUEUE, {"n": MESSAGES}))
    # Then the first run of the worker handles every message, for each consumer
    _first_run_handles(workers, redis_client, ids)
