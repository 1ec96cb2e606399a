"""Dead letters of Django tasks name their task (not only ``tasks.<queue>/tasks``) in
the list, on their page and in their causes, and triage can tell causes by task."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus
from django.urls import reverse

from redisq_django import deadletters
from redisq_django.connection import get_broker
from redisq_django.core.operator import browse
from redisq_django.core.worker import WorkerOptions
from redisq_django.models import DeadLetter
from redisq_django.runner import build_worker
from redisq_django.tasks.task_queues import task_queues
from tests.support.flow import run_in_thread
from tests.support.workers import wait_for
from tests.tasks.conftest import TasksEnv

pytestmark = pytest.mark.django_db(transaction=True)

FAILING = "tests.tasks.sample_tasks.failing"
FLAKY = "tests.tasks.sample_tasks.flaky"


def test_a_failed_tasks_dead_letter_shows_its_task(tasks_env: TasksEnv, admin_client: Any) -> None:
    # Given two tasks of one queue that fail every attempt through a real worker
    failed = [tasks_env.task("failing").enqueue(f"bad order {i}") for i in range(3)]
    flaky = tasks_env.task("flaky").enqueue(f"runs:{tasks_env.queue}", 99)
    tasks_env.run_worker()
    deadletters.sink(f"tasks.{tasks_env.queue}", "tasks")  # unless the worker's sink did
    rows = DeadLetter.objects.filter(queue=f"tasks.{tasks_env.queue}")
    assert {r.message_id: r.task for r in rows} == {
        **{r.id: FAILING for r in failed},
        flaky.id: FLAKY,
    }

    # Then the list names the task of each, and filters by task
    changelist = reverse("admin:redisq_django_deadletter_changelist")
    page = admin_client.get(changelist)
    assert page.content.count(f'<span class="redisq-task">{FAILING}</span>'.encode()) == 3
    assert page.content.count(f'<span class="redisq-task">{FLAKY}</span>'.encode()) == 1
    assert admin_client.get(changelist, {"task": FLAKY}).context["cl"].result_count == 1

    # And a dead letter's page shows it
    row = rows.get(message_id=failed[0].id)
    detail = admin_client.get(reverse("admin:redisq_django_deadletter_change", args=[row.pk]))
    assert FAILING.encode() in detail.content

    # And the causes by error keep the tasks apart, with the task named
    causes_url = reverse("admin:redisq_django_deadletter_causes")
    by_error = admin_client.get(causes_url, {"status__exact": "dead"})
    found = {(c.task, c.error_key, c.count) for c, _ in by_error.context["causes"]}
    assert found == {
        (FAILING, "bad order <n>", 3),
        (FLAKY, "attempt <n> fails", 1),
    }
    assert f'<span class="redisq-task">{FAILING}</span>'.encode() in by_error.content

    # And by task, one cause per task whose link lists exactly its rows
    by_task = admin_client.get(causes_url, {"status__exact": "dead", "by": "task"})
    causes = {c.task: (c.count, query) for c, query in by_task.context["causes"]}
    assert {task: count for task, (count, _) in causes.items()} == {FAILING: 3, FLAKY: 1}
    listing = admin_client.get(f"{changelist}?{causes[FAILING][1]}")
    assert {r.message_id for r in listing.context["cl"].result_list} == {r.id for r in failed}


def test_a_task_ended_by_staff_is_failed_with_the_reason(tasks_env: TasksEnv) -> None:
    # Given a task whose first attempt failed and whose retry is an hour away (a worker
    # ran it once; a burst worker would wait for the retry)
    result = tasks_env.task("fails_then_waits").enqueue()
    queue = f"tasks.{tasks_env.queue}"
    broker = get_broker()
    gkeys = broker.keys(queue).group("tasks")
    options = WorkerOptions(stats_interval=0, block_ms=100)
    worker = build_worker(task_queues([tasks_env.queue]), options=options)
    thread = run_in_thread(worker)
    try:
        wait_for(
            lambda: browse.retrying(broker.client, gkeys, None).entries,
            timeout=30,
            what="the task's retry",
        )
    finally:
        worker.stop()
        thread.join(15)
    (retry,) = browse.retrying(broker.client, gkeys, None).entries
    result.refresh()
    assert result.status == TaskResultStatus.READY

    # When staff end it
    assert broker.operator.end_message(queue, "tasks", retry.ref, by="ann").outcome == "ended"
    deadletters.sink(queue, "tasks")

    # Then its dead letter says so, and its result is FAILED with that error
    row = DeadLetter.objects.get(queue=queue, message_id=result.id)
    assert row.reason == "ended" and row.task == "tests.tasks.sample_tasks.fails_then_waits"
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors][-1] == (
        "redisq_django.tasks.results.TaskEnded"
    )
