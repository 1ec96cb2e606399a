"""Receivers of the tasks backend, connected from ``AppConfig.ready()`` (Django >= 6.0)."""

from __future__ import annotations

from typing import Any

from redisq_django.consuming.registry import registry
from redisq_django.core.clock import now_ms
from redisq_django.signals import dead_letters_retried
from redisq_django.tasks.options import TASKS_CONSUMER


def results_ready_again(sender: Any, rows: Any, **kwargs: Any) -> None:
    """Dead letters of task queues sent again (the admin's Retry): their FAILED results
    are READY again, until a worker starts them."""
    from redisq_django.connection import get_broker
    from redisq_django.core.task_results import TaskResults
    from redisq_django.tasks.declarations import redisq_backends

    ttl = {
        q: options.result_ttl_ms
        for options, names in redisq_backends().values()
        for name in names
        for q in options.level_queues(name)
    }
    broker = get_broker()
    results = TaskResults(broker.client, broker.scripts, broker.keys)
    for row in rows:
        if row.consumer == TASKS_CONSUMER and row.queue in ttl:
            results.ready(row.queue, row.message_id, expire_at_ms=now_ms() + ttl[row.queue])


def task_declarations() -> list[Any]:
    from redisq_django.tasks.declarations import task_declarations as declared

    return declared()


def connect() -> None:
    """Connect the receivers and declare the task queues (idempotent)."""
    dead_letters_retried.connect(results_ready_again, dispatch_uid="redisq_tasks_ready_again")
    registry.add_provider("tasks", task_declarations)
