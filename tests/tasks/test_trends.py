"""Django tasks show in the trends of the admin's charts: a task's settles (written by
its own scripts, not by the worker's acknowledgements) are counted as the worker's."""

from __future__ import annotations

from typing import Any

import pytest
import redis

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from redisq_django.core import trends
from redisq_django.core.clock import now_ms
from redisq_django.core.keys import queue_keys
from tests.tasks.conftest import TasksEnv, run_async

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


def _published_by_minute(client: redis.Redis, queue: str, first: int, last: int) -> list[int]:
    """The ``published`` counter of ``queue`` in each minute ``first..last``."""
    keys = queue_keys("redisq", queue)
    return [int(client.hget(keys.trend(m), trends.PUBLISHED) or 0) for m in range(first, last + 1)]


def test_aenqueue_counts_in_the_published_trend_as_enqueue_does(
    tasks_env: TasksEnv, redis_client: redis.Redis
) -> None:
    # Given a task queue with trends on (the default)
    task = tasks_env.task("calculate")
    queue = f"tasks.{tasks_env.queue}"
    first = trends.minute_of(now_ms())

    async def enqueue_async(n: int) -> list[str]:
        return [(await task.aenqueue(i, i)).id for i in range(n)]

    # When 7 tasks are enqueued with aenqueue, then 3 with enqueue
    async_ids = run_async(enqueue_async(7))
    sync_ids = [task.enqueue(i, i).id for i in range(3)]
    last = trends.minute_of(now_ms())
    # Then the queue's published counter of those minutes adds up to 7 + 3
    counts = _published_by_minute(redis_client, queue, first, last)
    assert sum(counts) == 10, counts
    assert len(set(async_ids + sync_ids)) == 10
    # And the minutes' hashes expire as enqueue's do (kept 48 h, not forever)
    for minute in range(first, last + 1):
        ttl = redis_client.ttl(queue_keys("redisq", queue).trend(minute))
        assert ttl == -2 or 0 < ttl <= trends.TTL_S


def test_aenqueue_is_not_counted_when_trends_are_off(
    tasks_env: TasksEnv, redis_client: redis.Redis
) -> None:
    # Given trends turned off
    tasks_env.settings.REDISQ = {"URL": tasks_env.redis_url, "TRENDS": False}
    task = tasks_env.task("calculate")
    first = trends.minute_of(now_ms())

    async def enqueue_async(n: int) -> list[Any]:
        return [await task.aenqueue(i, i) for i in range(n)]

    # When 4 tasks are enqueued with aenqueue
    results = run_async(enqueue_async(4))
    # Then they are enqueued, and no trend counts them
    assert len({r.id for r in results}) == 4
    counts = _published_by_minute(
        redis_client, f"tasks.{tasks_env.queue}", first, trends.minute_of(now_ms())
    )
    assert sum(counts) == 0


def test_aenqueue_after_redis_forgot_its_scripts_counts_each_task_once(
    tasks_env: TasksEnv, redis_client: redis.Redis
) -> None:
    # Given Redis without the scripts (as after a restart): the first EVALSHA is NOSCRIPT
    task = tasks_env.task("calculate")
    queue = f"tasks.{tasks_env.queue}"
    first = trends.minute_of(now_ms())

    async def flush_then_enqueue(n: int) -> list[Any]:
        redis_client.script_flush()
        return [await task.aenqueue(i, i) for i in range(n)]

    # When 3 tasks are enqueued with aenqueue
    results = run_async(flush_then_enqueue(3))
    # Then each is in the queue's log once, and counted once
    assert redis_client.xlen(queue_keys("redisq", queue).log) == 3
    assert len({r.id for r in results}) == 3
    counts = _published_by_minute(redis_client, queue, first, trends.minute_of(now_ms()))
    assert sum(counts) == 3, counts
