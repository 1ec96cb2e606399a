"""``aenqueue`` and ``aget_result`` share one native asyncio client per event loop, closed
when the loop shuts down."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus, task_backends

from tests.tasks.conftest import TasksEnv, run_async

pytestmark = pytest.mark.django_db(transaction=True)


def _connections(r: redis.Redis) -> tuple[int, int]:
    """(connections Redis accepted so far, connections open now), without this one's."""
    received = int(r.info("stats")["total_connections_received"])
    return received, int(r.info("clients")["connected_clients"])


def _client_ids(r: redis.Redis) -> set[int]:
    """The ids of the connections open on Redis now."""
    return {int(c["id"]) for c in r.client_list()}


def _still_open(r: redis.Redis, before: set[int]) -> set[int]:
    """Connections opened since ``before`` that are still open, once closed ones are gone
    (Redis sees a close a moment later). Other tests' connections closing meanwhile on
    the shared server do not count, either way."""
    opened = _client_ids(r) - before
    for _ in range(100):  # bounded: 1 s
        if not opened:
            break
        time.sleep(0.01)
        opened &= _client_ids(r)
    return opened


def test_one_client_per_event_loop_closed_with_the_loop(
    tasks_env: TasksEnv, redis_client: redis.Redis
) -> None:
    backend = task_backends["default"]
    task = tasks_env.task("calculate")

    async def twenty() -> list[Any]:
        results = [await task.aenqueue(i, i) for i in range(20)]
        return [await backend.aget_result(r.id) for r in results]

    # Given the connections the test Redis has seen and has open
    received, _ = _connections(redis_client)
    open_before = _client_ids(redis_client)
    # When 20 tasks are enqueued and read back with aenqueue/aget_result on one event
    # loop, then 20 more on another loop
    first = run_async(twenty())
    received_first, _ = _connections(redis_client)
    second = run_async(twenty())
    received_second, _ = _connections(redis_client)
    # Then each loop opened one connection for its 40 calls (not one per call)...
    assert received_first - received == 1
    assert received_second - received_first == 1
    # ...which was closed when its loop shut down
    assert _still_open(redis_client, open_before) == set()
    # And the calls did their work
    assert {r.status for r in first + second} == {TaskResultStatus.READY}
    assert len({r.id for r in first + second}) == 40
    tasks_env.run_worker()
    assert backend.get_result(second[-1].id).return_value == {"sum": 38, "items": [19, 19]}
