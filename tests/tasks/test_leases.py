"""A task's own ``visibility_timeout``, with real ``runconsumer --tasks`` processes and
SIGKILL: its worker keeps renewing it while the task runs; once the worker dies, another
worker runs the task again when the lease has ended — not when the dead worker's
heartbeat expires (15 s), not after the queue's visibility timeout (60 s by default)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus, task_backends

from redisq_django.connection import get_broker
from redisq_django.core.worker.liveness import DEFAULT_HEARTBEAT_TTL_S
from redisq_django.tasks.backend_options import TASKS_CONSUMER
from tests.support.workers import wait_for
from tests.tasks.conftest import TasksEnv, TaskWorkers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: The worker's reclaim runs every 2 s; the rest is slack for a loaded machine.
TAKEOVER_SLACK_S = 6.0


@pytest.fixture
def workers(tasks_env: TasksEnv, tmp_path: Path) -> Iterator[TaskWorkers]:
    # The queue's own visibility timeout is REDISQ's default (60 s), OPTIONS say nothing
    w = TaskWorkers(tasks_env.redis_url, tmp_path / "db.sqlite3", tmp_path / "logs")
    w.extra_env = {
        "REDISQ_TEST_TASK_QUEUE": tasks_env.queue,
        "REDISQ_TEST_TASK_OPTIONS": json.dumps({}),
        "REDISQ_TEST_RUNS_URL": tasks_env.redis_url,
    }
    w.migrate()
    try:
        yield w
    finally:
        w.close()


def _starts(url: str, key: str) -> list[float]:
    """When each run of the task began (this host's clock, s)."""
    client = redis.Redis.from_url(url)
    try:
        return [float(v) for v in client.lrange(key, 0, -1)]
    finally:
        client.close()


def _lease_end_s(queue: str) -> float:
    """When the one lease of the tasks of ``queue``'s normal level ends (s)."""
    broker = get_broker()
    [(_, ends_ms)] = broker.client.zrange(
        broker.keys(f"tasks.{queue}").group(TASKS_CONSUMER).leases, 0, -1, withscores=True
    )
    return float(ends_ms) / 1000


def test_a_killed_worker_s_tasks_run_again_when_their_own_lease_ends_and_not_before(
    tasks_env: TasksEnv, workers: TaskWorkers
) -> None:
    env = tasks_env
    short_key, long_key = f"short:{env.queue}", f"long:{env.queue}"
    # Given a worker running a task with visibility_timeout=3 (it sleeps a minute)...
    short = env.task("short_lease").enqueue(short_key, 60)
    first = workers.start("--tasks", env.queue, "--stats-interval", "0")
    wait_for(lambda: _starts(env.redis_url, short_key), timeout=60, what="the short task")
    # ...a second worker running one with visibility_timeout=24 (on another queue level,
    # as the first worker's thread of the normal level is busy)
    long = env.task("long_lease", priority=5).enqueue(long_key, 60)
    second = workers.start("--tasks", env.queue, "--stats-interval", "0")
    wait_for(lambda: _starts(env.redis_url, long_key), timeout=60, what="the long task")
    # ...and an idle third worker, reclaiming every 2 s all along
    workers.start("--tasks", env.queue, "--stats-interval", "0").wait_ready()
    time.sleep(5)  # longer than the short task's lease: its worker keeps renewing it
    assert len(_starts(env.redis_url, short_key)) == 1, workers.report()

    # When both busy workers are killed
    killed_at = time.time()
    for w in (first, second):
        w.send(signal.SIGKILL)
    for w in (first, second):
        w.wait_exit(10)
    short_ends = _lease_end_s(env.queue)
    long_ends = _lease_end_s(f"{env.queue}.high")

    # Then the third worker runs each again once its own lease ended, and not before
    backend = task_backends["default"]

    def both_done() -> bool:
        done = [backend.get_result(r.id).status for r in (short, long)]
        return done == [TaskResultStatus.SUCCESSFUL] * 2

    wait_for(both_done, timeout=60, what="both tasks to succeed", describe=workers.report)
    short_starts, long_starts = _starts(env.redis_url, short_key), _starts(env.redis_url, long_key)
    assert len(short_starts) == len(long_starts) == 2
    assert short_ends <= short_starts[1] <= short_ends + TAKEOVER_SLACK_S
    assert long_ends <= long_starts[1] <= long_ends + TAKEOVER_SLACK_S
    # The short task's lease beat the dead worker's heartbeat (15 s) and the queue's
    # visibility timeout (60 s); the long one's outlasted the heartbeat, which did not
    # hand it over earlier (a lease is renewed every third of it: it ends >= 16 s after)
    assert short_starts[1] < killed_at + DEFAULT_HEARTBEAT_TTL_S
    assert long_ends > killed_at + DEFAULT_HEARTBEAT_TTL_S
    for result in (short, long):
        result.refresh()
        assert result.attempts == 2 and len(set(result.worker_ids)) == 2
        assert result.errors == [] and result.return_value == 2


# On every server (the lease script); the 40 s test above runs on Redis 7 only (CI time).
@pytest.mark.servers
def test_a_worker_stopped_cold_hands_its_leased_task_over_at_once(
    tasks_env: TasksEnv, workers: TaskWorkers
) -> None:
    env = tasks_env
    key = f"long:{env.queue}"
    # Given a worker running a task with visibility_timeout=24, and an idle worker
    long = env.task("long_lease").enqueue(key, 60)
    first = workers.start("--tasks", env.queue, "--stats-interval", "0")
    wait_for(lambda: _starts(env.redis_url, key), timeout=60, what="the task to start")
    workers.start("--tasks", env.queue, "--stats-interval", "0").wait_ready()
    # When the first one is stopped cold (SIGTERM twice: it abandons the running task)
    first.send(signal.SIGTERM)
    first.wait_log("SIGTERM: finishing in-flight", timeout=10)
    first.send(signal.SIGTERM)
    assert first.wait_exit(20) == 1, workers.report()
    stopped_at = time.time()
    # Then the other worker runs the task again at once, not when its lease would end
    backend = task_backends["default"]
    wait_for(
        lambda: backend.get_result(long.id).status == TaskResultStatus.SUCCESSFUL,
        timeout=60,
        what="the task to succeed",
        describe=workers.report,
    )
    starts = _starts(env.redis_url, key)
    assert len(starts) == 2
    assert starts[1] - stopped_at < TAKEOVER_SLACK_S  # its lease would hold it >= 16 s
