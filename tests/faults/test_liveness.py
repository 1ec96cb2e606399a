"""Liveness (heartbeat, lease extension) never waits behind the database or a frozen Redis.

Real ``runconsumer`` processes: one instance runs a long handler while a second instance
of the same logical consumer looks for expired leases and dead instances. A locked
database or a Redis frozen for less than the documented margin must not let the second
instance start the message again (C3 redelivers after a crash, never while the handler
still runs). The handlers record each start in Redis (tests/faultapp/consumers.py).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker

# The fault tests' fixtures: a migrated SQLite copy per test, worker processes killed at
# teardown (imported fixtures are shadowed by the test arguments of the same name).
from tests.support.workers import Workers, read_deliveries, wait_deliveries

pytestmark = [
    pytest.mark.slow,
    pytest.mark.servers,
    # The worker processes consume queues declared in code (tests/faultapp/consumers.py),
    # fixed names by nature: each test starts them on an empty server.
    pytest.mark.usefixtures("empty_redis"),
]

LIVENESS = "liveness"  # consumer steady, visibility timeout 3 s
FROZEN = "frozen"  # consumer steady, visibility timeout 20 s
STEADY = "steady"


def _two_instances_on_a_long_message(
    workers: Workers, broker: Broker, client: redis.Redis, queue: str, sleep: float
) -> str:
    """Start two instances, publish one message whose handler sleeps ``sleep`` seconds,
    and return its id once one instance has started it."""
    first, second = workers.start(queue), workers.start(queue)
    first.wait_ready()
    second.wait_ready()
    time.sleep(0.5)  # both instances heartbeating and fetching
    mid = broker.publish(queue, {"sleep": sleep})
    (started,) = wait_deliveries(client, queue, STEADY, 1, timeout=20)
    assert started.id == mid
    return mid


def _assert_handled_once(workers: Workers, client: redis.Redis, queue: str, mid: str) -> None:
    done = wait_deliveries(client, queue, STEADY, 1, timeout=30, done=True)
    time.sleep(1.0)  # a second start would have been recorded by now
    starts = read_deliveries(client, queue, STEADY)
    assert [d.id for d in done] == [mid], workers.report()
    assert [(d.id, d.attempts) for d in starts] == [(mid, 1)], workers.report()


def test_a_locked_database_does_not_let_another_instance_start_a_running_message(
    workers: Workers, broker: Broker, redis_client: redis.Redis, db_file: Path
) -> None:
    # Given two instances of liveness/steady (visibility timeout 3 s), one of them
    # running a message whose handler takes 10 s
    mid = _two_instances_on_a_long_message(workers, broker, redis_client, LIVENESS, 10)

    # When another connection holds an exclusive lock on the workers' database for 8 s
    # (well over the visibility timeout): configuration refresh, dead-letter sink and
    # outbox relay all wait for it
    lock = sqlite3.connect(db_file, timeout=5, isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")
        time.sleep(8.0)
        lock.execute("ROLLBACK")
    finally:
        lock.close()

    # Then the lease was kept: the message was started once and completed once
    _assert_handled_once(workers, redis_client, LIVENESS, mid)


def test_a_frozen_redis_shorter_than_the_margin_does_not_run_a_message_twice(
    workers: Workers, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given two instances of frozen/steady (visibility timeout 20 s: leases are extended
    # every 6.7 s, a freeze of up to ~13 s is within the margin), one of them running a
    # message whose handler takes 11 s
    mid = _two_instances_on_a_long_message(workers, broker, redis_client, FROZEN, 11)

    # When Redis is frozen for 8 s (every client's commands wait, the reclaimer's too)
    redis_client.execute_command("CLIENT", "PAUSE", "8000", "ALL")
    time.sleep(8.5)

    # Then nobody took the message over when Redis came back: it ran once
    _assert_handled_once(workers, redis_client, FROZEN, mid)
