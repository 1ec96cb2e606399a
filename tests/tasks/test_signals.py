"""Django's task signals sent by our worker: each carries the result as it is at that
moment, a value of its own (the frozen ``TaskResult`` is replaced, never written)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus
from django.tasks.signals import task_finished, task_started

from tests.tasks.conftest import TasksEnv

pytestmark = pytest.mark.django_db(transaction=True)


def _signalled(env: TasksEnv) -> tuple[list[Any], list[Any]]:
    """The results ``task_started`` and ``task_finished`` carried while a worker ran."""
    started: list[Any] = []
    finished: list[Any] = []

    def on_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
        started.append(task_result)

    def on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
        finished.append(task_result)

    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        env.run_worker()
    finally:
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)
    return started, finished


def test_each_signal_carries_the_result_as_it_was_then(tasks_env: TasksEnv) -> None:
    # Given a task that succeeds and one that fails (no retries)
    ok = tasks_env.task("calculate").enqueue(1, 2)
    bad = tasks_env.task("failing").enqueue("no")
    # When a worker runs them, and receivers keep the results the signals carry
    started, finished = _signalled(tasks_env)
    # Then task_started's results are still RUNNING, unfinished, without errors
    assert sorted(r.id for r in started) == sorted([ok.id, bad.id])
    for r in started:
        assert (r.status, r.finished_at, r.errors) == (TaskResultStatus.RUNNING, None, [])
    # and task_finished's are the finished ones: the return value, or the error
    done = {r.id: r for r in finished}
    assert done[ok.id].status == TaskResultStatus.SUCCESSFUL
    assert done[ok.id].return_value == {"sum": 3, "items": [1, 2]}
    assert done[ok.id].finished_at is not None
    assert done[bad.id].status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in done[bad.id].errors] == ["builtins.ValueError"]
    # as get_result() reads them back
    for r in (ok, bad):
        r.refresh()
        assert (r.status, r.errors) == (done[r.id].status, done[r.id].errors)
