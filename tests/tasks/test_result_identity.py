"""What ``enqueue()``/``aenqueue()`` return is what ``get_result()`` and ``refresh()`` give
back: ``enqueued_at`` is cut to the millisecond once, before it is returned (a result
stores milliseconds)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import task_backends

from tests.tasks.conftest import TasksEnv, run_async

pytestmark = pytest.mark.django_db(transaction=True)

#: Enqueues in a row: each has a 99.9 % chance of a time with microseconds, so the
#: old code (microseconds returned, milliseconds stored) fails this almost surely.
ROUNDS = 20


@pytest.mark.parametrize("use_tz", [True, False])
def test_enqueue_returns_what_get_result_and_refresh_give_back(
    tasks_env: TasksEnv, settings: Any, use_tz: bool
) -> None:
    # Given the redisq backend (with or without USE_TZ)
    settings.USE_TZ = use_tz
    backend = task_backends["default"]
    for i in range(ROUNDS):
        # When a task is enqueued, then read back
        result = tasks_env.task("calculate").enqueue(i, 2, scale=3)
        returned_at = result.enqueued_at
        fetched = backend.get_result(result.id)
        # Then the result read back equals the one returned, field by field
        assert fetched.enqueued_at == returned_at
        assert returned_at.microsecond % 1000 == 0
        assert fetched == result
        # ...and refresh() changes none of them
        result.refresh()
        assert result.enqueued_at == returned_at
        assert result == fetched


def test_aenqueue_returns_what_aget_result_and_arefresh_give_back(tasks_env: TasksEnv) -> None:
    backend = task_backends["default"]

    async def rounds() -> list[tuple[Any, Any, Any]]:
        out = []
        for i in range(ROUNDS):
            result = await tasks_env.task("calculate").aenqueue(i, 2)
            returned_at = result.enqueued_at
            fetched = await backend.aget_result(result.id)
            await result.arefresh()
            out.append((returned_at, fetched, result))
        return out

    for returned_at, fetched, result in run_async(rounds()):
        assert fetched.enqueued_at == returned_at == result.enqueued_at
        assert fetched == result


def test_enqueue_once_returns_the_same_result_the_second_time(tasks_env: TasksEnv) -> None:
    from redisq_django.tasks import enqueue_once

    task = tasks_env.task("calculate")
    first = enqueue_once(task, (1, 2), {}, message_id=f"once-{tasks_env.queue}")
    again = enqueue_once(task, (1, 2), {}, message_id=f"once-{tasks_env.queue}")
    assert again == first == task_backends["default"].get_result(first.id)
