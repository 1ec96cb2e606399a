"""Skewed and stepping clocks: time comes from Redis, never from a host's own clock (C13).

Real processes, one of them with a skewed wall clock (``tests/support/skewed_clock``: a
``sitecustomize`` that offsets ``time.time``/``time.time_ns`` in that process only, by a
constant or by an offset the test steps mid-run, as NTP or a resumed VM does):

* a worker whose clock is behind, or steps 30 s back and forth while it runs a message,
  must not look dead to another instance (its running message is not started a second
  time);
* a worker whose clock is ahead must not deliver a delayed message early (C5);
* a worker whose clock steps 5 s back or forward delivers delayed messages neither
  early nor late (its timers are monotonic: a step back must not make it sleep 5 s);
* a publisher whose clock is off publishes ``delay=`` messages due by Redis's clock,
  and ``eta=`` messages due at the eta by Redis's clock, never at once because its own
  clock says the eta has passed.

Periodic schedules under stepping clocks: tests/schedules/test_schedules_clock.py.
"""

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

# The fault tests' fixtures: a migrated SQLite copy per test, worker processes killed at
# teardown (imported fixtures are shadowed by the test arguments of the same name).
from tests.support.clock_steps import SteppedClock, redis_ms, skew_env
from tests.support.workers import REPO_ROOT, Workers, read_deliveries, wait_deliveries, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.servers,
    # The worker processes consume queues declared in code (tests/faultapp/consumers.py),
    # fixed names by nature: each test starts them on an empty server.
    pytest.mark.usefixtures("empty_redis"),
]


@contextlib.contextmanager
def _clock_env(workers: Workers, env: dict[str, str]) -> Iterator[None]:
    """Workers started inside the block run with ``env`` (a skewed or stepped clock)."""
    saved = dict(workers.extra_env)
    workers.extra_env.update(env)
    try:
        yield
    finally:
        workers.extra_env.clear()
        workers.extra_env.update(saved)


def _skewed(workers: Workers, seconds: float) -> contextlib.AbstractContextManager[None]:
    """Workers started inside the block run with a clock ``seconds`` off."""
    return _clock_env(workers, skew_env(seconds))


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


def test_a_worker_whose_clock_steps_back_and_forth_does_not_look_dead(
    workers: Workers, broker: Broker, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # Given an instance whose clock the test steps, running an 8 s message of
    # liveness/steady (visibility timeout 3 s), and a second instance with a true clock
    clock = SteppedClock(tmp_path / "offset")
    with _clock_env(workers, clock.env()):
        stepped = workers.start("liveness")
    stepped.wait_ready()
    mid = broker.publish("liveness", {"sleep": 8})
    (started,) = wait_deliveries(redis_client, "liveness", "steady", 1, timeout=20)
    assert (started.id, started.pid) == (mid, stepped.pid)
    other = workers.start("liveness")
    other.wait_ready()

    # When its clock steps 30 s back (more than the 15 s heartbeat TTL), then 60 s
    # forward, then back to the true time, while the message runs
    for offset in (-30, 30, 0):
        clock.step(offset)
        time.sleep(1.5)

    # Then the message runs once, on the instance that started it
    wait_deliveries(redis_client, "liveness", "steady", 1, timeout=30, done=True)
    time.sleep(1.0)  # a second start would have been recorded by now
    starts = read_deliveries(redis_client, "liveness", "steady")
    assert [(d.id, d.attempts, d.pid) for d in starts] == [(mid, 1, stepped.pid)], workers.report()
    assert stepped.alive and other.alive


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


def _wait_delivered(client: redis.Redis, ids: set[str], seen: dict[str, int]) -> None:
    """Poll the recorder's deliveries every 10 ms until ``ids`` all started; ``seen``
    gets when each was first seen, by Redis's clock (at most a poll after it started)."""

    def all_seen() -> bool:
        started = read_deliveries(client, "faults", "recorder")
        now = redis_ms(client)  # read after: each had started by then
        for d in started:
            seen.setdefault(d.id, now)
        return ids <= seen.keys()

    wait_for(all_seen, timeout=30, interval=0.01, what=f"{len(ids)} delayed messages")


def test_a_worker_whose_clock_steps_delivers_delayed_messages_neither_early_nor_late(
    workers: Workers, broker: Broker, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # Given the only instance of faults/recorder, whose clock the test steps
    clock = SteppedClock(tmp_path / "offset")
    with _clock_env(workers, clock.env()):
        stepped = workers.start("faults")
    stepped.wait_ready()

    due_at: dict[str, int] = {}
    seen: dict[str, int] = {}
    # When, four times, messages due 0.4 to 2.8 s later are published and its clock
    # steps at once: 5 s back, 5 s forward (to the true time), 5 s forward, 5 s back
    for phase, offset in enumerate((-5, 0, 5, 0)):
        ids = set()
        for k in range(7):
            delay_ms = 400 * (k + 1)
            mid = broker.publish("faults", {"phase": phase, "k": k}, delay=delay_ms / 1000)
            ids.add(mid)
        clock.step(offset)
        _wait_delivered(redis_client, ids, seen)
    keys = broker.keys("faults")
    for entry_id, fields in redis_client.xrange(keys.log):
        due_at[fields[b"id"].decode()] = int(fields[b"due_at"])
        promoted = int(entry_id.decode().split("-")[0])
        # Then none was promoted before it was due by Redis's clock (the log entry id is
        # Redis's clock when it moved into the log)
        assert promoted >= due_at[fields[b"id"].decode()], fields

    # And each was delivered once, within a second of its due time (not 5 s late)
    starts = read_deliveries(redis_client, "faults", "recorder")
    assert sorted(d.id for d in starts) == sorted(due_at) and len(starts) == 28
    late = {mid: seen[mid] - due_at[mid] for mid in due_at}
    print(f"\nlateness as seen (ms): max {max(late.values())}, min {min(late.values())}")
    assert max(late.values()) < 1000, (late, workers.report())
    # And no step made it block on Redis past its socket timeout (Redis was never away)
    assert stepped.alive
    assert "Cannot reach Redis" not in stepped.stderr, workers.report()


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
    env = {**os.environ, **skew_env(skew_s)}
    env.pop("DJANGO_SETTINGS_MODULE", None)

    # When it publishes delay=10 messages (publish, publish_many, publish-once)
    before = redis_ms(redis_client)
    result = subprocess.run(
        [sys.executable, "-c", PUBLISHER, redis_url],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    after = redis_ms(redis_client)
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


ETA_PUBLISHER = """
import datetime as dt, sys
import redis
from redisq_django.core import Broker

broker = Broker(redis.Redis.from_url(sys.argv[1]))
eta = dt.datetime.fromtimestamp(int(sys.argv[2]) / 1000, dt.UTC)
broker.publish("skewed", {"n": 0}, eta=eta)
broker.send([broker.prepare("skewed", {"n": 1}, eta=eta)], once=True)
"""


@pytest.mark.parametrize("skew_s", [-8, 8])
def test_a_publisher_with_a_skewed_clock_publishes_an_eta_due_by_redis_clock(
    redis_url: str, redis_client: redis.Redis, skew_s: int
) -> None:
    # Given a publisher process whose clock is 8 s off
    env = {**os.environ, **skew_env(skew_s)}
    env.pop("DJANGO_SETTINGS_MODULE", None)

    # When it publishes messages with an eta 3 s ahead of Redis's clock (which its own
    # clock, 8 s ahead, would say has passed)
    eta_ms = redis_ms(redis_client) + 3000
    result = subprocess.run(
        [sys.executable, "-c", ETA_PUBLISHER, redis_url, str(eta_ms)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr

    # Then both wait for the eta by Redis's clock: none was published at once
    keys = Broker(redis_client).keys("skewed")
    assert redis_client.xlen(keys.log) == 0
    due = redis_client.zrange(keys.delayed, 0, -1, withscores=True)
    assert [score for _, score in due] == [eta_ms, eta_ms]
