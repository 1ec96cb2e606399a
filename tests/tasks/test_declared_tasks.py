"""A task path read from Redis, or typed in the admin, is looked up among the tasks the
project declared, never imported; and ids read from Redis are logged escaped (issue 19,
point 9)."""

from __future__ import annotations

import json
import logging
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.contrib.auth.models import User
from django.core.management import call_command
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import TaskResultDoesNotExist
from django.test import Client
from django.urls import reverse

from redisq_django import Message, consumer
from redisq_django.connection import get_broker
from redisq_django.consuming.declarations import registry as consumer_registry
from redisq_django.core.start import StartPoint
from redisq_django.models import DeadLetter, Schedule
from redisq_django.tasks import registry
from redisq_django.tasks.backend_options import TASKS_CONSUMER
from tests.support.workers import wait_for
from tests.tasks.conftest import TasksEnv, TaskWorkers

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = "tests.tasks.import_marker"  # records its own import; no project declares it
IMPORTED_KEY = "redisqtest:import_marker:imported"
NEWLINE_ID = "evil\n2026-01-01 00:00:00,000 CRITICAL forged line"


def _task_message(env: TasksEnv, path: str, message_id: str) -> str:
    """Write a task message naming ``path`` straight into the test queue's log, as anyone
    who can write to Redis can; returns its id."""
    queue = f"tasks.{env.queue}"
    broker = get_broker()
    broker.consumers.ensure(queue, TASKS_CONSUMER, StartPoint.parse("earliest"))
    payload = {
        "task": path,
        "args": [],
        "kwargs": {},
        "backend": "default",
        "queue_name": env.queue,
        "priority": 0,
        "run_after": None,
        "takes_context": False,
        "enqueued_at": int(time.time() * 1000),
        "retry": {"max_retries": 0},
        "visibility_timeout": None,
    }
    broker.client.xadd(broker.keys(queue).log, {"payload": json.dumps(payload), "id": message_id})
    return message_id


def _raw_result(message_id: str) -> dict[str, str] | None:
    backend = task_backends["default"]
    found = backend.results.read(backend.result_queues(), message_id)
    return None if found is None else found[1]


def _error_paths(fields: dict[str, str]) -> list[str]:
    return [e["exception_class_path"] for e in json.loads(fields["errors"])]


@pytest.fixture
def workers(tasks_env: TasksEnv, tmp_path: Path) -> Iterator[TaskWorkers]:
    w = TaskWorkers(tasks_env.redis_url, tmp_path / "db.sqlite3", tmp_path / "logs")
    w.extra_env = {
        "REDISQ_TEST_TASK_QUEUE": tasks_env.queue,
        "REDISQ_TEST_RUNS_URL": tasks_env.redis_url,
    }
    w.migrate()
    try:
        yield w
    finally:
        w.close()


@pytest.mark.slow
def test_a_worker_never_imports_the_module_a_task_message_names(
    tasks_env: TasksEnv, workers: TaskWorkers, redis_client: redis.Redis
) -> None:
    # Given task messages naming a module no project declares (it records its import)
    # and the standard library's `this` (which prints the Zen of Python when imported),
    # then a declared task
    redis_client.delete(IMPORTED_KEY)
    undeclared = [
        _task_message(tasks_env, f"{MARKER}.anything", f"marker-{secrets.token_hex(8)}"),
        _task_message(tasks_env, "this.x", f"this-{secrets.token_hex(8)}"),
    ]
    after = tasks_env.task("calculate").enqueue(1, 2)
    # When a worker process runs the queue
    worker = workers.start("--tasks", tasks_env.queue, "--stats-interval", "0")
    backend = task_backends["default"]
    wait_for(
        lambda: backend.get_result(after.id).is_finished,
        timeout=60,
        what="the declared task to run",
        describe=workers.report,
    )
    worker.send(signal.SIGTERM)
    assert worker.wait_exit(30) == 0, workers.report()
    # Then each undeclared task is FAILED with UnknownTask, saying why...
    for message_id, path in zip(undeclared, [f"{MARKER}.anything", "this.x"], strict=True):
        fields = _raw_result(message_id)
        assert fields is not None and fields["status"] == "FAILED", workers.report()
        assert _error_paths(fields) == ["redisq_django.tasks.registry.UnknownTask"]
        traceback = json.loads(fields["errors"])[0]["traceback"]
        assert f"Task {path!r} is not declared in this process" in traceback
        # ...and reading it back says so too (nothing is imported here either)
        with pytest.raises(TaskResultDoesNotExist, match="is not declared"):
            backend.get_result(message_id)
    # ...and neither module was ever imported in the worker process
    assert redis_client.lrange(IMPORTED_KEY, 0, -1) == []
    assert "Zen of Python" not in worker.stdout + worker.stderr
    assert MARKER not in sys.modules
    # ...while the declared task ran
    assert backend.get_result(after.id).status == TaskResultStatus.SUCCESSFUL


def test_an_undeclared_task_in_process_is_failed_without_an_import(tasks_env: TasksEnv) -> None:
    message_id = _task_message(tasks_env, f"{MARKER}.anything", f"m-{secrets.token_hex(8)}")
    tasks_env.run_worker()
    fields = _raw_result(message_id)
    assert fields is not None and fields["status"] == "FAILED"
    assert _error_paths(fields) == ["redisq_django.tasks.registry.UnknownTask"]
    assert MARKER not in sys.modules


def test_a_declared_task_is_found_through_the_apps_tasks_modules(
    tasks_env: TasksEnv, settings: Any
) -> None:
    # Given an installed app whose tasks.py imports the sample tasks, and a process that
    # has not recorded one of them (as one that never imported it)
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "tests.taskapp"]
    path = "tests.tasks.sample_tasks.calculate"
    registry.forget(path)
    registry.reset_discovery()
    try:
        # When a worker looks the path up, it finds it through the apps' tasks.py
        assert registry.declared_task(path).func is tasks_env.tasks.calculate.func
    finally:
        registry.reset_discovery()


def test_the_schedule_form_checks_a_task_against_the_declared_ones_without_importing(
    tasks_env: TasksEnv, queue_name: str
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_superuser("ops", password="pw-ops-123"))
    url = reverse("admin:redisq_django_schedule_add")
    token = client.get(url).cookies["csrftoken"].value
    form = {
        "name": queue_name,
        "enabled": "on",
        "cron": "",
        "every": "00:00:10",
        "timezone": "UTC",
        "queue": "",
        "payload": "null",
        "missed": "latest",
        "catch_up": "00:01:00",
        "csrfmiddlewaretoken": token,
    }
    # When staff type a path no project declares (a module with import-time effects)
    page = client.post(url, {**form, "task": f"{MARKER}.anything"})
    # Then the form refuses it, saying why, and never imported the module
    assert page.status_code == 200
    assert "is not declared in this process" in page.content.decode()
    assert MARKER not in sys.modules
    assert not Schedule.objects.filter(name=queue_name).exists()
    # And a declared task is accepted
    page = client.post(url, {**form, "task": "tests.tasks.sample_tasks.record"})
    assert page.status_code == 302, page.content.decode()[-2000:]
    assert Schedule.objects.get(name=queue_name).task == "tests.tasks.sample_tasks.record"


@pytest.fixture
def failing_consumer(queue_name: str) -> Iterator[str]:
    """A declared consumer of its own queue whose handler always raises."""
    saved = dict(consumer_registry._declarations)

    @consumer(queue_name, name="fails", max_retries=0, start="earliest")
    def fails(message: Message) -> None:
        raise ValueError("no")

    try:
        yield queue_name
    finally:
        consumer_registry._declarations.clear()
        consumer_registry._declarations.update(saved)


def _worker_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(("redisq", "django.tasks"))]


def test_a_message_id_with_a_newline_is_logged_escaped(
    failing_consumer: str, caplog: pytest.LogCaptureFixture, redisq_settings: Any
) -> None:
    # Given a message whose id (written straight into Redis) holds a newline and a fake
    # log line, to a consumer whose handler fails
    broker = get_broker()
    broker.consumers.ensure(failing_consumer, "fails", StartPoint.parse("earliest"))
    broker.client.xadd(broker.keys(failing_consumer).log, {"payload": "{}", "id": NEWLINE_ID})
    # When a worker handles it (it fails, then is a dead letter)
    with caplog.at_level(logging.INFO):
        call_command("runconsumer", failing_consumer, "--burst", "--stats-interval", "0")
    # Then every log line naming it shows the id escaped, on one line
    naming = [line for line in _worker_lines(caplog) if "evil" in line]
    assert len(naming) == 2, _worker_lines(caplog)  # "failed on", "is a dead letter"
    for line in naming:
        assert "\n" not in line
        assert repr(NEWLINE_ID) in line
    # the id itself is kept as it was (in Redis, or in its row once the sink moved it)
    in_redis = [d.id for d in broker.dead_letters.read(failing_consumer, "fails")]
    rows = list(DeadLetter.objects.filter(queue=failing_consumer).values_list("message_id"))
    assert in_redis + [r[0] for r in rows] == [NEWLINE_ID]


def test_a_task_id_with_a_newline_is_refused_before_django_logs_it(
    tasks_env: TasksEnv, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a task message (of a declared task) whose id holds a newline
    _task_message(tasks_env, "tests.tasks.sample_tasks.noop", NEWLINE_ID)
    # When a worker meets it
    with caplog.at_level(logging.DEBUG):
        tasks_env.run_worker()
    # Then it is a dead letter at once (rejected), the task never started, and no log
    # line carries the raw newline (Django's own task log lines never saw it)
    lines = _worker_lines(caplog)
    assert not any("forged" in line and "\n" in line for line in lines), lines
    assert any(repr(NEWLINE_ID) in line and "dead letter" in line for line in lines), lines
    queue = f"tasks.{tasks_env.queue}"
    dead = [
        (d.id, d.reason, d.error_message)
        for d in get_broker().dead_letters.read(queue, TASKS_CONSUMER)
    ] + list(
        DeadLetter.objects.filter(queue=queue).values_list("message_id", "reason", "error_message")
    )
    assert len(dead) == 1 and dead[0][:2] == (NEWLINE_ID, "rejected")
    assert "a task id must be printable" in dead[0][2]
    assert _raw_result(NEWLINE_ID) is None


def test_enqueue_once_refuses_a_task_id_with_a_newline(tasks_env: TasksEnv) -> None:
    from redisq_django.tasks import enqueue_once

    with pytest.raises(ValueError, match="A task id must be printable"):
        enqueue_once(tasks_env.task("noop"), (), {}, message_id=NEWLINE_ID)
    assert _raw_result(NEWLINE_ID) is None
