"""Beyond Django's assertions: retries with backoff, deferral never early, priority order,
results from another process, their TTL, enqueue_once, a FAILED task retried from its
dead letter, and the system checks."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import redis

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.utils import timezone

from redisq_django import deadletters
from redisq_django.connection import get_broker
from redisq_django.core.dead_entry import DeadReason
from redisq_django.models import DeadLetter
from redisq_django.tasks import enqueue_once
from tests.tasks.conftest import TasksEnv, tasks_setting

pytestmark = pytest.mark.django_db(transaction=True)
REPO_ROOT = Path(__file__).resolve().parents[2]
REJECT = "redisq_django.core.handler.Reject"


def _runs(env: TasksEnv, key: str) -> list[str]:
    client = redis.Redis.from_url(env.redis_url)
    try:
        return [v.decode() for v in client.lrange(key, 0, -1)]
    finally:
        client.close()


def test_a_flaky_task_is_retried_with_backoff_then_succeeds(tasks_env: TasksEnv) -> None:
    # Given a task (max_retries=2, backoff=0.05) that fails on its first two attempts
    key = f"runs:{tasks_env.queue}"
    result = tasks_env.task("flaky").enqueue(key, 2)
    # When a burst worker runs (it waits for retries as they come due)
    tasks_env.run_worker()
    result.refresh()
    # Then it succeeded on the third attempt, with one error per failed attempt
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3
    assert result.attempts == 3 and len(result.worker_ids) == 3
    assert [e.exception_class for e in result.errors] == [RuntimeError, RuntimeError]
    assert "attempt 1 fails" in result.errors[0].traceback
    assert "attempt 2 fails" in result.errors[1].traceback
    assert result.enqueued_at <= result.started_at <= result.last_attempted_at
    assert result.last_attempted_at <= result.finished_at
    assert _runs(tasks_env, key) == ["ran"] * 3


def test_a_task_failing_every_attempt_is_failed_after_max_retries_plus_one(
    tasks_env: TasksEnv,
) -> None:
    key = f"runs:{tasks_env.queue}"
    result = tasks_env.task("flaky").enqueue(key, 99)
    tasks_env.run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 3 and result.attempts == 3
    assert _runs(tasks_env, key) == ["ran"] * 3


@pytest.mark.servers  # task_settle.lua's dead mode
def test_a_task_raising_reject_is_a_dead_letter_at_once(tasks_env: TasksEnv) -> None:
    # Given a task with retries left (max_retries=3) that raises Reject on its first run
    key = f"runs:{tasks_env.queue}"
    result = tasks_env.task("rejects").enqueue(key, "order 7 no longer exists")
    # When a burst worker runs (it would wait for retries as they come due)
    tasks_env.run_worker()
    # Then it ran once: its result is FAILED with the Reject as its one error
    assert _runs(tasks_env, key) == ["ran"]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1
    assert [e.exception_class_path for e in result.errors] == [REJECT]
    assert "order 7 no longer exists" in result.errors[0].traceback
    # And its dead letter was rejected after one attempt, with the reason, as a consumer's
    deadletters.sink(f"tasks.{tasks_env.queue}", "tasks")  # unless the worker's sink did
    row = DeadLetter.objects.get(message_id=result.id)
    assert (row.reason, row.attempts) == (DeadReason.REJECTED, 1)
    assert (row.error_class, row.error_message) == (REJECT, "order 7 no longer exists")


def test_a_failed_task_retried_from_its_dead_letter_is_ready_then_runs_again(
    tasks_env: TasksEnv,
) -> None:
    # Given a FAILED task whose dead letter the sink stored in the database
    result = tasks_env.task("failing").enqueue("once more")
    tasks_env.run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    deadletters.sink(f"tasks.{tasks_env.queue}", "tasks")  # unless the worker's sink did
    row = DeadLetter.objects.get(message_id=result.id)
    assert row.consumer == "tasks" and row.error_class == "builtins.ValueError"
    # When staff retry it (the admin's Retry calls the same function)
    assert deadletters.retry([row]) == 1
    # Then its result is READY again at once, and the next worker runs it again
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert result.finished_at is None
    tasks_env.run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 2 and result.attempts == 2


def test_a_deferred_task_never_runs_early(tasks_env: TasksEnv) -> None:
    # Given a task deferred by 1.5 s
    key = f"runs:{tasks_env.queue}"
    run_after = timezone.now() + dt.timedelta(seconds=1.5)
    result = tasks_env.task("stamp", run_after=run_after).enqueue(key)
    # When a burst worker runs before it is due, it does not run it
    tasks_env.run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert _runs(tasks_env, key) == []
    # ...and once it is due, the next one does, not before its run_after
    time.sleep(max(0.0, (run_after - timezone.now()).total_seconds()) + 0.2)
    tasks_env.run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.task.run_after == run_after
    ran_at = float(_runs(tasks_env, key)[0])
    assert ran_at >= run_after.timestamp()
    assert result.started_at >= run_after


def test_higher_priorities_run_first(tasks_env: TasksEnv) -> None:
    # Given tasks enqueued low, normal and high, interleaved
    key = f"runs:{tasks_env.queue}"
    enqueued = []
    for i in range(4):
        for priority, label in ((-50, "low"), (0, "normal"), (50, "high")):
            tasks_env.task("record", priority=priority).enqueue(key, f"{label}{i}")
            enqueued.append(f"{label}{i}")
    # When one worker (one thread per level) runs them
    tasks_env.run_worker()
    # Then every high ran before every normal, every normal before every low, each
    # level in enqueue order
    runs = _runs(tasks_env, key)
    assert sorted(runs) == sorted(enqueued)
    assert runs == [f"{level}{i}" for level in ("high", "normal", "low") for i in range(4)]


@pytest.mark.slow  # a fresh Python process
def test_a_coroutine_task_runs_on_an_event_loop(tasks_env: TasksEnv) -> None:
    key = f"runs:{tasks_env.queue}"
    result = tasks_env.task("async_record").enqueue(key, "async")
    tasks_env.run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "async"
    assert _runs(tasks_env, key) == ["async"]


def _in_other_process(env: TasksEnv, code: str) -> str:
    script = (
        "import django; django.setup()\n"
        "from django.tasks import task_backends\n"
        "backend = task_backends['default']\n" + code
    )
    environ = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.tasks.settings",
        REDISQ_TEST_URL=env.redis_url,
        REDISQ_TEST_TASK_QUEUE=env.queue,
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_results_are_read_from_another_process(tasks_env: TasksEnv) -> None:
    # Given a task enqueued and run here
    result = tasks_env.task("calculate").enqueue(2, 3)
    tasks_env.run_worker()
    # Then another process reads its result
    seen = _in_other_process(
        tasks_env,
        f"r = backend.get_result({result.id!r})\nprint(r.status, r.return_value['sum'])",
    )
    assert seen == "SUCCESSFUL 5"
    # And a task enqueued by another process is run here and read here
    other_id = _in_other_process(
        tasks_env,
        "from tests.tasks.sample_tasks import calculate\n"
        f"print(calculate.using(queue_name={tasks_env.queue!r}).enqueue(4, 4).id)",
    )
    tasks_env.run_worker()
    other = task_backends["default"].get_result(other_id)
    assert other.status == TaskResultStatus.SUCCESSFUL
    assert other.return_value == {"sum": 8, "items": [4, 4]}


def test_results_expire_after_their_ttl(tasks_env: TasksEnv, settings: Any) -> None:
    # Given results kept 1 s
    settings.TASKS = tasks_setting(tasks_env.queue, RESULT_TTL=1)
    result = tasks_env.task("noop").enqueue()
    tasks_env.run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    # When 1 s has passed since it finished, it is gone
    time.sleep(1.3)
    with pytest.raises(TaskResultDoesNotExist):
        result.refresh()


def test_enqueue_once_enqueues_one_message_per_id(tasks_env: TasksEnv) -> None:
    # Given eight threads enqueueing the same task with the same message id at once
    key = f"runs:{tasks_env.queue}"
    task = tasks_env.task("record")
    message_id = f"tick:{tasks_env.queue[-6:]}:1700000000"
    results: list[Any] = []
    barrier = threading.Barrier(8)

    def call() -> None:
        barrier.wait(timeout=10)
        results.append(enqueue_once(task, (key, "tick"), {}, message_id=message_id))

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    # When a worker runs the queue
    tasks_env.run_worker()
    # Then the task ran once; every call got the same result id
    assert _runs(tasks_env, key) == ["tick"]
    assert {r.id for r in results} == {message_id} and len(results) == 8
    # And a later call enqueues nothing and returns the finished result
    again = enqueue_once(task, (key, "tick"), {}, message_id=message_id)
    assert again.status == TaskResultStatus.SUCCESSFUL and again.return_value == "tick"
    tasks_env.run_worker()
    assert _runs(tasks_env, key) == ["tick"]
    stats = get_broker().stats(f"tasks.{tasks_env.queue}")
    assert stats.length == 1


def test_checks_report_bad_options_and_queue_names(settings: Any, redis_url: str) -> None:
    settings.REDISQ = {"URL": redis_url}
    settings.TASKS = {
        "default": {
            "BACKEND": "redisq_django.tasks.RedisqBackend",
            "QUEUES": ["ok", "has space"],
            "OPTIONS": {"RESULT_TTL": 0, "COLOUR": "blue"},
        },
        "empty": {"BACKEND": "redisq_django.tasks.RedisqBackend", "QUEUES": []},
        "names": {"BACKEND": "redisq_django.tasks.RedisqBackend", "QUEUES": ["has space"]},
    }
    ids = {alias: [m.id for m in task_backends[alias].check()] for alias in ("default", "empty")}
    assert ids == {
        "default": ["redisq_django.E030", "redisq_django.E030"],
        "empty": ["redisq_django.E031"],
    }
    [bad_name] = task_backends["names"].check()
    assert bad_name.id == "redisq_django.E032" and "has space" in bad_name.msg


def test_checks_report_task_queues_that_share_a_redisq_queue(settings: Any, redis_url: str) -> None:
    # Given two backends with the default prefix and a queue name in common, and a
    # backend whose queues "x" and "x.high" both make "tasks.x.high"
    settings.REDISQ = {"URL": redis_url}
    backend = "redisq_django.tasks.RedisqBackend"
    settings.TASKS = {
        "default": {"BACKEND": backend, "QUEUES": ["default", "emails"]},
        "other": {"BACKEND": backend, "QUEUES": ["emails", "reports"]},
        "levels": {"BACKEND": backend, "QUEUES": ["x", "x.high"]},
        "apart": {"BACKEND": backend, "QUEUES": ["emails"], "OPTIONS": {"QUEUE_PREFIX": "b."}},
    }
    # When each backend is checked
    found = {alias: task_backends[alias].check() for alias in settings.TASKS}
    # Then each shared redisq queue is reported once, by the first backend involved,
    # naming both task queues; the backend with its own prefix shares nothing
    assert {alias: [m.id for m in msgs] for alias, msgs in found.items()} == {
        "default": ["redisq_django.E033"],
        "other": [],
        "levels": ["redisq_django.E033"],
        "apart": [],
    }
    [emails] = found["default"]
    assert emails.msg.startswith(
        "TASKS['default']['QUEUES']: TASKS['default'] queue 'emails' and TASKS['other'] "
        "queue 'emails' use the same redisq queues 'tasks.emails.high', 'tasks.emails', "
        "'tasks.emails.low'"
    )
    [levels] = found["levels"]
    assert "queue 'x' and TASKS['levels'] queue 'x.high'" in levels.msg
    assert "'tasks.x.high'" in levels.msg and "QUEUE_PREFIX" in (levels.hint or "")


def test_checks_and_enqueue_refuse_a_partitioned_task_queue(settings: Any, redis_url: str) -> None:
    # Given a task queue whose high level's redisq queue is partitioned
    settings.REDISQ = {"URL": redis_url, "PARTITIONS": {"tasks.reports.high": 2}}
    backend = "redisq_django.tasks.RedisqBackend"
    settings.TASKS = {"default": {"BACKEND": backend, "QUEUES": ["default", "reports"]}}
    # Then the check reports it (runconsumer and every manage.py command stop at start)
    [error] = task_backends["default"].check()
    assert error.id == "redisq_django.E034"
    assert "task queue 'reports' is partitioned" in error.msg
    assert "'tasks.reports.high'" in error.msg
    # And a task of that level is refused at enqueue, the other levels are not (the
    # level is chosen from the task's queue name and priority alone)
    urgent = cast("Any", SimpleNamespace(queue_name="reports", priority=50))
    with pytest.raises(InvalidTask, match="is partitioned"):
        task_backends["default"].level_queue(urgent)
    normal = cast("Any", SimpleNamespace(queue_name="reports", priority=0))
    assert task_backends["default"].level_queue(normal) == "tasks.reports"
