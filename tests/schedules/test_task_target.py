"""Schedules whose target is a Django task (Django >= 6.0).

The decorator on a real ``django.tasks`` Task needs only Django. Running the task needs
the redisq Tasks backend (``redisq_django.tasks.enqueue_once`` and ``runconsumer
--tasks``), built on the ``tasks`` branch: until it is merged, that test is skipped and
says so (tests/schedules/test_schedules_django.py checks our side of the contract with a
stand-in ``enqueue_once``).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import pytest
import redis
from django.core.management import call_command

from redisq_django.connection import get_broker
from redisq_django.core import Broker
from redisq_django.schedules.declared import registry
from redisq_django.schedules.scheduler import Scheduler
from redisq_django.schedules.spec import ScheduleSpec, TaskTarget
from redisq_django.schedules.targets import firer, load_task
from redisq_django.schedules.timing import Timing

pytest.importorskip("django.tasks", reason="Django's Tasks framework needs Django >= 6.0")


def _has_enqueue_once() -> bool:
    if importlib.util.find_spec("redisq_django.tasks") is None:
        return False
    return hasattr(importlib.import_module("redisq_django.tasks"), "enqueue_once")


HAS_BACKEND = _has_enqueue_once()
TASK_PATH = "tests.schedules.periodic_tasks.record"


def test_periodic_decorates_a_real_django_task(declarations: None) -> None:
    from redisq_django.schedules import periodic
    from tests.schedules import periodic_tasks

    # When @periodic is put above a real @task
    decorated = periodic(cron="*/5 * * * *", kwargs={"key": "k"})(periodic_tasks.record)
    # Then the task is returned as it was, declared under its dotted path
    assert decorated is periodic_tasks.record
    (declaration,) = registry.declarations()
    assert declaration.name == TASK_PATH
    assert declaration.target == TaskTarget(TASK_PATH, (), {"key": "k"})
    # And the path loads the same task back (what a worker does each tick)
    assert load_task(TASK_PATH) is periodic_tasks.record


@pytest.mark.skipif(
    not HAS_BACKEND,
    reason="needs redisq_django.tasks.enqueue_once and runconsumer --tasks (the tasks branch)",
)
@pytest.mark.django_db
@pytest.mark.usefixtures("empty_redis")  # the task queue is "default", a fixed name
def test_three_workers_enqueue_a_periodic_task_once_per_tick(
    settings: Any, redisq_settings: Any, redis_client: redis.Redis, queue_name: str
) -> None:
    settings.TASKS = {
        "default": {"BACKEND": "redisq_django.tasks.RedisqBackend", "QUEUES": ["default"]}
    }
    # The task is declared (its module imported): workers never import a path themselves
    importlib.import_module("tests.schedules.periodic_tasks")
    # Given a schedule of the task every second, and three workers evaluating it for 10
    # simulated seconds
    t0 = 1_750_000_000_000
    spec = ScheduleSpec(
        queue_name, Timing.of(every=1), TaskTarget(TASK_PATH, (), {"key": queue_name}), since_ms=t0
    )
    now = [t0]
    workers = [
        Scheduler(
            Broker(redis_client).schedule_ledger,
            lambda: [spec],
            firer(get_broker()),
            clock=lambda: now[0],
        )
        for _ in range(3)
    ]
    fired = []
    for step in range(1, 101):
        now[0] = t0 + step * 100
        for worker in workers:
            fired += worker.evaluate()
    assert len(fired) == 10
    # When a task worker drains the task queue
    call_command("runconsumer", "--tasks", "--burst", "--stats-interval", "0")
    # Then the task ran once per tick
    assert redis_client.llen(queue_name) == 10
