"""Clock skew between hosts: time comes from Redis, never from a host's own clock.

Real processes, one of them with a skewed wall clock (``tests/support/skewed_clock``: a
``sitecustomize`` that offsets ``time.time``/``time.time_ns`` in that process only):

* a worker whose clock is behind must not look dead to another instance (its running
  message is not started a second time);
* a worker whose clock is ahead must not deliver a delayed message early (C5);
* a publisher whose clock is off publishes ``delay=`` messages due by Redis's clock.
"""

# ruff: noqa: F811

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker
from tests.support.workers import REPO_ROOT, Workers, read_deliveries, wait_deliveries, wait_for

# The fault tests' fixtures: a migrated SQLite copy per test, worker processes killed at
# teardown (imported fixtures are shadowed by the test arguments of the same name).
from tests.test_faults import broker, db_file, migrated_db, workers  # noqa: F401

pytestmark = [
    pytest.mark.slow,
    pytest.mark.servers,
    # The worker processes consume queues declared in code (tests/faultapp/consumers.py),
    # fixed names by nature: each test starts them on an empty server.
    pytest.mark.usefixtures("empty_redis"),
]

SKEW_DIR = Path(__file__).resolve().parent / "support" / "skewed_clock"
SKEW_ENV = "REDISQ_TEST_CLOCK_SKEW_S"


def _skew_env(seconds: float) -> dict[str, str]:
    """Environment that skews a subprocess's wall clock by ``seconds``."""
    path = os.pathsep.join(p for p in (str(SKEW_DIR), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, SKEW_ENV: str(seconds)}


@contextlib.contextmanager
def _skewed(workers: Workers, seconds: float) -> Iterator[None]:
    """Workers started inside the block run with a clock ``seconds`` off."""
    saved = dict(workers.extra_env)
    workers.extra_env.update(_skew_env(seconds))
    try:
        yield
    finally:
        workers.extra_env.clear()
        workers.extra_env.update(saved)


def _redis_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_worker_whose_clock_is_behind_does_not_look_dead(
    workers: Workers, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given an instance whose clock is 30 s behind (more than the 15 s heartbeat TTL)
    # running a 6 s message of liveness/steady (visibility timeout 3 s)
    with _skewed(workers, -30):
        behind = workers.start("liveness")
    behind.wait_ready()
    mid = broker.publish("liveness", {"sleep": 6})
    (started,) = wait_deliveries(redis_client, "liveness", "steady", 1, timeout=20)
    assert (started.id, started.pid) == (mid, behind.pid)

    # When a second instance with a true clock looks for dead instances meanwhile
    other = workers.start("liveness")
    other.wait_ready()

    # Then the message runs once, on the instance that started it
    wait_deliveries(redis_client, "liveness", "steady", 1, timeout=30, done=True)
    time.sleep(1.0)  # a second start would have been recorded by now
    starts = read_deliveries(redis_client, "liveness", "steady")
    assert [(d.id, d.attempts, d.pid) for d in starts] == [(mid, 1, behind.pid)], workers.report()
    assert behind.alive and other.alive


def test_a_worker_whose_clock_is_ahead_never_delivers_a_delayed_message_early(
    workers: Workers, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given an instance of faults/recorder whose clock is 8 s ahead
    with _skewed(workers, 8):
        ahead = workers.start("faults")
    ahead.wait_ready()

    # When a message is published with delay=10 (by a host with a true clock)
    published_at = time.monotonic()
    mid = broker.publish("faults", {"n": 1}, delay=10)

    # Then it is delivered no earlier than 10 s later (C5), and not much later either
    wait_for(
        lambda: read_deliveries(redis_client, "faults", "recorder"),
        timeout=30,
        interval=0.01,
        what="the delayed message",
    )
    after_s = time.monotonic() - published_at
    print(f"\ndelay=10 delivered after {after_s:.3f}s by a worker 8 s ahead")
    assert [d.id for d in read_deliveries(redis_client, "faults", "recorder")] == [mid]
    assert after_s >= 10.0, f"delivered {10 - after_s:.3f}s early"
    assert after_s < 12.0, workers.report()


PUBLISHER = """
import sys, time
import redis
from redisq_django.core import Broker

broker = Broker(redis.Redis.from_url(sys.argv[1]))
broker.publish("skewed", {"n": 0}, delay=10)
broker.publish_many("skewed", [{"n": 1}, {"n": 2}], delay=10)
broker.send([broker.prepare("skewed", {"n": 3}, delay=10)], once=True)
print(int(time.time() * 1000))
"""


@pytest.mark.parametrize("skew_s", [-8, 8])
def test_a_publisher_with_a_skewed_clock_publishes_delays_due_by_redis_clock(
    redis_url: str, redis_client: redis.Redis, skew_s: int
) -> None:
    # Given a publisher process whose clock is 8 s off
    env = {**os.environ, **_skew_env(skew_s)}
    env.pop("DJANGO_SETTINGS_MODULE", None)

    # When it publishes delay=10 messages (publish, publish_many, publish-once)
    before = _redis_ms(redis_client)
    result = subprocess.run(
        [sys.executable, "-c", PUBLISHER, redis_url],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    after = _redis_ms(redis_client)
    assert result.returncode == 0, result.stderr
    its_clock = int(result.stdout.split()[-1])
    assert abs(its_clock - after - skew_s * 1000) < 2000  # the skew was in effect

    # Then each is due 10 s after Redis received it, by Redis's clock
    keys = Broker(redis_client).keys("skewed")
    due = redis_client.zrange(keys.delayed, 0, -1, withscores=True)
    assert len(due) == 4
    for member, score in due:
        assert before + 10_000 <= score <= after + 10_000, (score - before, skew_s)
        assert b'"due_at":"%d"' % int(score) in member
