"""Task results that another Redis client overwrote never make the task results pages
answer 500: they show the result and mark what cannot be read."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from redisq_django.connection import get_broker
from tests.tasks.conftest import TasksEnv

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/admin/redisq_django/taskresults/"


@pytest.mark.parametrize(
    "fields",
    [
        {"errors": "not json"},
        {"errors": "[" * 100_000},
        {"errors": '[1, {"x": 2}]', "worker_ids": "{}"},
        {"started_at": "abc", "finished_at": "9" * 20, "enqueued_at": "9" * 15},
    ],
    ids=["errors-not-json", "errors-deep", "errors-odd-items", "times"],
)
def test_a_result_written_by_another_client_leaves_the_pages_up(
    tasks_env: TasksEnv, admin_client: Any, fields: dict[str, str]
) -> None:
    # Given a task's result whose fields another Redis client overwrote
    result = tasks_env.task("calculate").enqueue(20, 22)
    tasks_env.run_worker()
    broker = get_broker()
    [key] = broker.client.keys(f"*:result:{result.id}")  # the queue of the task's level
    broker.client.hset(key, mapping=fields)
    # When the list and the result's page are shown
    listing = admin_client.get(URL)
    page = admin_client.get(f"{URL}result/{result.id}/")
    # Then both answer, show the result, and mark what is unreadable (where it is)
    assert listing.status_code == 200 and page.status_code == 200
    assert result.id.encode() in listing.content
    assert b"[20, 22]" in page.content
    assert b"unreadable:" in page.content
