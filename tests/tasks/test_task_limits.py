"""Flow control of a task queue (issue 34) through the backend's ``OPTIONS``: ``RATE``,
``BURST``, ``MAX_IN_FLIGHT`` and ``TIME_LIMIT`` are checked, declared on every priority
level of the queue, and the three levels keep to ONE rate together (they share the
normal level's bucket), with a real worker in this process on the session's Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus
from django.tasks.signals import task_started

from redisq_django.core.worker import Worker, WorkerOptions
from redisq_django.runner import build_worker
from redisq_django.tasks.backend_options import TASKS_CONSUMER, option_problems
from redisq_django.tasks.task_queues import task_declarations, task_queues
from tests.support.flow import most_allowed, most_in_any_window, run_in_thread
from tests.support.workers import wait_for
from tests.tasks.conftest import TasksEnv, tasks_setting

LIMITS = {"RATE": "5/s", "BURST": 2, "MAX_IN_FLIGHT": 3, "TIME_LIMIT": 10}


# -- OPTIONS ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"RATE": "5/x"}, "is not a rate"),
        ({"BURST": 2}, "BURST needs a RATE"),
        ({"MAX_IN_FLIGHT": 0}, "MAX_IN_FLIGHT"),
        ({"TIME_LIMIT": -1}, "TIME_LIMIT"),
    ],
)
def test_option_problems_refuse_limits_a_worker_could_not_keep(
    options: dict[str, Any], needle: str
) -> None:
    # When OPTIONS hold one bad limit, Then exactly that one is named
    problems = option_problems(options)
    assert len(problems) == 1, problems
    assert needle in problems[0]


def test_option_problems_accept_every_limit_together() -> None:
    assert option_problems(LIMITS) == []


# -- declarations -------------------------------------------------------------------------


def test_every_level_of_a_task_queue_gets_its_limits_and_one_flow_queue(
    settings: Any, queue_name: str
) -> None:
    # Given a task queue whose backend OPTIONS set every limit
    settings.TASKS = tasks_setting(queue_name, **LIMITS)
    levels = [f"tasks.{queue_name}.high", f"tasks.{queue_name}", f"tasks.{queue_name}.low"]
    # When the worker's declarations are computed
    mine = {d.queue: d for d in task_declarations() if d.queue in levels}
    # Then each of its three levels has the same limits and shares the normal level's
    # keys for them (one rate bucket, one pool of slots)
    assert sorted(mine) == sorted(levels)
    for declaration in mine.values():
        assert declaration.name == TASKS_CONSUMER
        assert (declaration.rate, declaration.burst) == ("5/s", 2)
        assert (declaration.max_in_flight, declaration.time_limit) == (3, 10)
        assert declaration.flow_queue == f"tasks.{queue_name}"
    # And the task queue "default" of the same backend gets the same limits, its own keys
    default = {d.queue: d for d in task_declarations()}["tasks.default.low"]
    assert (default.rate, default.flow_queue) == ("5/s", "tasks.default")


# -- end to end ---------------------------------------------------------------------------


class Starts:
    """When each task began (this process's monotonic clock), from ``task_started``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.at: dict[str, list[float]] = {}

    def __call__(self, sender: Any, task_result: Any, **kwargs: Any) -> None:
        now = time.monotonic()
        with self.lock:
            self.at.setdefault(task_result.id, []).append(now)

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.at.values())


@pytest.fixture
def starts() -> Iterator[Starts]:
    seen = Starts()
    task_started.connect(seen)
    try:
        yield seen
    finally:
        task_started.disconnect(seen)


def _enqueue_over_the_levels(env: TasksEnv, key: str, each: int) -> tuple[list[str], list[Any]]:
    """``each`` tasks per priority level, interleaved: their labels and results."""
    labels, results = [], []
    for i in range(each):
        for priority, level in ((50, "high"), (0, "normal"), (-50, "low")):
            labels.append(f"{level}{i}")
            results.append(env.task("record", priority=priority).enqueue(key, labels[-1]))
    return labels, results


def _run_until_started(
    workers: list[Worker], starts: Starts, client: redis.Redis, key: str, n: int
) -> None:
    """Run ``workers`` (each in a thread) until ``n`` tasks started and recorded a run."""
    threads = [run_in_thread(w) for w in workers]
    try:
        wait_for(lambda: starts.count() >= n, timeout=15, what=f"{n} tasks started")
        wait_for(lambda: client.llen(key) >= n, timeout=5, what=f"{n} tasks recorded")
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            t.join(timeout=15)
    assert not any(t.is_alive() for t in threads)


def _assert_ran_once_each(
    client: redis.Redis, key: str, labels: list[str], results: list[Any], starts: Starts
) -> list[float]:
    """Every task ran once, on its first attempt, successfully; when they started."""
    assert sorted(v.decode() for v in client.lrange(key, 0, -1)) == sorted(labels)
    assert sorted(starts.at) == sorted(r.id for r in results)
    assert all(len(v) == 1 for v in starts.at.values())
    for result in results:
        result.refresh()
        assert (result.status, result.attempts) == (TaskResultStatus.SUCCESSFUL, 1)
    return [t for v in starts.at.values() for t in v]


def _rate_keys(client: redis.Redis, queue: str) -> set[str]:
    """The rate buckets in Redis of task queue ``queue``'s levels."""
    return {k.decode() for k in client.scan_iter(match=f"redisq:{{tasks.{queue}*:rate")}


@pytest.mark.django_db(transaction=True)
def test_one_worker_runs_the_three_levels_of_a_task_queue_at_its_rate(
    tasks_env: TasksEnv, settings: Any, starts: Starts, redis_client: redis.Redis
) -> None:
    # Given a task queue limited to 5/s with a burst of 1, two threads per level, and
    # 12 tasks enqueued over its three priority levels (4 each)
    settings.TASKS = tasks_setting(tasks_env.queue, RATE="5/s", BURST=1, CONCURRENCY=2)
    key = f"runs:{tasks_env.queue}"
    labels, results = _enqueue_over_the_levels(tasks_env, key, 4)
    # When one worker runs the task queue (as runconsumer --tasks QUEUE does)
    options = WorkerOptions(stats_interval=0, block_ms=100)
    worker = build_worker(task_queues([tasks_env.queue]), options=options)
    _run_until_started([worker], starts, redis_client, key, 12)
    # Then every task ran once, and the levels together kept to 5/s (+1: a window's two
    # ends): the 11 intervals after the first take about 2.2 s
    times = _assert_ran_once_each(redis_client, key, labels, results, starts)
    assert most_in_any_window(times, 1.0) <= most_allowed(5, 1), sorted(
        t - min(times) for t in times
    )
    assert 1.9 <= max(times) - min(times) <= 6.0
    # And their one bucket is the normal level's: no level has a bucket of its own
    assert _rate_keys(redis_client, tasks_env.queue) == {
        f"redisq:{{tasks.{tasks_env.queue}}}:g:{TASKS_CONSUMER}:rate"
    }


@pytest.mark.django_db(transaction=True)
def test_levels_run_by_workers_of_their_own_share_one_rate(
    tasks_env: TasksEnv, settings: Any, starts: Starts, redis_client: redis.Redis
) -> None:
    # Given the same task queue (5/s, burst 1) and 12 tasks over its three levels, and a
    # worker per level (within one worker the levels run one after another, highest
    # first: here all three run at once, and only their shared bucket holds them to 5/s;
    # a bucket per level would let 15 a second through)
    settings.TASKS = tasks_setting(tasks_env.queue, RATE="5/s", BURST=1, CONCURRENCY=2)
    key = f"runs:{tasks_env.queue}"
    labels, results = _enqueue_over_the_levels(tasks_env, key, 4)
    options = WorkerOptions(stats_interval=0, block_ms=100)
    workers = [build_worker([q], options=options) for q in task_queues([tasks_env.queue])]
    # When the three workers run at once
    _run_until_started(workers, starts, redis_client, key, 12)
    # Then every task ran once, and the levels together kept to 5/s
    times = _assert_ran_once_each(redis_client, key, labels, results, starts)
    assert most_in_any_window(times, 1.0) <= most_allowed(5, 1), sorted(
        t - min(times) for t in times
    )
    assert 1.9 <= max(times) - min(times) <= 6.0
    # And each level started some of them early on: the levels did run side by side
    first = min(times)
    by_level = {r.id: label[:-1] for r, label in zip(results, labels, strict=True)}
    early = {by_level[i] for i, (t,) in starts.at.items() if t - first < 1.0}
    assert early == {"high", "normal", "low"}
