"""Tasks with history on (``REDISQ["HISTORY"]``): each settle of a task writes its
lifecycle event in the same script, as every other consumer's settle does."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus

from redisq_django.connection import get_broker
from tests.tasks.conftest import TasksEnv

pytestmark = pytest.mark.django_db(transaction=True)


def _events(queue: str) -> list[dict[str, Any]]:
    """The events of a task queue's normal level, decoded (``m`` as JSON)."""
    broker = get_broker()
    out = []
    for _, raw in broker.client.xrange(broker.keys(f"tasks.{queue}").events):
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        fields["m"] = json.loads(fields["m"])
        out.append(fields)
    return out


def test_a_task_retried_once_then_handled_and_a_task_that_dies_are_recorded(
    tasks_env: TasksEnv, settings: Any
) -> None:
    # Given history on, a task that fails once then succeeds and a task that always fails
    settings.REDISQ = {**settings.REDISQ, "HISTORY": True}
    key = f"runs:{tasks_env.queue}"
    flaky = tasks_env.task("flaky").enqueue(key, 1)
    failing = tasks_env.task("failing").enqueue("no luck")
    # When a burst worker runs them
    tasks_env.run_worker()
    flaky.refresh()
    failing.refresh()
    assert (flaky.status, failing.status) == (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
    # Then the flaky task has exactly a `retried` then a `handled` event, the failing
    # one exactly a `dead` event, each by the `tasks` consumer and its instance
    events = _events(tasks_env.queue)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        [(message_id, attempt, duration)] = event["m"]
        assert isinstance(duration, int) and duration >= 0
        by_task.setdefault(message_id, []).append({**event, "attempt": attempt})
    assert set(by_task) == {flaky.id, failing.id}
    retried, handled = by_task[flaky.id]
    assert (retried["e"], retried["attempt"]) == ("retried", 1)
    assert retried["error_class"] == "builtins.RuntimeError"
    assert retried["error_message"] == "attempt 1 fails"
    assert int(retried["next_due"]) > 0
    assert (handled["e"], handled["attempt"]) == ("handled", 2)
    [dead] = by_task[failing.id]
    assert (dead["e"], dead["attempt"], dead["reason"]) == ("dead", 1, "failed")
    assert (dead["error_class"], dead["error_message"]) == ("builtins.ValueError", "no luck")
    assert {e["g"] for e in events} == {"tasks"}
    assert {e["c"] for e in events} == set(flaky.worker_ids) | set(failing.worker_ids)
