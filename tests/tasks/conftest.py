"""Fixtures of the tasks backend tests: TASKS on redisq with a queue of the test's own,
and a burst worker (``runconsumer --tasks QUEUE --burst``) to run what was enqueued."""

from __future__ import annotations

import importlib
import io
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

import pytest
from django.core.management import call_command

from tests.support.aio import run_async  # noqa: F401  (the tasks tests import it from here)
from tests.support.workers import Workers

BACKEND = "redisq_django.tasks.RedisqBackend"
T = TypeVar("T")


@dataclass
class TasksEnv:
    """What a tasks test works with."""

    queue: str  # the Django task queue of this test
    tasks: ModuleType  # tests.tasks.sample_tasks
    redis_url: str
    settings: Any

    def task(self, name: str, **using: Any) -> Any:
        """A sample task bound to this test's queue."""
        return getattr(self.tasks, name).using(queue_name=self.queue, **using)

    def run_worker(self, *extra: str) -> str:
        """Run ``runconsumer --tasks QUEUE --burst`` in this process; its output."""
        out = io.StringIO()
        call_command(
            "runconsumer", "--tasks", self.queue, "--burst", "--stats-interval", "0", *extra,
            stdout=out,
        )  # fmt: skip
        return out.getvalue()


def tasks_setting(queue: str, **options: Any) -> dict[str, Any]:
    return {"default": {"BACKEND": BACKEND, "QUEUES": ["default", queue], "OPTIONS": options}}


@pytest.fixture
def tasks_env(settings: Any, redis_url: str, queue_name: str, monkeypatch: Any) -> TasksEnv:
    """TASKS = our backend with queues "default" and this test's own; runs recorded in
    the test Redis."""
    settings.REDISQ = {"URL": redis_url}
    settings.TASKS = tasks_setting(queue_name)
    monkeypatch.setenv("REDISQ_TEST_RUNS_URL", redis_url)
    module = importlib.import_module("tests.tasks.sample_tasks")
    return TasksEnv(queue=queue_name, tasks=module, redis_url=redis_url, settings=settings)


class TaskWorkers(Workers):
    """``runconsumer`` processes with TASKS on redisq (tests/tasks/settings.py)."""

    def _argv(self, args: Any) -> list[str]:
        return [*super()._argv(args)[:-1], "tests.tasks.settings"]
