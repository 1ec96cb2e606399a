"""A partitioned queue when Redis restarts empty under running processes (issue 32, point 1),
with real ``runconsumer`` processes: the running publisher and worker record the layout
again, and a process started afterwards (a deploy, a new web process) is not refused.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker, CoreConfig, Place, RedisUnavailable
from tests.support.redis_server import RedisServer
from tests.support.workers import Workers, wait_ids

pytestmark = [pytest.mark.slow, pytest.mark.servers]

FAULTS, RECORDER = "faults", "recorder"  # tests/faultapp/consumers.py
K = 4


def publish_retrying(broker: Broker, n: int, tag: str) -> list[str]:
    """Publish ``n`` keyed messages (spread over the partitions), each retried while Redis
    is still coming back (bounded)."""
    ids = []
    for i in range(n):
        deadline = time.monotonic() + 20
        while True:
            try:
                ids.append(broker.publish(FAULTS, {"n": f"{tag}-{i}"}, key=f"{tag}-{i}"))
                break
            except RedisUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    return ids


@pytest.fixture
def pool(volatile_redis_server: RedisServer, db_file: Path, tmp_path: Path) -> Iterator[Workers]:
    """Worker processes on the volatile server, the fault queue in K partitions."""
    workers = Workers(volatile_redis_server.url, db_file, tmp_path / "logs")
    workers.extra_env["REDISQ_TEST_PARTITIONS"] = f"{FAULTS}={K}"
    try:
        yield workers
    finally:
        workers.close()


def test_a_partitioned_queue_goes_on_after_redis_restarts_empty(
    volatile_redis_server: RedisServer, pool: Workers
) -> None:
    client = volatile_redis_server.client()
    try:
        # Given a running publisher and a running worker of a queue of 4 partitions
        publisher = Broker(client, CoreConfig(partitions={FAULTS: K}))
        publisher.consumers.ensure(FAULTS, RECORDER, "earliest")
        worker = pool.start(FAULTS).wait_ready()
        wait_ids(client, FAULTS, RECORDER, publish_retrying(publisher, 20, "before"), timeout=30)
        # When Redis restarts without persistence: every record of the layout is gone
        client.set("before-the-restart", 1)
        volatile_redis_server.restart()
        client = volatile_redis_server.client()
        assert client.exists("before-the-restart") == 0  # (the worker may write already)
        # Then the running publisher goes on (its first write records the layout again)
        after = publish_retrying(publisher, 20, "after")
        assert client.hget(publisher.keys(FAULTS).meta, "partitions") == str(K).encode()
        # And a process started afterwards publishes, and a new worker starts: no refusal
        fresh = pool.run(
            "shell",
            "-c",
            f"from redisq_django import publish; print(publish({FAULTS!r}, {{'n': 'x'}}, key='x'))",
        )
        assert fresh.returncode == 0, fresh.stderr[-3000:]
        after.append(fresh.stdout.strip().splitlines()[-1])
        second = pool.start(FAULTS).wait_ready()
        # And every message published after the restart is handled, none dead
        wait_ids(client, FAULTS, RECORDER, after, timeout=60)
        assert worker.alive and second.alive, pool.report()
        for proc in (worker, second):
            assert "partition logs but no number" not in proc.stderr
            assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert publisher.dead_letters.read(Place(FAULTS, None), RECORDER) == []
    finally:
        client.close()


def test_a_deploy_after_the_restart_is_not_refused_by_what_a_running_worker_wrote(
    volatile_redis_server: RedisServer, pool: Workers
) -> None:
    # The case of the report: a running worker alone (no publisher) re-creates its
    # groups after the restart, which creates the partition logs; a process started
    # afterwards found logs but no record and was refused.
    client = volatile_redis_server.client()
    try:
        Broker(client, CoreConfig(partitions={FAULTS: K})).consumers.ensure(
            FAULTS, RECORDER, "earliest"
        )
        worker = pool.start(FAULTS).wait_ready()
        volatile_redis_server.restart()
        client = volatile_redis_server.client()
        logs = [Broker(client).keys(FAULTS).partition(i).log for i in range(K)]

        def groups_back() -> bool:
            try:
                return all(client.xinfo_groups(log) for log in logs)
            except redis.ResponseError:
                return False

        deadline = time.monotonic() + 30
        while not groups_back():
            assert time.monotonic() < deadline, worker.tail()
            time.sleep(0.1)
        fresh = Broker(client, CoreConfig(partitions={FAULTS: K}))
        sent = publish_retrying(fresh, 8, "deploy")
        wait_ids(client, FAULTS, RECORDER, sent, timeout=30)
    finally:
        client.close()
