"""A real ``runconsumer`` process outlives a missing consumer group (issue 8, point 1;
issue 19, point 1: on Redis 6.2 too, where NOGROUP raised inside a script is wrapped).

Redis restarted without persistence loses every key, consumer groups included, and an
operator may ``XGROUP DESTROY`` a group under a running worker: the worker must register
its group again and consume what is published afterwards. The server matrix runs these
on Redis 6.2, 7 and Valkey (``make test``).
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker
from redisq_django.core.errors import RedisUnavailable
from tests.support.redis_server import RedisServer
from tests.support.workers import (
    WorkerProcess,
    Workers,
    read_deliveries,
    wait_for,
    wait_ids,
)

pytestmark = [pytest.mark.slow, pytest.mark.servers]

FAULTS, RECORDER = "faults", "recorder"  # tests/faultapp/consumers.py
CHAOS = "chaos"  # consumers alpha and beta


@pytest.fixture
def workers(
    volatile_redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> Iterator[Workers]:
    root = tmp_path_factory.mktemp("refusals-db")
    template = root / "template.sqlite3"
    Workers(volatile_redis_server.url, template, root / "logs").migrate()
    db = tmp_path / "worker.sqlite3"
    shutil.copyfile(template, db)
    pool = Workers(volatile_redis_server.url, db, tmp_path / "logs")
    try:
        yield pool
    finally:
        pool.close()


def _publish_retrying(broker: Broker, payloads: list[dict[str, int]]) -> list[str]:
    deadline = time.monotonic() + 20
    for _ in range(200):
        try:
            return broker.publish_many(FAULTS, payloads)
        except RedisUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    raise AssertionError("publish kept failing")


def _handles_20_more_and_stays_alive(
    client: redis.Redis, broker: Broker, worker: WorkerProcess
) -> None:
    """Publish 20 messages: the worker handles all of them, still running, and stops
    warm (exit code 0) on SIGTERM."""
    ids = _publish_retrying(broker, [{"n": i} for i in range(1, 21)])
    wait_ids(client, FAULTS, RECORDER, ids, timeout=30)
    assert worker.alive, worker.tail()
    stderr = worker.stderr
    assert "registering it again" in stderr, stderr[-3000:]
    assert "died of an unexpected error" not in stderr, stderr[-3000:]
    assert "crashed" not in stderr, stderr[-3000:]
    worker.send(signal.SIGTERM)
    assert worker.wait_exit(timeout=20) == 0, worker.tail()


@pytest.mark.parametrize("down_s", [1, 3])
def test_worker_consumes_again_after_redis_restarts_empty(
    volatile_redis_server: RedisServer, workers: Workers, down_s: float
) -> None:
    client = volatile_redis_server.client()
    try:
        # Given a worker consuming faults/recorder
        broker = Broker(client)
        worker = workers.start(FAULTS, "--prefetch", "20").wait_ready()
        (first,) = _publish_retrying(broker, [{"n": 0}])
        wait_ids(client, FAULTS, RECORDER, [first], timeout=20)

        # When Redis is down for a while and comes back empty (no persistence)
        volatile_redis_server.stop()
        time.sleep(down_s)
        volatile_redis_server.restart()
        assert client.exists(broker.keys(FAULTS).log) == 0

        # Then it handles the 20 messages published afterwards, still running
        _handles_20_more_and_stays_alive(client, broker, worker)
    finally:
        client.close()


def test_worker_consumes_again_after_its_group_is_destroyed(
    volatile_redis_server: RedisServer, workers: Workers
) -> None:
    client = volatile_redis_server.client()
    try:
        # Given a worker consuming faults/recorder, in the middle of a 3 s message (its
        # lease is renewed meanwhile: visibility 2 s)
        broker = Broker(client)
        worker = workers.start(FAULTS, "--prefetch", "20").wait_ready()
        (first,) = _publish_retrying(broker, [{"n": 0}])
        wait_ids(client, FAULTS, RECORDER, [first], timeout=20)
        (slow,) = _publish_retrying(broker, [{"sleep": 3}])
        wait_for(
            lambda: any(d.id == slow for d in read_deliveries(client, FAULTS, RECORDER)),
            timeout=20,
            what="the slow message started",
        )

        # When its consumer group is destroyed under it (log and private stream)
        keys = broker.keys(FAULTS)
        assert client.xgroup_destroy(keys.log, RECORDER) == 1
        client.xgroup_destroy(keys.group(RECORDER).direct, RECORDER)

        # Then it handles the 20 messages published afterwards, still running
        _handles_20_more_and_stays_alive(client, broker, worker)
    finally:
        client.close()


def test_a_handler_thread_dying_ends_its_process_with_exit_code_1(
    volatile_redis_server: RedisServer, workers: Workers
) -> None:
    client = volatile_redis_server.client()
    try:
        # Given a worker running two logical consumers, chaos/alpha and chaos/beta
        broker = Broker(client)
        worker = workers.start(CHAOS).wait_ready()
        (first,) = broker.publish_many(CHAOS, [{"n": 0}])
        wait_ids(client, CHAOS, "alpha", [first], timeout=20)
        wait_ids(client, CHAOS, "beta", [first], timeout=20)

        # When alpha's handler thread meets an error nobody expects (its private input
        # stream replaced by a string: WRONGTYPE on every fetch)
        direct = broker.keys(CHAOS).group("alpha").direct
        client.delete(direct)
        client.set(direct, "not a stream")

        # Then the process does not run on with beta only: it exits with code 1 (for its
        # supervisor to start it again), saying why
        assert worker.wait_exit(timeout=30) == 1, worker.tail()
        assert "died of an unexpected error" in worker.stderr, worker.tail()
    finally:
        client.close()
