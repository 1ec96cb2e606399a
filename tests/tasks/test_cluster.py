"""Tasks on a 3-master Redis Cluster (``REDISQ["CLUSTER"]``): enqueue and aenqueue,
a worker running them, get_result and aget_result, with the levels of a task queue on
different nodes."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus, task_backends

from redisq_django.connection import get_broker
from redisq_django.core import trends
from redisq_django.core.clock import now_ms
from tests.tasks.conftest import TasksEnv, run_async, tasks_setting

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


def _spread_queue(base: str, cluster: Any) -> str:
    """A task queue name (``base`` or a variant) whose three levels are not all on one
    node, so that the test crosses nodes."""
    client = cluster.client()
    try:
        for i in range(50):  # bounded: 1/9 of names put all three levels on one node
            name = base if i == 0 else f"{base}-{i}"
            levels = [f"tasks.{name}", f"tasks.{name}.high", f"tasks.{name}.low"]
            nodes = {client.get_node_from_key(f"redisq:{{{q}}}:log").name for q in levels}
            if len(nodes) > 1:
                return name
    finally:
        client.close()
    raise AssertionError("no queue name spreads its levels over the cluster's nodes")


@pytest.fixture
def cluster_env(
    settings: Any, redis_cluster: Any, queue_name: str, redis_url: str, monkeypatch: Any
) -> TasksEnv:
    """TASKS on redisq with REDISQ on the cluster (runs are recorded in the test Redis)."""
    redis_cluster.flushall()
    queue = _spread_queue(queue_name, redis_cluster)
    settings.REDISQ = {"URL": redis_cluster.nodes[0].url, "CLUSTER": True}
    settings.TASKS = tasks_setting(queue)
    monkeypatch.setenv("REDISQ_TEST_RUNS_URL", redis_url)
    module = importlib.import_module("tests.tasks.sample_tasks")
    return TasksEnv(queue=queue, tasks=module, redis_url=redis_url, settings=settings)


def test_tasks_run_on_a_cluster_from_enqueue_to_result(cluster_env: TasksEnv) -> None:
    env = cluster_env
    assert type(get_broker().client).__name__ == "RedisCluster"
    # Given tasks enqueued at each priority level, two of them with aenqueue
    normal = env.task("calculate").enqueue(1, 2)
    high = env.task("calculate", priority=50).enqueue(3, 4, scale=10)

    async def enqueue_two() -> list[Any]:
        low = await env.task("calculate", priority=-50).aenqueue(5, 6)
        again = await env.task("calculate").aenqueue(7, 8)
        return [low, again]

    first = trends.minute_of(now_ms())
    low, again = run_async(enqueue_two())
    results = [normal, high, low, again]
    # (and all four, aenqueue's too, count in their level queues' published trends)
    broker, minutes = get_broker(), range(first, trends.minute_of(now_ms()) + 1)
    levels = [f"tasks.{env.queue}{level}" for level in ("", ".high", ".low")]
    published = [
        int(broker.client.hget(broker.keys(q).trend(m), trends.PUBLISHED) or 0)
        for q in levels
        for m in minutes
    ]
    assert sum(published) == 4, published
    backend = task_backends["default"]
    assert {backend.get_result(r.id).status for r in results} == {TaskResultStatus.READY}
    # When a burst worker runs the task queue
    env.run_worker()
    # Then each result is SUCCESSFUL, read back with get_result and with aget_result
    expected = [3, 70, 11, 15]
    for result, total in zip(results, expected, strict=True):
        fetched = backend.get_result(result.id)
        assert fetched.status == TaskResultStatus.SUCCESSFUL
        assert fetched.return_value == {"sum": total, "items": list(result.args)}
        assert fetched.attempts == 1 and len(fetched.worker_ids) == 1

    async def read_all() -> list[Any]:
        return [await backend.aget_result(r.id) for r in results]

    for fetched, total in zip(run_async(read_all()), expected, strict=True):
        assert fetched.status == TaskResultStatus.SUCCESSFUL
        assert fetched.return_value["sum"] == total
