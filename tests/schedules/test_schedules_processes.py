"""Real ``runconsumer`` processes (no beat process): three of them evaluate a schedule
ticking every second, and every tick id is published exactly once, through a warm
restart of one worker and a SIGKILL of all three followed by a fresh start."""

# ruff: noqa: F811  (test parameters named after the fixtures imported below)

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
import redis

from redisq_django.core.keys import queue_keys
from tests.support.worker_fixtures import db_file, migrated_db, workers  # noqa: F401
from tests.support.workers import TOGETHER, Workers, wait_for

pytestmark = [
    pytest.mark.slow,
    # The workers run the consumers of queue "together", a name fixed in
    # tests/faultapp/consumers.py (runconsumer needs a queue to consume).
    pytest.mark.usefixtures("empty_redis"),
]


def ticks(client: redis.Redis, queue: str) -> list[int]:
    """The tick times (ms) of the messages in ``queue``'s log, in order."""
    log = client.xrange(queue_keys("redisq", queue).log)
    return [int(f[b"id"].decode().rsplit("@", 1)[1]) for _, f in log]


def contiguous(seen: list[int]) -> bool:
    return bool(seen) and sorted(seen) == list(range(min(seen), max(seen) + 1, 1000))


def test_three_runconsumer_processes_publish_every_tick_exactly_once(
    workers: Workers, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a schedule made in the admin (here, through the ORM), ticking every second
    created = workers.run(
        "shell",
        "-c",
        "import datetime as dt; from redisq_django.models import Schedule; "
        f"Schedule.objects.create(name='{queue_name}', every=dt.timedelta(seconds=1), "
        f"queue='{queue_name}', payload={{'kind': 'heartbeat'}})",
    )
    assert created.returncode == 0, created.stderr
    # When three workers run
    first = [workers.start(TOGETHER, "--stats-interval", "0") for _ in range(3)]
    for w in first:
        w.wait_ready(timeout=60)
    wait_for(lambda: len(ticks(redis_client, queue_name)) >= 4, timeout=30, what="4 ticks")
    # And one of them restarts (SIGTERM, then a new process) while the others run
    first[0].send(signal.SIGTERM)
    assert first[0].wait_exit(timeout=40) == 0
    first[0] = workers.start(TOGETHER, "--stats-interval", "0").wait_ready(timeout=60)
    time.sleep(3)
    # And then all three are killed (SIGKILL) and three new ones start 2.5 s later
    for w in first:
        w.kill()
    killed_at = int(time.time() * 1000)
    phase1 = ticks(redis_client, queue_name)
    time.sleep(2.5)
    second = [workers.start(TOGETHER, "--stats-interval", "0") for _ in range(3)]
    for w in second:
        w.wait_ready(timeout=60)
    restarted_at = int(time.time() * 1000)
    wait_for(
        lambda: len([t for t in ticks(redis_client, queue_name) if t > restarted_at]) >= 4,
        timeout=30,
        what="4 ticks after the restart",
    )
    for w in second:
        w.send(signal.SIGTERM)
    for w in second:
        assert w.wait_exit(timeout=40) == 0

    # Then no tick was published twice
    seen = ticks(redis_client, queue_name)
    assert [t for t, n in Counter(seen).items() if n > 1] == []
    # And while workers ran, every second had its tick (through the warm restart)
    assert contiguous(phase1), phase1
    after = [t for t in seen if t > killed_at]
    assert contiguous([t for t in after if t >= restarted_at - 1000]), after
    # And each tick was published by one process only (each logged what it fired)
    logs = "".join(w.stderr for w in workers.started)
    assert logs.count(f"Schedule {queue_name} fired") == len(seen), workers.report()
    assert sum(f"Schedule {queue_name} fired" in w.stderr for w in workers.started) >= 2
