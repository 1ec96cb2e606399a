"""The backend-neutral assertions of Django's own tests/tasks/test_immediate_backend.py,
ported to redisq: each enqueue is followed by a burst worker (``runconsumer --tasks QUEUE
--burst``) before the result is refreshed, as django-tasks-db's tests do."""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist

from redisq_django.tasks import RedisqBackend
from tests.tasks.conftest import TasksEnv, run_async

pytestmark = pytest.mark.django_db(transaction=True)


def _assert_finished_in_order(result: Any) -> None:
    assert result.is_finished is True
    assert result.started_at is not None
    assert result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at


def test_the_backend_is_ours_with_every_capability(tasks_env: TasksEnv) -> None:
    backend = task_backends["default"]
    assert default_task_backend.alias == "default"
    assert isinstance(backend, RedisqBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


@pytest.mark.parametrize("name", ["noop", "async_noop"])
def test_enqueue_then_worker_runs_it(tasks_env: TasksEnv, name: str) -> None:
    # Given a task enqueued with args and kwargs
    task = tasks_env.task(name)
    result = task.enqueue(1, two=3)
    assert result.status == TaskResultStatus.READY
    assert result.enqueued_at is not None and result.started_at is None
    # When a burst worker runs the queue
    tasks_env.run_worker()
    result.refresh()
    # Then the result is SUCCESSFUL, with its timestamps in order
    assert result.status == TaskResultStatus.SUCCESSFUL
    _assert_finished_in_order(result)
    assert result.return_value is None
    assert result.task == task
    assert result.args == [1]
    assert result.kwargs == {"two": 3}
    assert result.attempts == 1
    assert len(result.worker_ids) == 1


@pytest.mark.parametrize("name", ["noop", "async_noop"])
def test_aenqueue_then_worker_runs_it(tasks_env: TasksEnv, name: str) -> None:
    task = tasks_env.task(name)
    result = run_async(task.aenqueue())
    tasks_env.run_worker()
    run_async(result.arefresh())
    assert result.status == TaskResultStatus.SUCCESSFUL
    _assert_finished_in_order(result)
    assert result.return_value is None
    assert result.task == task
    assert (result.args, result.kwargs, result.attempts) == ([], {}, 1)


@pytest.mark.parametrize(
    ("name", "exception", "message"),
    [
        ("failing", ValueError, "This Task failed due to ValueError"),
        ("exits", SystemExit, "This Task failed due to SystemExit"),
        # A worker thread's KeyboardInterrupt is the task's own, as in django-tasks'
        # db_worker: only Django's immediate backend lets it through.
        ("interrupts", KeyboardInterrupt, "This Task failed due to KeyboardInterrupt"),
        ("async_interrupts", KeyboardInterrupt, "This Task failed due to KeyboardInterrupt"),
    ],
)
def test_a_raising_task_is_failed_with_its_error(
    tasks_env: TasksEnv, caplog: Any, name: str, exception: type, message: str
) -> None:
    # Given a task that raises (SystemExit and KeyboardInterrupt too)
    task = tasks_env.task(name)
    result = task.enqueue(message)
    # When the worker runs it
    with caplog.at_level(logging.ERROR, logger="django.tasks"):
        tasks_env.run_worker()
    result.refresh()
    # Then it is FAILED with one error whose traceback ends with the exception
    errors = [r for r in caplog.records if r.name == "django.tasks" and r.levelno == logging.ERROR]
    assert len(errors) == 1 and result.id in errors[0].getMessage()
    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    _assert_finished_in_order(result)
    assert result.errors[0].exception_class is exception
    assert result.errors[0].traceback.endswith(f"{exception.__name__}: {message}\n")
    assert result.task == task
    assert (result.args, result.kwargs) == ([message], {})


def test_complex_exception(tasks_env: TasksEnv) -> None:
    result = tasks_env.task("complex_exception").enqueue()
    tasks_env.run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    _assert_finished_in_order(result)
    assert result._return_value is None
    assert result.errors[0].exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in result.errors[0].traceback


def test_a_non_json_return_value_fails_the_task(tasks_env: TasksEnv) -> None:
    result = tasks_env.task("returns_non_json").enqueue()
    tasks_env.run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    _assert_finished_in_order(result)
    assert result._return_value is None
    assert result.errors[0].exception_class is TypeError
    assert "Unsupported type" in result.errors[0].traceback


def test_return_value_is_json(tasks_env: TasksEnv) -> None:
    result = tasks_env.task("calculate_meaning_of_life").enqueue()
    other = tasks_env.task("calculate").enqueue(1, 2, scale=3)
    tasks_env.run_worker()
    result.refresh()
    other.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    assert other.return_value == {"sum": 9, "items": [1, 2]}


def test_result_async(tasks_env: TasksEnv) -> None:
    backend = task_backends["default"]

    async def enqueue() -> Any:
        return await backend.aenqueue(tasks_env.task("calculate_meaning_of_life"), [], {})

    result = run_async(enqueue())
    tasks_env.run_worker()
    fetched = run_async(backend.aget_result(result.id))
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 42
    assert fetched.id == result.id


def test_unknown_result_does_not_exist(tasks_env: TasksEnv) -> None:
    backend = task_backends["default"]
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("0123456789abcdef")
    with pytest.raises(TaskResultDoesNotExist):
        run_async(backend.aget_result("0123456789abcdef"))
    with pytest.raises(TaskResultDoesNotExist):
        tasks_env.task("noop").get_result("0123456789abcdef")


def test_the_three_log_lines(tasks_env: TasksEnv, caplog: Any) -> None:
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        result = tasks_env.task("noop").enqueue()
        tasks_env.run_worker()
    lines = [r.getMessage() for r in caplog.records if r.name == "django.tasks"]
    assert len(lines) == 3
    assert "enqueued" in lines[0] and result.id in lines[0]
    assert "state=RUNNING" in lines[1] and result.id in lines[1]
    assert "state=SUCCESSFUL" in lines[2] and result.id in lines[2]
    assert not any("NoneType" in line for line in lines)


def test_the_three_log_lines_of_a_failure(tasks_env: TasksEnv, caplog: Any) -> None:
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        result = tasks_env.task("failing").enqueue("x")
        tasks_env.run_worker()
    lines = [r.getMessage() for r in caplog.records if r.name == "django.tasks"]
    assert len(lines) == 3
    assert "state=RUNNING" in lines[1] and result.id in lines[1]
    assert "state=FAILED" in lines[2] and result.id in lines[2]


def test_takes_context(tasks_env: TasksEnv) -> None:
    result = tasks_env.task("with_context").enqueue("ctx-" + tasks_env.queue)
    tasks_env.run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"attempt": 1, "id": result.id}


def test_validate_on_enqueue_and_aenqueue(tasks_env: TasksEnv) -> None:
    task = tasks_env.tasks.noop
    with pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid for backend"):
        task.using(queue_name="unknown_queue").enqueue()
    with pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid for backend"):
        run_async(task.using(queue_name="unknown_queue").aenqueue())
    with pytest.raises(TypeError, match="Unsupported type"):
        task.enqueue(object())
