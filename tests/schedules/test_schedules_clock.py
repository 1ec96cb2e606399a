"""Schedules on Redis's clock, whatever the workers' own clocks do (C13).

Real ``runconsumer`` processes evaluate a schedule ticking every second; one of them
has its wall clock stepped +5 s and then -5 s mid-run (``tests/support/clock_steps``:
``time.time`` jumps, the monotonic clock runs on, as through an NTP step or a VM
resume), or the workers' clocks are skewed by a constant. Every tick of the run is then
published exactly once, none before its due time by Redis's clock (the log entry id,
which Redis assigns, says when it was published) and none missing.
"""

# ruff: noqa: F811

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from tests.support.clock_steps import SteppedClock, redis_ms, skew_env
from tests.support.ticks import published_ticks
from tests.support.worker_fixtures import db_file, migrated_db, workers  # noqa: F401
from tests.support.workers import TOGETHER, WorkerProcess, Workers, wait_for

pytestmark = [
    pytest.mark.slow,
    # The workers run the consumers of queue "together", a name fixed in
    # tests/faultapp/consumers.py (runconsumer needs a queue to consume).
    pytest.mark.usefixtures("empty_redis"),
]

SECOND = 1000


def create_schedule(workers: Workers, name: str) -> None:
    """A schedule row ticking every second (``missed="latest"``, the default)."""
    created = workers.run(
        "shell",
        "-c",
        "import datetime as dt; from redisq_django.models import Schedule; "
        f"Schedule.objects.create(name='{name}', every=dt.timedelta(seconds=1), "
        f"queue='{name}', payload={{'kind': 'tick'}})",
    )
    assert created.returncode == 0, created.stderr


def start(workers: Workers, env: dict[str, str]) -> WorkerProcess:
    saved = dict(workers.extra_env)
    workers.extra_env.update(env)
    try:
        return workers.start(TOGETHER, "--stats-interval", "0")
    finally:
        workers.extra_env.clear()
        workers.extra_env.update(saved)


def check_run(
    client: redis.Redis, workers: Workers, queue: str, began: int, stopped: int
) -> list[int]:
    """Assert that every tick due in ``(began, stopped - 1 s]`` (Redis's clock) was
    published once, and that no tick was published before its due time."""
    seen = published_ticks(client, queue)
    early = [(tick, at - tick) for tick, at in seen if at < tick]
    assert early == [], f"ticks published early (tick, ms): {early}\n{workers.report()}"
    doubled = [tick for tick, n in Counter(t for t, _ in seen).items() if n > 1]
    assert doubled == [], f"ticks published twice: {doubled}"
    ticks = sorted(t for t, _ in seen)
    expected = list(range((began // SECOND + 1) * SECOND, stopped - SECOND + 1, SECOND))
    missing = sorted(set(expected) - set(ticks))
    assert missing == [], f"{len(missing)} of {len(expected)} ticks missing: {missing}"
    assert len(expected) >= 12
    return ticks


@pytest.mark.parametrize("others", [2, 0], ids=["with-two-true-workers", "alone"])
def test_a_worker_whose_clock_steps_fires_no_tick_early_and_loses_none(
    workers: Workers,
    redis_client: redis.Redis,
    queue_name: str,
    tmp_path: Path,
    others: int,
) -> None:
    # Given a schedule ticking every second, a worker whose wall clock the test steps,
    # and (or not) two workers whose clocks are true
    create_schedule(workers, queue_name)
    clock = SteppedClock(tmp_path / "offset")
    running = [start(workers, clock.env())]
    running += [start(workers, {}) for _ in range(others)]
    for w in running:
        w.wait_ready(timeout=60)
    began = redis_ms(redis_client)
    wait_for(
        lambda: len(published_ticks(redis_client, queue_name)) >= 2, timeout=30, what="2 ticks"
    )

    # When its clock steps 5 s forward, and 6 s later 10 s back (5 s behind the true
    # time), and 6 s later forward again to the true time
    for offset in (5, -5, 0):
        clock.step(offset)
        time.sleep(6)
    stopped = redis_ms(redis_client)
    for w in running:
        w.send(signal.SIGTERM)
    for w in running:
        assert w.wait_exit(timeout=40) == 0, workers.report()

    # Then every tick was published once, none early, none missing
    ticks = check_run(redis_client, workers, queue_name, began, stopped)
    # And the stepped worker took part (with the others, or alone), and no step made it
    # block on Redis past its socket timeout (Redis was never away)
    assert f"Schedule {queue_name} fired" in running[0].stderr, workers.report()
    assert "Cannot reach Redis" not in running[0].stderr, workers.report()
    print(f"\n{len(ticks)} ticks, {others + 1} workers, one stepped +5 s then -5 s")


def test_workers_whose_clocks_are_skewed_fire_every_tick_once_and_none_early(
    workers: Workers, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a schedule ticking every second, and three workers whose clocks are 5 s
    # ahead, 5 s behind and 40 ms ahead of the true time
    create_schedule(workers, queue_name)
    running = [start(workers, skew_env(skew)) for skew in (5, -5, 0.04)]
    for w in running:
        w.wait_ready(timeout=60)
    began = redis_ms(redis_client)

    # When they run for 14 s
    time.sleep(14)
    stopped = redis_ms(redis_client)
    for w in running:
        w.send(signal.SIGTERM)
    for w in running:
        assert w.wait_exit(timeout=40) == 0, workers.report()

    # Then every tick was published once, none early, none missing
    check_run(redis_client, workers, queue_name, began, stopped)
