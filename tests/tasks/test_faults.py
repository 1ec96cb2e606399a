"""Tasks under faults, with real ``runconsumer --tasks`` processes and real signals."""

from __future__ import annotations

import json
import signal
import time
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


def test_a_task_raising_keyboard_interrupt_fails_and_the_worker_lives_on(
    tasks_env: TasksEnv, workers: TaskWorkers
) -> None:
    # Given tasks raising KeyboardInterrupt (sync and async) and SystemExit, then one
    # that records its run, and a worker process
    key = f"runs:{tasks_env.queue}"
    raising = [
        tasks_env.task("interrupts").enqueue("from the task"),
        tasks_env.task("async_interrupts").enqueue("from the coroutine"),
        tasks_env.task("exits").enqueue("bye"),
    ]
    after = tasks_env.task("record").enqueue(key, "after")
    worker = workers.start("--tasks", tasks_env.queue, "--stats-interval", "0")
    backend = task_backends["default"]

    # When it runs them
    def all_finished() -> bool:
        if not worker.alive:
            raise AssertionError(f"the worker died:\n{workers.report()}")
        return all(backend.get_result(r.id).is_finished for r in [*raising, after])

    wait_for(all_finished, timeout=60, what="every task to finish", describe=workers.report)

    # Then each raising task is FAILED with its exception class and traceback, after
    # one attempt (max_retries 0), and the task after them ran
    for result, kind, text in zip(
        raising,
        ["builtins.KeyboardInterrupt", "builtins.KeyboardInterrupt", "builtins.SystemExit"],
        ["KeyboardInterrupt: from the task", "KeyboardInterrupt: from the coroutine", "bye"],
        strict=True,
    ):
        result.refresh()
        assert result.status == TaskResultStatus.FAILED
        assert [e.exception_class_path for e in result.errors] == [kind]
        assert result.errors[0].traceback.rstrip().endswith(text)
        assert result.attempts == 1 and result.finished_at is not None
    after.refresh()
    assert after.status == TaskResultStatus.SUCCESSFUL
    assert _runs(tasks_env.redis_url, key) == [b"after"]
    # ...and the worker is alive, and stops cleanly on SIGTERM (exit code 0)
    assert worker.alive
    worker.send(signal.SIGTERM)
    assert worker.wait_exit(30) == 0, workers.report()
    assert "died of an unexpected error" not in worker.stderr


def test_a_second_sigint_is_a_cold_stop_and_the_log_says_so(
    tasks_env: TasksEnv, workers: TaskWorkers
) -> None:
    # Given a worker (grace period 30 s) running a task that takes 60 s
    key = f"runs:{tasks_env.queue}"
    result = tasks_env.task("slow_first_time").enqueue(key, 60)
    worker = workers.start(
        "--tasks", tasks_env.queue, "--stats-interval", "0", "--grace-period", "30"
    )
    wait_for(lambda: _runs(tasks_env.redis_url, key), timeout=60, what="the task to start")

    # When it gets SIGINT (a warm stop), then SIGINT again
    worker.send(signal.SIGINT)
    worker.wait_log("SIGINT: finishing in-flight messages (grace period 30 s)", timeout=10)
    worker.send(signal.SIGINT)

    # Then it exits at once with code 1, and its log says what happened: a cold stop
    # during the warm one, the running task left to be delivered again; no grace
    # period ran out
    assert worker.wait_exit(10) == 1, workers.report()
    log = worker.stderr
    assert "SIGINT again: exiting now, without finishing in-flight messages" in log
    assert "Cold stop" in log and "s into the warm stop" in log
    assert "their 1 unfinished message(s) stay pending" in log
    assert "counting this delivery" in log
    assert "grace period of" not in log.lower()
    assert "after the 30 s grace period" not in log

    # And so it is: another worker runs the task again, to the end
    second = workers.start("--tasks", tasks_env.queue, "--stats-interval", "0")
    backend = task_backends["default"]
    wait_for(
        lambda: backend.get_result(result.id).status == TaskResultStatus.SUCCESSFUL,
        timeout=60,
        what="the task to run again elsewhere",
        describe=workers.report,
    )
    second.send(signal.SIGTERM)
    assert second.wait_exit(30) == 0, workers.report()
    result.refresh()
    assert result.return_value == 2 and result.attempts == 2


#: Always-failing tasks of the kill test, each attempt running this long (s).
FAILING_TASKS, ATTEMPT_S = 16, 1.0


def test_killed_attempts_do_not_count_against_max_retries(
    tasks_env: TasksEnv, workers: TaskWorkers
) -> None:
    # Given always-failing tasks (max_retries 3, each attempt 1 s) and two worker
    # processes of 4 threads each
    workers.extra_env["REDISQ_TEST_TASK_OPTIONS"] = json.dumps(
        {"VISIBILITY_TIMEOUT": 2, "CONCURRENCY": 4}
    )
    key = f"runs:{tasks_env.queue}"
    results = [tasks_env.task("fails_slowly").enqueue(key, ATTEMPT_S) for _ in range(FAILING_TASKS)]
    argv = ("--tasks", tasks_env.queue, "--stats-interval", "0")
    running = [workers.start(*argv), workers.start(*argv)]

    def started_by(pid: int) -> int:
        return sum(1 for r in _runs(tasks_env.redis_url, key) if r.endswith(b" %d" % pid))

    # When a worker is SIGKILLed while it runs attempts, three times (each time a new
    # one takes its place)
    for round_ in range(3):
        victim = running[round_ % 2]
        seen = started_by(victim.pid)
        wait_for(
            lambda v=victim, n=seen: started_by(v.pid) > n,  # type: ignore[misc]
            timeout=30,
            what=f"an attempt started by {victim!r}",
            describe=workers.report,
        )
        time.sleep(ATTEMPT_S / 4)  # in the middle of that attempt
        victim.kill()
        running[round_ % 2] = workers.start(*argv)
    backend = task_backends["default"]

    def all_failed() -> bool:
        return all(backend.get_result(r.id).status == TaskResultStatus.FAILED for r in results)

    wait_for(all_failed, timeout=90, what="every task to be FAILED", describe=workers.report)
    for worker in running:
        worker.send(signal.SIGTERM)
    for worker in running:
        assert worker.wait_exit(30) == 0, workers.report()

    # Then every task is FAILED with exactly max_retries + 1 = 4 errors, its own...
    starts: dict[str, int] = {}
    for run in _runs(tasks_env.redis_url, key):
        result_id = run.decode().split()[0]
        starts[result_id] = starts.get(result_id, 0) + 1
    killed = 0
    for result in results:
        result.refresh()
        assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 4
        assert result.finished_at is not None
        # ...whatever attempts were killed: each started attempt has a worker id, only
        # those that failed have an error
        assert result.attempts == starts[result.id] >= 4
        killed += starts[result.id] - 4
    assert killed >= 3, f"only {killed} attempt(s) were killed mid-run"
