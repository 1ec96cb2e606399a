"""Tasks under faults, with real ``runconsumer --tasks`` processes and real signals."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus, task_backends

from tests.support.workers import wait_for
from tests.tasks.conftest import TasksEnv, TaskWorkers, tasks_setting

pytestmark = [
    pytest.mark.slow,
    pytest.mark.servers,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def workers(tasks_env: TasksEnv, tmp_path: Path) -> Iterator[TaskWorkers]:
    w = TaskWorkers(tasks_env.redis_url, tmp_path / "db.sqlite3", tmp_path / "logs")
    w.extra_env = {
        "REDISQ_TEST_TASK_QUEUE": tasks_env.queue,
        "REDISQ_TEST_TASK_OPTIONS": json.dumps({"VISIBILITY_TIMEOUT": 2}),
        "REDISQ_TEST_RUNS_URL": tasks_env.redis_url,
    }
    w.migrate()
    try:
        yield w
    finally:
        w.close()


def _runs(url: str, key: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return list(client.lrange(key, 0, -1))
    finally:
        client.close()


def test_a_task_whose_worker_is_killed_runs_again_elsewhere(
    tasks_env: TasksEnv, workers: TaskWorkers, settings: Any
) -> None:
    # Given a task whose first attempt runs long, started by a worker process
    settings.TASKS = tasks_setting(tasks_env.queue, VISIBILITY_TIMEOUT=2)
    key = f"runs:{tasks_env.queue}"
    result = tasks_env.task("slow_first_time").enqueue(key, 60)
    first = workers.start("--tasks", tasks_env.queue, "--stats-interval", "0")
    wait_for(lambda: _runs(tasks_env.redis_url, key), timeout=60, what="the first start")
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING
    # When that worker is killed (SIGKILL) in the middle of the task
    first.send(signal.SIGKILL)
    first.wait_exit(10)
    # Then another worker takes it over once its lease expires and runs it to the end
    second = workers.start("--tasks", tasks_env.queue, "--stats-interval", "0")
    backend = task_backends["default"]

    def finished() -> bool:
        return backend.get_result(result.id).status == TaskResultStatus.SUCCESSFUL

    wait_for(finished, timeout=60, what="the task to succeed", describe=workers.report)
    second.send(signal.SIGTERM)
    assert second.wait_exit(30) == 0, workers.report()
    result.refresh()
    assert result.return_value == 2
    assert result.attempts == 2 and len(set(result.worker_ids)) == 2
    assert result.errors == []
    assert _runs(tasks_env.redis_url, key) == [b"started", b"started"]
    assert result.enqueued_at <= result.started_at <= result.last_attempted_at
    assert result.last_attempted_at <= result.finished_at


def test_sigterm_lets_a_running_task_finish(tasks_env: TasksEnv, workers: TaskWorkers) -> None:
    # Given a worker process running a task that takes 2 s
    key = f"runs:{tasks_env.queue}"
    result = tasks_env.task("slow_first_time").enqueue(key, 2)
    worker = workers.start("--tasks", tasks_env.queue, "--stats-interval", "0")
    wait_for(lambda: _runs(tasks_env.redis_url, key), timeout=60, what="the start")
    # When it gets SIGTERM meanwhile
    worker.send(signal.SIGTERM)
    # Then it finishes the task, records it SUCCESSFUL and exits 0
    assert worker.wait_exit(30) == 0, workers.report()
    fetched = task_backends["default"].get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.return_value == 1
    assert _runs(tasks_env.redis_url, key) == [b"started"]


def test_a_task_that_kills_every_worker_ends_failed(
    tasks_env: TasksEnv, workers: TaskWorkers
) -> None:
    # Given a crash budget of 1 (REDISQ["MAX_RETRIES"]) and a task that SIGKILLs the
    # process running it
    workers.extra_env["REDISQ_TEST_MAX_RETRIES"] = "1"
    key = f"runs:{tasks_env.queue}"
    result = tasks_env.task("kills_its_worker").enqueue(key)
    # When workers keep being started, as a supervisor would
    backend = task_backends["default"]

    def failed() -> bool:
        if not any(w.alive for w in workers.started):
            workers.start("--tasks", tasks_env.queue, "--stats-interval", "0")
        return backend.get_result(result.id).status == TaskResultStatus.FAILED

    wait_for(failed, timeout=90, what="the result to be FAILED", describe=workers.report)
    # Then it ran twice (1 + 1 retry), its dead letter says lease_expired, and its
    # result is FAILED with that error
    result.refresh()
    assert _runs(tasks_env.redis_url, key) == [b"started", b"started"]
    assert [e.exception_class_path for e in result.errors] == [
        "redisq_django.tasks.results.LeaseExpired"
    ]
    assert result.finished_at is not None and result.started_at <= result.finished_at
