"""Django tasks show in the trends of the admin's charts: a task's settles (written by
its own scripts, not by the worker's acknowledgements) are counted as the worker's."""

from __future__ import annotations

import pytest
import redis

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from redisq_django.core import trends
from redisq_django.core.keys import queue_keys
from tests.tasks.conftest import TasksEnv

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_flaky_task_counts_one_published_two_failures_then_one_handled(
    tasks_env: TasksEnv,
) -> None:
    # Given a task that fails on its first two attempts, run by a burst worker
    key = f"runs:{tasks_env.queue}"
    tasks_env.task("flaky").enqueue(key, 2)
    tasks_env.task("flaky").enqueue(f"{key}:ok", 0)
    tasks_env.run_worker()
    # Then the queue's trends say so, per outcome
    client = redis.Redis.from_url(tasks_env.redis_url)
    try:
        # (a Django task queue is three Redis queues: its priority levels)
        names = [f"tasks.{tasks_env.queue}{level}" for level in ("", ".high", ".low")]
        found = trends.read_trends(client, [queue_keys("redisq", n) for n in names], 5)
    finally:
        client.close()
    totals: dict[str, int] = {}
    for minute in (m for trend in found for m in trend.minutes):
        for name, value in minute.items():
            what = name.split(":", 1)[0]
            totals[what] = totals.get(what, 0) + value
    assert (totals["published"], totals["handled"]) == (2, 2)
    assert (totals["failed"], totals["retried"], totals.get("dead", 0)) == (2, 2, 0)
